"""Statistical inference any benchmark reuses: cluster bootstrap, paired tests, power,
partial pooling of small groups and exact binomial intervals.

Observations come in clusters (CharacterEval: the metric rows of one sample share one reply;
CoSER: the dimension scores of one scene share one simulation), so they are not independent.
The bootstrap resamples whole clusters, which keeps a cluster's observations together and lets
every statistic derived from the same resamples (per category, averages of categories) carry a
consistent interval. Nothing here knows a benchmark's metric names: callers pass categories.

Intervals are studentized (bootstrap-t): each resample's mean is divided by its own
cluster-robust standard error, and the quantiles of that t are scaled by the run's standard
error. A percentile interval of a mean is too narrow at small n (the bootstrap draws no wider
spread than the few clusters show); the studentized one reaches its nominal coverage from
``MIN_CLUSTERS`` clusters on, as ``testing.coverage`` measures on data drawn like the real ones.
Below that no method we measured gets there, so no interval is given (``TOO_FEW``).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd

# numpy, pandas and scipy are imported where they are used: every command imports this module
# for its defaults, and the three take about a second to import (most commands need none).

DEFAULT_N_BOOT = 1000
DEFAULT_SEED = 0
DEFAULT_LEVEL = 0.95
# Below 4 clusters no interval we measured (percentile, studentized, t with cluster-robust
# errors) covered 93% of simulated reward-model means at a nominal 95%: with 2-3 clusters of
# skewed, discrete scores the spread the clusters show is too often far from the truth.
MIN_CLUSTERS = 4
TOO_FEW = f"n<{MIN_CLUSTERS}"
TOO_FEW_REASON = (f"fewer than {MIN_CLUSTERS} clusters: no interval method reaches 93% coverage of a nominal 95% "
                  "there (simulated), so none is given")
BOOTSTRAP_METHOD = "studentized (bootstrap-t) cluster bootstrap: sample ids resampled with replacement"


def how_to_read(cluster: str, why: str, extra: str = "") -> str:
    """The "How to read" paragraph of a report, naming its interval methods: ``cluster`` names
    what is resampled (plural, e.g. "samples"), ``why`` why they are kept whole, ``extra`` the
    report's own methods (pooling, tests) as further sentences."""
    return (f"**How to read.** Means are the protocol's plain means, unchanged, each with its n. Every 95% "
            f"interval is a studentized (bootstrap-t) cluster bootstrap: whole {cluster} are resampled ({why}), each "
            f"resample's mean is divided by its own cluster-robust standard error, and the interval is never "
            f"narrower than Student's t with one degree of freedom fewer than {cluster}; averages get theirs "
            f"from the same resamples. With fewer than {MIN_CLUSTERS} {cluster} a cell reads {TOO_FEW} instead: "
            f"{TOO_FEW_REASON}, at a usable width (benchmarks/bench_coverage.py measures the coverage of every "
            f"kind of interval on simulated data; docs/performance.md). {extra}").strip()


@dataclass(frozen=True)
class Clusters:
    """Per-cluster totals: everything the bootstrap needs, one row per cluster."""

    ids: np.ndarray  # (n_clusters,) cluster keys
    sums: np.ndarray  # (n_clusters, n_categories) sum of the values per cluster and category
    counts: np.ndarray  # (n_clusters, n_categories) number of observations per cluster and category


def category_positions(values: pd.Series, categories: Sequence[str], label: str = "category") -> np.ndarray:
    """Column index of each observation's category; an unknown category is an error that
    calls it by the caller's ``label`` (e.g. "metric")."""
    import numpy as np

    position = {name: i for i, name in enumerate(categories)}
    positions = values.map(position)
    if positions.isna().any():
        unknown = sorted(set(values[positions.isna()].astype(str)))
        raise ValueError(f"unknown {label} name(s) {unknown[:5]}; expected one of {list(categories)}")
    return positions.to_numpy(dtype=np.int64)


