"""One run's artifacts loaded once for analysis, with the tables the reports show.

Notebooks call these functions and display what they return; nothing here writes to the run
directory (analysis only reads artifacts).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from charactereval_lib.engine import runs
from charactereval_lib import __version__
from charactereval_lib.engine.stats import DEFAULT_LEVEL, DEFAULT_N_BOOT, DEFAULT_SEED
from charactereval_lib.charactereval.statistics import PairedComparison, Statistics, metric_statistics, paired_comparison
from charactereval_lib.charactereval.summary import failed_rows_by_metric, load_run_scores
from charactereval_lib.charactereval.data import DataError, OfficialData, load_official_data
from charactereval_lib.charactereval.diagnostics import failure_breakdown, with_context_lengths
from charactereval_lib.charactereval.protocol import PROTOCOL_VERSION

OFFLINE_BACKEND = "offline"
TINY_MARKER = "tiny"

OFFLINE_CAVEAT = (
    "The replies come from the **offline backend**: deterministic placeholder text made without "
    "any model. They demonstrate the wiring only; they say nothing about any model."
)
TINY_RM_CAVEAT = (
    "The scores come from a **tiny, randomly initialised reward model**, not BaichuanCharRM. "
    "They demonstrate the wiring only and are not CharacterEval scores."
)


@dataclass
class RunAnalysis:
    """Everything one run's report needs, read from its directory."""

    run_dir: Path
    manifest: dict[str, Any]
    rows: pd.DataFrame  # rows.jsonl: one row per (id, metric), scored or not
    scores: pd.DataFrame  # scored rows: rows joined with the latest score
    generations: pd.DataFrame  # latest generation record per sample (empty if none)
    stats: Statistics
    data: OfficialData | None = None

    @property
    def name(self) -> str:
        return self.run_dir.name

    def caveats(self) -> list[str]:
        return run_caveats(self.manifest, unscored=len(self.rows) - len(self.scores))

    def failed_by_metric(self) -> dict[str, int] | None:
        """Rows each metric lost to failed generations (needs the official id2metric)."""
        if self.data is None:
            return None
        return failed_rows_by_metric(self.manifest.get("transform", {}).get("failed_ids", []), self.data.id2metric)

    def failures(self) -> pd.DataFrame:
        return failure_breakdown(self.generations, self.rows, self.scores)

    def scores_with_context(self) -> pd.DataFrame:
        """Scored rows with their context length; empty without the official data."""
        if self.data is None or self.scores.empty:
            return pd.DataFrame()
        return with_context_lengths(self.scores, self.data)

    def header_markdown(self, data_note: str = "") -> str:
        """Report heading: run, model, backend, then every caveat in plain words."""
        generation = self.manifest.get("generation", {})
        lines = [
            f"# CharacterEval report: {self.name}",
            "",
            f"Model **{generation.get('model', 'unknown')}** via backend **{generation.get('backend', 'unknown')}**; "
            f"{len(self.scores)} scored rows of {len(self.rows)}; protocol "
            f"{self.manifest.get('protocol_version', 'unknown')}.",
            "",
            caveats_markdown(self.caveats()),
            "",
            rendered_by(),
        ]
        if data_note:
            lines += ["", data_note]
        return "\n".join(lines)


def load_run(
    run_dir: Path | str,
    *,
    data: OfficialData | None = None,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = DEFAULT_SEED,
    level: float = DEFAULT_LEVEL,
) -> RunAnalysis:
    """Read a run directory (a bare name means outputs/NAME) and compute its statistics."""
    run_dir = runs.resolve_run_dir(run_dir)
    if not run_dir.is_dir():
        raise runs.RunError(f"{run_dir}: no such run directory")
    scores, _ = load_run_scores(run_dir)
    rows = pd.DataFrame(runs.read_jsonl(run_dir / runs.ROWS).records)
    latest = runs.latest_by_key(runs.read_jsonl(run_dir / runs.GENERATIONS).records, "id")
    generations = pd.DataFrame(list(latest.values()))
    stats = metric_statistics(scores, n_boot=n_boot, seed=seed, level=level)
    return RunAnalysis(run_dir, runs.load_manifest(run_dir), rows, scores, generations, stats, data)


def load_data_if_available(data_dir: str | None = None, *, verify: bool = True) -> tuple[OfficialData | None, str]:
    """The official data for context lengths and per-metric failure counts, or None with the
    reason: a report is still worth having without them."""
    try:
        data = load_official_data(data_dir, verify=verify)
    except DataError as exc:
        return None, f"Official data not available ({exc}); context-length and per-metric failure views are skipped."
    return data, f"Official data: {data.data_dir}"


