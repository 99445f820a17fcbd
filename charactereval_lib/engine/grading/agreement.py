"""Agreement between two scorers, and between a scorer and human labels, with intervals.

Every statistic is written for *weighted* rows, so one matrix product evaluates it on all
bootstrap replicates at once: the cluster bootstrap by sample id (``engine.stats.cluster_weights``,
the same resamples as every other interval of the workbench) draws how often each sample is
taken, and each row inherits its sample's count as weight. A
statistic on integer weights equals the statistic on the data with each row repeated that
often, which is what the tests check against direct computations.

Statistics: Pearson, Spearman, Kendall tau-b, quadratic-weighted kappa and exact agreement on
rounded scores (scorer vs scorer); metascore (exact agreement, as evals), Cohen's kappa,
Krippendorff's alpha and the confusion matrix (scorer vs human labels).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import krippendorff
import numpy as np
import pandas as pd

from charactereval_lib.engine.stats import cluster_weights, proportion_interval

DEFAULT_SCALE = (1, 2, 3, 4, 5)
OVERALL = "overall"
SCORER_STATISTICS = ("pearson", "spearman", "kendall_tau_b", "quadratic_kappa", "exact")
ALPHA_LEVELS = ("nominal", "ordinal", "interval")

# Replicates are evaluated in blocks so that B x rows matrices stay small.
_BLOCK = 128


@dataclass(frozen=True)
class Estimate:
    """A statistic with its percentile cluster-bootstrap interval (NaN when not computable)."""

    value: float
    low: float
    high: float
    n: int
    n_clusters: int


def round_half_up(scores: np.ndarray) -> np.ndarray:
    """Scores rounded to whole grades, halves upwards (2.5 -> 3), unlike numpy's half-to-even."""
    return np.floor(np.asarray(scores, dtype=float) + 0.5)


# ---- weighted statistics; w has shape (rows,) or (B, rows) ----


def _as_2d(w: np.ndarray) -> np.ndarray:
    return w[None, :] if w.ndim == 1 else w


