"""Protocol step S9 and the statistics around it, as tidy tables.

The official aggregation is the arithmetic mean of every row's score per metric, unrounded;
the paper's dimension "Avg." is the unweighted mean of its metrics' means (it reproduces all of
the paper's published averages; a row-weighted mean does not). Nothing is rounded here.

Intervals come from a cluster bootstrap over sample ids: one sample can carry up to 11 metrics
and its rows share one reply, so they are not independent; resampling whole samples keeps a
sample's rows together and gives the dimension averages intervals from the same resamples.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats as _stats

from charactereval_lib.engine import runs
from charactereval_lib.charactereval.protocol import DIMENSIONS, MBTI_NOT_REPRODUCED, METRICS, PROTOCOL_VERSION, metrics_of

SCORE_COLUMNS = ["id", "metric_en", "score"]
METRIC_ORDER: tuple[str, ...] = tuple(m.metric_en for m in METRICS)
_METRIC_POSITION = {name: i for i, name in enumerate(METRIC_ORDER)}
# Column positions (in METRIC_ORDER) of each dimension's metrics, in DIMENSIONS order.
_DIMENSION_COLUMNS = [[_METRIC_POSITION[m.metric_en] for m in metrics_of(d)] for d in DIMENSIONS]

DEFAULT_N_BOOT = 1000
DEFAULT_SEED = 0
DEFAULT_LEVEL = 0.95
BOOTSTRAP_METHOD = "percentile cluster bootstrap: sample ids resampled with replacement"


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


# --- cluster bootstrap -----------------------------------------------------------------------


@dataclass(frozen=True)
class Clusters:
    """Per-sample totals: everything the bootstrap needs, one row per sample id."""

    ids: np.ndarray  # (n_ids,) sample ids
    sums: np.ndarray  # (n_ids, 12) sum of the values of each id's rows per metric (protocol order)
    counts: np.ndarray  # (n_ids, 12) number of rows per id and metric


def metric_positions(metric_en: pd.Series) -> np.ndarray:
    """Protocol-order column index of each row's metric; an unknown name is an error."""
    positions = metric_en.map(_METRIC_POSITION)
    if positions.isna().any():
        unknown = sorted(set(metric_en[positions.isna()].astype(str)))
        raise ValueError(f"unknown metric name(s) {unknown[:5]}; expected one of {list(METRIC_ORDER)}")
    return positions.to_numpy(dtype=np.int64)


def cluster_totals(frame: pd.DataFrame, value: str = "score") -> Clusters:
    """Sum and count ``value`` per (sample id, metric) as dense (n_ids, 12) arrays."""
    codes, ids = pd.factorize(frame["id"], sort=True)
    flat = codes.astype(np.int64) * len(METRIC_ORDER) + metric_positions(frame["metric_en"])
    size = len(ids) * len(METRIC_ORDER)
    values = frame[value].to_numpy(dtype=np.float64)
    sums = np.bincount(flat, weights=values, minlength=size).reshape(len(ids), len(METRIC_ORDER))
    counts = np.bincount(flat, minlength=size).reshape(len(ids), len(METRIC_ORDER)).astype(np.float64)
    return Clusters(np.asarray(ids), sums, counts)


def resample_counts(n_ids: int, n_boot: int, seed: int) -> np.ndarray:
    """(n_boot, n_ids): how often each id is drawn in each resample of n_ids draws with
    replacement. Counting the draws (one bincount over all resamples at once) turns every
    resampled sum into a matrix product instead of a Python loop."""
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, n_ids, size=(n_boot, n_ids), dtype=np.int64)
    picks += np.arange(n_boot, dtype=np.int64)[:, None] * n_ids
    return np.bincount(picks.ravel(), minlength=n_boot * n_ids).reshape(n_boot, n_ids).astype(np.float64)


def bootstrap_means(clusters: Clusters, n_boot: int = DEFAULT_N_BOOT, seed: int = DEFAULT_SEED) -> np.ndarray:
    """(n_boot, 12) resampled per-metric means (ratio of resampled sums to resampled counts).

    A resample that happens to draw no row of a metric gives NaN for it (only plausible for a
    metric with very few rows); intervals ignore those draws."""
    weights = resample_counts(len(clusters.ids), n_boot, seed)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (weights @ clusters.sums) / (weights @ clusters.counts)


