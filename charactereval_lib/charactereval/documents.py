"""CharacterEval's typed documents: its sections of ``run.json`` and its summaries.

``CharacterEvalManifest`` adds the sections CharacterEval's stages write (S5 transform,
reward-model scoring, judge scoring) to the engine's ``Manifest``; ``Summary`` is
``summary.json`` / ``judge_summary.json`` as ``summary.summarize_run`` writes them. Keys beyond
the typed ones are kept as written; a damaged file is one line naming the file and the key.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from charactereval_lib.charactereval.benchmark import NAME
from charactereval_lib.engine.storage import artifacts, runs
from charactereval_lib.engine.storage.manifest import Manifest, Section
from charactereval_lib.engine.validation import validate


class TransformSection(Section):
    counts: dict[str, int | None] = {}
    failed_ids: list[int] = []
    no_metric_ids: list[int] = []
    warnings: list[str] = []


class ScoringSection(Section):
    mode: str | None = None
    device: str | None = None
    protocol_version: str | None = None
    checkpoint: dict[str, Any] | None = None
    shards: dict[str, Any] = {}


class JudgeScoringSection(Section):
    # One entry per judge model (runs judged before several judges per run: the section itself,
    # see ``summary.judge_manifest``).
    judges: dict[str, dict[str, Any]] | None = None


class CharacterEvalManifest(Manifest):
    # The only benchmark before manifests named theirs.
    benchmark: str = NAME
    transform: TransformSection | None = None
    scoring: ScoringSection | None = None
    judge_scoring: JudgeScoringSection | None = None
    rm_verify: dict[str, Any] | None = None


class SummaryCounts(Section):
    rows: int
    scored_rows: int
    unscored_rows: int
    scorer: str
    scorer_modes: dict[str, int] = {}
    scorers: dict[str, int] = {}
    # Counts of S5 (None: the run has no transform counts).
    generation_failures: int | None = None
    no_metric_samples: int | None = None
    missing_samples: int | None = None
    # A judge's summary.
    judge_model: str | None = None
    invalid_answers: int | None = None
    invalid_unscored: int | None = None
    invalid_by_metric: dict[str, int] | None = None


class Bootstrap(Section):
    method: str
    n_boot: int
    seed: int
    level: float


class MetricRecord(Section):
    metric_en: str
    dimension: str
    n: int
    mean: float | None
    sd: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    # Rows lost to failed generations (None: unknown without the official id2metric).
    failed: int | None = None
    # A judge's invalid answers.
    invalid: int | None = None


class DimensionRecord(Section):
    dimension: str
    name: str
    mean: float | None
    ci_low: float | None = None
    ci_high: float | None = None


class Summary(Section):
    """``summary.json`` (or a judge's ``judge_summary.json``): every mean with its n, interval
    and the run's failure counts."""

    protocol_version: str
    run: str
    scorer: str
    model: str | None = None
    counts: SummaryCounts
    bootstrap: Bootstrap
    metrics: list[MetricRecord]
    dimensions: list[DimensionRecord]
    warnings: list[str] = []
    created_at: str | None = None
    judge: dict[str, Any] | None = None


def load_summary(path: Path | str) -> Summary:
    """A summary file typed, or RunError naming the file and the key."""
    path = Path(path)
    return validate(Summary, artifacts.read_json(path), str(path), runs.RunError, root="(document)")