def cluster_totals(
    frame: pd.DataFrame, categories: Sequence[str], *, cluster: str = "id", category: str = "metric_en",
    value: str = "score", label: str = "category",
) -> Clusters:
    """Sum and count ``value`` per (cluster, category) as dense (n_clusters, n_categories) arrays."""
    import numpy as np
    import pandas as pd

    codes, ids = pd.factorize(frame[cluster], sort=True)
    width = len(categories)
    flat = codes.astype(np.int64) * width + category_positions(frame[category], categories, label)
    size = len(ids) * width
    values = frame[value].to_numpy(dtype=np.float64)
    sums = np.bincount(flat, weights=values, minlength=size).reshape(len(ids), width)
    counts = np.bincount(flat, minlength=size).reshape(len(ids), width).astype(np.float64)
    return Clusters(np.asarray(ids), sums, counts)


def resample_counts(n_ids: int, n_boot: int, seed: int) -> np.ndarray:
    """(n_boot, n_ids): how often each cluster is drawn in each resample of n_ids draws with
    replacement. Counting the draws (one bincount over all resamples at once) turns every
    resampled sum into a matrix product instead of a Python loop."""
    import numpy as np

    rng = np.random.default_rng(seed)
    picks = rng.integers(0, n_ids, size=(n_boot, n_ids), dtype=np.int64)
    picks += np.arange(n_boot, dtype=np.int64)[:, None] * n_ids
    return np.bincount(picks.ravel(), minlength=n_boot * n_ids).reshape(n_boot, n_ids).astype(np.float64)


@functools.lru_cache(maxsize=2)
def _with_data_row(n_ids: int, n_boot: int, seed: int) -> np.ndarray:
    """(n_boot + 1, n_ids), read-only: row 0 the data as they are (every cluster once), rows
    1..n_boot ``resample_counts``. Kept for the next call: every run of a benchmark has the same
    clusters (a CharacterEval run's 4,564 samples) and seed, so a site build draws them once
    rather than once per run (a quarter of a run's intervals' time)."""
    import numpy as np

    weights = np.vstack([np.ones((1, n_ids)), resample_counts(n_ids, n_boot, seed)])
    weights.flags.writeable = False
    return weights


def cluster_weights(clusters: Sequence[Hashable], n_boot: int = DEFAULT_N_BOOT, seed: int = DEFAULT_SEED) -> np.ndarray:
    """(n_boot, rows) row weights of the cluster bootstrap: a row weighs how often its cluster was
    drawn. The draws are ``resample_counts`` over the clusters in sorted order, as
    ``cluster_totals`` numbers them, so a statistic weighted by rows (the agreement statistics)
    sees the very resamples ``bootstrap_means`` sees for the same clusters and seed."""
    import pandas as pd

    codes, ids = pd.factorize(pd.Series(list(clusters), dtype=object), sort=True)
    return resample_counts(len(ids), n_boot, seed)[:, codes]


def bootstrap_means(clusters: Clusters, n_boot: int = DEFAULT_N_BOOT, seed: int = DEFAULT_SEED) -> np.ndarray:
    """(n_boot, n_categories) resampled per-category means (resampled sums over resampled counts).

    A resample that happens to draw no observation of a category gives NaN for it (only
    plausible for a category with very few observations); intervals ignore those draws."""
    import numpy as np

    if n_boot < 1:
        raise ValueError(f"n_boot must be at least 1, got {n_boot}")
    weights = resample_counts(len(clusters.ids), n_boot, seed)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (weights @ clusters.sums) / (weights @ clusters.counts)


def percentile_interval(draws: np.ndarray, level: float = DEFAULT_LEVEL) -> tuple[np.ndarray, np.ndarray]:
    """Per-column percentile interval of bootstrap draws, ignoring NaN draws; NaN when a
    column has no finite draw."""
    import numpy as np

    _check_level(level)
    tail = (1 - level) / 2 * 100
    low = np.full(draws.shape[1], math.nan)
    high = np.full(draws.shape[1], math.nan)
    for col in range(draws.shape[1]):
        finite = draws[:, col][np.isfinite(draws[:, col])]
        if finite.size:
            low[col], high[col] = np.percentile(finite, [tail, 100 - tail])
    return low, high