def run_caveats(manifest: dict[str, Any], *, unscored: int = 0) -> list[str]:
    """Plain warnings a reader must see before any number: demo backends, incomplete runs."""
    caveats = []
    generation = manifest.get("generation", {})
    scoring = manifest.get("scoring", {})
    if generation.get("backend") == OFFLINE_BACKEND:
        caveats.append(OFFLINE_CAVEAT)
    if any(TINY_MARKER in label.lower() for label in checkpoint_labels(scoring)):
        caveats.append(TINY_RM_CAVEAT)
    counts = manifest.get("transform", {}).get("counts", {})
    if counts.get("missing"):
        caveats.append(
            f"{counts['missing']} test sample(s) have no reply (a subset run, or generation is unfinished): "
            "the means rest on fewer rows than the paper's and are not directly comparable with its table."
        )
    if unscored:
        caveats.append(f"Scoring is incomplete: {unscored} row(s) have no score yet; means use scored rows only.")
    if manifest.get("protocol_version") not in (None, PROTOCOL_VERSION):
        caveats.append(
            f"The run was made under protocol {manifest['protocol_version']}, this workbench is {PROTOCOL_VERSION}."
        )
    return caveats


def checkpoint_labels(scoring: dict[str, Any]) -> list[str]:
    """Labels the scorer recorded for its reward-model checkpoint(s): ``scoring.rm_label``, or
    ``scoring.checkpoint.label`` for the whole run and for each shard (``rm make-tiny`` labels
    its checkpoints as tiny)."""
    sections = [scoring, *scoring.get("shards", {}).values()]
    labels = [s.get("rm_label") for s in sections] + [(s.get("checkpoint") or {}).get("label") for s in sections]
    return [str(label) for label in labels if label]


def rendered_by() -> str:
    """Which workbench rendered the report (its version and git commit, when known)."""
    commit = runs.git_commit()
    return f"Rendered by charactereval {__version__}" + (f" at commit `{commit}`." if commit else ".")


def caveats_markdown(caveats: Sequence[str]) -> str:
    if not caveats:
        return "No caveats: real replies, scored by the configured reward model, complete run."
    return "\n".join(f"> ⚠️ {text}" for text in caveats)


def run_info(manifest: dict[str, Any]) -> pd.DataFrame:
    """Two-column table of the settings that produced the run: versions, then the generation
    and scoring sections flattened to dotted keys; long lists are summarised by their length."""
    fields = [("protocol version", manifest.get("protocol_version")),
              ("package version", manifest.get("package_version")),
              ("git commit", manifest.get("git_commit"))]
    for section in ("generation", "scoring"):
        fields += _flatten(manifest.get(section, {}), section)
    fields += [(f"transform.{k}", v) for k, v in manifest.get("transform", {}).get("counts", {}).items()]
    # str() of every value (None included): pandas' astype(str) would keep None as a missing value.
    return pd.DataFrame([(k, str(v)) for k, v in fields], columns=["setting", "value"]).set_index("setting")


def _flatten(value: Any, prefix: str) -> list[tuple[str, Any]]:
    if isinstance(value, dict):
        return [item for key, inner in value.items() for item in _flatten(inner, f"{prefix}.{key}")]
    if isinstance(value, list) and len(value) > 8:
        return [(prefix, f"[{len(value)} items]")]
    return [(prefix, value)]


def _fmt(value: float, digits: int = 3) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


def metric_display(stats: Statistics, failed: dict[str, int] | None = None) -> pd.DataFrame:
    """The per-metric table as displayed: three decimals (display only), interval as text."""
    level = round(stats.level * 100)
    m = stats.metrics
    table = pd.DataFrame(
        {
            "metric": m["metric_en"],
            "abbr": m["abbr"],
            "dimension": m["dimension"],
            "n": m["n"],
            "failed": [failed.get(name, 0) for name in m["metric_en"]] if failed is not None else "-",
            "mean": [_fmt(v) for v in m["mean"]],
            f"{level}% CI": [f"[{_fmt(lo)}, {_fmt(hi)}]" for lo, hi in zip(m["ci_low"], m["ci_high"])],
            "sd": [_fmt(v) for v in m["sd"]],
        }
    )
    return table.set_index("metric")


