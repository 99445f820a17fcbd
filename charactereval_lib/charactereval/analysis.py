"""One run's artifacts loaded once for analysis, with the tables the reports show.

Notebooks call these functions and display what they return; nothing here writes to the run
directory (analysis only reads artifacts). Display tables round numbers only when shown
(``show``); the frames behind them keep every digit.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from pandas.io.formats.style import Styler

from charactereval_lib.charactereval import layout
from charactereval_lib.charactereval.calibration import calibration_caveat
from charactereval_lib.charactereval.data import DataError, OfficialData, load_official_data
from charactereval_lib.charactereval.diagnostics import (
    NOT_ESTIMABLE,
    dimension_estimable,
    estimable,
    failure_breakdown,
    metric_label,
    paired_estimable,
    with_context_lengths,
)
from charactereval_lib.charactereval.documents import CharacterEvalManifest
from charactereval_lib.charactereval.evidence import (
    OFFLINE_BACKEND,
    OFFLINE_CAVEAT,
    TINY_MARKER,
    TINY_RM_CAVEAT,
    checkpoint_labels,
    no_manifest_line,
    run_evidence,
)
from charactereval_lib.charactereval.official import EVALUATION
from charactereval_lib.charactereval.protocol import DIMENSIONS, METRICS, PROTOCOL_VERSION
from charactereval_lib.charactereval.statistics import PairedComparison, Statistics, group_summary, metric_statistics, paired_comparison
from charactereval_lib.charactereval.summary import failed_rows_by_metric, load_run_scores
from charactereval_lib.engine.reports import kit
from charactereval_lib.engine.reports.evidence import Evidence
from charactereval_lib.engine.reports.kit import rendered_by
from charactereval_lib.engine.reports.texttable import fmt
from charactereval_lib.engine.stats import (
    DEFAULT_LEVEL,
    DEFAULT_N_BOOT,
    DEFAULT_SEED,
    TOO_FEW_REASON,
    how_to_read,
    partial_pooling,
)
from charactereval_lib.engine.storage import artifacts, runs
from charactereval_lib.engine.storage.manifest import GenerationSection

# The scorer mode import-official records for scores read from an official evaluation file.
IMPORTED_MODE = "imported"
DISPLAY_DIGITS = 3

IMPORTED_SCORES_CAVEAT = (
    "The scores were imported from an official evaluation file, which does not record the reward "
    "model that produced them: the scorer is unknown (it may be a tiny test model, not "
    "BaichuanCharRM). Re-score the run with `charactereval score` to know what the numbers mean."
)
JUDGE_CAVEAT = (
    "The scores are the grades of the LLM judge {judge_model}, not of CharacterEval's reward model: "
    "the paper's Table 4 (reward-model scores) is not their reference, and their deltas compare different scorers."
)


HOW_TO_READ = how_to_read(
    "samples", "a sample's metric rows share one reply",
    "Characters and novels are ranked by their partially pooled centred means (empirical Bayes: a character "
    "of one or two samples is drawn toward the average, so it cannot top a chart), with Morris's "
    "empirical-Bayes intervals; the raw means stand beside them. Paired differences resample the samples both "
    "runs scored; their p-values are two-sided Wilcoxon signed-rank tests, Holm-adjusted over the report. A "
    "judge's metascore (its exact agreement with human labels) has an exact Clopper-Pearson interval.")


@dataclass
class RunAnalysis:
    """Everything one run's report needs, read from its directory."""

    run_dir: Path
    manifest: dict[str, Any]  # run.json as recorded (``run_info`` shows it in its own order)
    manifest_model: CharacterEvalManifest  # the same, typed: what the report reads from it
    rows: pd.DataFrame  # rows.jsonl: one row per (id, metric), scored or not
    scores: pd.DataFrame  # scored rows: rows joined with the latest score
    generations: pd.DataFrame  # latest generation record per sample (empty if none)
    stats: Statistics
    data: OfficialData | None = None
    scorer_modes: dict[str, int] = field(default_factory=dict)  # scored rows per scorer mode
    scorer: str = layout.REWARD_MODEL  # whose scores: the reward model's or one judge model's
    judge_model: str | None = None
    invalid: tuple[int, int] = (0, 0)  # the judge's invalid answers: all, and those left unscored
    # What the run's files show (``charactereval.evidence``); none run: "No warnings" is never said.
    evidence: Evidence = field(default_factory=lambda: Evidence([]))

    @property
    def name(self) -> str:
        return self.run_dir.name

    def warnings(self) -> list[str]:
        """What the run's files show (``evidence``), then what its manifest and statistics add."""
        judge_model = self.judge_model if self.scorer == layout.JUDGE else None
        return with_evidence(self.evidence, run_caveats(
            self.manifest, unscored=len(self.rows) - len(self.scores) - self.invalid[1],
            scorer_modes=self.scorer_modes, metric_n=dict(zip(self.stats.metrics["metric_en"], self.stats.metrics["n"])),
            judge_model=judge_model, invalid=self.invalid))

    def failed_by_metric(self) -> dict[str, int] | None:
        """Rows each metric lost to failed generations (needs the official id2metric)."""
        if self.data is None:
            return None
        transform = self.manifest_model.transform
        return failed_rows_by_metric(transform.failed_ids if transform else [], self.data.id2metric)

    def failures(self) -> pd.DataFrame:
        return failure_breakdown(self.generations, self.rows, self.scores)

    def scores_with_context(self) -> pd.DataFrame:
        """Scored rows with their context length (no ``context_chars`` column without the
        official data; no rows before scoring)."""
        if self.data is None:
            return pd.DataFrame()
        return with_context_lengths(self.scores, self.data)

    def header_markdown(self, data_note: str = "") -> str:
        """Report heading: run, model, backend, what rendered it. Warnings go in their own box
        (``warnings_html``) right below."""
        generation = self.manifest_model.generation or GenerationSection()
        lines = [
            f"# CharacterEval report: {self.name}",
            "",
            *([f"**{no_manifest_line(self.run_dir)}.**", ""] if not (self.run_dir / runs.MANIFEST).exists() else []),
            f"Model **{generation.model or 'unknown'}** via backend **{generation.backend or 'unknown'}**; "
            f"{self.scorer_text()}{len(self.scores)} scored rows of {len(self.rows)}; protocol "
            f"{self.manifest_model.protocol_version or 'unknown'}. {rendered_by()}",
        ]
        transform = self.manifest.get("transform") or {}
        if transform.get("thinking"):
            lines += ["", f"Thinking blocks: {transform['thinking']} before S5's first-line cut "
                          f"({transform.get('thinking_blocks_removed', 0)} reply(ies) had one removed)."]
        if data_note:
            lines += ["", data_note]
        return "\n".join(lines)


    def scorer_text(self) -> str:
        """The judge that made the scores, said before their count (nothing for the reward model)."""
        return f"scores of the LLM judge **{self.judge_model}**, " if self.scorer == layout.JUDGE else ""


