"""``charactereval batch CONFIG.yaml``: many models, one report each, then one comparison.

For every model in the config: generate (resuming), transform, score, summarize and report,
through the typed pipeline API. Before anything runs, every entry is validated (an unknown key
names the key and the model) and a pre-flight check looks at the data, every reward-model
directory, API key variables and endpoints. A model that fails later is recorded with the step
and the reason and the batch goes on with the next; Ctrl-C or SIGTERM stops the whole batch
with everything received saved. The comparison covers the models that finished, and the
closing summary (also written to ``batch-summary.json``) names every failure and why.

With ``engine: ray`` the models run concurrently as Ray tasks, each with its resource request:
a model's generation (data, subset, generate, transform) asks for ``ray.generate_gpus`` GPUs
when it is an hf model and none otherwise (an API or offline model only waits on the network);
its scoring (score, summarize, report) asks for ``ray.score_gpus``. The tasks write each run
directory themselves, so on a cluster of several machines ``output_dir`` (and the data and
checkpoints) must be at the same path on every node, e.g. a shared filesystem. The summary is
the sequential batch's.

Config (YAML; relative paths are relative to the current directory, like command-line
arguments)::

    output_dir: outputs             # runs go to OUTPUT_DIR/NAME (default outputs)
    comparison: comparison          # comparison report directory, under output_dir
    data_dir: null                  # official data (default: $CHARACTEREVAL_DATA_DIR, data/official)
    baselines: [GPT-4, ChatGLM3-6B] # paper models overlaid in the reports
    judges: [judge-a, judge-b]      # judges shown beside the reward model (default: every judge of
                                    # each run); each one a run holds also gets its own report
    n_boot: 1000                    # bootstrap resamples
    engine: local                   # local (one model after the other) | ray (concurrently)
    ray: {address: null, cpus: 1, generate_gpus: 0, score_gpus: 0}  # engine ray: per-task requests
    defaults: {...}                 # model keys applied to every model unless it sets them
    models:
      - name: my-model              # run name (required, unique)
        backend: openai             # openai | hf | offline (required)
        model: my-model-id          # API model id or local path (required)
        base_url: http://localhost:8000/v1
        max_tokens: 1024            # also concurrency, temperature, top_p, seed
        subset: 200                 # a metric-stratified subset (or ids: FILE, or limit: N)
        rm: models/BaichuanCharRM   # reward-model directory (required)
        device: cuda                # scorer device; also mode: faithful | fast
        generate: {max_attempts: 3} # any other generate setting (pipeline.GenerateSettings)
        score: {}                   # any other score setting (pipeline.ScoreSettings)

A bare list of models is accepted too.

A model of another registered benchmark (``engine.benchmarks``; e.g. CoSER) names it with
``benchmark:`` (or the config's top-level ``benchmark:`` names it for every entry that does
not); its entry holds ``name``, an optional ``data_dir`` and one mapping of settings per stage
(``run:``, ``summarize:``, ``report:``), and it runs its benchmark's stages in that order, in
this process, after the CharacterEval models (``defaults`` and the comparison are theirs)::

      - {name: coser-a, benchmark: coser, run: {actor_model: my-model, preset: smoke}}
"""

from __future__ import annotations

import os
import re
import signal
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Annotated, Any, ClassVar

from pydantic import model_validator

from charactereval_lib import pipeline
from charactereval_lib.engine import benchmarks, faults, progress, runs
from charactereval_lib.engine.validation import Document, expect, is_int, is_number, problem, validate

# The benchmark of the models this module runs itself; the others run through the registry.
CHARACTEREVAL = "charactereval"
# A model's name names its run directory.
_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
BATCH_ENGINES = ("local", "ray")
SUMMARY_FILE = "batch-summary.json"
SUBSET_IDS = "subset_ids.txt"
# How long Ray tasks get, after Ctrl-C or SIGTERM, to save what they received and end. They end
# as soon as they have (two generations of 400 samples, measured from the cancel to run.json
# written: 16-88 ms at load averages 3 to 11), so the wait only costs time when a task is stuck;
# one still running then is killed.
CANCEL_WAIT_S = 120.0
# How long a killed task's worker may take to be gone (Ray reports it within seconds).
KILL_WAIT_S = 30.0


