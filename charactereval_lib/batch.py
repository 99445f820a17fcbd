"""``charactereval batch CONFIG.yaml``: many models, one report each, then one comparison.

For every model in the config: generate (resuming), transform, score, summarize and report,
through the typed pipeline API. Before anything runs, every entry is validated (an unknown key
names the key and the model) and a pre-flight check looks at the data, every reward-model
directory, API key variables and endpoints. A model that fails later is recorded with the step
and the reason and the batch goes on with the next; Ctrl-C or SIGTERM stops the whole batch
with everything received saved. The comparison covers the models that finished, and the
closing summary (also written to ``batch-summary.json``) names every failure and why.

Config (YAML; relative paths are relative to the current directory, like command-line
arguments)::

    output_dir: outputs             # runs go to OUTPUT_DIR/NAME (default outputs)
    comparison: comparison          # comparison report directory, under output_dir
    data_dir: null                  # official data (default: $CHARACTEREVAL_DATA_DIR, data/official)
    baselines: [GPT-4, ChatGLM3-6B] # paper models overlaid in the reports
    n_boot: 1000                    # bootstrap resamples
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
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from charactereval_lib import pipeline
from charactereval_lib.engine import runs

# Shorthands allowed at the top of a model entry, beside the full `generate:` / `score:` sections.
GENERATE_KEYS = ("base_url", "concurrency", "max_tokens", "temperature", "top_p", "seed", "limit", "ids")
SCORE_KEYS = ("device", "mode")
MODEL_KEYS = {"name", "backend", "model", "rm", "subset", "generate", "score", *GENERATE_KEYS, *SCORE_KEYS}
TOP_KEYS = {"output_dir", "comparison", "data_dir", "baselines", "n_boot", "defaults", "models"}
SUMMARY_FILE = "batch-summary.json"
SUBSET_IDS = "subset_ids.txt"
_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
ENDPOINT_TIMEOUT_S = 5.0


class BatchError(runs.RunError):
    """A batch config that cannot be run as it is (named with the file and the entry)."""


@dataclass(frozen=True)
class ModelSpec:
    name: str
    generate: pipeline.GenerateSettings
    score: pipeline.ScoreSettings
    subset: int | None = None


@dataclass(frozen=True)
class BatchConfig:
    path: Path
    output_dir: Path
    comparison_dir: Path
    data_dir: str | None
    report: pipeline.ReportSettings
    models: list[ModelSpec]


@dataclass
class ModelResult:
    name: str
    run_dir: str
    status: str = "ok"  # ok | failed | interrupted
    failed_step: str | None = None
    error: str | None = None
    report: str | None = None
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


def load_config(path: Path | str) -> BatchConfig:
    """Read and check a batch config; every problem names the file and the model entry."""
    import yaml

    path = Path(path)
    if not path.exists():
        raise BatchError(f"{path}: batch config missing")
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark else ""
        raise BatchError(f"{path}: malformed YAML{where}: {getattr(exc, 'problem', exc)}") from None
    if isinstance(raw, list):
        raw = {"models": raw}
    if not isinstance(raw, dict):
        raise BatchError(f"{path}: expected a mapping with 'models' (or a list of models), got {type(raw).__name__}")
    unknown = sorted(set(raw) - TOP_KEYS)
    if unknown:
        raise BatchError(f"{path}: unknown key(s) {unknown}; expected some of {sorted(TOP_KEYS)}")
    models = raw.get("models")
    if not isinstance(models, list) or not models:
        raise BatchError(f"{path}: 'models' must be a non-empty list")
    defaults = raw.get("defaults") or {}
    if not isinstance(defaults, dict):
        raise BatchError(f"{path}: 'defaults' must be a mapping")
    specs = [_model_spec(path, k, {**defaults, **entry} if isinstance(entry, dict) else entry)
             for k, entry in enumerate(models)]
    names = [s.name for s in specs]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise BatchError(f"{path}: duplicate model name(s) {duplicates}")
    output_dir = Path(raw.get("output_dir") or runs.outputs_dir())
    report_values = {"n_boot": raw.get("n_boot", 1000)}
    if raw.get("baselines") is not None:
        report_values["baselines"] = raw["baselines"]
    try:
        report = pipeline.ReportSettings.from_mapping(report_values, f"{path}")
    except pipeline.SettingsError as exc:
        raise BatchError(str(exc)) from None
    return BatchConfig(
        path=path,
        output_dir=output_dir,
        comparison_dir=output_dir / str(raw.get("comparison") or "comparison"),
        data_dir=raw.get("data_dir"),
        report=report,
        models=specs,
    )


def _model_spec(path: Path, index: int, entry: Any) -> ModelSpec:
    where = f"{path}: models[{index}]"
    if not isinstance(entry, dict):
        raise BatchError(f"{where}: expected a mapping, got {type(entry).__name__}")
    if "name" in entry:
        where = f"{path}: model {entry['name']!r}"
    unknown = sorted(set(entry) - MODEL_KEYS)
    if unknown:
        raise BatchError(f"{where}: unknown key(s) {unknown}; expected some of {sorted(MODEL_KEYS)} "
                         "(other settings go under generate: or score:)")
    for key in ("name", "backend", "model", "rm"):
        if not isinstance(entry.get(key), str) or not entry[key]:
            raise BatchError(f"{where}: '{key}' is required (a string)")
    if not _SAFE_NAME.match(entry["name"]):
        raise BatchError(f"{where}: name must be letters, digits, '.', '_' or '-' (it names the run directory)")
    for key in ("generate", "score"):
        if not isinstance(entry.get(key) or {}, dict):
            raise BatchError(f"{where}: '{key}' must be a mapping of {key} settings")
    chosen = [k for k in ("subset", "ids", "limit") if entry.get(k) is not None]
    if len(chosen) > 1:
        raise BatchError(f"{where}: choose one of subset, ids, limit (got {chosen})")
    subset = entry.get("subset")
    if subset is not None and (not isinstance(subset, int) or isinstance(subset, bool) or subset < 1):
        raise BatchError(f"{where}: 'subset' must be a positive integer")
    generate = {"backend": entry["backend"], "model": entry["model"],
                **{k: entry[k] for k in GENERATE_KEYS if entry.get(k) is not None}, **(entry.get("generate") or {})}
    score = {"rm": entry["rm"], **{k: entry[k] for k in SCORE_KEYS if entry.get(k) is not None},
             **(entry.get("score") or {})}
    try:
        return ModelSpec(
            entry["name"],
            pipeline.GenerateSettings.from_mapping(generate, f"{where}: generate"),
            pipeline.ScoreSettings.from_mapping(score, f"{where}: score"),
            subset,
        )
    except pipeline.SettingsError as exc:
        raise BatchError(str(exc)) from None


# --- pre-flight ----------------------------------------------------------------------------------


def endpoint_problem(base_url: str, timeout_s: float = ENDPOINT_TIMEOUT_S) -> str | None:
    """Why ``base_url`` cannot be reached (a name that does not resolve, a refused or timed-out
    TCP connection), or None. Only connects; sends nothing."""
    parsed = urllib.parse.urlsplit(base_url)
    if not parsed.hostname:
        return f"{base_url}: not a URL with a host"
    port = parsed.port or (443 if parsed.scheme == "https" else 80)
    try:
        with socket.create_connection((parsed.hostname, port), timeout=timeout_s):
            return None
    except socket.gaierror:
        return f"{base_url}: the host name {parsed.hostname!r} does not resolve"
    except ConnectionRefusedError:
        return f"{base_url}: connection refused (is the server running on port {port}?)"
    except TimeoutError:
        return f"{base_url}: no answer within {timeout_s:g} s"
    except OSError as exc:
        return f"{base_url}: unreachable ({exc.strerror or exc})"


def preflight(config: BatchConfig) -> list[str]:
    """Everything that can be checked before hours of generation: the official data, every
    model's reward-model directory, API key variables and endpoints. One line per problem."""
    from charactereval_lib.charactereval.data import DataError, load_official_data
    from charactereval_lib.charactereval.reward.download import check_rm_dir

    problems = []
    try:
        load_official_data(config.data_dir)
    except DataError as exc:
        problems.append(f"data: {exc}")
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
            problem = endpoint_problem(settings.base_url)
            if problem:
                problems.append(f"{where}: {problem}")
    return problems


