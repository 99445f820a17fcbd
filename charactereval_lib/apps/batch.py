"""``charactereval batch CONFIG.yaml``: many models, one report each, then one comparison.

This module orchestrates: it reads the config, runs the models in order (or concurrently on Ray),
draws the overall bar, stops on Ctrl-C or SIGTERM, writes the summary and makes the comparison.
What a model's entry holds and which steps it runs are its benchmark's, through the batch plan
it declares in the registry (``engine.registry.batching``; CharacterEval's is
``pipeline.charactereval_batch``): every entry is validated before anything runs (an unknown key
names the key and the model), then each plan's pre-flight check looks at what it can (for
CharacterEval the data, every reward-model directory, API key variables and endpoints; CoSER's
in ``pipeline.coser_batch``), every benchmark's before the first model starts. A model
that fails later is recorded with the step and the reason and the batch goes on with the next;
Ctrl-C or SIGTERM stops the whole batch with everything received saved. Each benchmark whose plan
compares gets a comparison of its models that finished, and the closing summary (also written to
``batch-summary.json``, with each model's benchmark and headline score) names every failure and
why, and why a comparison was not made.

With ``engine: ray`` the models run concurrently as Ray tasks: each model's generation part, then
(when it did not fail) its scoring part, each with the resource request its plan gives (for
CharacterEval ``ray.generate_gpus`` for an hf model's generation, none for an API or offline
one, ``ray.score_gpus`` for scoring). The tasks write each run directory themselves, so on a
cluster of several machines ``output_dir`` (and the data and checkpoints) must be at the same
path on every node, e.g. a shared filesystem. The summary is the sequential batch's. The tasks' lifecycle
(submitting, gathering, stopping them on Ctrl-C) is ``batch_ray``'s; the config, the outcome and
one model's stages, which both run, are ``batch_stages``'s.

Config (YAML; relative paths are relative to the current directory, like command-line
arguments)::

    output_dir: outputs             # runs go to OUTPUT_DIR/NAME (default outputs)
    comparison: comparison          # comparison report directory, under output_dir
    benchmark: charactereval        # the benchmark of entries that name none (default charactereval)
    data_dir: null                  # CharacterEval's official data (default: $CHARACTEREVAL_DATA_DIR, data/official)
    baselines: [GPT-4, ChatGLM3-6B] # CharacterEval: paper models overlaid in the reports
    judges: [judge-a, judge-b]      # CharacterEval: judges shown beside the reward model (default: every
                                    # judge of each run); each one a run holds also gets its own report
    n_boot: 1000                    # CharacterEval: bootstrap resamples
    engine: local                   # local (one model after the other) | ray (concurrently)
    ray: {address: null, cpus: 1, generate_gpus: 0, score_gpus: 0}  # engine ray: per-task requests
    defaults: {...}                 # keys applied to every entry of the config's benchmark unless it sets them
    models:
      - name: my-model              # run name (required, unique); every entry also takes
                                    # benchmark: and data_dir:
        backend: openai             # openai | hf | offline (required)
        model: my-model-id          # API model id or local path (required)
        base_url: http://localhost:8000/v1
        max_tokens: 1024            # also concurrency, temperature, top_p, seed
        request_params: {reasoning_effort: high}  # further request-body keys (openai backend)
        subset: 200                 # a metric-stratified subset (or ids: FILE, or limit: N)
        rm: models/BaichuanCharRM   # reward-model directory (required)
        device: cuda                # scorer device; also mode: faithful | fast
        generate: {max_attempts: 3} # any other generate setting (pipeline.GenerateSettings)
        score: {}                   # any other score setting (pipeline.ScoreSettings)
      - {name: coser-a, benchmark: coser, run: {actor_model: my-model, preset: smoke,
                                                actor_request_params: {reasoning_effort: high}}}

A bare list of models is accepted too. An entry of a benchmark without a plan of its own (CoSER,
a project's own) holds one mapping of settings per stage (``run:``, ``summarize:``, ``report:``).
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Annotated, Any

from pydantic import model_validator

from charactereval_lib.apps.batch_stages import (
    BatchConfig,
    BatchError,
    BatchResult,
    RayBatch,
    interrupted_result,
    run_model,
)
from charactereval_lib.engine import faults, outdir, progress, ray_cluster
from charactereval_lib.engine.generation.base import ConfigError
from charactereval_lib.engine.registry import batching
from charactereval_lib.engine.registry.batching import ModelResult
from charactereval_lib.engine.storage import artifacts, jobs, runs
from charactereval_lib.engine.validation import Document, expect, problem, validate

# The benchmark of the entries when the config names none.
DEFAULT_BENCHMARK = "charactereval"
BATCH_ENGINES = ("local", "ray")
SUMMARY_FILE = "batch-summary.json"


# --- config ------------------------------------------------------------------------------------


class BatchDocument(Document):
    """A batch config file as written (see the module docstring)."""

    # Each entry is checked by the plan of its benchmark (``_model``).
    models: Annotated[list[Any], expect("a list of model entries", lambda v: isinstance(v, list))]
    benchmark: str | None = None
    output_dir: str | None = None
    comparison: str | None = None
    # The keys of the top level that a plan reads for all its models (``BatchPlan.configure``).
    data_dir: str | None = None
    baselines: Any = None
    judges: Any = None
    n_boot: Any = 1000
    defaults: Annotated[Any, expect("a mapping of settings", lambda v: v is None or isinstance(v, dict))] = None
    engine: Annotated[str, expect(f"one of {', '.join(BATCH_ENGINES)}", lambda v: v in BATCH_ENGINES)] = "local"
    ray: RayBatch | None = None

    @model_validator(mode="after")
    def _consistent(self) -> BatchDocument:
        if self.ray is not None and self.engine != "ray":
            raise problem("'ray' settings need engine: ray")
        return self


SHARED_KEYS = ("data_dir", "baselines", "judges", "n_boot")


def load_config(path: Path | str) -> BatchConfig:
    """Read and check a batch config; every problem names the file and the model entry."""
    import yaml

    path = Path(path)
    if not path.exists():
        raise BatchError(f"{path}: batch config missing")
    try:
        raw = yaml.safe_load(artifacts.read_text(path))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
        raise BatchError(f"{path}: malformed YAML{where}: {getattr(exc, 'problem', exc)}") from None
    if isinstance(raw, list):
        raw = {"models": raw}
    if not isinstance(raw, dict):
        raise BatchError(f"{path}: expected a mapping with 'models' (or a list of models), got {type(raw).__name__}")
    document = validate(BatchDocument, raw, str(path), BatchError)
    if not document.models:
        raise BatchError(f"{path}: models: expected a non-empty list of model entries, got []")
    shared: dict[str, Any] = {}
    models = [_model(path, index, entry, document, shared) for index, entry in enumerate(document.models)]
    names = [m.name for m in models]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise BatchError(f"{path}: duplicate model name(s) {duplicates}")
    # Under the workspace, as the runs are (``RunDir.resolve``): the summary and the comparison
    # belong beside them.
    output_dir = runs.workspace_root() / (document.output_dir or runs.OUTPUTS_DIR)
    return BatchConfig(
        path=path,
        output_dir=output_dir,
        comparison_dir=output_dir / (document.comparison or "comparison"),
        models=models,
        engine=document.engine,
        ray=document.ray or RayBatch(),
    )


def _model(path: Path, index: int, entry: Any, document: BatchDocument, shared: dict[str, Any]) -> Any:
    """One entry, as the plan of its benchmark reads it; ``shared`` keeps each plan's reading of
    the top-level keys (``configure``), made once."""
    top = document.benchmark or DEFAULT_BENCHMARK
    # A benchmark that is not a string is left to the entry's check to report.
    given = entry.get("benchmark") if isinstance(entry, dict) else None
    benchmark = given if isinstance(given, str) and given else top
    named = isinstance(entry, dict) and isinstance(entry.get("name"), str)
    where = f"{path}: model {entry['name']!r}" if named else f"{path}: models[{index}]"
    try:
        plan = batching.plan_of(benchmark)
    except ConfigError as exc:
        raise BatchError(f"{where}: {exc}") from None
    if isinstance(entry, dict) and benchmark == top and document.defaults:
        entry = {**document.defaults, **entry}

    def label(loc: tuple[int | str, ...]) -> tuple[str, tuple[int | str, ...]]:
        # An entry is named by its name, as the summary and the run directory name it.
        return (f"model {entry['name']!r}", loc) if named else ("", ("models", index, *loc))

    parsed = validate(plan.entry_class(), entry, str(path), BatchError, label=label)
    try:
        if benchmark not in shared:
            shared[benchmark] = plan.configure({key: getattr(document, key) for key in SHARED_KEYS}, str(path))
        return plan.model(parsed, where, shared[benchmark])
    except ConfigError as exc:
        raise BatchError(str(exc)) from None


# --- pre-flight ----------------------------------------------------------------------------------


def preflight(config: BatchConfig) -> list[str]:
    """Everything that can be checked before hours of generation, by each benchmark's plan, and
    the Ray cluster's address. One line per problem."""
    problems = []
    for benchmark in dict.fromkeys(m.benchmark for m in config.models):
        models = [m for m in config.models if m.benchmark == benchmark]
        problems += batching.plan_of(benchmark).preflight(models, config)
    if config.engine == "ray" and config.ray.address:
        try:
            ray_cluster.check_ray_address(config.ray.address)
        except (faults.Unreachable, runs.RunError) as exc:
            problems.append(f"{config.path}: ray: {exc}")
    # The comparison folder follows the rule of every --out (engine.outdir), checked before any model runs.
    try:
        outdir.check(config.comparison_dir, outdir.REPORTS, inputs=[config.output_dir / m.name for m in config.models])
    except runs.RunError as exc:
        problems.append(f"{config.path}: comparison: {exc}")
    return problems