class BatchError(runs.RunError):
    """A batch config that cannot be run as it is (named with the file and the entry)."""


NonNegative = Annotated[float, expect("a number of at least 0", lambda v: is_number(v) and v >= 0)]
_Setting = Annotated[Any, expect("a mapping of settings", lambda v: v is None or isinstance(v, dict))]
_Text = Annotated[str, expect("a non-empty string", lambda v: isinstance(v, str) and bool(v))]


@dataclass(frozen=True)
class ModelSpec:
    name: str
    generate: pipeline.GenerateSettings
    score: pipeline.ScoreSettings
    subset: int | None = None


@dataclass(frozen=True)
class BenchmarkModel:
    """A model of another benchmark: its stages' settings, by stage name."""

    name: str
    benchmark: str
    settings: dict[str, Any]
    data_dir: str | None = None


class RayBatch(Document):
    """The resource requests of the tasks of ``engine: ray`` (per task; 0 GPUs on CPU)."""

    # An existing cluster ("auto", "HOST:6379"); None starts a local one.
    address: str | None = None
    cpus: NonNegative = 1.0
    # A model's generation task: GPUs when it runs an hf model (other backends ask for none).
    generate_gpus: NonNegative = 0.0
    # A model's scoring task (the reward model).
    score_gpus: NonNegative = 0.0

    def gpus(self, spec: ModelSpec, stage: str) -> float:
        if stage == SCORING:
            return self.score_gpus
        return self.generate_gpus if spec.generate.backend == "hf" else 0.0


@dataclass(frozen=True)
class BatchConfig:
    path: Path
    output_dir: Path
    comparison_dir: Path
    data_dir: str | None
    report: pipeline.ReportSettings
    models: list[ModelSpec]
    engine: str = "local"
    ray: RayBatch = RayBatch()
    # Progress bars on stderr (``batch`` without --quiet, on a terminal): the overall bar and
    # each step's own.
    progress: bool = False
    # The models of other benchmarks, run through the registry.
    others: list[BenchmarkModel] = field(default_factory=list)


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
    # Samples whose latest generation is an error (S5 drops them; the summary counts them).
    failed_samples: int | None = None
    seconds: float = 0.0


@dataclass
class BatchResult:
    models: list[ModelResult] = field(default_factory=list)
    comparison: str | None = None
    comparison_error: str | None = None
    interrupted: bool = False

    @property
    def failures(self) -> list[ModelResult]:
        return [m for m in self.models if m.status == "failed"]


# --- config ------------------------------------------------------------------------------------


class ModelEntry(Document):
    """One entry of ``models`` (after ``defaults`` are applied). The shorthands and the
    ``generate:``/``score:`` sections are checked by the pipeline settings they become."""

    unknown_key_hint: ClassVar[str] = " (other settings go under generate: or score:)"

    name: Annotated[str, expect("letters, digits, '.', '_' or '-' (the name of the run directory)",
                                lambda v: isinstance(v, str) and _SAFE_NAME.match(v))]
    backend: _Text
    model: _Text
    rm: _Text
    subset: Annotated[int | None, expect("a positive integer", lambda v: v is None or (is_int(v) and v > 0))] = None
    generate: _Setting = None
    score: _Setting = None
    # Shorthands of generate settings.
    base_url: Any = None
    concurrency: Any = None
    max_tokens: Any = None
    temperature: Any = None
    top_p: Any = None
    seed: Any = None
    limit: Any = None
    ids: Any = None
    # Shorthands of score settings.
    device: Any = None
    mode: Any = None

    @model_validator(mode="after")
    def _one_selection(self) -> ModelEntry:
        chosen = [k for k in ("subset", "ids", "limit") if getattr(self, k) is not None]
        if len(chosen) > 1:
            raise problem(f"choose one of subset, ids, limit (got {chosen})")
        return self

    def shorthands(self, keys: tuple[str, ...]) -> dict[str, Any]:
        return {key: getattr(self, key) for key in keys if getattr(self, key) is not None}