# --- running -----------------------------------------------------------------------------------


def _step(result: ModelResult, name: str) -> None:
    result.failed_step = name
    print(f"== {result.name}: {name}", flush=True)


def run_model(spec: ModelSpec, config: BatchConfig) -> ModelResult:
    """All steps for one model; a failure is recorded in the result, never raised. An interrupt
    (KeyboardInterrupt, GenerationInterrupted) is raised: it stops the whole batch."""
    from charactereval_lib.charactereval.data import load_official_data
    from charactereval_lib.charactereval.subsets import stratified_subset, write_ids

    run = runs.RunDir.resolve(config.output_dir / spec.name)
    result = ModelResult(spec.name, str(run.path))
    started = time.monotonic()
    try:
        generate = spec.generate
        _step(result, "data")
        data = load_official_data(config.data_dir)
        if spec.subset is not None:
            _step(result, "subset")
            ids = stratified_subset(data, spec.subset)
            path = write_ids(run.artifact(SUBSET_IDS), ids, comment=f"stratified subset of {spec.subset} samples")
            generate = pipeline.GenerateSettings.from_mapping({**generate.as_dict(), "ids": str(path)})
        _step(result, "generate")
        generated = pipeline.generate(run, generate, data=data)
        result.failed_samples = generated.failed
        _step(result, "transform")
        pipeline.transform(run, data=data)
        _step(result, "score")
        pipeline.score(run, spec.score, data=data)
        _step(result, "summarize")
        pipeline.summarize(run, pipeline.SummarizeSettings(n_boot=config.report.n_boot), data_dir=config.data_dir)
        _step(result, "report")
        result.report = str(pipeline.report(run, config.report, data_dir=config.data_dir).html)
        result.failed_step = None
    except Exception as exc:  # noqa: BLE001 - one model's failure of any kind must not stop the batch
        from charactereval_lib.engine.generation.engine import GenerationInterrupted

        if isinstance(exc, GenerationInterrupted):
            raise
        result.status = "failed"
        result.error = f"{type(exc).__name__}: {exc}" if not isinstance(exc, (runs.RunError, ValueError)) else str(exc)
        print(f"!! {spec.name}: {result.failed_step} failed: {result.error}", flush=True)
    result.seconds = round(time.monotonic() - started, 1)
    return result


