"""Intervals, comparisons and breakdowns around the S9 means of CharacterEval.

Intervals come from a studentized cluster bootstrap over sample ids (``engine.stats``): one
sample can carry up to 11 metrics and its rows share one reply, so they are not independent;
resampling whole samples keeps a sample's rows together and gives the dimension averages and
the overall score intervals from the same resamples. A metric with fewer than
``stats.MIN_CLUSTERS`` rows (one sample scores a metric once) has none.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from charactereval_lib.charactereval.aggregate import METRIC_ORDER, SCORE_COLUMNS, dimension_averages, metric_means
from charactereval_lib.charactereval.protocol import DIMENSIONS, METRICS, metrics_of
from charactereval_lib.engine import stats
from charactereval_lib.engine.stats import (
    BOOTSTRAP_METHOD,
    DEFAULT_LEVEL,
    DEFAULT_N_BOOT,
    DEFAULT_SEED,
    minimum_detectable_difference,
    wilcoxon_p,
)

_METRIC_POSITION = {name: i for i, name in enumerate(METRIC_ORDER)}
# Column positions (in METRIC_ORDER) of each dimension's metrics, in DIMENSIONS order.
_DIMENSION_COLUMNS = [[_METRIC_POSITION[m.metric_en] for m in metrics_of(d)] for d in DIMENSIONS]


def metric_clusters(frame: pd.DataFrame, value: str = "score") -> stats.Clusters:
    """Sum and count ``value`` per (sample id, metric) in protocol order, for the bootstrap."""
    return stats.cluster_totals(frame, METRIC_ORDER, value=value, label="metric")


def dimension_draws(metric_draws: np.ndarray) -> np.ndarray:
    """(n_boot, 3) unweighted dimension averages of each resample's metric means."""
    return np.stack([metric_draws[:, cols].mean(axis=1) for cols in _DIMENSION_COLUMNS], axis=1)


def _combinations() -> np.ndarray:
    """(12, 16) weights of the metric means in each reported value: the 12 metrics, the 3
    dimension averages (1/k over a dimension's k metrics) and the overall score (the unweighted
    mean of the dimension averages, the board's headline)."""
    dims = np.zeros((len(METRIC_ORDER), len(DIMENSIONS)))
    for d, cols in enumerate(_DIMENSION_COLUMNS):
        dims[cols, d] = 1.0 / len(cols)
    return np.hstack([np.eye(len(METRIC_ORDER)), dims, dims.mean(axis=1, keepdims=True)])


_COMBINATIONS = _combinations()


@dataclass(frozen=True)
class Statistics:
    """Per-metric and per-dimension means with bootstrap intervals, and the draws behind them."""

    metrics: pd.DataFrame
    dimensions: pd.DataFrame
    draws: np.ndarray  # (n_boot, 12) metric means per resample
    n_boot: int
    seed: int
    level: float
    # The overall score (mean of the dimension averages) and its interval (NaN where a metric
    # has too few rows for one).
    overall: tuple[float, float, float] = (math.nan, math.nan, math.nan)

    def settings(self) -> dict[str, Any]:
        return {"method": BOOTSTRAP_METHOD, "n_boot": self.n_boot, "seed": self.seed, "level": self.level}


def metric_statistics(
    scores: pd.DataFrame, *, n_boot: int = DEFAULT_N_BOOT, seed: int = DEFAULT_SEED, level: float = DEFAULT_LEVEL
) -> Statistics:
    """S9 means plus, per metric, the row SD and a studentized cluster-bootstrap interval;
    dimension averages and the overall score with intervals from the same resamples. A metric
    with fewer than ``stats.MIN_CLUSTERS`` rows has no interval (NaN, written as null): with so
    few samples no interval keeps its 95% promise (``stats.TOO_FEW_REASON``); a dimension with
    such a metric, and then the overall score, has none either."""
    means = metric_means(scores)
    sd = scores.groupby("metric_en")["score"].std(ddof=1) if len(scores) else pd.Series(dtype=float)
    means["sd"] = [float(sd.get(name, math.nan)) for name in METRIC_ORDER]
    width = len(METRIC_ORDER)
    if len(scores):
        found = stats.studentized_intervals(metric_clusters(scores), _COMBINATIONS, n_boot=n_boot, seed=seed,
                                            level=level)
        low, high, draws = found.low, found.high, found.draws[:, :width]
    else:
        low = high = np.full(_COMBINATIONS.shape[1], math.nan)
        draws = np.full((n_boot, width), math.nan)
    too_few = means["n"] < stats.MIN_CLUSTERS
    means["ci_low"], means["ci_high"] = np.where(too_few, math.nan, low[:width]), np.where(too_few, math.nan, high[:width])
    dims = dimension_averages(means)
    lacking = {m.dimension.key for m, few in zip(METRICS, too_few) if few}
    dim_lacks = dims["dimension"].isin(lacking).to_numpy()
    dims["ci_low"] = np.where(dim_lacks, math.nan, low[width:width + len(DIMENSIONS)])
    dims["ci_high"] = np.where(dim_lacks, math.nan, high[width:width + len(DIMENSIONS)])
    overall = (float(dims["mean"].mean()), *((math.nan, math.nan) if lacking else (float(low[-1]), float(high[-1]))))
    return Statistics(means, dims, draws, n_boot, seed, level, overall)


# --- paired comparison ---------------------------------------------------------------------