def dimension_display(stats: Statistics) -> pd.DataFrame:
    level = round(stats.level * 100)
    d = stats.dimensions
    return pd.DataFrame(
        {
            "dimension": d["name"],
            "metrics": d["n_metrics"],
            "average (unweighted mean of metric means)": [_fmt(v) for v in d["mean"]],
            f"{level}% CI": [f"[{_fmt(lo)}, {_fmt(hi)}]" for lo, hi in zip(d["ci_low"], d["ci_high"])],
        }
    ).set_index("dimension")


def side_by_side(analyses: Sequence[RunAnalysis]) -> pd.DataFrame:
    """Metric and dimension means of several runs, one column per run, "mean [CI]" text."""
    if not analyses:
        raise ValueError("no runs to compare")
    first = analyses[0].stats
    labels = list(first.metrics["metric_en"] + " (" + first.metrics["abbr"] + ")") + [
        f"{name} avg." for name in first.dimensions["name"]
    ]
    table = pd.DataFrame({"cell": labels})
    for analysis in analyses:
        cells = pd.concat([analysis.stats.metrics, analysis.stats.dimensions], ignore_index=True)
        table[analysis.name] = [
            f"{_fmt(v)} [{_fmt(lo)}, {_fmt(hi)}]" for v, lo, hi in zip(cells["mean"], cells["ci_low"], cells["ci_high"])
        ]
    return table.set_index("cell")


def compare_to_first(
    analyses: Sequence[RunAnalysis], *, n_boot: int = DEFAULT_N_BOOT, seed: int = DEFAULT_SEED,
    level: float = DEFAULT_LEVEL,
) -> dict[str, PairedComparison]:
    """Paired comparison of every run against the first one ("<run> − <first>")."""
    if len(analyses) < 2:
        raise ValueError("a comparison needs at least two runs")
    base = analyses[0]
    return {
        f"{other.name} − {base.name}": paired_comparison(other.scores, base.scores, n_boot=n_boot, seed=seed, level=level)
        for other in analyses[1:]
    }


def paired_display(comparison: PairedComparison, level: float = DEFAULT_LEVEL) -> pd.DataFrame:
    """One comparison's metric and dimension rows as displayed (three decimals, p in 3 s.f.)."""
    pct = round(level * 100)
    metrics = comparison.metrics.assign(cell=comparison.metrics["metric_en"] + " (" + comparison.metrics["abbr"] + ")")
    dims = comparison.dimensions.assign(cell=comparison.dimensions["name"] + " avg.", n=comparison.dimensions["n_ids"])
    cells = pd.concat([metrics, dims], ignore_index=True)
    return pd.DataFrame(
        {
            "cell": cells["cell"],
            "shared n": cells["n"],
            "A": [_fmt(v) for v in cells["mean_a"]],
            "B": [_fmt(v) for v in cells["mean_b"]],
            "A − B": [_fmt(v) for v in cells["diff"]],
            f"{pct}% CI": [f"[{_fmt(lo)}, {_fmt(hi)}]" for lo, hi in zip(cells["ci_low"], cells["ci_high"])],
            "Wilcoxon p": ["-" if math.isnan(p) else f"{p:.3g}" for p in cells["p_wilcoxon"]],
            "MDD (80% power)": [_fmt(v) for v in cells["mdd"]],
        }
    ).set_index("cell")


def comparison_header_markdown(analyses: Sequence[RunAnalysis], data_note: str = "") -> str:
    """Comparison heading: the runs in order (the first is the reference B of every paired
    comparison) with each run's caveats."""
    lines = ["# CharacterEval comparison", ""]
    for k, run in enumerate(analyses):
        generation = run.manifest.get("generation", {})
        role = "reference (B in every comparison)" if k == 0 else "A"
        lines.append(
            f"{k + 1}. **{run.name}**: model {generation.get('model', 'unknown')}, backend "
            f"{generation.get('backend', 'unknown')}, {len(run.scores)} scored rows; {role}"
        )
        lines += [f"   {line}" for line in caveats_markdown(run.caveats()).splitlines()]
    lines += ["", rendered_by()]
    if data_note:
        lines += ["", data_note]
    return "\n".join(lines)


def stacked(analyses: Sequence[RunAnalysis], table: Callable[[RunAnalysis], pd.DataFrame]) -> pd.DataFrame:
    """One tidy table of several runs: ``table(run)`` for each run, with a leading ``run`` column."""
    frames = [table(run).assign(run=run.name) for run in analyses]
    combined = pd.concat(frames, ignore_index=True)
    return combined[["run"] + [c for c in combined.columns if c != "run"]]