GENERATE_SHORTHANDS = ("base_url", "concurrency", "max_tokens", "temperature", "top_p", "seed", "limit", "ids")
SCORE_SHORTHANDS = ("device", "mode")


class BatchDocument(Document):
    """A batch config file as written (see the module docstring)."""

    # The CharacterEval entries (load_config refuses an empty ``models`` before splitting them
    # from the entries of other benchmarks).
    models: Annotated[list[ModelEntry], expect("a list of model entries", lambda v: isinstance(v, list))]
    # The benchmark of entries that do not name theirs (default charactereval).
    benchmark: str | None = None
    output_dir: str | None = None
    comparison: str | None = None
    data_dir: str | None = None
    # Checked by pipeline.ReportSettings.
    baselines: Any = None
    judges: Any = None
    n_boot: Any = 1000
    defaults: _Setting = None
    engine: Annotated[str, expect(f"one of {', '.join(BATCH_ENGINES)}", lambda v: v in BATCH_ENGINES)] = "local"
    ray: RayBatch | None = None

    @model_validator(mode="after")
    def _consistent(self) -> BatchDocument:
        names = [m.name for m in self.models]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise problem(f"duplicate model name(s) {duplicates}")
        if self.ray is not None and self.engine != "ray":
            raise problem("'ray' settings need engine: ray")
        return self


def load_config(path: Path | str) -> BatchConfig:
    """Read and check a batch config; every problem names the file and the model entry."""
    import yaml

    path = Path(path)
    if not path.exists():
        raise BatchError(f"{path}: batch config missing")
    try:
        raw = yaml.safe_load(runs.read_text(path))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
        raise BatchError(f"{path}: malformed YAML{where}: {getattr(exc, 'problem', exc)}") from None
    if isinstance(raw, list):
        raw = {"models": raw}
    if not isinstance(raw, dict):
        raise BatchError(f"{path}: expected a mapping with 'models' (or a list of models), got {type(raw).__name__}")
    entries = raw.get("models")
    others: list[BenchmarkModel] = []
    if isinstance(entries, list):
        # Entries of other benchmarks are checked by their benchmark's settings; the CharacterEval
        # ones (``defaults`` applied) by this module's models.
        top = raw.get("benchmark") or CHARACTEREVAL
        chosen = [_entry_benchmark(entry, top) for entry in entries]
        others = [_other_model(path, k, entry, chosen[k]) for k, entry in enumerate(entries)
                  if chosen[k] != CHARACTEREVAL]
        defaults = raw.get("defaults")
        own = [_without_benchmark(entry) if isinstance(entry, dict) else entry
               for k, entry in enumerate(entries) if chosen[k] == CHARACTEREVAL]
        if isinstance(defaults, dict):
            own = [{**defaults, **entry} if isinstance(entry, dict) else entry for entry in own]
        raw = {**raw, "models": own}

    def entry_label(loc: tuple[int | str, ...]) -> tuple[str, tuple[int | str, ...]]:
        # A model entry is named by its name, as the summary and the run directory name it.
        if len(loc) >= 2 and loc[0] == "models" and isinstance(loc[1], int):
            entry = raw["models"][loc[1]]
            if isinstance(entry, dict) and isinstance(entry.get("name"), str):
                return f"model {entry['name']!r}", loc[2:]
        return "", loc

    document = validate(BatchDocument, raw, str(path), BatchError, label=entry_label)
    if not document.models and not others:
        raise BatchError(f"{path}: models: expected a non-empty list of model entries, got []")
    specs = [_model_spec(path, entry) for entry in document.models]
    names = [s.name for s in specs] + [o.name for o in others]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise BatchError(f"{path}: duplicate model name(s) {duplicates}")
    # Under the workspace, as the runs are (``RunDir.resolve``): the summary and the comparison
    # belong beside them.
    output_dir = runs.workspace_root() / (document.output_dir or runs.OUTPUTS_DIR)
    report_values = {"n_boot": document.n_boot}
    if document.baselines is not None:
        report_values["baselines"] = document.baselines
    if document.judges is not None:
        report_values["judges"] = document.judges
    try:
        report = pipeline.ReportSettings.from_mapping(report_values, f"{path}")
    except pipeline.SettingsError as exc:
        raise BatchError(str(exc)) from None
    return BatchConfig(
        path=path,
        output_dir=output_dir,
        comparison_dir=output_dir / (document.comparison or "comparison"),
        data_dir=document.data_dir,
        report=report,
        models=specs,
        engine=document.engine,
        ray=document.ray or RayBatch(),
        others=others,
    )


