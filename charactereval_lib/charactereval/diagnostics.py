"""Diagnostic tables behind the report's charts: the bf16 score grid, sample sizes, failures,
context length. Plain data in, tidy DataFrames out; ``figures.py`` draws them.

The official reward model computes its sigmoid in bfloat16 and reports ``float(sigmoid)*4+1``
(protocol step S8), so every faithful score sits on a grid: (score-1)/4 is a bfloat16 number. With
8 significant bits the sigmoid steps by 2^-8 in [0.5, 1) (scores step 0.015625 from 3 to 5),
by 2^-9 in [0.25, 0.5) (scores step 0.0078125 from 2 to 3), and so on, finer towards 1. A score
off that grid did not come from a faithful bf16 scorer.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from charactereval_lib.charactereval.data import OfficialData
from charactereval_lib.charactereval.protocol import COLON, ERROR_OUTPUT, METRICS
from charactereval_lib.charactereval.statistics import PairedComparison, Statistics
from charactereval_lib.engine.stats import MIN_CLUSTERS, TOO_FEW, minimum_detectable_difference

# --- the bf16 grid ------------------------------------------------------------------------------

# Positive bfloat16 bit patterns up to 1.0 (0x3F80): every sigmoid value bf16 can hold.
_BF16_ONE = 0x3F80


def on_bf16_grid(score: float | Iterable[float] | np.ndarray) -> bool | np.ndarray:
    """True where ``(score - 1) / 4`` is exactly representable in bfloat16 (a scalar gives a bool).

    In float64, subtracting 1 from a score in [1, 5] and dividing by 4 are exact, so this
    recovers the sigmoid exactly; bfloat16 is float32 with the low 16 bits zero, so the value
    must survive a float32 round trip and have those bits clear."""
    values = np.asarray(score, dtype=np.float64)
    x = np.atleast_1d((values - 1.0) / 4.0)
    with np.errstate(over="ignore", invalid="ignore"):
        x32 = x.astype(np.float32)
    ok = np.isfinite(x) & (x32.astype(np.float64) == x) & ((x32.view(np.uint32) & 0xFFFF) == 0)
    return bool(ok[0]) if values.ndim == 0 else ok.reshape(values.shape)


def score_grid(low: float = 1.0, high: float = 5.0) -> np.ndarray:
    """Every score ``bf16_sigmoid * 4 + 1`` (sigmoid in [0, 1]) within [low, high], ascending."""
    bits = np.arange(0, _BF16_ONE + 1, dtype=np.uint32) << 16
    scores = bits.view(np.float32).astype(np.float64) * 4.0 + 1.0
    scores = np.unique(scores)  # tiny sigmoids all round to a score of exactly 1.0
    return scores[(scores >= low) & (scores <= high)]


def grid_step(score: float) -> float:
    """The spacing of the score grid just above ``score`` (in score units)."""
    if not 1.0 <= score < 5.0:
        raise ValueError(f"score {score} is outside [1, 5)")
    sigmoid = (score - 1.0) / 4.0
    if sigmoid == 0.0:
        return float(score_grid(1.0, 5.0)[1] - 1.0)
    exponent = math.floor(math.log2(sigmoid))
    # 8 significant bits: the bf16 step within [2^e, 2^(e+1)) is 2^(e-7); scores scale it by 4.
    return 4.0 * 2.0 ** max(exponent - 7, -133)


def grid_bins(low: float, high: float, max_bins: int = 400) -> np.ndarray:
    """Histogram edges aligned to the grid: each edge lies halfway between two grid scores, so a
    bin holds whole grid values (exactly one, unless more than ``max_bins`` grid values fall in
    the range, when consecutive bins are merged)."""
    if not low <= high:
        raise ValueError(f"empty score range [{low}, {high}]")
    grid = score_grid(1.0, 5.0)
    first = max(int(np.searchsorted(grid, low, side="right")) - 1, 0)
    last = min(int(np.searchsorted(grid, high, side="left")), len(grid) - 1)
    points = grid[first : last + 1]
    if len(points) == 1:
        half = grid_step(points[0]) / 2 if points[0] < 5.0 else grid_step(4.99) / 2
        return np.array([points[0] - half, points[0] + half])
    mids = (points[:-1] + points[1:]) / 2
    edges = np.concatenate([[points[0] - (mids[0] - points[0])], mids, [points[-1] + (points[-1] - mids[-1])]])
    stride = max(1, math.ceil((len(edges) - 1) / max_bins))
    if stride > 1:
        kept = edges[::stride]
        edges = kept if kept[-1] == edges[-1] else np.append(kept, edges[-1])
    return edges


def grid_check(scores: pd.DataFrame) -> pd.DataFrame:
    """Per metric: scored rows, distinct score values and rows off the bf16 grid (a faithful
    scorer has none)."""
    on = on_bf16_grid(scores["score"].to_numpy()) if len(scores) else np.array([], dtype=bool)
    tagged = scores.assign(off_grid=~on)
    records = []
    for metric in METRICS:
        part = tagged[tagged["metric_en"] == metric.metric_en]
        records.append(
            {"metric_en": metric.metric_en, "abbr": metric.abbr, "n": len(part),
             "distinct_scores": int(part["score"].nunique()), "off_grid": int(part["off_grid"].sum())}
        )
    return pd.DataFrame.from_records(records)


# --- sample size -------------------------------------------------------------------------------

# Below this many rows (or sample ids) no interval keeps its promise (``stats.TOO_FEW_REASON``).
MIN_N_FOR_INTERVAL = MIN_CLUSTERS
# How tables and figures mark an interval that cannot be estimated.
NOT_ESTIMABLE = TOO_FEW


def metric_label(metric_en: str) -> str:
    """A metric's name as reports show it: the official key without underscores
    ("Communication_skills" -> "Communication skills"); files keep the key."""
    return metric_en.replace("_", " ")


def estimable(n: int | float | Iterable[int | float] | np.ndarray) -> bool | np.ndarray:
    """True where ``n`` rows are enough for an interval (n >= MIN_N_FOR_INTERVAL); NaN counts are not."""
    n = np.asarray(n, dtype=float)
    result = np.nan_to_num(n, nan=0.0) >= MIN_N_FOR_INTERVAL
    return bool(result) if result.ndim == 0 else result


def dimension_estimable(stats: Statistics) -> np.ndarray:
    """Per dimension (in ``stats.dimensions`` order): whether every one of its metrics has an
    estimable interval. One fixed metric mean would make the average's interval too narrow."""
    return _dimensions_estimable(stats.metrics, stats.dimensions["dimension"])