def load_run(
    run_dir: Path | str,
    *,
    data: OfficialData | None = None,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = DEFAULT_SEED,
    level: float = DEFAULT_LEVEL,
    scorer: str = layout.REWARD_MODEL,
    judge_model: str | None = None,
) -> RunAnalysis:
    """Read a run directory (a bare name means outputs/NAME) and compute the statistics of
    ``scorer``'s scores (the judge's: of ``judge_model``, or the run's only judge)."""
    run_dir = runs.resolve_run_dir(run_dir)
    if not run_dir.is_dir():
        raise runs.RunError(f"{run_dir}: no such run directory")
    scores, counts = load_run_scores(run_dir, scorer, judge_model)
    rows = pd.DataFrame(artifacts.read_jsonl(run_dir / layout.ROWS).records)
    latest = artifacts.latest_by_key(artifacts.read_jsonl(run_dir / runs.GENERATIONS).records, "id")
    generations = pd.DataFrame(list(latest.values()))
    stats = metric_statistics(scores, n_boot=n_boot, seed=seed, level=level)
    return RunAnalysis(run_dir, runs.load_manifest(run_dir), runs.read_manifest(run_dir, CharacterEvalManifest), rows,
                       scores, generations, stats, data,
                       counts["scorer_modes"], scorer, counts.get("judge_model"),
                       (counts.get("invalid_answers", 0), counts.get("invalid_unscored", 0)),
                       run_evidence(run_dir, scorer, counts.get("judge_model"), data))


