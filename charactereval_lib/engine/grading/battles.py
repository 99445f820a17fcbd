"""Battles: two replies to the same sample judged pairwise, in both presentation orders.

evals leaves position bias to the user; here every pair is judged twice, once with reply A in
the first position and once with reply B there. A verdict stands only when it survives the
swap; a pair whose two verdicts disagree is a tie and counts against position consistency.

A pairwise spec is an ordinary `ModelGradedSpec` whose template shows two replies (by default
the fields `response_1` and `response_2`) and whose choices map to `first`, `second` or `tie`
through `verdicts` (given to these functions, or the spec's `metadata.verdicts`).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from charactereval_lib.engine.grading.agreement import Estimate, over_replicates, percentile_estimate
from charactereval_lib.engine.grading.choices import INVALID
from charactereval_lib.engine.grading.spec import ModelGradedSpec, build_judge_messages, grade_reply
from charactereval_lib.engine.stats import cluster_weights

Order = Literal["ab", "ba"]
ORDERS: tuple[Order, Order] = ("ab", "ba")
VERDICTS = ("first", "second", "tie")
OUTCOMES = ("win", "tie", "loss")


@dataclass(frozen=True)
class BattleRequest:
    """The judge messages for one presentation order (`ab`: reply A shown first)."""

    order: Order
    messages: list[dict[str, str]]


def battle_requests(
    spec: ModelGradedSpec,
    fields: Mapping[str, Any],
    reply_a: str,
    reply_b: str,
    *,
    first_field: str = "response_1",
    second_field: str = "response_2",
    spec_args: Mapping[str, Any] | None = None,
) -> list[BattleRequest]:
    """Judge messages for both presentation orders of replies A and B on one sample
    (`spec_args` override the spec's args, e.g. to battle on one metric)."""
    requests = []
    for order, (first, second) in zip(ORDERS, ((reply_a, reply_b), (reply_b, reply_a)), strict=True):
        sample = {**fields, first_field: first, second_field: second}
        requests.append(BattleRequest(order, build_judge_messages(spec, sample, spec_args=spec_args)))
    return requests


def spec_verdicts(spec: ModelGradedSpec, verdicts: Mapping[str, str] | None = None) -> dict[str, str]:
    """The choice -> first/second/tie map: `verdicts` if given, else the spec's metadata."""
    mapping = dict(verdicts if verdicts is not None else spec.metadata.get("verdicts") or {})
    choices = spec.choices()
    if set(mapping) != set(choices) or not set(mapping.values()) <= set(VERDICTS):
        raise ValueError(
            f"{spec.source}: verdicts must map every choice {choices} to one of {', '.join(VERDICTS)}"
        )
    return mapping


def preferred_reply(choice: str, order: Order, verdicts: Mapping[str, str]) -> str:
    """Which reply a parsed choice prefers: `a`, `b`, `tie`, or `invalid` for an invalid parse."""
    if choice == INVALID:
        return "invalid"
    verdict = verdicts[choice]
    if verdict == "tie":
        return "tie"
    shown_first = "a" if order == "ab" else "b"
    shown_second = "b" if order == "ab" else "a"
    return shown_first if verdict == "first" else shown_second


def combine_orders(preferred_ab: str, preferred_ba: str) -> tuple[str, bool | None]:
    """Outcome for reply A (`win`/`tie`/`loss`, or `invalid`) and whether the verdict survived
    the swap (None when a parse was invalid). Disagreeing orders make a tie."""
    if "invalid" in (preferred_ab, preferred_ba):
        return "invalid", None
    if preferred_ab != preferred_ba:
        return "tie", False
    return {"a": "win", "b": "loss", "tie": "tie"}[preferred_ab], True


def judge_battle(
    spec: ModelGradedSpec, reply_ab: str, reply_ba: str, verdicts: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The battle record from the judge's replies to both orders: both parsed records, which
    reply each order prefers, the `outcome` for reply A and `consistent`."""
    mapping = spec_verdicts(spec, verdicts)
    record_ab, record_ba = grade_reply(spec, reply_ab), grade_reply(spec, reply_ba)
    preferred_ab = preferred_reply(record_ab["choice"], "ab", mapping)
    preferred_ba = preferred_reply(record_ba["choice"], "ba", mapping)
    outcome, consistent = combine_orders(preferred_ab, preferred_ba)
    return {
        "choice_ab": record_ab["choice"], "choice_ba": record_ba["choice"],
        "reply_ab": reply_ab, "reply_ba": reply_ba,
        "preferred_ab": preferred_ab, "preferred_ba": preferred_ba,
        "outcome": outcome, "consistent": consistent,
    }  # fmt: skip


def battle_summary(
    outcomes: Sequence[str],
    clusters: Sequence[Hashable] | None = None,
    consistent: Sequence[bool | None] | None = None,
    *,
    n_boot: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> dict[str, Estimate | int]:
    """Win, tie and loss rates of reply A and the position-consistency rate, each with a
    cluster-bootstrap interval by `clusters` (sample ids). Rates are over valid battles;
    `invalid` counts the battles left out and `n` all battles."""
    outcomes = list(outcomes)
    n = len(outcomes)
    clusters = list(range(n)) if clusters is None else list(clusters)
    if consistent is None:
        consistent = [None] * n
    valid = np.array([o != "invalid" for o in outcomes], dtype=float)
    indicators = {name: np.array([o == name for o in outcomes], dtype=float) for name in OUTCOMES}
    indicators["position_consistency"] = np.array([c is True for c in consistent], dtype=float)
    n_valid = int(valid.sum())
    summary: dict[str, Estimate | int] = dict(rate_estimates(indicators, valid, clusters, n_boot=n_boot,
                                                             confidence=confidence, seed=seed))
    summary["invalid"] = n - n_valid
    summary["n"] = n
    return summary


def rate_estimates(
    indicators: Mapping[str, np.ndarray],
    valid: np.ndarray,
    clusters: Sequence[Hashable],
    *,
    n_boot: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> dict[str, Estimate]:
    """Each indicator's rate over the ``valid`` rows (0/1 arrays, one entry per judgement) with
    a percentile cluster-bootstrap interval by ``clusters`` (the same resamples for every rate);
    NaN where no row is valid."""
    n = len(valid)
    n_valid = int(np.sum(valid))
    n_clusters = len(set(clusters))
    replicates = cluster_weights(list(clusters), n_boot, seed)
    ones = np.ones(n)

    def rate(indicator: np.ndarray):
        def of(w: np.ndarray) -> np.ndarray:
            w = w[None, :] if w.ndim == 1 else w
            with np.errstate(invalid="ignore", divide="ignore"):
                return (w @ indicator) / (w @ valid)

        return of

    return {
        name: percentile_estimate(rate(indicator)(ones)[0] if n else float("nan"),
                                  over_replicates(rate(indicator), replicates), confidence, n_valid, n_clusters)
        for name, indicator in indicators.items()
    }