# --- running -----------------------------------------------------------------------------------


def run_batch(config: BatchConfig) -> BatchResult:
    """Every model (in turn, or with ``engine: ray`` concurrently), then the comparison of those
    that finished; writes the summary. Ctrl-C or SIGTERM stops the batch: the models in progress
    are marked interrupted, the rest are not started, and the summary says so."""
    outcome = BatchResult()
    with faults.sigterm_interrupts():
        if config.engine == "ray":
            # The Ray part is imported only for engine: ray.
            from charactereval_lib.apps.batch_ray import run_on_ray

            run_on_ray(config, outcome)
        else:
            _run_in_turn(config, outcome)
        if outcome.interrupted:
            outcome.comparison_error = "skipped: the batch was interrupted"
        else:
            for result in outcome.models:
                if result.status == "ok":
                    result.headline = _headline(result)
            _compare(config, outcome)
    artifacts.write_json_atomic(config.output_dir / SUMMARY_FILE, _summary_record(config, outcome))
    return outcome


def _compare(config: BatchConfig, outcome: BatchResult) -> None:
    """One comparison per benchmark whose plan compares, of its finished models when two or
    more finished (runs of different benchmarks are never compared). The first such benchmark
    writes into ``comparison_dir``, any other into ``comparison_dir`` suffixed with its name."""
    ok = {m.name for m in outcome.models if m.status == "ok"}
    names = list(dict.fromkeys(s.benchmark for s in config.models))
    several = len(names) > 1
    first = next((b for b in names if batching.plan_of(b).compare is not None), None)
    for benchmark in names:
        plan = batching.plan_of(benchmark)
        finished = [s for s in config.models if s.benchmark == benchmark and s.name in ok]
        entry: dict[str, Any] = {"benchmark": benchmark, "report": None, "error": None}
        outcome.comparisons.append(entry)
        if plan.compare is None:
            entry["error"] = f"skipped: {benchmark} has no comparison report"
            continue
        if len(finished) < 2:
            entry["error"] = (f"skipped: {len(finished)} {benchmark + ' ' if several else ''}model(s) finished, a "
                              "comparison needs two" + (" of one benchmark" if several else ""))
            continue
        target = config if benchmark == first else replace(
            config, comparison_dir=config.comparison_dir.with_name(f"{config.comparison_dir.name}-{benchmark}"))
        print(f"== comparison of {len(finished)} {benchmark} runs", flush=True)
        try:
            entry["report"] = plan.compare(finished, target)
        except Exception as exc:
            entry["error"] = f"{type(exc).__name__}: {exc}"
    outcome.comparison = next((e["report"] for e in outcome.comparisons if e["report"]), None)
    errors = [e for e in outcome.comparisons if e["error"]]
    if errors:
        outcome.comparison_error = ("; ".join(f'{e["benchmark"]}: {e["error"]}' for e in errors) if several
                                    else errors[0]["error"])