def weighted_pearson(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Pearson correlation of x and y with row weights, per weight row."""
    w = _as_2d(np.asarray(w, dtype=float))
    x = np.asarray(x, dtype=float) - np.mean(x)
    y = np.asarray(y, dtype=float) - np.mean(y)
    total = w.sum(axis=1)
    mx, my = (w @ x) / total, (w @ y) / total
    cov = (w @ (x * y)) / total - mx * my
    vx = (w @ (x * x)) / total - mx * mx
    vy = (w @ (y * y)) / total - my * my
    with np.errstate(invalid="ignore", divide="ignore"):
        return cov / np.sqrt(vx * vy)


def _weighted_midranks(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    # The midrank of a tied block in the repeated data: the weight before it + (its weight + 1) / 2.
    order = np.argsort(x, kind="stable")
    sorted_x = x[order]
    starts = np.flatnonzero(np.r_[True, sorted_x[1:] != sorted_x[:-1]])
    ends = np.r_[starts[1:], len(x)]
    cumulative = np.concatenate([np.zeros((w.shape[0], 1)), np.cumsum(w[:, order], axis=1)], axis=1)
    before = cumulative[:, starts]
    block = cumulative[:, ends] - before
    midrank = before + (block + 1.0) / 2.0
    group_of_sorted = np.repeat(np.arange(len(starts)), ends - starts)
    ranks = np.empty_like(w)
    ranks[:, order] = midrank[:, group_of_sorted]
    return ranks


def weighted_spearman(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Spearman correlation (Pearson on midranks of the weighted data), per weight row."""
    w = _as_2d(np.asarray(w, dtype=float))
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    rx, ry = _weighted_midranks(x, w), _weighted_midranks(y, w)
    total = w.sum(axis=1, keepdims=True)
    mx = (w * rx).sum(axis=1, keepdims=True) / total
    my = (w * ry).sum(axis=1, keepdims=True) / total
    dx, dy = rx - mx, ry - my
    cov = (w * dx * dy).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return cov / np.sqrt((w * dx * dx).sum(axis=1) * (w * dy * dy).sum(axis=1))


def _tables(codes_x: np.ndarray, codes_y: np.ndarray, kx: int, ky: int, w: np.ndarray) -> np.ndarray:
    # (B, kx, ky) weighted contingency tables, one per weight row.
    size = kx * ky
    cells = (np.arange(w.shape[0])[:, None] * size + (codes_x * ky + codes_y)[None, :]).ravel()
    counts = np.bincount(cells, weights=w.ravel(), minlength=w.shape[0] * size)
    return counts.reshape(w.shape[0], kx, ky)


def _kendall_from_tables(t: np.ndarray) -> np.ndarray:
    # Concordant pairs: cells strictly below-right; discordant: strictly below-left.
    below = np.flip(np.cumsum(np.flip(t, axis=1), axis=1), axis=1)
    below = np.pad(below[:, 1:, :], ((0, 0), (0, 1), (0, 0)))
    right = np.flip(np.cumsum(np.flip(below, axis=2), axis=2), axis=2)
    right = np.pad(right[:, :, 1:], ((0, 0), (0, 0), (0, 1)))
    left = np.cumsum(below, axis=2)
    left = np.pad(left[:, :, :-1], ((0, 0), (0, 0), (1, 0)))
    concordant = (t * right).sum(axis=(1, 2))
    discordant = (t * left).sum(axis=(1, 2))
    n = t.sum(axis=(1, 2))
    pairs = n * (n - 1) / 2
    rows, cols = t.sum(axis=2), t.sum(axis=1)
    tied_x = (rows * (rows - 1) / 2).sum(axis=1)
    tied_y = (cols * (cols - 1) / 2).sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (concordant - discordant) / np.sqrt((pairs - tied_x) * (pairs - tied_y))


def weighted_kendall_tau_b(x: np.ndarray, y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Kendall's tau-b with row weights, per weight row, from weighted contingency tables."""
    w = _as_2d(np.asarray(w, dtype=float))
    vx, cx = np.unique(np.asarray(x, dtype=float), return_inverse=True)
    vy, cy = np.unique(np.asarray(y, dtype=float), return_inverse=True)
    # Blocks of replicates small enough that their tables stay within a few tens of MB.
    block = max(1, min(_BLOCK, int(4e6 // max(1, len(vx) * len(vy)))))
    out = [
        _kendall_from_tables(_tables(cx, cy, len(vx), len(vy), w[start : start + block]))
        for start in range(0, w.shape[0], block)
    ]
    return np.concatenate(out)


def _label_codes(a: Sequence, b: Sequence, labels: Sequence | None) -> tuple[list, np.ndarray, np.ndarray]:
    if labels is None:
        labels = sorted(set(a) | set(b), key=_sort_key)
    position = {label: i for i, label in enumerate(labels)}
    missing = sorted({v for v in (*a, *b) if v not in position}, key=_sort_key)
    if missing:
        raise ValueError(f"values {missing} are not among the labels {list(labels)}")
    return (list(labels), np.array([position[v] for v in a], dtype=np.int64),
            np.array([position[v] for v in b], dtype=np.int64))


def _sort_key(value):
    return (0, value, "") if isinstance(value, (int, float, np.number)) else (1, 0, str(value))


def weighted_kappa(
    a: Sequence, b: Sequence, w: np.ndarray, labels: Sequence | None = None, quadratic: bool = False
) -> np.ndarray:
    """Cohen's kappa (or with quadratic weights over the label order), per weight row."""
    w = _as_2d(np.asarray(w, dtype=float))
    labels, ca, cb = _label_codes(a, b, labels)
    k = len(labels)
    observed = _tables(ca, cb, k, k, w)
    total = observed.sum(axis=(1, 2))
    expected = observed.sum(axis=2)[:, :, None] * observed.sum(axis=1)[:, None, :] / total[:, None, None]
    i, j = np.indices((k, k))
    if quadratic:
        penalty = ((i - j) / max(k - 1, 1)) ** 2
    else:
        penalty = (i != j).astype(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        return 1.0 - (observed * penalty).sum(axis=(1, 2)) / (expected * penalty).sum(axis=(1, 2))


def weighted_exact(a: Sequence, b: Sequence, w: np.ndarray) -> np.ndarray:
    """Share of rows where both sides are equal (evals' metascore), per weight row."""
    w = _as_2d(np.asarray(w, dtype=float))
    equal = np.array([left == right for left, right in zip(a, b, strict=True)], dtype=float)
    return (w @ equal) / w.sum(axis=1)


# ---- Krippendorff's alpha from coincidence matrices ----


def _unit_coincidences(data: np.ndarray, values: np.ndarray) -> np.ndarray:
    # Per unit (column), its contribution to the coincidence matrix; units with < 2 values add 0.
    counts = np.stack([(data == v).sum(axis=0) for v in values], axis=1).astype(float)
    pairable = counts.sum(axis=1)
    outer = counts[:, :, None] * counts[:, None, :] - counts[:, :, None] * np.eye(len(values))[None]
    with np.errstate(invalid="ignore", divide="ignore"):
        scale = np.where(pairable >= 2, 1.0 / (pairable - 1), 0.0)
    return outer * scale[:, None, None]


def _alpha_from_coincidences(o: np.ndarray, values: np.ndarray, level: str) -> np.ndarray:
    marginals = o.sum(axis=2)
    n = marginals.sum(axis=1)
    k = len(values)
    if level == "nominal":
        delta = np.broadcast_to(1.0 - np.eye(k), o.shape)
    elif level == "interval":
        delta = np.broadcast_to((values[:, None] - values[None, :]) ** 2, o.shape)
    elif level == "ordinal":
        cumulative = np.cumsum(marginals, axis=1)
        between = (
            cumulative[:, None, :]
            - cumulative[:, :, None]
            + (marginals[:, :, None] - marginals[:, None, :]) / 2
        )
        delta = between**2
    else:
        raise ValueError(f"level must be one of {', '.join(ALPHA_LEVELS)}, not {level!r}")
    observed = (o * delta).sum(axis=(1, 2))
    expected = (marginals[:, :, None] * marginals[:, None, :] * delta).sum(axis=(1, 2))
    with np.errstate(invalid="ignore", divide="ignore"):
        return 1.0 - (n - 1) * observed / expected


def weighted_krippendorff_alpha(data: np.ndarray, w: np.ndarray, level: str = "ordinal") -> np.ndarray:
    """Krippendorff's alpha of a (coders x units) array (NaN = missing) with unit weights."""
    data = np.asarray(data, dtype=float)
    values = np.unique(data[~np.isnan(data)])
    per_unit = _unit_coincidences(data, values)
    w = _as_2d(np.asarray(w, dtype=float))
    o = (w @ per_unit.reshape(per_unit.shape[0], -1)).reshape(w.shape[0], len(values), len(values))
    return _alpha_from_coincidences(o, values, level)


def krippendorff_alpha(data: np.ndarray, level: str = "ordinal") -> float:
    """Krippendorff's alpha of a (coders x units) array, NaN marking a missing value (computed
    by the `krippendorff` package)."""
    if level not in ALPHA_LEVELS:
        raise ValueError(f"level must be one of {', '.join(ALPHA_LEVELS)}, not {level!r}")
    data = np.asarray(data, dtype=float)
    pairable_units = int(((~np.isnan(data)).sum(axis=0) >= 2).sum())
    if len(np.unique(data[~np.isnan(data)])) < 2 or pairable_units < 2:
        # Alpha is undefined when every rating is the same value (no disagreement is possible;
        # the package raises then) or fewer than two units carry a pair of ratings (one unit's
        # pair would read as 0, a number that means nothing); one metric's labels can be either.
        return float("nan")
    return float(
        krippendorff.alpha(reliability_data=np.asarray(data, dtype=float), level_of_measurement=level)
    )


# ---- estimates with intervals ----


def percentile_estimate(
    point: float, replicates: np.ndarray, confidence: float, n: int, n_clusters: int
) -> Estimate:
    """`point` with the percentile interval of its finite bootstrap `replicates`; no interval
    (NaN) from fewer than two clusters, whose replicates all repeat the point."""
    finite = replicates[np.isfinite(replicates)]
    if len(finite) == 0 or not np.isfinite(point) or n_clusters < 2:
        return Estimate(float(point), float("nan"), float("nan"), n, n_clusters)
    tail = (1.0 - confidence) / 2.0 * 100.0
    low, high = np.percentile(finite, [tail, 100.0 - tail])
    return Estimate(float(point), float(low), float(high), n, n_clusters)


def _clusters_or_rows(clusters: Sequence[Hashable] | None, n: int) -> list:
    return list(range(n)) if clusters is None else list(clusters)


def scorer_agreement(
    x: Sequence[float],
    y: Sequence[float],
    clusters: Sequence[Hashable] | None = None,
    *,
    scale: Sequence[int] = DEFAULT_SCALE,
    n_boot: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> dict[str, Estimate]:
    """Agreement of two scorers on the same rows, each statistic with a cluster-bootstrap
    interval by `clusters` (sample ids; None: each row its own cluster).

    Pearson, Spearman and Kendall tau-b use the raw scores; quadratic-weighted kappa and exact
    agreement use scores rounded half up to the `scale` grades (values outside it are clipped).
    """
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if x.shape != y.shape or x.ndim != 1:
        raise ValueError("x and y must be 1-D arrays of the same length")
    if np.isnan(x).any() or np.isnan(y).any():
        raise ValueError("scores contain NaN: drop unscored (invalid) rows first and report them")
    clusters = _clusters_or_rows(clusters, len(x))
    n_clusters = len(set(clusters))
    low, high = min(scale), max(scale)
    rx, ry = np.clip(round_half_up(x), low, high), np.clip(round_half_up(y), low, high)
    ones = np.ones(len(x))
    replicates = cluster_weights(clusters, n_boot, seed)
    functions = {
        "pearson": lambda w: weighted_pearson(x, y, w),
        "spearman": lambda w: weighted_spearman(x, y, w),
        "kendall_tau_b": lambda w: weighted_kendall_tau_b(x, y, w),
        "quadratic_kappa": lambda w: weighted_kappa(
            rx, ry, w, labels=[float(s) for s in scale], quadratic=True
        ),
        "exact": lambda w: weighted_exact(rx, ry, w),
    }
    # A correlation or kappa of fewer than two rows is undefined (one row's kappa would read 0).
    defined = {name: len(x) >= 2 or name == "exact" for name in functions}
    return {
        name: percentile_estimate(
            function(ones)[0] if defined[name] else float("nan"), over_replicates(function, replicates),
            confidence, len(x), n_clusters,
        )
        for name, function in functions.items()
    }


def over_replicates(function, weights: np.ndarray) -> np.ndarray:
    """`function` (weights (B, rows) -> (B,)) on all replicate weights, in memory-sized blocks."""
    if weights.size == 0:
        return np.array([])
    return np.concatenate([function(weights[s : s + _BLOCK]) for s in range(0, len(weights), _BLOCK)])


def agreement_table(
    frame: pd.DataFrame,
    a: str,
    b: str,
    *,
    group: str = "metric_en",
    cluster: str = "id",
    scale: Sequence[int] = DEFAULT_SCALE,
    n_boot: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> pd.DataFrame:
    """`scorer_agreement` of columns `a` and `b` per `group` value and overall, in long form:
    columns group, statistic, value, low, high, n, n_clusters. Rows where either score is
    missing (an invalid judge reply) are left out; `n` says how many rows were used."""
    scored = frame.dropna(subset=[a, b])
    parts = [(value, rows) for value, rows in scored.groupby(group, sort=False)] + [(OVERALL, scored)]
    records = []
    for value, rows in parts:
        estimates = scorer_agreement(
            rows[a].to_numpy(), rows[b].to_numpy(), rows[cluster].tolist(),
            scale=scale, n_boot=n_boot, confidence=confidence, seed=seed,
        )  # fmt: skip
        for statistic, estimate in estimates.items():
            records.append({group: value, "statistic": statistic, **estimate.__dict__})
    return pd.DataFrame.from_records(records)


def confusion_matrix(human: Sequence, predicted: Sequence, labels: Sequence | None = None) -> pd.DataFrame:
    """Counts of (human label, predicted choice): rows human, columns predicted."""
    labels, ch, cp = _label_codes(human, predicted, labels)
    table = _tables(ch, cp, len(labels), len(labels), np.ones((1, len(ch))))[0].astype(int)
    return pd.DataFrame(
        table, index=pd.Index(labels, name="human"), columns=pd.Index(labels, name="predicted")
    )


@dataclass(frozen=True)
class LabelAgreement:
    """A scorer against human labels."""

    metascore: Estimate
    cohen_kappa: Estimate
    krippendorff_alpha: Estimate
    confusion: pd.DataFrame


def label_agreement(
    predicted: Sequence,
    human: Sequence,
    clusters: Sequence[Hashable] | None = None,
    *,
    labels: Sequence | None = None,
    alpha_level: str = "ordinal",
    invalid: str = "__invalid__",
    n_boot: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> LabelAgreement:
    """Meta-evaluation of a scorer's choices against human labels, with cluster-bootstrap
    intervals by `clusters`.

    metascore is evals' exact, case-sensitive agreement (an invalid parse matches only a label
    `__invalid__`), with a Clopper-Pearson interval (``stats.proportion_interval``); Cohen's
    kappa and the confusion matrix treat `invalid` as one more category;
    Krippendorff's alpha (`alpha_level`) needs numeric labels for ordinal/interval and treats an
    invalid parse as a missing value.
    """
    predicted, human = list(predicted), list(human)
    if len(predicted) != len(human):
        raise ValueError("predicted and human must have the same length")
    clusters = _clusters_or_rows(clusters, len(human))
    n, n_clusters = len(human), len(set(clusters))
    if labels is not None and invalid in predicted and invalid not in labels:
        labels = [*labels, invalid]
    replicates = cluster_weights(clusters, n_boot, seed)
    data = _alpha_data(human, predicted, invalid, alpha_level)

    def with_interval(statistic, point: float) -> Estimate:
        return percentile_estimate(point, over_replicates(statistic, replicates), confidence, n, n_clusters)

    def exact(w):
        return weighted_exact(predicted, human, w)

    def kappa(w):
        return weighted_kappa(human, predicted, w, labels=labels)

    def alpha(w):
        return weighted_krippendorff_alpha(data, w, alpha_level)

    ones = np.ones(n)
    # Against fewer than two labels, or labels that never vary, a chance-corrected agreement is
    # 0 or 0/0 whatever the scorer says: undefined (NaN, null in JSON), never a number.
    kappa_point = kappa(ones)[0] if n >= 2 and len(set(human)) >= 2 else float("nan")
    # The share of agreeing rows among none is undefined too.
    exact_point = exact(ones)[0] if n else float("nan")
    # The metascore is a share of hits: its interval is the exact binomial one (Clopper-Pearson,
    # at the effective n when labels cluster), which keeps 95% at any n where a bootstrap of a
    # few 0/1 rows cannot (all-hit resamples give a zero-width interval).
    hits = np.array([p == h for p, h in zip(predicted, human, strict=True)], dtype=float)
    meta_low, meta_high = proportion_interval(hits, clusters, confidence)
    return LabelAgreement(
        Estimate(float(exact_point), meta_low, meta_high, n, n_clusters),
        with_interval(kappa, kappa_point),
        with_interval(alpha, krippendorff_alpha(data, alpha_level)),
        confusion_matrix(human, predicted, labels),
    )


def _alpha_data(human: list, predicted: list, invalid: str, level: str) -> np.ndarray:
    if level == "nominal":
        # Nominal alpha needs only distinct codes; the invalid parse stays missing.
        codes = {value: i for i, value in enumerate(sorted({*human, *predicted} - {invalid}, key=_sort_key))}
        convert = lambda v: np.nan if v == invalid else float(codes[v])  # noqa: E731
    else:
        convert = lambda v: np.nan if v == invalid else float(v)  # noqa: E731
    return np.array([[convert(v) for v in human], [convert(v) for v in predicted]])