def load_data_if_available(data_dir: str | None = None, *, verify: bool = True) -> tuple[OfficialData | None, str]:
    """The official data for context lengths and per-metric failure counts, or None with the
    reason: a report is still worth having without them."""
    try:
        data = load_official_data(data_dir, verify=verify)
    except DataError as exc:
        return None, f"Official data not available ({exc}); context-length and per-metric failure views are skipped."
    return data, f"Official data: {data.data_dir}"


# --- warnings ----------------------------------------------------------------------------------


def run_caveats(
    manifest: dict[str, Any],
    *,
    unscored: int = 0,
    scorer_modes: Mapping[str, int] | None = None,
    metric_n: Mapping[str, int] | None = None,
    judge_model: str | None = None,
    invalid: tuple[int, int] = (0, 0),
    mix_said: bool = False,
) -> list[str]:
    """Plain warnings a reader must see before any number: demo backends, unknown or mixed
    scorers, incomplete runs, metrics too small for an interval. ``scorer_modes`` counts scored
    rows per scorer mode; ``metric_n`` counts scored rows per metric; ``judge_model``: the scores
    are that judge's grades, not the reward model's, with ``invalid`` answers (all, unscored), and
    its calibration against human labels is said (``calibration.calibration_caveat``).
    ``mix_said``: the caller already warns of a scorer mix (the CLI's MIXED SCORERS line, which
    names checkpoints too), so a mode mix is not said twice."""
    caveats = []
    generation = manifest.get("generation", {})
    scoring = manifest.get("scoring", {})
    scorer_modes = dict(scorer_modes or {})
    if generation.get("backend") == OFFLINE_BACKEND:
        caveats.append(OFFLINE_CAVEAT)
    if judge_model is not None:
        caveats.append(JUDGE_CAVEAT.format(judge_model=judge_model))
        calibration = calibration_caveat(manifest, judge_model)
        if calibration:
            caveats.append(calibration)
        if invalid[0]:
            caveats.append(f"The judge gave {invalid[0]} invalid answer(s) (no grade could be read); "
                           f"{invalid[1]} of them are left out of the means, as their spec says.")
    elif any(TINY_MARKER in label.lower() for label in checkpoint_labels(scoring)):
        caveats.append(TINY_RM_CAVEAT)
    # Imported evaluation scores carry mode "imported"; an older run may only say so in its
    # manifest (an evaluation file imported and never scored here).
    imported_file = (generation.get("source") or {}).get("kind") == EVALUATION and not scoring
    if IMPORTED_MODE in scorer_modes or imported_file:
        caveats.append(IMPORTED_SCORES_CAVEAT)
    if len(scorer_modes) > 1 and not mix_said:
        mix = ", ".join(f"{mode}: {count} rows" for mode, count in sorted(scorer_modes.items()))
        caveats.append(f"The scores mix scorer modes ({mix}); re-run `charactereval score` with one mode.")
    counts = manifest.get("transform", {}).get("counts", {})
    if counts.get("missing"):
        caveats.append(
            f"{counts['missing']} test sample(s) have no reply (a subset run, or generation is unfinished): "
            "the means rest on fewer rows than the paper's and are not directly comparable with its table."
        )
    if unscored:
        caveats.append(f"Scoring is incomplete: {unscored} row(s) have no score yet; means use scored rows only.")
    small = [f"{metric_label(name)} (n={n})" for name, n in (metric_n or {}).items() if not estimable(n)]
    if small and any(metric_n.values()):
        caveats.append(
            f"No interval is given for {', '.join(small)}: {TOO_FEW_REASON}. "
            f"Tables and figures mark these {NOT_ESTIMABLE}, and dimension averages that include them."
        )
    if manifest.get("protocol_version") not in (None, PROTOCOL_VERSION):
        caveats.append(
            f"The run was made under protocol {manifest['protocol_version']}, this workbench is {PROTOCOL_VERSION}."
        )
    return caveats


def run_warnings(run_dir: Path | str, scorer: str = layout.REWARD_MODEL, judge_model: str | None = None, *,
                 mix_said: bool = False) -> list[str]:
    """The warnings a run's report shows at the top, as plain text lines (for ``summarize`` to
    print): read from the run directory alone, without the official data (``mix_said``: see
    ``run_caveats``)."""
    return run_warnings_and_evidence(run_dir, scorer, judge_model, mix_said=mix_said)[0]


