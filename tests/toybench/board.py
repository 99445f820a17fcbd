"""ToyBench on the leaderboard: its board (what one run scores, two eligibility rules, an
anchor) and its sample explorer. A run is ranked by its accuracy over the questions it answered,
with a 95% studentized interval from resampling whole questions; nothing is ranked until a run
of the reference model reproduces the accuracy its (invented) paper publishes."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from charactereval_lib.engine.generation.base import STATUS_OK
from charactereval_lib.engine.leaderboard import details as sections
from charactereval_lib.engine.leaderboard.board import FAILED, REPRODUCED, AnchorCheck, BoardSpec, Rule, RunView
from charactereval_lib.engine.leaderboard.site import Explorer
from charactereval_lib.engine.stats import Clusters, bootstrap_means, percentile_interval
from charactereval_lib.engine.storage import artifacts
from tests.toybench import NAME, PROTOCOL_VERSION
from tests.toybench.stages import ANSWERS

# The anchor: the paper's reference model and the accuracy it publishes for it.
ANCHOR_MODEL = "toy-reference"
PUBLISHED_ACCURACY = 0.5
ANCHOR_MARGIN = 0.01
# Fewer answered questions than this say too little to be ranked.
MIN_QUESTIONS = 3


def read(path: Path, manifest: dict[str, Any], context: Mapping[str, Any]) -> list[RunView]:
    """One view of a run: its latest answer per question, failures counted and left out."""
    latest = {r["id"]: r for r in artifacts.read_jsonl(path / ANSWERS).records}
    ok = {i: r for i, r in latest.items() if r["status"] == STATUS_OK}
    clusters = {i: float(bool(r["correct"])) for i, r in ok.items()}
    view = RunView(path, NAME, manifest.get("protocol_version", PROTOCOL_VERSION), "exact match",
                   str(manifest.get("model")), manifest, n=len(ok), failures=len(latest) - len(ok),
                   clusters=clusters)
    if clusters:
        values = np.array([[v] for v in clusters.values()])
        draws = bootstrap_means(Clusters(np.array(list(clusters)), values, np.ones_like(values)))
        low, high = percentile_interval(draws)
        view.score, view.ci = float(values.mean()), (float(low[0]), float(high[0]))
    return [view]


def _answered(view: RunView) -> list[str]:
    return [f"{view.failures} question(s) failed"] if view.failures else []


def _enough(view: RunView) -> list[str]:
    return [f"{view.n} question(s) answered, the board needs {MIN_QUESTIONS}"] if view.n < MIN_QUESTIONS else []


def anchor(view: RunView) -> AnchorCheck | None:
    if view.model != ANCHOR_MODEL or view.score is None:
        return None
    delta = view.score - PUBLISHED_ACCURACY
    inside = abs(delta) <= ANCHOR_MARGIN
    reason = (f"accuracy {view.score:.3f}, the paper's {PUBLISHED_ACCURACY:.3f} "
              f"({'within' if inside else 'outside'} ±{ANCHOR_MARGIN})")
    return AnchorCheck(REPRODUCED if inside else FAILED, [reason], {"accuracy": delta})


SPEC = BoardSpec(
    benchmark=NAME,
    title="ToyBench",
    current_versions=(PROTOCOL_VERSION,),
    headline="accuracy: the share of answered questions whose reply equals the answer",
    cluster="question",
    rules=(Rule("all-answered", "Every question was answered; a failed question leaves a hole in the set.", _answered),
           Rule("enough-questions", f"At least {MIN_QUESTIONS} questions answered.", _enough)),
    anchor_text=f"a run of {ANCHOR_MODEL} within ±{ANCHOR_MARGIN} of the paper's accuracy {PUBLISHED_ACCURACY}",
    read=read,
    anchor=anchor,
)

COLUMNS = [("id", "question", "int"), ("status", "status", "text"), ("correct", "correct", "num")]


def explorer(view: RunView, context: Mapping[str, Any]) -> Explorer:
    """One row per question; its detail the reply (test-set text) and how it was scored."""
    latest = {r["id"]: r for r in artifacts.read_jsonl(view.path / ANSWERS).records}
    rows, details = [], []
    for question, record in sorted(latest.items()):
        ok = record["status"] == STATUS_OK
        rows.append([question, record["status"], float(bool(record["correct"])) if ok else None])
        details.append([sections.kv("Answer", [("question", question), ("status", record["status"])]),
                        sections.text("The model's reply", record.get("reply"), empty="none"),
                        sections.computation("Score", f"reply == answer: {bool(record['correct'])}; "
                                                      f"correct {int(bool(record['correct']))}") if ok
                        else sections.note("Failure (left out of the accuracy)", record["status"], failure=True)])
    return Explorer(COLUMNS, ("status",), rows, details, None)