def dimension_draws(metric_draws: np.ndarray) -> np.ndarray:
    """(n_boot, 3) unweighted dimension averages of each resample's metric means."""
    return np.stack([metric_draws[:, cols].mean(axis=1) for cols in _DIMENSION_COLUMNS], axis=1)


def percentile_interval(draws: np.ndarray, level: float = DEFAULT_LEVEL) -> tuple[np.ndarray, np.ndarray]:
    """Per-column percentile interval of bootstrap draws, ignoring NaN draws; NaN when a
    column has no finite draw."""
    if not 0 < level < 1:
        raise ValueError(f"confidence level must be between 0 and 1, got {level}")
    tail = (1 - level) / 2 * 100
    low = np.full(draws.shape[1], math.nan)
    high = np.full(draws.shape[1], math.nan)
    for col in range(draws.shape[1]):
        finite = draws[:, col][np.isfinite(draws[:, col])]
        if finite.size:
            low[col], high[col] = np.percentile(finite, [tail, 100 - tail])
    return low, high


@dataclass(frozen=True)
class Statistics:
    """Per-metric and per-dimension means with bootstrap intervals, and the draws behind them."""

    metrics: pd.DataFrame
    dimensions: pd.DataFrame
    draws: np.ndarray  # (n_boot, 12) metric means per resample
    n_boot: int
    seed: int
    level: float

    def settings(self) -> dict[str, Any]:
        return {"method": BOOTSTRAP_METHOD, "n_boot": self.n_boot, "seed": self.seed, "level": self.level}


def metric_statistics(
    scores: pd.DataFrame, *, n_boot: int = DEFAULT_N_BOOT, seed: int = DEFAULT_SEED, level: float = DEFAULT_LEVEL
) -> Statistics:
    """S9 means plus, per metric, the row SD and a cluster-bootstrap interval; dimension
    averages with intervals from the same resamples."""
    if n_boot < 1:
        raise ValueError(f"n_boot must be at least 1, got {n_boot}")
    means = metric_means(scores)
    sd = scores.groupby("metric_en")["score"].std(ddof=1) if len(scores) else pd.Series(dtype=float)
    means["sd"] = [float(sd.get(name, math.nan)) for name in METRIC_ORDER]
    if len(scores):
        draws = bootstrap_means(cluster_totals(scores), n_boot, seed)
    else:
        draws = np.full((n_boot, len(METRIC_ORDER)), math.nan)
    means["ci_low"], means["ci_high"] = percentile_interval(draws, level)
    dims = dimension_averages(means)
    dims["ci_low"], dims["ci_high"] = percentile_interval(dimension_draws(draws), level)
    return Statistics(means, dims, draws, n_boot, seed, level)


# --- power ------------------------------------------------------------------------------------