def run_warnings_and_evidence(run_dir: Path | str, scorer: str = layout.REWARD_MODEL, judge_model: str | None = None,
                              *, mix_said: bool = False, data: OfficialData | None = None) -> tuple[list[str], Evidence]:
    """``run_warnings`` and the evidence checks they rest on (for the "No warnings" line);
    ``data``: the official data the samples check counts against, when at hand."""
    run_dir = runs.resolve_run_dir(run_dir)
    scores, counts = load_run_scores(run_dir, scorer, judge_model)
    metric_n = scores.groupby("metric_en").size() if len(scores) else pd.Series(dtype=int)
    invalid = (counts.get("invalid_answers", 0), counts.get("invalid_unscored", 0))
    evidence = run_evidence(run_dir, scorer, counts.get("judge_model"), data)
    return with_evidence(evidence, run_caveats(
        runs.load_manifest(run_dir), unscored=counts["unscored_rows"] - invalid[1], scorer_modes=counts["scorer_modes"],
        metric_n={m.metric_en: int(metric_n.get(m.metric_en, 0)) for m in METRICS},
        judge_model=counts.get("judge_model"), invalid=invalid, mix_said=mix_said)), evidence


def with_evidence(evidence: Evidence, caveats: Sequence[str]) -> list[str]:
    """The evidence checks' warnings first (a missing run.json at the very top), then the
    manifest's and the statistics' caveats that say something else (the checks word the same
    findings the same way: the offline backend, a tiny checkpoint, missing and unscored rows)."""
    found = evidence.warnings
    return found + [caveat for caveat in caveats if caveat not in found]


def comparison_warnings(analyses: Sequence[RunAnalysis]) -> list[str]:
    """Every run's warnings, each prefixed by the run's name."""
    return [f"{run.name}: {warning}" for run in analyses for warning in run.warnings()]


def warnings_html(warnings: Sequence[str], checks: Evidence | Sequence[Evidence]) -> str:
    """The warning box at the top of a report: one bullet per warning. Without any, the quiet
    line "No warnings" naming the evidence checks that ran and passed (``checks``: the run's, or
    each compared run's); it is never said on less (a check that could not run is a warning)."""
    evidences = [checks] if isinstance(checks, Evidence) else list(checks)
    if not warnings and not all(e.all_clear for e in evidences):
        warnings = ["Not every evidence check ran: nothing here is vouched for."]
    if len(evidences) == 1:
        clear = evidences[0].clear_line()
    else:
        names = dict.fromkeys(name for e in evidences for name in e.checks)
        clear = (f"No warnings: all {len(names)} checks ran and passed on the files of each of the "
                 f"{len(evidences)} runs ({', '.join(names)}).")
    return kit.warnings_box(warnings, "Warnings", empty=clear)


# --- display tables ----------------------------------------------------------------------------

# Column labels for display: everything else has its underscores replaced by spaces.
COLUMN_LABELS = {
    "metric_en": "metric", "abbr": "abbr.", "sd": "SD", "ci_half_width": "CI half-width",
    "mdd": "MDD", "distinct_scores": "distinct scores", "off_grid": "off grid", "n_ids": "samples",
    "n_rows": "rows", "n_metrics": "metrics", "mean_centred": "centred mean", "novel_name": "novel",
    "role": "character",
}
_DIMENSION_NAMES = {d.key: d.name for d in DIMENSIONS}


def show(frame: pd.DataFrame, *, digits: int = DISPLAY_DIGITS) -> Styler:
    """The kit's ``show`` in CharacterEval's words: metric and dimension names instead of keys."""
    return kit.show(frame, digits=digits, columns=COLUMN_LABELS,
                    values={"metric_en": metric_label, "dimension": lambda v: _DIMENSION_NAMES.get(v, v)})