def _entry_benchmark(entry: Any, top: str) -> str:
    return entry.get("benchmark") or top if isinstance(entry, dict) else top


def _without_benchmark(entry: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in entry.items() if key != "benchmark"}


def _other_model(path: Path, index: int, entry: Any, name: str) -> BenchmarkModel:
    """A model entry of another benchmark, its settings checked by that benchmark's classes."""
    where = f"{path}: models[{index}]"
    if not isinstance(entry, dict):
        raise BatchError(f"{where}: expected a mapping, got {type(entry).__name__}")
    if "name" in entry:
        where = f"{path}: model {entry['name']!r}"
    benchmark = benchmarks.get(name)
    allowed = {"name", "benchmark", "data_dir", *benchmark.stages}
    unknown = sorted(set(entry) - allowed)
    if unknown:
        raise BatchError(f"{where}: unknown key(s) {unknown} for a {benchmark.title} model; expected some of "
                         f"{sorted(allowed)}")
    if not isinstance(entry.get("name"), str) or not _SAFE_NAME.match(entry["name"]):
        raise BatchError(f"{where}: 'name' is required: letters, digits, '.', '_' or '-' (it names the run "
                         "directory)")
    settings = {}
    for stage in benchmark.stages:
        values = entry.get(stage) or {}
        if not isinstance(values, dict):
            raise BatchError(f"{where}: '{stage}' must be a mapping of {stage} settings")
        try:
            settings[stage] = benchmark.make_settings(stage, values, f"{where}: {stage}")
        except pipeline.SettingsError as exc:
            raise BatchError(str(exc)) from None
    return BenchmarkModel(entry["name"], benchmark.name, settings, entry.get("data_dir"))


def _model_spec(path: Path, entry: ModelEntry) -> ModelSpec:
    where = f"{path}: model {entry.name!r}"
    generate = {"backend": entry.backend, "model": entry.model, **entry.shorthands(GENERATE_SHORTHANDS),
                **(entry.generate or {})}
    score = {"rm": entry.rm, **entry.shorthands(SCORE_SHORTHANDS), **(entry.score or {})}
    try:
        return ModelSpec(
            entry.name,
            pipeline.GenerateSettings.from_mapping(generate, f"{where}: generate"),
            pipeline.ScoreSettings.from_mapping(score, f"{where}: score"),
            entry.subset,
        )
    except pipeline.SettingsError as exc:
        raise BatchError(str(exc)) from None


# --- pre-flight ----------------------------------------------------------------------------------


def preflight(config: BatchConfig) -> list[str]:
    """Everything that can be checked before hours of generation: the official data, every
    model's reward-model directory, API key variables and endpoints. One line per problem."""
    from charactereval_lib.charactereval.data import DataError, load_official_data
    from charactereval_lib.charactereval.reward.download import check_rm_dir

    problems = []
    try:
        if config.models:
            load_official_data(config.data_dir)
    except DataError as exc:
        problems.append(f"data: {exc}")
    if config.engine == "ray" and config.ray.address:
        try:
            faults.check_ray_address(config.ray.address)
        except (faults.Unreachable, runs.RunError) as exc:
            problems.append(f"{config.path}: ray: {exc}")
    checked: dict[str, list[str]] = {}
    for spec in config.models:
        where = f"{config.path}: model {spec.name!r}"
        rm = spec.score.rm or ""
        if rm not in checked:
            checked[rm] = check_rm_dir(rm, required=("config.json", "tokenizer.model")) if Path(rm).is_dir() \
                else [f"{rm}: no such reward-model directory (see `charactereval rm download` / `rm make-tiny`)"]
        problems += [f"{where}: rm: {p}" for p in checked[rm]]
        settings = spec.generate
        if settings.backend != "openai":
            continue
        if settings.base_url is None and not os.environ.get(settings.api_key_env):
            problems.append(f"{where}: the API key variable {settings.api_key_env} is not set")
        if settings.base_url is not None:
            problem = faults.endpoint_problem(settings.base_url)
            if problem:
                problems.append(f"{where}: {problem}")
    return problems