@dataclass(frozen=True)
class PairedComparison:
    """Run A minus run B on the (id, metric) rows both runs scored."""

    rows: pd.DataFrame  # id, metric_en, score_a, score_b, diff
    metrics: pd.DataFrame
    dimensions: pd.DataFrame


def paired_rows(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """The (id, metric) rows scored in both runs, with both scores and their difference A - B."""
    for name, frame in (("A", a), ("B", b)):
        if frame.duplicated(["id", "metric_en"]).any():
            raise ValueError(f"run {name} has more than one score for some (id, metric) row")
    merged = a[SCORE_COLUMNS].merge(b[SCORE_COLUMNS], on=["id", "metric_en"], suffixes=("_a", "_b"))
    merged["diff"] = merged["score_a"] - merged["score_b"]
    return merged


def paired_comparison(
    a: pd.DataFrame,
    b: pd.DataFrame,
    *,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = DEFAULT_SEED,
    level: float = DEFAULT_LEVEL,
    alpha: float = 0.05,
    power: float = 0.8,
) -> PairedComparison:
    """Per metric and per dimension: means of A and B on their shared rows, the difference with a
    paired cluster-bootstrap interval (shared sample ids resampled), a Wilcoxon signed-rank p and
    the minimum difference detectable at ``power``.

    A dimension's Wilcoxon test uses one observation per sample (the mean difference over that
    sample's rows in the dimension), because rows of one sample are not independent."""
    rows = paired_rows(a, b)
    means_a = metric_means(rows.rename(columns={"score_a": "score"}))
    means_b = metric_means(rows.rename(columns={"score_b": "score"}))
    diff_stats = metric_statistics(rows.rename(columns={"diff": "score"}), n_boot=n_boot, seed=seed, level=level)
    metrics = diff_stats.metrics[["metric_en", "abbr", "dimension", "n"]].copy()
    metrics["mean_a"] = means_a["mean"]
    metrics["mean_b"] = means_b["mean"]
    metrics["diff"] = diff_stats.metrics["mean"]
    metrics["ci_low"] = diff_stats.metrics["ci_low"]
    metrics["ci_high"] = diff_stats.metrics["ci_high"]
    metrics["sd_diff"] = diff_stats.metrics["sd"]
    by_metric = {name: group["diff"].to_numpy() for name, group in rows.groupby("metric_en")}
    metrics["p_wilcoxon"] = [wilcoxon_p(by_metric.get(name, np.array([]))) for name in METRIC_ORDER]
    metrics["mdd"] = minimum_detectable_difference(metrics["sd_diff"], metrics["n"], alpha=alpha, power=power)

    dims = diff_stats.dimensions[["dimension", "name"]].copy()
    dims["mean_a"] = dimension_averages(means_a)["mean"]
    dims["mean_b"] = dimension_averages(means_b)["mean"]
    dims["diff"] = diff_stats.dimensions["mean"]
    dims["ci_low"] = diff_stats.dimensions["ci_low"]
    dims["ci_high"] = diff_stats.dimensions["ci_high"]
    per_sample = _per_sample_dimension_diffs(rows)
    dims["n_ids"] = [int((per_sample["dimension"] == d.key).sum()) for d in DIMENSIONS]
    dims["p_wilcoxon"] = [
        wilcoxon_p(per_sample.loc[per_sample["dimension"] == d.key, "diff"].to_numpy()) for d in DIMENSIONS
    ]
    return PairedComparison(rows, metrics, dims)


def _per_sample_dimension_diffs(rows: pd.DataFrame) -> pd.DataFrame:
    dimension_of = {m.metric_en: m.dimension.key for m in METRICS}
    tagged = rows.assign(dimension=rows["metric_en"].map(dimension_of))
    return tagged.groupby(["dimension", "id"], as_index=False)["diff"].mean()


# --- breakdowns ------------------------------------------------------------------------------

def group_breakdown(scores: pd.DataFrame, by: str) -> pd.DataFrame:
    """Tidy table, one row per (group, metric): rows ``n`` and mean score (e.g. by ``role`` or
    ``novel_name``). Groups are small, so these means are descriptive, not comparable to the
    paper's metric means."""
    if by not in scores.columns:
        raise ValueError(f"scores have no column {by!r} to break down by")
    table = scores.groupby([by, "metric_en"], as_index=False)["score"].agg(n="count", mean="mean")
    table["abbr"] = table["metric_en"].map({m.metric_en: m.abbr for m in METRICS})
    order = table["metric_en"].map(_METRIC_POSITION)
    return table.assign(_order=order).sort_values([by, "_order"]).drop(columns="_order").reset_index(drop=True)


def group_summary(scores: pd.DataFrame, by: str) -> pd.DataFrame:
    """One row per group: samples, rows, and the mean of ``score - its metric's run mean``.

    Groups carry different mixes of metrics, whose means differ by up to ~2 points, so a raw
    pooled mean would rank groups by their metric mix; centring each row on its metric's mean
    removes that. Sorted from the lowest centred mean."""
    if by not in scores.columns:
        raise ValueError(f"scores have no column {by!r} to summarise by")
    centred = scores["score"] - scores.groupby("metric_en")["score"].transform("mean")
    table = (
        scores.assign(centred=centred)
        .groupby(by, as_index=False)
        .agg(n_ids=("id", "nunique"), n_rows=("score", "size"), n_metrics=("metric_en", "nunique"),
             mean_centred=("centred", "mean"))
    )
    return table.sort_values("mean_centred").reset_index(drop=True)