def paired_estimable(comparison: PairedComparison) -> np.ndarray:
    """Per cell of a paired comparison (12 metrics, then 3 dimensions): whether its difference
    has an estimable interval (>= 4 shared rows; for a dimension, >= 4 shared samples and every
    one of its metrics estimable)."""
    dims = comparison.dimensions
    dim_ok = _dimensions_estimable(comparison.metrics, dims["dimension"]) & estimable(dims["n_ids"])
    return np.concatenate([estimable(comparison.metrics["n"]), dim_ok])


def _dimensions_estimable(metrics: pd.DataFrame, dimension_keys: Iterable[str]) -> np.ndarray:
    by_name = dict(zip(metrics["metric_en"], estimable(metrics["n"])))
    return np.array([all(by_name[m.metric_en] for m in METRICS if m.dimension.key == key) for key in dimension_keys],
                    dtype=bool)



def sample_size_table(stats: Statistics, *, alpha: float = 0.05, power: float = 0.8) -> pd.DataFrame:
    """Per metric: n, SD, the interval's half-width and the minimum detectable difference
    between this run and another run of the same size (two-sided, ``alpha``, ``power``).

    The MDD assumes no pairing gain (independent rows of equal n and this run's SD). Two models
    scored on the same rows usually correlate positively, which makes the paired MDD smaller:
    the comparison report shows the paired value measured on real differences. Metrics with
    n < 4 have no half-width (NaN), not a zero one."""
    table = stats.metrics[["metric_en", "abbr", "dimension", "n", "sd"]].copy()
    half_width = (stats.metrics["ci_high"] - stats.metrics["ci_low"]) / 2
    table["ci_half_width"] = half_width.where(estimable(table["n"]))
    table["mdd"] = minimum_detectable_difference(table["sd"], table["n"], alpha=alpha, power=power, paired=False)
    return table


# --- failures ----------------------------------------------------------------------------------

FAILURE_COLUMNS = ["category", "detail", "unit", "count", "total", "share"]