# --- running -----------------------------------------------------------------------------------


# The steps the overall bar counts per model (subset and each judge's report ride along).
BAR_STEPS = ("data", "generate", "transform", "score", "summarize", "report")


def _step(result: ModelResult, name: str) -> None:
    result.failed_step = name
    bar = progress.current()
    if bar is not None:
        bar.step(result.name, name)
    print(f"== {result.name}: {name}", flush=True)


def _generation_steps(spec: ModelSpec, config: BatchConfig, result: ModelResult, run: runs.RunDir, data: Any) -> None:
    from charactereval_lib.charactereval.subsets import stratified_subset, write_ids

    generate = spec.generate
    if spec.subset is not None:
        _step(result, "subset")
        ids = stratified_subset(data, spec.subset)
        path = write_ids(run.artifact(SUBSET_IDS), ids, comment=f"stratified subset of {spec.subset} samples")
        generate = pipeline.GenerateSettings.from_mapping({**generate.as_dict(), "ids": str(path)})
    _step(result, "generate")
    generated = pipeline.generate(run, generate, data=data, progress=config.progress)
    result.failed_samples = generated.failed
    _step(result, "transform")
    pipeline.transform(run, data=data)


def _scoring_steps(spec: ModelSpec, config: BatchConfig, result: ModelResult, run: runs.RunDir, data: Any) -> None:
    _step(result, "score")
    pipeline.score(run, spec.score, data=data, progress=config.progress)
    _step(result, "summarize")
    pipeline.summarize(run, pipeline.SummarizeSettings(n_boot=config.report.n_boot), data_dir=config.data_dir)
    _step(result, "report")
    held = run.judge_models()
    judges = tuple(j for j in config.report.judges if j in held)
    if len(judges) < len(config.report.judges):
        missing = ", ".join(j for j in config.report.judges if j not in held)
        print(f"   {result.name}: no scores of judge(s) {missing}; the report shows {', '.join(judges) or 'every judge of the run'}",
              flush=True)
    result.report = str(pipeline.report(run, config.report.replace(judges=judges), data_dir=config.data_dir).html)
    for model in judges:
        _step(result, f"report of judge {model}")
        judged = config.report.replace(scorer=runs.JUDGE, judge_model=model, judges=())
        result.judge_reports.append(str(pipeline.report(run, judged, data_dir=config.data_dir).html))


# A model's two stages: with engine ray each is a task with its own resource request.
GENERATION, SCORING = "generation", "scoring"
STAGES = {GENERATION: _generation_steps, SCORING: _scoring_steps}


def run_stages(spec: ModelSpec, config: BatchConfig, result: ModelResult, stages: tuple[str, ...]) -> ModelResult:
    """The steps of ``stages`` for one model, after the ones ``result`` already records; a
    failure is recorded in the result, never raised. An interrupt (KeyboardInterrupt,
    GenerationInterrupted) is raised: it stops the whole batch."""
    from charactereval_lib.charactereval.data import load_official_data

    run = runs.RunDir.resolve(config.output_dir / spec.name)
    started = time.monotonic()
    try:
        _step(result, "data")
        data = load_official_data(config.data_dir)
        for stage in stages:
            STAGES[stage](spec, config, result, run, data)
        result.failed_step = None
    except Exception as exc:
        from charactereval_lib.engine.generation.engine import GenerationInterrupted

        if isinstance(exc, GenerationInterrupted):
            raise
        result.status = "failed"
        result.error = f"{type(exc).__name__}: {exc}" if not isinstance(exc, (runs.RunError, ValueError)) else str(exc)
        print(f"!! {spec.name}: {result.failed_step} failed: {result.error}", flush=True)
    result.seconds = round(result.seconds + time.monotonic() - started, 1)
    return result