@dataclass(frozen=True)
class Intervals:
    """Per output (a category mean, or a linear combination of category means): the point
    estimate, its studentized interval (NaN below ``MIN_CLUSTERS`` clusters or where undefined),
    the clusters behind it and the resampled estimates (the percentile bootstrap's draws)."""

    value: np.ndarray  # (n_outputs,)
    low: np.ndarray
    high: np.ndarray
    se: np.ndarray  # cluster-robust standard error of the point estimate
    n_clusters: np.ndarray  # clusters with at least one observation the output uses
    draws: np.ndarray  # (n_boot, n_outputs)


def _check_level(level: float) -> None:
    if not 0 < level < 1:
        raise ValueError(f"confidence level must be between 0 and 1, got {level}")


def studentized_intervals(
    clusters: Clusters, combos: np.ndarray | None = None, *, n_boot: int = DEFAULT_N_BOOT, seed: int = DEFAULT_SEED,
    level: float = DEFAULT_LEVEL, min_clusters: int = MIN_CLUSTERS,
) -> Intervals:
    """Bootstrap-t intervals of category means and of linear combinations of them.

    ``combos`` (n_categories, n_outputs) weighs the category means into each output (identity:
    the category means themselves; a column of 1/k over k categories: their unweighted average).
    An output's standard error is the cluster-robust (linearised) one of a ratio of sums,
    sqrt(G/(G-1) * sum_g u_g^2) with u_g = sum_j L_j (s_gj - mean_j c_gj) / N_j over its G
    clusters; each resample recomputes it with its own means, so t* = (est* - est) / se* and the
    interval is [est - q(1-a/2) se, est - q(a/2) se]. Every sum over clusters is one matrix
    product of the resample counts with per-cluster columns (sums, counts and their pairwise
    products), so no resample is looped over in Python. A resample whose standard error is zero
    (it drew one cluster again and again) has an infinite t when its estimate moved and none
    when it did not; those with no observation of a category the output uses are left out."""
    import numpy as np

    _check_level(level)
    if n_boot < 1:
        raise ValueError(f"n_boot must be at least 1, got {n_boot}")
    sums, counts = clusters.sums, clusters.counts
    n_ids, width = sums.shape
    combos = np.eye(width) if combos is None else np.asarray(combos, dtype=np.float64)
    support = combos != 0
    n_out = combos.shape[1]
    used = ((counts > 0).astype(np.float64) @ support.astype(np.float64)) > 0
    n_clusters = used.sum(axis=0).astype(np.int64)
    first, second = np.nonzero(np.triu((support.astype(np.int64) @ support.T.astype(np.int64)) > 0))
    weights = _with_data_row(n_ids, n_boot, seed) if n_ids else np.zeros((n_boot + 1, 0))
    columns = np.concatenate([sums, counts, sums[:, first] * sums[:, second], sums[:, first] * counts[:, second],
                              counts[:, first] * sums[:, second], counts[:, first] * counts[:, second]], axis=1)
    totals = weights @ columns
    n_pairs = len(first)
    total_sums, total_counts = totals[:, :width], totals[:, width:2 * width]
    ss, sc, cs, cc = (totals[:, 2 * width + k * n_pairs: 2 * width + (k + 1) * n_pairs] for k in range(4))
    with np.errstate(invalid="ignore", divide="ignore"):
        means = total_sums / total_counts
        mean_a, mean_b = means[:, first], means[:, second]
        # sum_g w_g (s_ga - mean_a c_ga)(s_gb - mean_b c_gb) / (N_a N_b), expanded into the totals.
        cross = (ss - mean_b * sc - mean_a * cs + mean_a * mean_b * cc) / (total_counts[:, first] * total_counts[:, second])
        doubled = np.where(first == second, 1.0, 2.0)[:, None]
        variance = np.nan_to_num(cross) @ (combos[first] * combos[second] * doubled)
        variance = np.maximum(variance, 0.0) * np.where(n_clusters > 1, n_clusters / (n_clusters - 1.0), math.nan)
    missing = ((total_counts == 0).astype(np.float64) @ support.astype(np.float64)) > 0
    estimates = np.where(missing, math.nan, np.nan_to_num(means) @ combos)
    se_all = np.sqrt(variance)
    value, se = estimates[0], se_all[0]
    draws, se_draws = estimates[1:], se_all[1:]
    moved = draws - value
    # A standard error of zero up to rounding: the expansion leaves ~1e-15 of the squares' scale.
    tiny = 1e-9 * np.maximum(1.0, np.abs(value))
    with np.errstate(invalid="ignore", divide="ignore"):
        t = np.where(se_draws > tiny, moved / se_draws,
                     np.where(np.abs(moved) > tiny, np.sign(moved) * math.inf, 0.0))
    t[np.isnan(draws)] = math.nan
    from scipy.special import stdtrit

    tail = (1 - level) / 2
    low = np.full(n_out, math.nan)
    high = np.full(n_out, math.nan)
    for col in range(n_out):
        drawn = t[:, col][~np.isnan(t[:, col])]
        if drawn.size and n_clusters[col] >= min_clusters and np.isfinite(value[col]):
            # An order statistic, not an interpolation between two: a t may be infinite.
            q_low, q_high = np.quantile(drawn, [tail, 1 - tail], method="inverted_cdf")
            # Never narrower than the cluster-robust t interval (G-1 degrees of freedom): with few
            # clusters of discrete scores piled on a bound, many resamples repeat one value and
            # their t is infinite; the Student bound then stands in for the bootstrap's.
            student = float(stdtrit(n_clusters[col] - 1, 1 - tail))
            upper = q_high if np.isfinite(q_high) else student
            lower = q_low if np.isfinite(q_low) else -student
            low[col] = value[col] - max(upper, student) * se[col]
            high[col] = value[col] - min(lower, -student) * se[col]
    return Intervals(value, low, high, se, n_clusters, draws)


