"""What the two ways of running a batch share, below both: the checked config (``BatchConfig``,
with the Ray tasks' requests ``RayBatch``), its outcome (``BatchResult``), ``BatchError``, and one
model's parts run by its benchmark's plan (``run_stages``). ``batch`` runs the models in turn
through these; ``batch_ray`` runs the same stages as Ray tasks. Neither imports the other's
lifecycle from here: ``batch`` alone chooses between them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from charactereval_lib.engine.ray_cluster import LOST_NODE_WAIT_S
from charactereval_lib.engine.registry import batching
from charactereval_lib.engine.registry.batching import PARTS, ModelResult
from charactereval_lib.engine.storage import jobs, runs
from charactereval_lib.engine.validation import Document, expect, is_number


class BatchError(runs.RunError):
    """A batch config that cannot be run as it is (named with the file and the entry)."""


NonNegative = Annotated[float, expect("a number of at least 0", lambda v: is_number(v) and v >= 0)]
Positive = Annotated[float, expect("a number above 0", lambda v: is_number(v) and v > 0)]


class RayBatch(Document):
    """The resource requests of the tasks of ``engine: ray`` (per task; 0 GPUs on CPU)."""

    # An existing cluster ("auto", "HOST:6379"); None starts a local one.
    address: str | None = None
    cpus: NonNegative = 1.0
    # A model's generation task (CharacterEval: GPUs when it runs an hf model).
    generate_gpus: NonNegative = 0.0
    # A model's scoring task (CharacterEval: the reward model).
    score_gpus: NonNegative = 0.0
    # Seconds a task waits for a node able to run it, once none is left (its node was lost),
    # before it is reported failed; a node that joins in time runs it.
    lost_node_wait: Positive = LOST_NODE_WAIT_S

    def gpus(self, spec: Any, stage: str) -> float:
        """What the task of ``stage`` (a part) of the model ``spec`` asks for, as its plan says."""
        return batching.plan_of(spec.benchmark).gpus(stage, spec, self)


@dataclass(frozen=True)
class BatchConfig:
    path: Path
    output_dir: Path
    comparison_dir: Path
    # Every model, in config order, as its benchmark's plan made it (``name``, ``benchmark``).
    models: list[Any]
    engine: str = "local"
    ray: RayBatch = RayBatch()
    # Progress bars on stderr (``batch`` without --quiet, on a terminal): the overall bar and
    # each step's own.
    progress: bool = False


@dataclass
class BatchResult:
    models: list[ModelResult] = field(default_factory=list)
    # The first comparison made, and why one was not (every benchmark's reason when several).
    comparison: str | None = None
    comparison_error: str | None = None
    interrupted: bool = False
    # One per benchmark of the batch, in config order: {"benchmark", "report", "error"}.
    comparisons: list[dict[str, Any]] = field(default_factory=list)

    @property
    def failures(self) -> list[ModelResult]:
        return [m for m in self.models if m.status == "failed"]


def run_stages(spec: Any, config: BatchConfig, result: ModelResult, stages: tuple[str, ...]) -> ModelResult:
    """The parts ``stages`` of one model, by its plan; a failure is recorded in the result
    (against the last step named), never raised. An interrupt (KeyboardInterrupt, or any
    benchmark's ``JobInterrupted``) is raised: it stops the whole batch."""

    started = time.monotonic()
    try:
        batching.plan_of(spec.benchmark).run(spec, config, result, stages)
        result.failed_step = None
    except Exception as exc:
        if isinstance(exc, jobs.JobInterrupted):
            raise
        result.status = "failed"
        result.error = f"{type(exc).__name__}: {exc}" if not isinstance(exc, (runs.RunError, ValueError)) else str(exc)
        print(f"!! {spec.name}: {result.failed_step} failed: {result.error}", flush=True)
    result.seconds = round(result.seconds + time.monotonic() - started, 1)
    return result


def new_result(spec: Any, config: BatchConfig) -> ModelResult:
    return ModelResult(spec.name, str(runs.RunDir.resolve(config.output_dir / spec.name).path),
                       benchmark=spec.benchmark)


def run_model(spec: Any, config: BatchConfig) -> ModelResult:
    """Every part of one model (see ``run_stages``)."""
    return run_stages(spec, config, new_result(spec, config), PARTS)


def interrupted_result(spec: Any, config: BatchConfig, seconds: float) -> ModelResult:
    return ModelResult(spec.name, new_result(spec, config).run_dir, benchmark=spec.benchmark, status="interrupted",
                       error="stopped by the user; re-run the batch to resume", seconds=round(seconds, 1))