def _failure(category: str, detail: str, unit: str, count: int, total: int) -> dict[str, Any]:
    return {"category": category, "detail": detail, "unit": unit, "count": int(count), "total": int(total),
            "share": count / total if total else math.nan}


def failure_breakdown(generations: pd.DataFrame, rows: pd.DataFrame, scores: pd.DataFrame) -> pd.DataFrame:
    """Where a run loses or weakens rows, one line per kind (tidy; zero counts are kept so that
    "none" is visible):

    - generation errors by class (samples whose latest record has status ``error``);
    - replies S5 drops although the call succeeded (null or exactly "ERROR");
    - empty first lines (S5 keeps and scores them: a reply that starts with a newline);
    - replies without the ``role：`` prefix (full-width colon) that nearly all released replies
      carry;
    - reward-model inputs cut to the last 4096 tokens;
    - rows not scored yet.
    """
    records = []
    n_samples = len(generations)
    if n_samples:
        status = generations.get("status", pd.Series("ok", index=generations.index)).fillna("ok")
        errors = generations[status != "ok"]
        classes = errors["error"].map(_error_class) if "error" in errors else pd.Series("unknown", index=errors.index)
        for name, count in classes.value_counts().sort_index().items():
            records.append(_failure("generation error", str(name), "samples", count, n_samples))
        if errors.empty:
            records.append(_failure("generation error", "none", "samples", 0, n_samples))
        outputs = generations.loc[status == "ok", "model_output"]
        dropped = outputs.isna() | (outputs == ERROR_OUTPUT)
        records.append(_failure("reply dropped by S5", "null or \"ERROR\" output", "samples", dropped.sum(), n_samples))
    replies = rows.drop_duplicates("id") if len(rows) else rows
    n_replies = len(replies)
    if n_replies:
        empty = replies["model_output"] == ""
        prefixed = [str(out).startswith(role + COLON) for out, role in zip(replies["model_output"], replies["role"])]
        records.append(_failure("empty reply", "first line is empty (scored)", "samples", empty.sum(), n_replies))
        records.append(
            _failure("no role prefix", f"reply does not start with 'role{COLON}'", "samples",
                     n_replies - sum(prefixed), n_replies)
        )
    n_rows = len(rows)
    if len(scores) and "truncated" in scores:
        truncated = scores["truncated"].fillna(False).astype(bool).sum()
        records.append(_failure("RM input truncated", "kept the last 4096 tokens", "rows", truncated, len(scores)))
    if n_rows:
        records.append(_failure("unscored", "row has no score yet", "rows", n_rows - len(scores), n_rows))
    return pd.DataFrame.from_records(records, columns=FAILURE_COLUMNS)


def _error_class(error: Any) -> str:
    if isinstance(error, Mapping):
        return str(error.get("class") or "unknown")
    return "unknown"


# --- context length ------------------------------------------------------------------------------


def context_lengths(data: OfficialData) -> pd.DataFrame:
    """Per test sample: characters and lines of its dialogue context."""
    return pd.DataFrame(
        {
            "id": [s.id for s in data.samples],
            "context_chars": [len(s.context) for s in data.samples],
            "context_lines": [s.context.count("\n") + 1 for s in data.samples],
        }
    )


def with_context_lengths(scores: pd.DataFrame, data: OfficialData) -> pd.DataFrame:
    return scores.merge(context_lengths(data), on="id", how="left")


def binned_means(frame: pd.DataFrame, x: str, y: str = "score", bins: int = 8) -> pd.DataFrame:
    """Mean of ``y`` within quantile bins of ``x`` (equal-count bins: context lengths are skewed)."""
    if frame.empty:
        return pd.DataFrame(columns=["x_low", "x_high", "x_mid", "n", "mean"])
    cut = pd.qcut(frame[x], q=bins, duplicates="drop")
    grouped = frame.groupby(cut, observed=True)[y].agg(["count", "mean"]).reset_index()
    return pd.DataFrame(
        {
            "x_low": [iv.left for iv in grouped[x]],
            "x_high": [iv.right for iv in grouped[x]],
            "x_mid": [(iv.left + iv.right) / 2 for iv in grouped[x]],
            "n": grouped["count"].to_numpy(),
            "mean": grouped["mean"].to_numpy(),
        }
    )