def minimum_detectable_difference(
    sd: float | np.ndarray, n: float | np.ndarray, *, alpha: float = 0.05, power: float = 0.8, paired: bool = True
) -> float | np.ndarray:
    """The true mean difference a two-sided z-test at ``alpha`` detects with probability
    ``power``: (z_{1-alpha/2} + z_{power}) * sd / sqrt(n) for n paired differences of SD ``sd``;
    for two independent groups of n rows each with common SD ``sd``, times sqrt(2)."""
    factor = _stats.norm.ppf(1 - alpha / 2) + _stats.norm.ppf(power)
    scale = 1.0 if paired else math.sqrt(2.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return factor * scale * np.asarray(sd, dtype=float) / np.sqrt(np.asarray(n, dtype=float))


# --- paired comparison -------------------------------------------------------------------------


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


def wilcoxon_p(differences: np.ndarray) -> float:
    """Two-sided Wilcoxon signed-rank p-value; NaN when no difference is non-zero (undefined)."""
    differences = np.asarray(differences, dtype=float)
    if not np.any(differences != 0):
        return math.nan
    return float(_stats.wilcoxon(differences, zero_method="wilcox").pvalue)


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


# --- breakdowns -------------------------------------------------------------------------------


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


# --- run directories ---------------------------------------------------------------------------


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
    # With nothing scored yet the table still has the rows' columns (role, novel_name, ...), so
    # breakdowns of an unscored run are empty rather than errors.
    frame = scores_frame(scored) if scored else pd.DataFrame(columns=list(dict.fromkeys([*rows[0], *SCORE_COLUMNS])))
    # Published numbers need one scorer mode throughout; a mix (a mode switch left half done) is
    # shown, not hidden.
    modes = dict(Counter(str(s.get("mode")) for s in scored))
    return frame, {"rows": len(rows), "scored_rows": len(scored), "unscored_rows": len(rows) - len(scored),
                   "scorer_modes": modes}


def failed_rows_by_metric(failed_ids: Iterable[int], id2metric: Mapping[str, Sequence[Sequence[str]]]) -> dict[str, int]:
    """How many (id, metric) rows each metric lost to failed generations: S5 drops a failed
    sample before expanding it, so these rows silently shrink n unless they are counted."""
    lost = dict.fromkeys(METRIC_ORDER, 0)
    for sample_id in failed_ids:
        for metric_en, _ in id2metric.get(str(sample_id), ()):
            lost[metric_en] += 1
    return lost


def summarize_run(
    run_dir: Path,
    *,
    id2metric: Mapping[str, Sequence[Sequence[str]]] | None = None,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = DEFAULT_SEED,
    level: float = DEFAULT_LEVEL,
) -> dict[str, Any]:
    """S9 for a run directory with intervals: writes ``summary.json`` and ``metrics.csv`` and
    returns the summary.

    The summary carries every mean with its n, SD, interval and the run's failure counts, so a
    number is never shown without what it rests on. With ``id2metric`` each metric also gets
    ``failed``, the rows it lost to failed generations (unknown, hence None, without it)."""
    run_dir = Path(run_dir)
    frame, counts = load_run_scores(run_dir)
    manifest = runs.load_manifest(run_dir)
    transform = manifest.get("transform", {})
    transform_counts = transform.get("counts", {})
    stats = metric_statistics(frame, n_boot=n_boot, seed=seed, level=level)
    means = stats.metrics
    if id2metric is not None:
        lost = failed_rows_by_metric(transform.get("failed_ids", []), id2metric)
        means["failed"] = [lost[name] for name in METRIC_ORDER]
    else:
        means["failed"] = None
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
        "bootstrap": stats.settings(),
        "metrics": means.to_dict(orient="records"),
        "dimensions": stats.dimensions.to_dict(orient="records"),
        "mbti": MBTI_NOT_REPRODUCED,
        "created_at": runs.utc_now(),
    }
    runs.write_json_atomic(run_dir / runs.SUMMARY, _nan_to_none(summary))
    runs.write_text_atomic(run_dir / runs.METRICS_CSV, metrics_table(means, stats.dimensions).to_csv(index=False))
    return summary


METRICS_TABLE_COLUMNS = ["kind", "name", "abbr", "dimension", "n", "failed", "mean", "sd", "ci_low", "ci_high"]


def metrics_table(means: pd.DataFrame, dims: pd.DataFrame) -> pd.DataFrame:
    """One table with a row per metric and per dimension average (kind = metric | dimension).

    Columns missing from the inputs (intervals, SD, failures) are left empty."""
    metric_rows = means.assign(kind="metric", name=means["metric_en"])
    dim_rows = dims.assign(kind="dimension", abbr="Avg.", n=pd.NA, failed=pd.NA, sd=math.nan)
    table = pd.concat([metric_rows, dim_rows], ignore_index=True)
    return table.reindex(columns=METRICS_TABLE_COLUMNS)


def _nan_to_none(obj: Any) -> Any:
    if isinstance(obj, float) and math.isnan(obj):
        return None
    if isinstance(obj, dict):
        return {k: _nan_to_none(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_nan_to_none(v) for v in obj]
    return obj