def _new_result(spec: ModelSpec, config: BatchConfig) -> ModelResult:
    return ModelResult(spec.name, str(runs.RunDir.resolve(config.output_dir / spec.name).path))


def run_model(spec: ModelSpec, config: BatchConfig) -> ModelResult:
    """All steps for one model (see ``run_stages``)."""
    return run_stages(spec, config, _new_result(spec, config), (GENERATION, SCORING))


def run_batch(config: BatchConfig) -> BatchResult:
    """Every model (in turn, or with ``engine: ray`` concurrently), then the comparison of those
    that finished; writes the summary. Ctrl-C or SIGTERM stops the batch: the models in progress
    are marked interrupted, the rest are not started, and the summary says so."""
    outcome = BatchResult()
    with faults.sigterm_interrupts():
        if config.engine == "ray" and config.models:
            _run_on_ray(config, outcome)
        elif config.models:
            _run_in_turn(config, outcome)
        if config.others and not outcome.interrupted:
            _run_other_benchmarks(config, outcome)
        own = {spec.name for spec in config.models}
        finished = [Path(m.run_dir) for m in outcome.models if m.status == "ok" and m.name in own]
        if outcome.interrupted:
            outcome.comparison_error = "skipped: the batch was interrupted"
        elif len(finished) >= 2:
            print(f"== comparison of {len(finished)} runs", flush=True)
            try:
                outcome.comparison = str(pipeline.compare(finished, config.comparison_dir, config.report,
                                                          data_dir=config.data_dir).html)
            except Exception as exc:
                outcome.comparison_error = f"{type(exc).__name__}: {exc}"
        else:
            outcome.comparison_error = f"skipped: {len(finished)} model(s) finished, a comparison needs two"
    runs.write_json_atomic(config.output_dir / SUMMARY_FILE, _summary_record(config, outcome))
    return outcome


def _interrupted(spec: ModelSpec, config: BatchConfig, seconds: float) -> ModelResult:
    return ModelResult(spec.name, _new_result(spec, config).run_dir, status="interrupted",
                       error="stopped by the user; re-run the batch to resume", seconds=round(seconds, 1))


def _run_in_turn(config: BatchConfig, outcome: BatchResult) -> None:
    from charactereval_lib.engine.generation.engine import GenerationInterrupted

    with progress.overall(len(config.models), BAR_STEPS, config.progress) as bar:
        for spec in config.models:
            started = time.monotonic()
            try:
                outcome.models.append(run_model(spec, config))
            except (KeyboardInterrupt, GenerationInterrupted):
                outcome.models.append(_interrupted(spec, config, time.monotonic() - started))
                outcome.interrupted = True
                break
            finally:
                bar.model_done()