def _headline(result: ModelResult) -> dict[str, Any] | None:
    """The finished run's score as its benchmark's board reads it (the first scorer's: the reward
    model's for CharacterEval), with its 95% interval; None for a benchmark without a board."""
    from charactereval_lib.apps.leaderboard import boarded

    declared = boarded().get(result.benchmark or "")
    if declared is None:
        return None
    spec = declared.hook("board")
    path = Path(result.run_dir)
    try:
        views = spec.read(path, runs.load_manifest(path), {})
    except (runs.RunError, ValueError, KeyError, OSError) as exc:
        return {"error": f"the score cannot be read: {exc}"}
    if not views:
        return None
    view = views[0]
    return {"headline": spec.headline, "scorer": view.scorer, "score": view.score,
            "ci": list(view.ci) if view.score is not None else None, "n": view.n, "failures": view.failures}


def _run_in_turn(config: BatchConfig, outcome: BatchResult) -> None:
    steps = [batching.plan_of(spec.benchmark).bar_steps() for spec in config.models]
    with progress.overall(len(steps), (), config.progress, total=sum(map(len, steps))) as bar:
        for spec, model_steps in zip(config.models, steps, strict=True):
            bar.start(model_steps)
            started = time.monotonic()
            try:
                outcome.models.append(run_model(spec, config))
            except (KeyboardInterrupt, jobs.JobInterrupted):
                outcome.models.append(interrupted_result(spec, config, time.monotonic() - started))
                outcome.interrupted = True
                break
            finally:
                bar.model_done()


def _summary_record(config: BatchConfig, outcome: BatchResult) -> dict[str, Any]:
    return {
        "config": os.fspath(config.path),
        "finished_at": runs.utc_now(),
        "interrupted": outcome.interrupted,
        "models": [asdict(m) for m in outcome.models],
        "comparison": outcome.comparison,
        "comparison_error": outcome.comparison_error,
        "comparisons": outcome.comparisons,
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
    if len(outcome.comparisons) > 1:
        lines += [f'comparison ({c["benchmark"]}): {c["report"] or c["error"]}' for c in outcome.comparisons]
    elif outcome.comparison:
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
