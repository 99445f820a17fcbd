"""A run's S9 summary: its scored rows as a tidy table, and ``summary.json`` / ``metrics.csv``."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from charactereval_lib.charactereval import layout
from charactereval_lib.charactereval.aggregate import METRIC_ORDER, SCORE_COLUMNS, scores_frame
from charactereval_lib.charactereval.documents import Summary
from charactereval_lib.charactereval.protocol import MBTI_NOT_REPRODUCED, PROTOCOL_VERSION
from charactereval_lib.charactereval.statistics import metric_statistics
from charactereval_lib.engine.stats import DEFAULT_LEVEL, DEFAULT_N_BOOT, DEFAULT_SEED
from charactereval_lib.engine.storage import artifacts, runs
from charactereval_lib.engine.validation import validate

# run.json's section of the judge scorer (``charactereval.judge`` writes it).
JUDGE_SECTION = "judge_scoring"


def load_run_scores(run: layout.CharacterEvalRun, scorer: str = layout.REWARD_MODEL,
                    judge_model: str | None = None, *, rows: list[dict[str, Any]] | None = None,
                    latest: dict[tuple, dict[str, Any]] | None = None) -> tuple[pd.DataFrame, dict[str, Any]]:
    """The run's scored rows as a tidy table (rows.jsonl joined with the latest score of each
    (id, metric) of ``scorer``; for the judge, of one judge model: ``CharacterEvalRun.select_judge``), and
    counts of rows that have no score yet. ``rows``, ``latest``: rows.jsonl's records and the
    scorer's latest score records, when the caller has read them already.

    Judge rows whose answer was invalid and left unscored by their spec (score None) are not in
    the table (a mean cannot use them) but are counted in ``invalid_by_metric``, never dropped
    silently; invalid answers a spec scores (evals: the minimum) stay in the table and are
    counted there too."""
    run = layout.CharacterEvalRun.resolve(run)
    judge_model = run.select_judge(judge_model) if scorer == layout.JUDGE else None
    # The score file is read once: a full run's holds 8,032 records or more.
    if latest is None:
        latest = run.latest_scores(scorer=scorer, judge_model=judge_model)
    rows, scored = run.scored_rows(scorer, judge_model, latest=latest, rows=rows)
    if not rows:
        raise runs.RunError(f"{run.rows}: no rows (run `charactereval transform` first)")
    invalid = Counter(s["metric_en"] for s in scored if s.get("invalid"))
    unscored_invalid = sum(1 for s in scored if s.get("score") is None)
    scored = [s for s in scored if s.get("score") is not None]
    # With nothing scored yet the table still has the rows' columns (role, novel_name, ...), so
    # breakdowns of an unscored run are empty rather than errors.
    frame = scores_frame(scored) if scored else pd.DataFrame(columns=list(dict.fromkeys([*rows[0], *SCORE_COLUMNS])))
    modes = dict(Counter(str(layout.scorer_identity(s).mode) for s in scored))
    scorers = {identity.label(): count for identity, count in run.scorer_identities(scorer, judge_model, latest=latest).items()}
    counts = {"rows": len(rows), "scored_rows": len(scored), "unscored_rows": len(rows) - len(scored),
              "scorer_modes": modes, "scorers": scorers, "scorer": scorer}
    if scorer == layout.JUDGE:
        counts.update(judge_model=judge_model, invalid_answers=sum(invalid.values()), invalid_unscored=unscored_invalid,
                      invalid_by_metric={m: invalid.get(m, 0) for m in METRIC_ORDER})
    return frame, counts


def failed_rows_by_metric(failed_ids: Iterable[int], id2metric: Mapping[str, Sequence[Sequence[str]]]) -> dict[str, int]:
    """How many (id, metric) rows each metric lost to failed generations: S5 drops a failed
    sample before expanding it, so these rows silently shrink n unless they are counted."""
    lost = dict.fromkeys(METRIC_ORDER, 0)
    for sample_id in failed_ids:
        for metric_en, _ in id2metric.get(str(sample_id), ()):
            lost[metric_en] += 1
    return lost


def summarize_run(
    run: layout.CharacterEvalRun,
    *,
    id2metric: Mapping[str, Sequence[Sequence[str]]] | None = None,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = DEFAULT_SEED,
    level: float = DEFAULT_LEVEL,
    warnings: Sequence[str] = (),
    scorer: str = layout.REWARD_MODEL,
    judge_model: str | None = None,
    out: Path | None = None,
) -> dict[str, Any]:
    """S9 for a run directory with intervals of one scorer's scores: writes ``summary.json`` and
    ``metrics.csv`` (the judge's: ``judge_summary.json``, ``judge_metrics.csv``, of one judge
    model) and returns the summary. A judge summary gives every metric its count of invalid
    answers.

    The summary carries every mean with its n, SD, interval and the run's failure counts, so a
    number is never shown without what it rests on. With ``id2metric`` each metric also gets
    ``failed``, the rows it lost to failed generations (unknown, hence None, without it)."""
    run = layout.CharacterEvalRun.resolve(run)
    frame, counts = load_run_scores(run, scorer, judge_model)
    manifest = run.manifest()
    transform = manifest.get("transform", {})
    transform_counts = transform.get("counts", {})
    stats = metric_statistics(frame, n_boot=n_boot, seed=seed, level=level)
    means = stats.metrics
    if id2metric is not None:
        lost = failed_rows_by_metric(transform.get("failed_ids", []), id2metric)
        means["failed"] = [lost[name] for name in METRIC_ORDER]
    else:
        means["failed"] = None
    if scorer == layout.JUDGE:
        means["invalid"] = [counts["invalid_by_metric"][name] for name in METRIC_ORDER]
    summary = {
        "protocol_version": PROTOCOL_VERSION,
        "run": run.name,
        "scorer": scorer,
        "model": manifest.get("generation", {}).get("model"),
        "counts": {
            **counts,
            "generation_failures": transform_counts.get("failed"),
            "no_metric_samples": transform_counts.get("no_metric"),
            "missing_samples": transform_counts.get("missing"),
        },
        "bootstrap": stats.settings(),
        "metrics": means.to_dict(orient="records"),
        "dimensions": stats.dimensions.to_dict(orient="records"),
        "mbti": MBTI_NOT_REPRODUCED,
        "warnings": list(warnings),
        "created_at": runs.utc_now(),
    }
    if scorer == layout.JUDGE:
        recorded = judge_manifest(manifest, counts["judge_model"])
        summary["judge"] = {"judge_model": counts["judge_model"],
                            **{k: recorded.get(k) for k in ("base_url", "status")}}
    # ``out``: another directory than the run's (a colleague's run, read-only to us).
    out = run.path if out is None else Path(out)
    out.mkdir(parents=True, exist_ok=True)
    document, path = nan_to_none(summary), out / run.summary_file(scorer).name
    # Never written unless ``documents.load_summary`` reads it back.
    validate(Summary, document, str(path), runs.RunError)
    artifacts.write_json_atomic(path, document)
    artifacts.write_text_atomic(out / run.metrics_csv_file(scorer).name,
                           metrics_table(means, stats.dimensions).to_csv(index=False))
    return summary


def judge_manifest(manifest: Mapping[str, Any], judge_model: str | None) -> dict[str, Any]:
    """What ``run.json`` records about one judge model's sessions: its entry under
    ``judge_scoring.judges`` (runs judged before several judges per run: the section itself)."""
    section = manifest.get(JUDGE_SECTION) or {}
    if "judges" in section:
        return dict(section["judges"].get(judge_model) or {})
    return dict(section) if section.get("judge_model") == judge_model else {}


METRICS_TABLE_COLUMNS = ["kind", "name", "abbr", "dimension", "n", "failed", "mean", "sd", "ci_low", "ci_high"]
# A judge's metrics table also counts invalid answers per metric.
JUDGE_COLUMNS = [*METRICS_TABLE_COLUMNS, "invalid"]


def metrics_table(means: pd.DataFrame, dims: pd.DataFrame) -> pd.DataFrame:
    """One table with a row per metric and per dimension average (kind = metric | dimension).

    Columns missing from the inputs (intervals, SD, failures) are left empty."""
    metric_rows = means.assign(kind="metric", name=means["metric_en"])
    dim_rows = dims.assign(kind="dimension", abbr="Avg.", n=pd.NA, failed=pd.NA, sd=math.nan)
    table = pd.concat([metric_rows, dim_rows], ignore_index=True)
    return table.reindex(columns=JUDGE_COLUMNS if "invalid" in means else METRICS_TABLE_COLUMNS)


def nan_to_none(obj: Any) -> Any:
    """NaN (a statistic of no rows) as None throughout dicts and lists: JSON has no NaN."""
    if isinstance(obj, float) and math.isnan(obj):
        return None
    if isinstance(obj, dict):
        return {k: nan_to_none(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [nan_to_none(v) for v in obj]
    return obj


def summary_table_lines(summary: Mapping[str, Any], *, columns: Sequence[str] = ("n",)) -> list[str]:
    """A summary's metric means and dimension averages as terminal lines (``summarize``,
    ``panel``): metrics named as the reports name them, each dimension average on an "(avg)" row
    in the same columns, ``columns`` (of each metric record: n, failed, invalid) before the mean,
    and the interval (n<4 where there is none)."""
    from charactereval_lib.charactereval.diagnostics import NOT_ESTIMABLE, metric_label
    from charactereval_lib.engine.reports.texttable import text_table

    def number(value: Any) -> str:
        return "-" if value is None or value != value else f"{value:.3f}"

    def interval(record: Mapping[str, Any]) -> str:
        low, high = record.get("ci_low"), record.get("ci_high")
        if low is None or low != low:
            return NOT_ESTIMABLE if record.get("mean") is not None else "-"
        return f"[{number(low)}, {number(high)}]"

    level = round(summary["bootstrap"]["level"] * 100)
    rows = [[metric_label(m["metric_en"]), *("-" if m.get(c) is None else m[c] for c in columns), number(m["mean"]),
             interval(m)] for m in summary["metrics"]]
    rows += [[f"{d['name']} (avg)", *([""] * len(columns)), number(d["mean"]), interval(d)]
             for d in summary["dimensions"]]
    return text_table(["metric", *columns, "mean", f"{level}% CI"], rows)
