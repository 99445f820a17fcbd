"""Several replies in one judge prompt (evals' multicomp, as its `best` spec uses it).

evals numbers the n replies with the spec's ``output_template`` and joins them into the one
output field of the prompt; the judge answers with one of the choices (``from_n``: "1".."n"),
the position of the best reply. evals shows the replies in the order of its command line, so a
judge that prefers a position favours whoever stands there, and evals leaves that to the user.
Here a sample may be judged in several orders: ``rotations(n)`` are the n cyclic orders, in
which every reply stands in every position exactly once, so a position preference spreads over
the replies evenly, and the rate per position shows it.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import numpy as np

from charactereval_lib.engine.grading.agreement import Estimate
from charactereval_lib.engine.grading.battles import rate_estimates
from charactereval_lib.engine.grading.choices import INVALID
from charactereval_lib.engine.grading.errors import GradingError
from charactereval_lib.engine.grading.spec import ModelGradedSpec

ORDERS = ("given", "rotations")


def orders(n: int, kind: str = "rotations") -> list[tuple[int, ...]]:
    """The orders in which ``n`` replies are shown (each a tuple of reply indices, position 1
    first): ``given`` is evals' single order, ``rotations`` the n cyclic ones (module docstring)."""
    if kind not in ORDERS:
        raise ValueError(f"orders {kind!r}: expected one of {', '.join(ORDERS)}")
    given = tuple(range(n))
    return [given] if kind == "given" else [given[k:] + given[:k] for k in range(n)]


def output_field(spec: ModelGradedSpec) -> str:
    """The one output field the replies are joined into (evals' multicomp fills one)."""
    outputs = list(spec.input_outputs.values())
    if len(outputs) != 1:
        raise GradingError(f"{spec.source}: input_outputs: several replies in one prompt need exactly one output "
                           f"field, not {len(outputs)}")
    if spec.output_template is None:
        raise GradingError(f"{spec.source}: output_template: needed to number several replies in one prompt")
    return outputs[0]


def multicomp_fill(spec: ModelGradedSpec, replies: Sequence[str], order: Sequence[int]) -> dict[str, Any]:
    """The fill arguments of ``spec.build_judge_messages`` (and ``judging.make_item``) that show
    ``replies`` in ``order``, numbered from 1 by the spec's output template, exactly as evals
    fills multicomp: the spec's output field gets them in that order, and ``multicomp_n`` is
    their number."""
    return {"completions": {output_field(spec): [replies[i] for i in order]}, "multicomp_n": len(replies)}


def chosen_reply(choice: str, order: Sequence[int], choices: Sequence[str]) -> int | None:
    """The index of the reply a parsed choice names (``choices[k]`` is position k + 1 of
    ``order``); None for an invalid answer."""
    if choice == INVALID:
        return None
    return order[list(choices).index(choice)]


def multicomp_summary(
    chosen: Sequence[int | None],
    positions: Sequence[int | None],
    clusters: Sequence[Hashable],
    n_replies: int,
    *,
    n_boot: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
) -> dict[str, Any]:
    """Per judgement the chosen reply's index and its position (None: invalid answer): how
    often each reply and each position was chosen, over the valid judgements, with
    cluster-bootstrap intervals by ``clusters`` (sample ids); ``invalid`` and ``n`` count the
    judgements."""
    valid = np.array([c is not None for c in chosen], dtype=float)
    by_reply = {i: np.array([c == i for c in chosen], dtype=float) for i in range(n_replies)}
    by_position = {k: np.array([p == k for p in positions], dtype=float) for k in range(n_replies)}
    options = {"n_boot": n_boot, "confidence": confidence, "seed": seed}
    replies: dict[int, Estimate] = rate_estimates(by_reply, valid, clusters, **options)
    shown: dict[int, Estimate] = rate_estimates(by_position, valid, clusters, **options)
    return {
        "replies": [replies[i] for i in range(n_replies)],
        "positions": [shown[k] for k in range(n_replies)],
        "counts": [int(by_reply[i].sum()) for i in range(n_replies)],
        "position_counts": [int(by_position[k].sum()) for k in range(n_replies)],
        "invalid": int(len(chosen) - valid.sum()),
        "n": len(chosen),
    }