def _run_other_benchmarks(config: BatchConfig, outcome: BatchResult) -> None:
    """Each model of another benchmark, its stages in order (``benchmarks.STAGES``) through the
    registry; a failure is recorded and the batch goes on, an interrupt stops it."""
    from charactereval_lib.engine.generation.engine import GenerationInterrupted

    for model in config.others:
        benchmark = benchmarks.get(model.benchmark)
        run = runs.RunDir.resolve(config.output_dir / model.name)
        result = ModelResult(model.name, str(run.path))
        started = time.monotonic()
        try:
            for stage in (s for s in benchmarks.STAGES if s in benchmark.stages):
                _step(result, f"{benchmark.name} {stage}")
                done = benchmark.call(stage, run, model.settings[stage], data_dir=model.data_dir,
                                      progress=config.progress)
                if stage == "run" and getattr(done, "errors", None):
                    result.failed_samples = len(done.errors)
                if stage == "report":
                    result.report = str(done.html)
            result.failed_step = None
        except (KeyboardInterrupt, GenerationInterrupted):
            outcome.models.append(ModelResult(model.name, str(run.path), status="interrupted",
                                              error="stopped by the user; re-run the batch to resume",
                                              seconds=round(time.monotonic() - started, 1)))
            outcome.interrupted = True
            return
        except Exception as exc:
            result.status = "failed"
            result.error = f"{type(exc).__name__}: {exc}" if not isinstance(exc, (runs.RunError, ValueError)) \
                else str(exc)
            print(f"!! {model.name}: {result.failed_step} failed: {result.error}", flush=True)
        result.seconds = round(time.monotonic() - started, 1)
        outcome.models.append(result)


def _run_on_ray(config: BatchConfig, outcome: BatchResult) -> None:
    """Each model's generation stage as a Ray task, then (when it did not fail) its scoring
    stage, with the resource requests of ``config.ray``; the results in config order."""
    from charactereval_lib.engine.ray_cluster import WAIT_S, cause, cluster, cluster_size

    settings = config.ray
    # cluster() puts run_batch's SIGTERM handler back once Ray's driver has connected.
    with cluster(settings.address, settings.cpus, log_to_driver=True) as ray:
        available = cluster_size(ray)
        wanted = max(settings.gpus(spec, stage) for spec in config.models for stage in STAGES)
        if wanted > available["gpus"]:
            raise BatchError(f"{config.path}: ray: a task asks for {wanted:g} GPU(s), the cluster has "
                             f"{available['gpus']:g}; set generate_gpus/score_gpus to 0 on CPU")
        task = ray.remote(_run_stages_task)
        in_flight: dict[Any, tuple[int, str, float]] = {}
        results: dict[int, ModelResult] = {}

        def submit(index: int, stage: str, result: ModelResult) -> None:
            spec = config.models[index]
            ref = task.options(num_cpus=settings.cpus, num_gpus=settings.gpus(spec, stage), max_retries=0).remote(
                spec, config, result, (stage,))
            in_flight[ref] = (index, stage, time.monotonic())
            results[index] = result

        for index, spec in enumerate(config.models):
            submit(index, GENERATION, _new_result(spec, config))
        try:
            while in_flight:
                ready, _ = ray.wait(list(in_flight), num_returns=1, timeout=WAIT_S)
                if not ready:
                    continue
                index, stage, _ = in_flight.pop(ready[0])
                try:
                    results[index] = ray.get(ready[0])
                except ray.exceptions.RayError as exc:
                    # The task itself failed (its worker or node died): that model failed.
                    failed = results[index]
                    failed.status, failed.failed_step, failed.error = "failed", stage, f"Ray task: {cause(exc)}"
                    print(f"!! {failed.name}: {stage} failed: {failed.error}", flush=True)
                    continue
                if stage == GENERATION and results[index].status == "ok":
                    submit(index, SCORING, results[index])
        except KeyboardInterrupt:
            _stop_tasks(ray, {ref: (config.models[index].name, _generation_run(config, index, stage))
                              for ref, (index, stage, _) in in_flight.items()}, CANCEL_WAIT_S)
            now = time.monotonic()
            for index, _stage, started in in_flight.values():
                results[index] = _interrupted(config.models[index], config, results[index].seconds + now - started)
            outcome.interrupted = True
        outcome.models = [results[index] for index in sorted(results)]


def _run_stages_task(spec: ModelSpec, config: BatchConfig, result: ModelResult, stages: tuple[str, ...]) -> ModelResult:
    """``run_stages`` as a Ray task. Ray stops a running task (``ray.cancel``) by raising
    KeyboardInterrupt in it through ``_thread.interrupt_main``, which does nothing in a process
    that ignores SIGINT; Ray's workers ignore it whenever whatever started their node did (a batch
    or ``ray start`` run in the background, with ``&`` or nohup), and the task would generate on
    until the driver left and Ray killed it mid-write. So while the task runs SIGINT has Python's
    own handler. (Ray blocks SIGINT in its workers: a Ctrl-C at a terminal still never reaches them.)"""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return run_stages(spec, config, result, stages)
    finally:
        signal.signal(signal.SIGINT, previous)


