"""Panels: several judges on the same rows, their combined verdict and how far they agree.

Verdicts: ``mean`` (the mean of the valid values) or ``majority`` (the most common valid value).
A majority can be tied (two judges that disagree always are); the tie rule says what then:
``none`` gives no verdict, ``lowest`` the lowest of the tied values (on a grade scale the more
severe grade, so a split panel never flatters a reply).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable, Sequence
from typing import Literal

import numpy as np
import pandas as pd

from charactereval_lib.engine.grading.agreement import (
    Estimate,
    krippendorff_alpha,
    over_replicates,
    percentile_estimate,
    weighted_krippendorff_alpha,
)
from charactereval_lib.engine.grading.choices import INVALID
from charactereval_lib.engine.stats import cluster_weights

Method = Literal["majority", "mean"]
TieRule = Literal["none", "lowest"]
TIE_RULES = ("none", "lowest")
OUTCOME_VALUES = {"loss": 0.0, "tie": 0.5, "win": 1.0}


def majority(values: Sequence[Hashable], tie: TieRule = "none") -> Hashable | None:
    """The most common valid value (None, NaN and `__invalid__` ignored); None when no value
    is valid. When several values share the top count, ``tie`` decides (module docstring)."""
    counts = Counter(v for v in values if not _missing(v)).most_common()
    if not counts:
        return None
    tied = [value for value, count in counts if count == counts[0][1]]
    if len(tied) == 1:
        return tied[0]
    if tie == "lowest":
        return min(tied)
    if tie != "none":
        raise ValueError(f"tie must be one of {', '.join(TIE_RULES)}, not {tie!r}")
    return None


def is_tied(values: Sequence[Hashable]) -> bool:
    """Whether several valid values share the top count (a majority needs the tie rule)."""
    counts = Counter(v for v in values if not _missing(v)).most_common()
    return len(counts) > 1 and counts[0][1] == counts[1][1]


def mean_verdict(values: Sequence) -> float | None:
    """The mean of the valid values; battle outcomes count as win 1, tie 0.5, loss 0."""
    numbers = [OUTCOME_VALUES.get(v, v) for v in values if not _missing(v)]
    return float(np.mean(numbers)) if numbers else None


def _missing(value) -> bool:
    return (
        value is None
        or value == INVALID
        or value == "invalid"
        or (isinstance(value, float) and np.isnan(value))
    )


def panel_table(
    frame: pd.DataFrame,
    *,
    judge: str = "judge_model",
    value: str = "score",
    keys: Sequence[str] = ("id", "metric_en"),
    method: Method = "mean",
    tie: TieRule = "none",
) -> pd.DataFrame:
    """One row per `keys` with the panel's verdict (`majority` with the `tie` rule, or `mean`
    of the judges' `value`), `n_judges`, `n_valid` (judges whose value is valid) and `tied`
    (a majority that needed the tie rule)."""
    rows = []
    for key, group in frame.groupby(list(keys), sort=False):
        values = group[value].tolist()
        tied = method == "majority" and is_tied(values)
        rows.append({
            **dict(zip(keys, key if isinstance(key, tuple) else (key,), strict=True)),
            "panel": majority(values, tie) if method == "majority" else mean_verdict(values),
            "n_judges": group[judge].nunique(), "n_valid": sum(not _missing(v) for v in values), "tied": tied,
        })  # fmt: skip
    return pd.DataFrame.from_records(rows)


def inter_judge_alpha(
    frame: pd.DataFrame,
    *,
    judge: str = "judge_model",
    value: str = "score",
    keys: Sequence[str] = ("id", "metric_en"),
    cluster: str = "id",
    level: str = "ordinal",
    n_boot: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> Estimate:
    """Krippendorff's alpha among the judges (judges x rows, a missing or invalid value left
    out), with a cluster-bootstrap interval by `cluster`."""
    table = frame.assign(
        _value=pd.to_numeric(frame[value].where(~frame[value].map(_missing)), errors="coerce")
    )
    # Not pivot_table(dropna=False): that makes every combination of the key levels a row (every
    # id with every metric), inflating the row count with rows nobody judged.
    wide = table.groupby([*keys, judge], sort=False)["_value"].first().unstack(judge)
    data = wide.to_numpy(dtype=float).T
    clusters = wide.index.get_level_values(cluster).tolist()
    replicates = cluster_weights(clusters, n_boot, seed)
    point = krippendorff_alpha(data, level)
    spread = over_replicates(lambda w: weighted_krippendorff_alpha(data, w, level), replicates)
    return percentile_estimate(point, spread, confidence, data.shape[1], len(set(clusters)))
