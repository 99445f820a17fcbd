"""Protocol step S9, exactly: per-metric means and dimension averages, as tidy tables.

The official aggregation is the arithmetic mean of every row's score per metric, unrounded;
the paper's dimension "Avg." is the unweighted mean of its metrics' means (it reproduces all of
the paper's published averages; a row-weighted mean does not). Nothing is rounded here.
Intervals and comparisons around these means live in ``charactereval.statistics``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd

from charactereval_lib.charactereval.protocol import DIMENSIONS, METRICS, metrics_of

SCORE_COLUMNS = ["id", "metric_en", "score"]
METRIC_ORDER: tuple[str, ...] = tuple(m.metric_en for m in METRICS)


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