def run_info(manifest: dict[str, Any]) -> pd.DataFrame:
    """The settings that produced the run, one row each: section (versions, generation,
    scoring, judge scoring, transform; shown once per block), setting (nested keys joined by
    " / ", underscores as spaces) and value as text a reader reads (``setting_text``); long
    lists are summarised by their length, a list of records (judge sessions) by its latest."""
    fields = [("versions", "protocol", manifest.get("protocol_version")),
              ("versions", "package", manifest.get("package_version")),
              ("versions", "git commit", manifest.get("git_commit"))]
    for section in ("generation", "scoring", "judge_scoring"):
        if manifest.get(section):
            fields += [(section.replace("_", " "), key, value)
                       for key, value in kit.flatten(manifest[section], "", _summarised)]
    fields += [("transform", k, v) for k, v in manifest.get("transform", {}).get("counts", {}).items()]
    shown = [(section if section != previous else "", key.replace("_", " "), setting_text(value))
             for (section, key, value), previous in zip(fields, [None, *(f[0] for f in fields)])]
    return pd.DataFrame(shown, columns=["section", "setting", "value"])


def setting_text(value: Any) -> str:
    """One setting as a reader reads it: – for none, yes/no, numbers rounded (4 significant
    digits, thousands whole), short lists joined by commas, an empty mapping as –."""
    if value is None or value == {} or value == []:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"
    if isinstance(value, int):
        return f"{value:,}" if abs(value) >= 10000 else str(value)
    if isinstance(value, list):
        return ", ".join(setting_text(item) for item in value)
    return str(value)


def _summarised(value: Any, prefix: str) -> list[tuple[str, Any]] | None:
    """How a manifest's settings table shortens what it repeats (``reports.kit.flatten``'s
    ``expand``); None: flattened as any mapping is."""
    if _uniform_records(value):
        # One row per field of many alike records (a judge's spec per metric), not one per record.
        return [item for key in next(iter(value.values()))
                for item in kit.flatten(_same_or_count([inner[key] for inner in value.values()]),
                                        f"{prefix} / each of {len(value)} / {key}" if prefix else key,
                                        _summarised)]
    if isinstance(value, dict) and not value:
        return [(prefix, value)]
    if isinstance(value, list) and value and all(isinstance(item, dict) for item in value):
        return kit.flatten(value[-1], f"{prefix} (latest of {len(value)})", _summarised)
    if isinstance(value, list) and len(value) > 8:
        return [(prefix, f"[{len(value)} items]")]
    return None


def _uniform_records(value: Any) -> bool:
    records = list(value.values()) if isinstance(value, dict) else []
    return len(records) >= 3 and all(isinstance(r, dict) and r.keys() == records[0].keys() for r in records)


def _same_or_count(values: list[Any]) -> Any:
    distinct = {repr(v) for v in values}
    return values[0] if len(distinct) == 1 else f"{len(distinct)} different values"


def interval_text(low: float, high: float, ok: bool, *, empty: bool = False) -> str:
    """An interval as shown: "[low, high]", ``NOT_ESTIMABLE`` when too few rows leave none, and
    "–" for a cell with no value at all (``empty``: no rows)."""
    if empty:
        return "–"
    return f"[{fmt(low)}, {fmt(high)}]" if ok else NOT_ESTIMABLE


def metric_display(stats: Statistics, failed: dict[str, int] | None = None) -> pd.DataFrame:
    """The per-metric table: mean, interval (n<4 where it cannot be estimated), SD, rows and the
    rows lost to failed generations ("–" without the official data)."""
    m = stats.metrics
    ok = estimable(m["n"])
    return pd.DataFrame(
        {
            "metric": m["metric_en"].map(metric_label),
            "abbr.": m["abbr"],
            "dimension": m["dimension"],
            "n": m["n"],
            "failed": [failed.get(name, 0) for name in m["metric_en"]] if failed is not None else "–",
            "mean": m["mean"],
            f"{round(stats.level * 100)}% CI": [interval_text(lo, hi, k, empty=math.isnan(v))
                                                for v, lo, hi, k in zip(m["mean"], m["ci_low"], m["ci_high"], ok)],
            "SD": m["sd"],
        }
    )


def dimension_display(stats: Statistics) -> pd.DataFrame:
    d = stats.dimensions
    ok = dimension_estimable(stats)
    return pd.DataFrame(
        {
            "dimension": d["name"],
            "metrics": d["n_metrics"],
            "average (unweighted mean of metric means)": d["mean"],
            f"{round(stats.level * 100)}% CI": [interval_text(lo, hi, k, empty=math.isnan(v))
                                                for v, lo, hi, k in zip(d["mean"], d["ci_low"], d["ci_high"], ok)],
        }
    )