@contextlib.contextmanager
def _sigterm_interrupts() -> Iterator[None]:
    """SIGTERM stops the batch like Ctrl-C (records are flushed as they arrive either way)."""

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    try:
        previous = signal.signal(signal.SIGTERM, interrupt)
    except ValueError:  # not the main thread: leave signals to the caller
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_batch(config: BatchConfig) -> BatchResult:
    """Every model in turn, then the comparison of those that finished; writes the summary.
    Ctrl-C or SIGTERM stops the batch: the model in progress is marked interrupted, the rest
    are not started, and the summary says so."""
    from charactereval_lib.engine.generation.engine import GenerationInterrupted

    outcome = BatchResult()
    with _sigterm_interrupts():
        for spec in config.models:
            started = time.monotonic()
            try:
                outcome.models.append(run_model(spec, config))
            except (KeyboardInterrupt, GenerationInterrupted):
                run_dir = config.output_dir / spec.name
                outcome.models.append(ModelResult(spec.name, str(run_dir), status="interrupted",
                                                  error="stopped by the user; re-run the batch to resume",
                                                  seconds=round(time.monotonic() - started, 1)))
                outcome.interrupted = True
                break
        finished = [Path(m.run_dir) for m in outcome.models if m.status == "ok"]
        if outcome.interrupted:
            outcome.comparison_error = "skipped: the batch was interrupted"
        elif len(finished) >= 2:
            print(f"== comparison of {len(finished)} runs", flush=True)
            try:
                outcome.comparison = str(pipeline.compare(finished, config.comparison_dir, config.report,
                                                          data_dir=config.data_dir).html)
            except Exception as exc:  # noqa: BLE001 - the per-model reports stand on their own
                outcome.comparison_error = f"{type(exc).__name__}: {exc}"
        else:
            outcome.comparison_error = f"skipped: {len(finished)} model(s) finished, a comparison needs two"
    runs.write_json_atomic(config.output_dir / SUMMARY_FILE, _summary_record(config, outcome))
    return outcome


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
            lines.append(f"ok      {m.name}: {m.report} ({m.seconds:.0f} s){failed}")
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