def partial_pooling(
    sums: np.ndarray, counts: np.ndarray, groups: np.ndarray, *, level: float = DEFAULT_LEVEL
) -> pd.DataFrame:
    """Empirical-Bayes estimates of group effects from per-cluster totals.

    ``sums`` and ``counts``: one row per cluster (a sample), ``groups``: the group of each
    cluster (a character, a novel). A group's raw effect is its row mean (its sums over its
    counts), with sampling variance v = sum(c^2 sigma_c^2) / sum(c)^2 (sigma_c^2: the pooled
    within-group variance of the means of clusters of c rows, so rows of one cluster count as
    one observation of it). The between-group variance tau^2 is the Paule-Mandel estimate (the moment
    estimate DerSimonian-Laird's one-step formula approximates: with group sizes from 1 to
    hundreds, that step underestimates tau^2, shrinks too much and undercovers large groups). Each group is shrunk toward the precision-weighted grand mean by
    B = (k-3)/(k-1) v / (v + tau^2) over k groups: a group of one sample moves most of the way,
    a group of 50 barely. Its interval is Morris's (1983) empirical-Bayes one, est +- t sqrt(V)
    (t: Student's quantile with k-1 degrees of freedom)
    with V = v (1 - (k-1)/k B) + 2/(k-3) B^2 (raw - grand)^2, which counts the uncertainty of
    tau^2 and the grand mean (fewer than 4 groups: no shrinkage, the raw means with their own
    standard errors). Returns one row per group: n (clusters), raw, pooled, shrinkage, low,
    high, in the order groups first appear."""
    import numpy as np
    import pandas as pd
    from scipy.special import ndtri, stdtrit

    _check_level(level)
    sums, counts = np.asarray(sums, dtype=float), np.asarray(counts, dtype=float)
    frame = pd.DataFrame({"group": groups, "sum": sums, "count": counts, "count2": counts ** 2,
                          "value": sums / counts})
    by = frame.groupby("group", sort=False)
    totals = by[["sum", "count", "count2"]].sum()
    names = totals.index
    n = by.size().to_numpy(float)
    raw = (totals["sum"] / totals["count"]).to_numpy(float)
    within = (frame["value"] - frame["group"].map(pd.Series(raw, index=names))) ** 2
    dof = len(frame) - len(n)
    sigma2 = float(within.sum() / dof) if dof > 0 else float(np.var(frame["value"]))
    # A cluster of two rows varies less than one of one row: the variance of cluster means is
    # estimated per cluster size (its share of the residual degrees of freedom), falling back to
    # the common one where a size has fewer than 5 degrees of freedom.
    share = dof / len(frame) if len(frame) else 0.0
    by_size = within.groupby(frame["count"]).agg(["sum", "size"])
    size_dof = by_size["size"] * share
    variances = (by_size["sum"] / size_dof).where(size_dof >= 5, sigma2)
    frame["weighted"] = frame["count2"] * frame["count"].map(variances)
    v = (frame.groupby("group", sort=False)["weighted"].sum() / totals["count"] ** 2).to_numpy(float)
    tau2 = _between_variance(raw, v)
    k = len(n)
    with np.errstate(invalid="ignore", divide="ignore"):
        precision = 1 / (v + tau2)
        grand = float(np.sum(raw * precision) / np.sum(precision)) if np.all(np.isfinite(precision)) else float(np.mean(raw))
        # Morris's corrections: the shrinkage factor (k-3)/(k-1) for estimating tau^2 and the
        # grand mean, and the variance term for the uncertainty of the shrinkage itself (the
        # naive posterior variance undercovers, most where it shrinks most).
        correction = (k - 3) / (k - 1) if k > 3 else 0.0
        shrink = np.where(v + tau2 > 0, correction * v / (v + tau2), 0.0)
        variance = v * (1 - (k - 1) / k * shrink) + (2 / (k - 3) if k > 3 else 0.0) * shrink ** 2 * (raw - grand) ** 2
    pooled = grand + (1 - shrink) * (raw - grand)
    # Student's t with k-1 degrees of freedom rather than z: the grand mean and tau^2 come from
    # the k groups themselves (as Hartung-Knapp do for a meta-analysis' mean).
    half = (stdtrit(k - 1, 1 - (1 - level) / 2) if k > 1 else ndtri(1 - (1 - level) / 2)) * np.sqrt(variance)
    return pd.DataFrame({"group": names, "n": n.astype(int), "raw": raw, "pooled": pooled, "shrinkage": shrink,
                         "low": pooled - half, "high": pooled + half})