def _cell_labels(stats_metrics: pd.DataFrame, dimension_names: Sequence[str]) -> list[str]:
    return [f"{metric_label(name)} ({abbr})" for name, abbr in zip(stats_metrics["metric_en"], stats_metrics["abbr"])] + [
        f"{n} avg." for n in dimension_names]


def side_by_side(analyses: Sequence[RunAnalysis]) -> pd.DataFrame:
    """Metric and dimension means of several runs, one "mean [CI]" column per run in the order
    given (n<4 where the interval cannot be estimated)."""
    if not analyses:
        raise ValueError("no runs to compare")

    def column(analysis: RunAnalysis) -> list[str]:
        stats = analysis.stats
        cells = pd.concat([stats.metrics, stats.dimensions], ignore_index=True)
        ok = np.concatenate([estimable(stats.metrics["n"]), dimension_estimable(stats)])
        return [f"{fmt(v)} {interval_text(lo, hi, k)}" if not math.isnan(v) else "–"
                for v, lo, hi, k in zip(cells["mean"], cells["ci_low"], cells["ci_high"], ok)]

    first = analyses[0].stats
    return kit.side_by_side(analyses, "cell", _cell_labels(first.metrics, first.dimensions["name"]), column)


def compare_to_first(
    analyses: Sequence[RunAnalysis], *, n_boot: int = DEFAULT_N_BOOT, seed: int = DEFAULT_SEED,
    level: float = DEFAULT_LEVEL,
) -> dict[str, PairedComparison]:
    """Paired comparison of every run against the first one ("<run> − <first>"), in the order
    given."""
    if len(analyses) < 2:
        raise ValueError("a comparison needs at least two runs")
    base = analyses[0]
    return {
        f"{other.name} − {base.name}": paired_comparison(other.scores, base.scores, n_boot=n_boot, seed=seed, level=level)
        for other in analyses[1:]
    }


def holm(pvalues: Sequence[float] | np.ndarray) -> np.ndarray:
    """Holm's step-down adjustment of a family of p-values (NaN p-values, untestable cells, are
    left out of the family and stay NaN). Controls the family-wise error rate under any
    dependence between the tests."""
    p = np.asarray(pvalues, dtype=float)
    adjusted = np.full(p.shape, math.nan)
    finite = np.flatnonzero(np.isfinite(p))
    order = finite[np.argsort(p[finite], kind="stable")]
    m = len(order)
    # The k-th smallest p (k from 0) is multiplied by m - k; monotone so that no adjusted p is
    # below that of a smaller raw p.
    adjusted[order] = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p[order]))
    return adjusted


def paired_tables(
    analyses: Sequence[RunAnalysis], comparisons: Mapping[str, PairedComparison], level: float = DEFAULT_LEVEL
) -> dict[str, pd.DataFrame]:
    """One display table per comparison (``compare_to_first``'s order), columns named by run:
    the first run's mean, the other run's mean, their difference with its paired interval
    (n<4 where it cannot be estimated), the Wilcoxon p (n<4 for fewer than four shared rows) and
    the Holm-adjusted p over every test in the report (all cells of all comparisons), and the
    MDD at 80% power."""
    if len(comparisons) != len(analyses) - 1:
        raise ValueError("comparisons must be compare_to_first(analyses)")
    cells_by_label = {}
    for label, comparison in comparisons.items():
        metrics = comparison.metrics
        dims = comparison.dimensions.assign(n=comparison.dimensions["n_ids"])
        cells = pd.concat([metrics, dims], ignore_index=True)
        cells["estimable"] = paired_estimable(comparison)
        # A test of fewer than four differences says little (three give p >= 0.25 at best): it
        # is shown as n<4 and left out of the Holm family.
        cells["p_wilcoxon"] = cells["p_wilcoxon"].where(estimable(cells["n"]))
        cells["cell"] = _cell_labels(metrics, comparison.dimensions["name"])
        cells_by_label[label] = cells
    adjusted = holm(np.concatenate([c["p_wilcoxon"].to_numpy(float) for c in cells_by_label.values()]))
    pct = round(level * 100)
    base = analyses[0].name
    tables, offset = {}, 0
    for other, (label, cells) in zip(analyses[1:], cells_by_label.items()):
        holm_p = adjusted[offset: offset + len(cells)]
        offset += len(cells)
        tables[label] = pd.DataFrame(
            {
                "cell": cells["cell"],
                "shared n": cells["n"],
                base: cells["mean_b"],
                other.name: cells["mean_a"],
                label: cells["diff"],
                f"{pct}% CI": [interval_text(lo, hi, k, empty=math.isnan(v))
                               for v, lo, hi, k in zip(cells["diff"], cells["ci_low"], cells["ci_high"],
                                                       cells["estimable"])],
                "Wilcoxon p": [_p_text(p) if ok else NOT_ESTIMABLE for p, ok in zip(cells["p_wilcoxon"], estimable(cells["n"]))],
                "Holm p": [_p_text(p) for p in holm_p],
                "MDD (80% power)": cells["mdd"],
            }
        )
    return tables


