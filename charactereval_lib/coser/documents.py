"""CoSER's typed documents: its section of ``run.json`` and its summary.

``CoserManifest`` adds the ``coser`` section (``run.run_scenes`` and ``official`` imports write
it) to the engine's ``Manifest``; ``CoserSummary`` is ``statistics.compute_summary``'s result, as
``coser_summary.json`` holds it. Keys beyond the typed ones are kept as written; a damaged file
is one line naming the file and the key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import Strict

from charactereval_lib.coser.statistics import compute_summary
from charactereval_lib.engine.storage import artifacts, runs
from charactereval_lib.engine.storage.manifest import Manifest, Section
from charactereval_lib.engine.validation import validate


class CoserSection(Section):
    # running, complete, partial (some scene runs failed) or interrupted; absent before it was recorded.
    status: str | None = None
    # The settings a resumed run must match (models, protocol, fixed parameters, roles).
    identity: dict[str, Any] = {}
    endpoints: dict[str, Any] = {}
    preset: str | None = None
    repeats: int = 0
    scenes: list[str] = []
    models: dict[str, str | None] = {}
    data_dir: str | None = None


class CoserManifest(Manifest):
    coser: CoserSection | None = None


# JSON keys are strings: a number read back from a file as a key is parsed.
NumberKey = Annotated[int, Strict(False)]


class Interval(Section):
    """A mean with its 95% scene-bootstrap interval (low and high None with fewer than four scenes)."""

    mean: float | None = None
    low: float | None = None
    high: float | None = None


class SurfaceInterval(Interval):
    sessions: int


class BookScores(Section):
    tag: str
    scenes: int
    sessions: int
    scores: dict[str, Interval]


class SummaryCounts(Section):
    scenes: int
    sessions: int
    sessions_expected: int


class Endings(Section):
    end_chat: int
    max_rounds: int
    failed: int
    not_run: int


class Rounds(Section):
    """Rounds per finished scene (every field absent when none finished)."""

    mean: float | None = None
    median: float | None = None
    min: float | None = None
    max: float | None = None
    histogram: dict[NumberKey, int] = {}


class ThinkingCounts(Section):
    replies: int
    with_block: int
    removed: int
    kept: int


class ThinkingBlocks(Section):
    """Replies that started with a thinking block and what the run's rule did with them
    (``statistics.thinking_blocks``)."""

    rule: str
    roles: dict[str, ThinkingCounts]
    total: ThinkingCounts


class CoserSummary(Section):
    """The CoSER statistics of a run (see ``statistics.compute_summary``). Interval tables map a
    dimension (and ``average``) to its ``Interval``; empty when nothing is judged."""

    protocol_version: str | None
    models: dict[str, str | None] | None = None
    preset: str | None = None
    repeats: int | None = None
    score_variant: str
    bootstrap: dict[str, Any]
    counts: SummaryCounts
    overall: dict[str, Interval]
    by_split: dict[str, dict[str, Interval]]
    by_book: dict[str, BookScores]
    by_repeat: dict[NumberKey, dict[str, float | None]]
    run_to_run_sd: dict[str, float | None] | None = None
    scenes_simulated: int
    rounds: Rounds
    ended_by: Endings
    judge_failures: int
    judge_failed_dimensions: dict[str, int]
    sessions_unjudged: int
    refused_turns: dict[str, int]
    # Reasoning tokens per kind of call and in total, where the servers report them (else None).
    reasoning_tokens: dict[str, int] | None = None
    # None for a run without turn records (an import) and in summaries written before it was recorded.
    thinking_blocks: ThinkingBlocks | None = None
    # Per role, what the servers reported for its calls (``engine.generation.served.ServedCounts.as_dict``);
    # None in summaries written before it was recorded.
    served: dict[str, dict[str, Any]] | None = None
    bleu_mean: float | None = None
    rouge_l_mean: float | None = None
    bleu_unavailable: str | None = None
    surface_per_100: dict[str, SurfaceInterval]


def computed_summary(run: runs.RunDir, **options: Any) -> CoserSummary:
    """``statistics.compute_summary`` typed (what ``coser summarize`` writes, computed afresh)."""
    return validate(CoserSummary, compute_summary(run, **options), f"{run.path}: summary", runs.RunError)


def load_summary(path: Path | str) -> CoserSummary:
    """``coser_summary.json`` typed, or RunError naming the file and the key."""
    path = Path(path)
    return validate(CoserSummary, artifacts.read_json(path), str(path), runs.RunError, root="(document)")
