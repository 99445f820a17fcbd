"""``charactereval batch CONFIG.yaml``: many models, one report each, then one comparison.

For every model in the config: generate (resuming), transform, score, summarize and report,
each through the same command a user would type (``steps``). A model that fails is recorded
with the step and the reason and the batch goes on with the next; the comparison covers the
models that finished, and the closing summary (also written to ``batch-summary.json``) names
every failure and why.

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
        generate: {max_attempts: 3} # any other `generate` flag, snake case
        score: {}                   # any other `score` flag, snake case

A bare list of models is accepted too.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from charactereval_lib.engine import runs
from charactereval_lib import steps

GENERATE_KEYS = ("base_url", "concurrency", "max_tokens", "temperature", "top_p", "seed", "limit", "ids")
SCORE_KEYS = ("device", "mode")
MODEL_KEYS = {"name", "backend", "model", "rm", "subset", "generate", "score", *GENERATE_KEYS, *SCORE_KEYS}
TOP_KEYS = {"output_dir", "comparison", "data_dir", "baselines", "n_boot", "defaults", "models"}
SUMMARY_FILE = "batch-summary.json"
SUBSET_IDS = "subset_ids.txt"
_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


class BatchError(runs.RunError):
    """A batch config that cannot be run as it is (named with the file and the entry)."""


@dataclass(frozen=True)
class ModelSpec:
    name: str
    backend: str
    model: str
    rm: str
    generate: dict[str, Any]
    score: dict[str, Any]
    subset: int | None = None


@dataclass(frozen=True)
class BatchConfig:
    path: Path
    output_dir: Path
    comparison_dir: Path
    data_dir: str | None
    baselines: list[str] | None
    n_boot: int
    models: list[ModelSpec]


@dataclass
class ModelResult:
    name: str
    run_dir: str
    status: str = "ok"  # ok | failed
    failed_step: str | None = None
    error: str | None = None
    report: str | None = None
    seconds: float = 0.0


@dataclass
class BatchResult:
    models: list[ModelResult] = field(default_factory=list)
    comparison: str | None = None
    comparison_error: str | None = None

    @property
    def failures(self) -> list[ModelResult]:
        return [m for m in self.models if m.status != "ok"]


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
    output_dir = Path(raw.get("output_dir") or runs.OUTPUTS_DIR)
    baselines = raw.get("baselines")
    if baselines is not None and not (isinstance(baselines, list) and all(isinstance(b, str) for b in baselines)):
        raise BatchError(f"{path}: 'baselines' must be a list of paper model names")
    n_boot = raw.get("n_boot", 1000)
    if not isinstance(n_boot, int) or n_boot < 1:
        raise BatchError(f"{path}: 'n_boot' must be a positive integer, got {n_boot!r}")
    return BatchConfig(
        path=path,
        output_dir=output_dir,
        comparison_dir=output_dir / str(raw.get("comparison") or "comparison"),
        data_dir=raw.get("data_dir"),
        baselines=baselines,
        n_boot=n_boot,
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
        raise BatchError(f"{where}: unknown key(s) {unknown}; expected some of {sorted(MODEL_KEYS)}")
    for key in ("name", "backend", "model", "rm"):
        if not isinstance(entry.get(key), str) or not entry[key]:
            raise BatchError(f"{where}: '{key}' is required (a string)")
    if not _SAFE_NAME.match(entry["name"]):
        raise BatchError(f"{where}: name must be letters, digits, '.', '_' or '-' (it names the run directory)")
    for key in ("generate", "score"):
        if not isinstance(entry.get(key) or {}, dict):
            raise BatchError(f"{where}: '{key}' must be a mapping of {key} flags")
    chosen = [k for k in ("subset", "ids", "limit") if entry.get(k) is not None]
    if len(chosen) > 1:
        raise BatchError(f"{where}: choose one of subset, ids, limit (got {chosen})")
    subset = entry.get("subset")
    if subset is not None and (not isinstance(subset, int) or subset < 1):
        raise BatchError(f"{where}: 'subset' must be a positive integer")
    generate = {k: entry[k] for k in GENERATE_KEYS if entry.get(k) is not None} | dict(entry.get("generate") or {})
    score = {k: entry[k] for k in SCORE_KEYS if entry.get(k) is not None} | dict(entry.get("score") or {})
    return ModelSpec(entry["name"], entry["backend"], entry["model"], entry["rm"], generate, score, subset)


def check_commands(config: BatchConfig) -> None:
    """Parse every model's generate and score command lines before anything runs, so a typo in
    a flag stops the batch at once instead of after hours of other models."""
    for spec in config.models:
        run_dir = config.output_dir / spec.name
        generate = dict(spec.generate) | ({"ids": run_dir / SUBSET_IDS} if spec.subset is not None else {})
        for argv in (
            steps.generate_argv(run_dir, backend=spec.backend, model=spec.model, data_dir=config.data_dir, **generate),
            steps.score_argv(run_dir, rm=spec.rm, **spec.score),
        ):
            try:
                steps.parse_command(argv)
            except steps.StepError as exc:
                raise BatchError(f"{config.path}: model {spec.name!r}: {exc}") from None


# --- running -----------------------------------------------------------------------------------


def _step(result: ModelResult, name: str) -> None:
    result.failed_step = name
    print(f"== {result.name}: {name}", flush=True)


def run_model(spec: ModelSpec, config: BatchConfig) -> ModelResult:
    """All steps for one model; a failure is recorded in the result, never raised."""
    from charactereval_lib.engine import report
    from charactereval_lib.charactereval.data import load_official_data
    from charactereval_lib.charactereval.subsets import stratified_subset, write_ids

    run_dir = config.output_dir / spec.name
    result = ModelResult(spec.name, str(run_dir))
    started = time.monotonic()
    try:
        generate = dict(spec.generate)
        if spec.subset is not None:
            _step(result, "subset")
            data = load_official_data(config.data_dir)
            ids = stratified_subset(data, spec.subset)
            generate["ids"] = write_ids(run_dir / SUBSET_IDS, ids, comment=f"stratified subset of {spec.subset} samples")
        _step(result, "generate")
        steps.generate(run_dir, backend=spec.backend, model=spec.model, data_dir=config.data_dir, **generate)
        _step(result, "transform")
        steps.transform(run_dir, data_dir=config.data_dir)
        _step(result, "score")
        steps.score(run_dir, rm=spec.rm, **spec.score)
        _step(result, "summarize")
        steps.summarize(run_dir, data_dir=config.data_dir, n_boot=config.n_boot)
        _step(result, "report")
        options = {"baselines": config.baselines} if config.baselines else {}
        _, html = report.report(run_dir, data_dir=config.data_dir, n_boot=config.n_boot, **options)
        result.report = str(html)
        result.failed_step = None
    except KeyboardInterrupt:
        raise
    except Exception as exc:  # noqa: BLE001 - one model's failure of any kind must not stop the batch
        result.status = "failed"
        result.error = str(exc) if isinstance(exc, steps.StepError) else f"{type(exc).__name__}: {exc}"
        print(f"!! {spec.name}: {result.failed_step} failed: {result.error}", flush=True)
    result.seconds = round(time.monotonic() - started, 1)
    return result


def run_batch(config: BatchConfig) -> BatchResult:
    """Every model in turn, then the comparison of those that finished; writes the summary."""
    from charactereval_lib.engine import report

    outcome = BatchResult()
    for spec in config.models:
        outcome.models.append(run_model(spec, config))
    finished = [Path(m.run_dir) for m in outcome.models if m.status == "ok"]
    if len(finished) >= 2:
        print(f"== comparison of {len(finished)} runs", flush=True)
        try:
            options = {"baselines": config.baselines} if config.baselines else {}
            _, html = report.compare(finished, config.comparison_dir, data_dir=config.data_dir,
                                     n_boot=config.n_boot, **options)
            outcome.comparison = str(html)
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
        "models": [asdict(m) for m in outcome.models],
        "comparison": outcome.comparison,
        "comparison_error": outcome.comparison_error,
    }


def summary_lines(outcome: BatchResult) -> list[str]:
    """The closing summary: one line per model, the comparison, and the failures with reasons."""
    lines = []
    for m in outcome.models:
        if m.status == "ok":
            lines.append(f"ok      {m.name}: {m.report} ({m.seconds:.0f} s)")
        else:
            lines.append(f"FAILED  {m.name}: at {m.failed_step}: {m.error}")
    if outcome.comparison:
        lines.append(f"comparison: {outcome.comparison}")
    else:
        lines.append(f"comparison: {outcome.comparison_error}")
    failures = outcome.failures
    lines.append(
        f"{len(outcome.models) - len(failures)}/{len(outcome.models)} model(s) finished"
        + (f"; failed: {', '.join(m.name for m in failures)}" if failures else "")
    )
    return lines
