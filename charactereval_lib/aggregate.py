"""Protocol step S9: per-metric means and dimension averages, as tidy tables.

The official aggregation is the arithmetic mean of every row's score per metric, unrounded;
the paper's dimension "Avg." is the unweighted mean of its metrics' means (it reproduces all of
the paper's published averages; a row-weighted mean does not). Nothing is rounded here.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from . import runs
from .protocol import DIMENSIONS, MBTI_NOT_REPRODUCED, METRICS, PROTOCOL_VERSION, metrics_of

SCORE_COLUMNS = ["id", "metric_en", "score"]


def scores_frame(scores: Iterable[Mapping[str, Any]]) -> pd.DataFrame:
    """One row per scored (id, metric) observation with at least ``id, metric_en, score``."""
    frame = pd.DataFrame(list(scores))
    if frame.empty:
        return pd.DataFrame(columns=SCORE_COLUMNS)
    missing = [c for c in SCORE_COLUMNS if c not in frame.columns]
    if missing:
        raise ValueError(f"score records lack column(s) {missing}")
    return frame


def metric_means(scores: pd.DataFrame) -> pd.DataFrame:
    """S9: the arithmetic mean score of each metric with its row count ``n``, in protocol order.

    A metric with no rows gets ``n = 0`` and a NaN mean rather than disappearing."""
    grouped = scores.groupby("metric_en")["score"].agg(["count", "mean"]) if len(scores) else None
    records = []
    for metric in METRICS:
        has = grouped is not None and metric.metric_en in grouped.index
        records.append(
            {
                "metric_en": metric.metric_en,
                "metric_zh": metric.metric_zh,
                "abbr": metric.abbr,
                "dimension": metric.dimension.key,
                "n": int(grouped.loc[metric.metric_en, "count"]) if has else 0,
                "mean": float(grouped.loc[metric.metric_en, "mean"]) if has else math.nan,
            }
        )
    return pd.DataFrame.from_records(records)


def dimension_averages(means: pd.DataFrame) -> pd.DataFrame:
    """S9: each dimension's average = unweighted mean of its metric means (not of its rows).

    If any of its metrics has no rows the average is NaN: a partial average is not the paper's."""
    by_metric = means.set_index("metric_en")["mean"]
    records = []
    for dimension in DIMENSIONS:
        values = [float(by_metric[m.metric_en]) for m in metrics_of(dimension)]
        mean = math.nan if any(math.isnan(v) for v in values) else sum(values) / len(values)
        records.append(
            {"dimension": dimension.key, "name": dimension.name, "n_metrics": len(values), "mean": mean}
        )
    return pd.DataFrame.from_records(records)


def load_run_scores(run_dir: Path) -> tuple[pd.DataFrame, dict[str, int]]:
    """The run's scored rows as a tidy table (rows.jsonl joined with the latest score of each
    (id, metric)), and counts of rows that have no score yet."""
    run_dir = Path(run_dir)
    rows = runs.read_jsonl(run_dir / runs.ROWS).records
    if not rows:
        raise runs.RunError(f"{run_dir / runs.ROWS}: no rows (run `charactereval transform` first)")
    latest = runs.latest_by_key(runs.read_jsonl(run_dir / runs.SCORES).records, "id", "metric_en")
    scored = []
    for row in rows:
        score = latest.get((row["id"], row["metric_en"]))
        if score is not None:
            scored.append({**row, **score})
    frame = scores_frame(scored)
    return frame, {"rows": len(rows), "scored_rows": len(scored), "unscored_rows": len(rows) - len(scored)}


def summarize_run(run_dir: Path) -> dict[str, Any]:
    """S9 for a run directory: writes ``summary.json`` and ``metrics.csv`` and returns the summary.

    The summary carries every mean with its n and the run's failure counts, so that a number is
    never shown without what it rests on."""
    run_dir = Path(run_dir)
    frame, counts = load_run_scores(run_dir)
    manifest = runs.load_manifest(run_dir)
    transform_counts = manifest.get("transform", {}).get("counts", {})
    means = metric_means(frame)
    dims = dimension_averages(means)
    summary = {
        "protocol_version": PROTOCOL_VERSION,
        "run": run_dir.name,
        "model": manifest.get("generation", {}).get("model"),
        "counts": {
            **counts,
            "generation_failures": transform_counts.get("failed"),
            "no_metric_samples": transform_counts.get("no_metric"),
            "missing_samples": transform_counts.get("missing"),
        },
        "metrics": means.to_dict(orient="records"),
        "dimensions": dims.to_dict(orient="records"),
        "mbti": MBTI_NOT_REPRODUCED,
        "created_at": runs.utc_now(),
    }
    runs.write_json_atomic(run_dir / runs.SUMMARY, _nan_to_none(summary))
    runs.write_text_atomic(run_dir / runs.METRICS_CSV, metrics_table(means, dims).to_csv(index=False))
    return summary


def metrics_table(means: pd.DataFrame, dims: pd.DataFrame) -> pd.DataFrame:
    """One table with a row per metric and per dimension average (kind = metric | dimension)."""
    metric_rows = means.assign(kind="metric", name=means["metric_en"])[["kind", "name", "abbr", "dimension", "n", "mean"]]
    dim_rows = dims.assign(kind="dimension", abbr="Avg.", n=pd.NA)[["kind", "name", "abbr", "dimension", "n", "mean"]]
    return pd.concat([metric_rows, dim_rows], ignore_index=True)


def _nan_to_none(obj: Any) -> Any:
    if isinstance(obj, float) and math.isnan(obj):
        return None
    if isinstance(obj, dict):
        return {k: _nan_to_none(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_nan_to_none(v) for v in obj]
    return obj
