"""What ``charactereval batch`` needs of a benchmark: a batch plan (``BatchPlan``) for its models.

``batch`` (the orchestrator: config, order, bars, interrupts, summary, comparison) reads each
model entry with the common keys of ``BatchEntry`` (``name``, ``benchmark``, ``data_dir``) and
hands the rest to the plan of the entry's benchmark, which a benchmark declares in the registry
(``Benchmark.batch``, a ``BatchPlan`` subclass by reference). The default plan runs the
benchmark's declared stages (``benchmarks.STAGES``) from one mapping of settings per stage::

      - {name: coser-a, benchmark: coser, run: {actor_model: my-model, preset: smoke}}

A model's work is two parts, each one Ray task with its own resource request under ``engine:
ray`` (``GENERATION``, what talks to the model under test; ``SCORING``, the rest); in one process
they run one after the other. A plan reports each step with ``step`` and raises on a failure:
``batch`` records it against the last step named and goes on with the next model.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import create_model

from charactereval_lib.engine import progress
from charactereval_lib.engine.registry import benchmarks
from charactereval_lib.engine.storage import runs
from charactereval_lib.engine.validation import Document, expect

# A model's two parts (see the module docstring), in order.
GENERATION, SCORING = "generation", "scoring"
PARTS = (GENERATION, SCORING)
# A model's name names its run directory.
SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")

Settings = Annotated[Any, expect("a mapping of settings", lambda v: v is None or isinstance(v, dict))]


class BatchEntry(Document):
    """The keys every model entry has, whatever its benchmark; a plan's entry class adds its own."""

    name: Annotated[str, expect("letters, digits, '.', '_' or '-' (the name of the run directory)",
                                lambda v: isinstance(v, str) and bool(SAFE_NAME.match(v)))]
    # The model's benchmark (default: the config's top-level ``benchmark``, else charactereval).
    benchmark: str | None = None
    # Its benchmark's data (default: the benchmark's own lookup; CharacterEval: the config's).
    data_dir: str | None = None


@dataclass
class ModelResult:
    name: str
    run_dir: str
    status: str = "ok"  # ok | failed | interrupted
    failed_step: str | None = None
    error: str | None = None
    report: str | None = None
    # One report per judge named in the config that this run holds.
    judge_reports: list[str] = field(default_factory=list)
    # Samples whose latest generation is an error (S5 drops them; the summary counts them); None
    # only when the model never reached its generation.
    failed_samples: int | None = None
    seconds: float = 0.0
    benchmark: str | None = None
    # The score its benchmark's board ranks by, with its interval (``batch`` reads it from the
    # finished run): {"headline", "scorer", "score", "ci", "n", "failures"}.
    headline: dict[str, Any] | None = None


def step(result: ModelResult, name: str) -> None:
    """``name`` starts for the model of ``result``: said on stdout and on the overall bar; a
    failure from here on is recorded against it."""
    result.failed_step = name
    bar = progress.current()
    if bar is not None:
        bar.step(result.name, name)
    print(f"== {result.name}: {name}", flush=True)


@dataclass(frozen=True)
class StagesModel:
    """A model of the default plan: its stages' settings, by stage name."""

    name: str
    benchmark: str
    settings: dict[str, Any]
    data_dir: str | None = None


class BatchPlan:
    """The default plan: a model entry holds one mapping of settings per declared stage, and the
    stages run in ``benchmarks.STAGES`` order (``run`` as the generation part, the others as the
    scoring part). A benchmark with more to do in a batch subclasses it and names the subclass in
    its declaration (``Benchmark.batch``)."""

    # ``compare(models, config) -> report path`` of the models that finished, when the benchmark
    # has a comparison (``batch`` makes it when two or more finished).
    compare: Any = None

    def __init__(self, benchmark: benchmarks.Benchmark) -> None:
        self.benchmark = benchmark

    def entry_class(self) -> type[BatchEntry]:
        """The pydantic model of this benchmark's entries (``BatchEntry`` and its own keys)."""
        fields: dict[str, Any] = {stage: (Settings, None) for stage in self.stages()}
        return create_model(f"{self.benchmark.title}Entry", __base__=BatchEntry, **fields)

    def stages(self) -> list[str]:
        return [s for s in benchmarks.STAGES if s in self.benchmark.stages]

    def configure(self, values: Mapping[str, Any], where: str) -> Any:
        """What the config's top level sets for every model of this benchmark (the default plan
        reads none of it)."""
        return None

    def model(self, entry: BatchEntry, where: str, shared: Any) -> Any:
        """The model an entry describes (``name`` and ``benchmark`` set), its settings checked
        (a ``ConfigError`` naming ``where`` and the key)."""
        settings = {stage: self.benchmark.make_settings(stage, getattr(entry, stage) or {}, f"{where}: {stage}")
                    for stage in self.stages()}
        return StagesModel(entry.name, self.benchmark.name, settings, entry.data_dir)

    def bar_steps(self) -> tuple[str, ...]:
        """The steps the overall bar counts per model (the names given to ``step``)."""
        return tuple(self._step_name(stage) for stage in self.stages())

    def _step_name(self, stage: str) -> str:
        return f"{self.benchmark.name} {stage}"

    def preflight(self, models: Sequence[Any], config: Any) -> list[str]:
        """One line per problem found before anything runs (the default plan checks nothing
        beyond the settings)."""
        return []

    def gpus(self, part: str, model: Any, ray: Any) -> float:
        """The GPUs the Ray task of ``part`` asks for (``ray``: the config's ``RayBatch``)."""
        return 0.0

    def run(self, model: StagesModel, config: Any, result: ModelResult, parts: Sequence[str]) -> None:
        """The steps of ``parts`` for one model, each announced with ``step``; raises on a failure."""
        run = runs.RunDir.resolve(config.output_dir / model.name)
        for stage in self.stages():
            if (GENERATION if stage == "run" else SCORING) not in parts:
                continue
            step(result, self._step_name(stage))
            done = self.benchmark.call(stage, run, model.settings[stage], data_dir=model.data_dir,
                                       progress=config.progress)
            if stage == "run" and hasattr(done, "errors"):
                result.failed_samples = len(done.errors)
            if stage == "report":
                result.report = str(done.html)


def plan_of(name: str) -> BatchPlan:
    """The batch plan of the benchmark ``name`` (its declared one, else the default)."""
    benchmark = benchmarks.get(name)
    if benchmark.batch is None:
        return BatchPlan(benchmark)
    return benchmarks.resolve(benchmark.batch, f"benchmark {name!r}, batch plan")(benchmark)
