"""Run-level aggregation of model-graded records as openai/evals reports it, meta-eval included."""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from charactereval_lib.engine.grading.agreement import weighted_exact
from charactereval_lib.engine.grading.errors import MissingLabelError

EVALS_SHUFFLE_SEED = 123
MISSING_LABEL = "meta-evaluation needs a `choice` label on every sample"


def evals_execution_order(n_samples: int, seed: int = EVALS_SHUFFLE_SEED) -> list[int]:
    """The order in which evals evaluates samples.

    evals rule: `random.Random(123)` shuffles the list of sample indices. Float sums follow this
    order, which is why a mean can come out as 0.45 or 0.45000000000000007.
    """
    order = list(range(n_samples))
    random.Random(seed).shuffle(order)
    return order


def metascore(choice: str, label: str | None) -> bool:
    """evals meta-eval rule: exact, case-sensitive equality of the parsed choice and the human
    `choice` label (`y` never matches `Y`; a label `__invalid__` matches an invalid parse). A
    missing label raises `MissingLabelError`."""
    if label is None:
        raise MissingLabelError(MISSING_LABEL)
    return choice == label


def aggregate_run(
    records: Sequence[Mapping[str, Any]], labels: Sequence[str | None] | None = None
) -> dict[str, Any]:
    """The metrics evals' `run()` returns, from records in *execution order*.

    evals rules: `counts/<choice>` counts every record, `counts/__invalid__` included, keyed in
    order of first appearance; `score` is the mean of the non-null scores, summed in record
    order, and absent when no record has a score; with `labels` (meta-eval), `metascore` is the
    share of `metascore(choice, label)` hits: the exact agreement of `agreement.weighted_exact`
    with every record weighing one (a sum of ones and zeros is exact in any order).
    """
    result: dict[str, Any] = {}
    for record in records:
        key = f"counts/{record['choice']}"
        result[key] = result.get(key, 0) + 1
    scores = [record["score"] for record in records if record["score"] is not None]
    if scores:
        result["score"] = _sequential_mean(scores)
    if labels is not None:
        if None in labels:
            raise MissingLabelError(MISSING_LABEL)
        choices = [record["choice"] for record in records]
        result["metascore"] = float(weighted_exact(choices, labels, np.ones(len(choices)))[0])
    return result


def _sequential_mean(values: Sequence[float]) -> float:
    total = 0.0
    for value in values:
        total += value
    return total / len(values)