def _generation_run(config: BatchConfig, index: int, stage: str) -> runs.RunDir | None:
    return runs.RunDir.resolve(config.output_dir / config.models[index].name) if stage == GENERATION else None


def _stop_tasks(ray: Any, tasks: dict[Any, tuple[str, runs.RunDir | None]], wait_s: float) -> None:
    """Stop the running Ray tasks ``tasks`` (each mapped to its model's name and, for a generation
    task, the run it generates into) before the driver leaves: Ray kills a job's workers the
    moment its driver disconnects, whatever they are writing. Each task gets Ctrl-C
    (``ray.cancel``): a generation saves what it received and records that it was interrupted,
    as on Ctrl-C in one process, and the task ends. The wait lasts until every task has ended,
    at most ``wait_s``; a task still running then is killed (``_close_cancelled_generation``)."""
    refs = list(tasks)
    for ref in refs:
        ray.cancel(ref)
    _, running = ray.wait(refs, num_returns=len(refs), timeout=wait_s)
    for ref in running:
        ray.cancel(ref, force=True)
    killed, alive = ray.wait(running, num_returns=len(running), timeout=KILL_WAIT_S) if running else ([], [])
    for ref in killed:
        name, run = tasks[ref]
        print(f"!! {name}: its Ray task was still running {wait_s:g} s after the interrupt: killed", flush=True)
        if run is not None:
            _close_cancelled_generation(run)
    for ref in alive:
        print(f"!! {tasks[ref][0]}: its Ray task was still running {wait_s:g} s after the interrupt and could not "
              "be killed; its run may be incomplete", flush=True)


def _close_cancelled_generation(run: runs.RunDir) -> None:
    """The last resort for a generation whose task ``_stop_tasks`` had to kill (it did not end
    within its wait after Ctrl-C: stuck in a call that never returns to the interpreter, or
    deaf to KeyboardInterrupt), so it could not record how it ended: a generation still marked
    running is marked interrupted, its records (flushed as they came) are kept."""
    if run.manifest_path.exists() and (runs.load_manifest(run.path).get("generation") or {}).get("status") == "running":
        runs.update_manifest(run.path, generation={"status": "interrupted"})


def _summary_record(config: BatchConfig, outcome: BatchResult) -> dict[str, Any]:
    return {
        "config": os.fspath(config.path),
        "finished_at": runs.utc_now(),
        "interrupted": outcome.interrupted,
        "models": [asdict(m) for m in outcome.models],
        "comparison": outcome.comparison,
        "comparison_error": outcome.comparison_error,
    }


def summary_lines(outcome: BatchResult) -> list[str]:
    """The closing summary: one line per model, the comparison, and the failures with reasons."""
    lines = []
    for m in outcome.models:
        failed = f"; {m.failed_samples} sample(s) failed to generate" if m.failed_samples else ""
        if m.status == "ok":
            judged = "".join(f"; {path}" for path in m.judge_reports)
            lines.append(f"ok      {m.name}: {m.report}{judged} ({m.seconds:.0f} s){failed}")
        elif m.status == "interrupted":
            lines.append(f"STOPPED {m.name}: {m.error}")
        else:
            lines.append(f"FAILED  {m.name}: at {m.failed_step}: {m.error}")
    if outcome.comparison:
        lines.append(f"comparison: {outcome.comparison}")
    else:
        lines.append(f"comparison: {outcome.comparison_error}")
    failures = outcome.failures
    lines.append(
        f"{sum(m.status == 'ok' for m in outcome.models)}/{len(outcome.models)} model(s) finished"
        + (f"; failed: {', '.join(m.name for m in failures)}" if failures else "")
        + ("; interrupted" if outcome.interrupted else "")
    )
    return lines