def _p_text(p: float) -> str:
    return "–" if math.isnan(p) else f"{p:.3g}"


def comparison_header_markdown(analyses: Sequence[RunAnalysis], data_note: str = "") -> str:
    """Comparison heading: the runs in the order given (the first is the reference every other
    run is compared with). Their warnings go in the box below (``comparison_warnings``)."""
    entries = []
    for k, run in enumerate(analyses):
        generation = run.manifest_model.generation or GenerationSection()
        role = "reference (every difference is against it)" if k == 0 else f"compared with {analyses[0].name}"
        entries.append(f"**{run.name}**: model {generation.model or 'unknown'}, backend "
                       f"{generation.backend or 'unknown'}, {len(run.scores)} scored rows; {role}")
    return kit.comparison_header("CharacterEval comparison", entries, data_note)


# --- characters and novels ---------------------------------------------------------------------


def group_results(
    scores: pd.DataFrame, by: str, *, n_boot: int = DEFAULT_N_BOOT, seed: int = DEFAULT_SEED,
    level: float = DEFAULT_LEVEL,
) -> pd.DataFrame:
    """Per group (``role`` or ``novel_name``): samples, rows, metrics, the raw mean score, the
    raw centred mean (``statistics.group_summary``: score minus its metric's run mean) and the
    partially pooled centred mean with its interval (``stats.partial_pooling``: empirical Bayes
    over the groups' sample means, so a group of one or two samples is drawn toward the
    average instead of topping a chart). Sorted from the lowest pooled mean. ``n_boot`` and
    ``seed`` are accepted for a uniform signature: pooling draws no resamples."""
    del n_boot, seed
    summary = group_summary(scores, by)
    columns = ["pooled", "shrinkage", "pooled_low", "pooled_high"]
    if summary.empty:
        return summary.assign(mean_score=[], **{c: [] for c in columns})
    centred = scores.assign(centred=scores["score"] - scores.groupby("metric_en")["score"].transform("mean"))
    per_sample = centred.groupby([by, "id"], as_index=False, sort=False).agg(total=("centred", "sum"),
                                                                             rows=("centred", "size"))
    pooled = partial_pooling(per_sample["total"].to_numpy(float), per_sample["rows"].to_numpy(float),
                             per_sample[by].to_numpy(), level=level).set_index("group")
    raw = centred.groupby(by)["score"].mean()
    table = summary.assign(mean_score=summary[by].map(raw).to_numpy(float),
                           pooled=summary[by].map(pooled["pooled"]).to_numpy(float),
                           shrinkage=summary[by].map(pooled["shrinkage"]).to_numpy(float),
                           pooled_low=summary[by].map(pooled["low"]).to_numpy(float),
                           pooled_high=summary[by].map(pooled["high"]).to_numpy(float))
    return table.sort_values("pooled", kind="stable").reset_index(drop=True)


def group_display(table: pd.DataFrame, by: str, level: float = DEFAULT_LEVEL) -> pd.DataFrame:
    """``group_results`` as shown: the raw means beside the pooled one and its interval."""
    return pd.DataFrame(
        {
            COLUMN_LABELS.get(by, by): table[by],
            "samples": table["n_ids"],
            "rows": table["n_rows"],
            "metrics": table["n_metrics"],
            "mean score": table["mean_score"],
            "centred mean (raw)": table["mean_centred"],
            "centred mean (pooled)": table["pooled"],
            f"{round(level * 100)}% CI (pooled)": [interval_text(lo, hi, True)
                                                   for lo, hi in zip(table["pooled_low"], table["pooled_high"])],
        }
    )
