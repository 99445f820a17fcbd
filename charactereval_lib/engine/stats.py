"""Statistical inference any benchmark reuses: cluster bootstrap, paired tests, power.

Observations come in clusters (CharacterEval: the metric rows of one sample share one reply;
CoSER: the dimension scores of one scene share one simulation), so they are not independent.
The bootstrap resamples whole clusters, which keeps a cluster's observations together and lets
every statistic derived from the same resamples (per category, averages of categories) carry a
consistent interval. Nothing here knows a benchmark's metric names: callers pass categories.
"""

from __future__ import annotations

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
BOOTSTRAP_METHOD = "percentile cluster bootstrap: sample ids resampled with replacement"


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


def wilcoxon_p(differences: np.ndarray) -> float:
    """Two-sided Wilcoxon signed-rank p-value; NaN when no difference is non-zero (undefined)."""
    import numpy as np

    differences = np.asarray(differences, dtype=float)
    if not np.any(differences != 0):
        return math.nan
    from scipy import stats as _stats

    return float(_stats.wilcoxon(differences, zero_method="wilcox").pvalue)