def _between_variance(raw: np.ndarray, v: np.ndarray) -> float:
    """Paule-Mandel: the tau^2 >= 0 at which the weighted residuals sum(w (raw - mean_w)^2) with
    w = 1/(v + tau^2) equal their expectation k - 1 (bisection: the sum falls as tau^2 grows)."""
    import numpy as np

    k = len(raw)
    if k < 2 or not np.all(v > 0):
        return 0.0

    def excess(tau2: float) -> float:
        w = 1 / (v + tau2)
        mean = np.sum(w * raw) / np.sum(w)
        return float(np.sum(w * (raw - mean) ** 2)) - (k - 1)

    if excess(0.0) <= 0:
        return 0.0
    low, high = 0.0, float(np.var(raw)) * 2 + float(v.max())
    while excess(high) > 0:
        high *= 2
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if excess(middle) > 0 else (low, middle)
    return (low + high) / 2


def clopper_pearson(successes: float, n: float, level: float = DEFAULT_LEVEL) -> tuple[float, float]:
    """Exact (Clopper-Pearson) binomial interval of a proportion; NaN for n = 0. Non-integer
    ``successes`` and ``n`` (an effective sample size, ``proportion_interval``) use the same
    beta quantiles."""
    from scipy.special import betaincinv

    _check_level(level)
    if n <= 0:
        return math.nan, math.nan
    tail = (1 - level) / 2
    low = 0.0 if successes <= 0 else float(betaincinv(successes, n - successes + 1, tail))
    high = 1.0 if successes >= n else float(betaincinv(successes + 1, n - successes, 1 - tail))
    return low, high


def proportion_interval(hits: np.ndarray, clusters: Sequence[Hashable] | None = None,
                        level: float = DEFAULT_LEVEL) -> tuple[float, float]:
    """Clopper-Pearson interval of the share of hits (0/1 rows). Rows clustered (several labels
    of one item) carry less information than their number: the exact interval is then taken at
    the effective sample size n / design effect (Korn and Graubard), the design effect being the
    cluster-robust variance of the share over the binomial one (never below 1)."""
    import numpy as np
    import pandas as pd

    hits = np.asarray(hits, dtype=float)
    n = len(hits)
    if n == 0:
        return math.nan, math.nan
    share = float(hits.mean())
    effective = float(n)
    if clusters is not None and 0 < share < 1:
        codes, ids = pd.factorize(pd.Series(list(clusters), dtype=object))
        if len(ids) == 1:
            # One item holding every label: its design effect cannot be estimated; it counts once.
            effective = 1.0
        elif len(ids) < n:
            residual = np.bincount(codes, weights=hits - share, minlength=len(ids))
            robust = len(ids) / max(len(ids) - 1, 1) * float(np.sum(residual ** 2)) / n ** 2
            binomial = share * (1 - share) / n
            effective = n / max(1.0, robust / binomial)
    return clopper_pearson(share * effective, effective, level)


def minimum_detectable_difference(
    sd: float | np.ndarray, n: float | np.ndarray, *, alpha: float = 0.05, power: float = 0.8, paired: bool = True
) -> float | np.ndarray:
    """The true mean difference a two-sided z-test at ``alpha`` detects with probability
    ``power``: (z_{1-alpha/2} + z_{power}) * sd / sqrt(n) for n paired differences of SD ``sd``;
    for two independent groups of n observations each with common SD ``sd``, times sqrt(2)."""
    import numpy as np
    from scipy.special import ndtri  # norm.ppf's own function; scipy.stats' import costs about a second

    factor = ndtri(1 - alpha / 2) + ndtri(power)
    scale = 1.0 if paired else math.sqrt(2.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return factor * scale * np.asarray(sd, dtype=float) / np.sqrt(np.asarray(n, dtype=float))


# Above this many non-zero differences scipy's default method is the normal approximation.
WILCOXON_EXACT_MAX = 50


def wilcoxon_p(differences: np.ndarray) -> float:
    """Two-sided Wilcoxon signed-rank p-value (scipy.stats.wilcoxon's default: zero differences
    dropped, no continuity correction); NaN when no difference is non-zero (undefined).

    Above ``WILCOXON_EXACT_MAX`` non-zero differences (every full-size board comparison) scipy
    uses the normal approximation with the tie correction, computed here from average ranks
    with scipy.special's normal tail: importing scipy.stats takes about 0.6 s, more than a whole
    board's tests. Fewer go to scipy.stats, whose exact and permutation tests those are."""
    import numpy as np

    differences = np.asarray(differences, dtype=float)
    nonzero = differences[differences != 0]
    n = len(nonzero)
    if not n:
        return math.nan
    if n <= WILCOXON_EXACT_MAX:
        from scipy import stats as _stats

        return float(_stats.wilcoxon(differences, zero_method="wilcox").pvalue)
    from scipy.special import ndtr

    _, inverse, ties = np.unique(np.abs(nonzero), return_inverse=True, return_counts=True)
    # Tied magnitudes share the average of the ranks they span (halves: every sum below is exact).
    average_rank = np.cumsum(ties) - (ties - 1) / 2.0
    r_plus = float(average_rank[inverse][nonzero > 0].sum())
    # scipy's operations in scipy's order, so that the p-value is its to the last bit.
    ties = ties.astype(float)
    se = math.sqrt((n * (n + 1.0) * (2.0 * n + 1.0) - float((ties ** 3 - ties).sum()) / 2) / 24)
    z = (r_plus - n * (n + 1.0) * 0.25) / se
    return float(2 * ndtr(-abs(z)))
