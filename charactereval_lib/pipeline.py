"""The CharacterEval pipeline as typed Python calls: the one API behind the CLI, batch and notebooks.

Each stage takes a run (a name under ``./outputs`` or a path) and typed settings, does its work
through the engine and the protocol modules, and returns a result object carrying the counts a
caller prints. Settings are frozen dataclasses that also load from YAML mappings, where an
unknown key is an error that names it. Nothing here prints; nothing here parses a command line.

    from charactereval_lib import pipeline
    run = "outputs/demo"
    pipeline.generate(run, pipeline.GenerateSettings(backend="offline", model="demo", limit=20))
    pipeline.transform(run)
    pipeline.score(run, pipeline.ScoreSettings(rm="models/tiny-rm"))
    print(pipeline.summarize(run).summary["dimensions"])
    pipeline.report(run)
"""

from __future__ import annotations

import dataclasses
import os
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from charactereval_lib.charactereval.data import DataError, OfficialData, load_official_data
from charactereval_lib.charactereval.protocol import PROTOCOL_VERSION
from charactereval_lib.engine import faults, runs
from charactereval_lib.engine.generation.base import ConfigError
from charactereval_lib.engine.stats import DEFAULT_LEVEL, DEFAULT_N_BOOT, DEFAULT_SEED

if TYPE_CHECKING:
    import pandas as pd

# Paper models overlaid by default: the strongest open model, GPT-4, and one released run.
DEFAULT_BASELINES = ("GPT-4", "Baichuan2-13B", "ChatGLM3-6B")
ANALYSE_NOTEBOOK = "analyse.ipynb"
COMPARE_NOTEBOOK = "compare.ipynb"
REPORT_NOTEBOOK = "report.ipynb"
REPORT_HTML = "report.html"
COMPARISON_NOTEBOOK = "comparison.ipynb"
COMPARISON_HTML = "comparison.html"
# Each report figure is also saved here as PNG, beside the HTML.
FIGURES_DIR = "figures"
# Where reward-model scoring and local (hf) generation run: this process, or the workers of a
# Ray cluster.
ENGINES = ("local", "ray")


class SettingsError(ConfigError):
    """Settings that cannot be used (an unknown key, a wrong type, an impossible value)."""


# --- settings ------------------------------------------------------------------------------------


def _accepts(annotation: Any, value: Any) -> bool:
    """Whether ``value`` fits a simple annotation (int, float, str, bool, X | None, tuples)."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return any(_accepts(arg, value) for arg in typing.get_args(annotation))
    if annotation is type(None):
        return value is None
    if annotation is bool:
        return isinstance(value, bool)
    if annotation is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if annotation is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if origin is tuple:
        return isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value)
    return isinstance(value, annotation)


class _Settings:
    """Shared loading for the settings dataclasses below."""

    @classmethod
    def keys(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any], where: str = "settings"):
        """Settings from a mapping (a YAML section); unknown keys and wrong types are errors
        that name the key and ``where`` it was found."""
        unknown = sorted(set(values) - set(cls.keys()))
        if unknown:
            raise SettingsError(f"{where}: unknown key(s) {unknown}; expected some of {cls.keys()}")
        hints = typing.get_type_hints(cls)
        for key, value in values.items():
            if not _accepts(hints[key], value):
                raise SettingsError(f"{where}: {key!r} must be {hints[key]}, got {value!r}")
        values = {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}
        try:
            return cls(**values)
        except ConfigError as exc:
            raise SettingsError(f"{where}: {exc}") from None

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)  # type: ignore[call-overload]


def _positive(name: str, value: int | float | None) -> None:
    if value is not None and value <= 0:
        raise SettingsError(f"{name} must be a positive number, got {value}")


def _not_negative(name: str, value: int | float | None) -> None:
    if value is not None and value < 0:
        raise SettingsError(f"{name} must not be negative, got {value}")


def _check_engine(settings: GenerateSettings | ScoreSettings) -> None:
    """The engine and its Ray options (``engine``, ``address``, ``workers``, ``gpus_per_worker``)."""
    _positive("workers", settings.workers)
    if settings.engine not in ENGINES:
        raise SettingsError(f"engine {settings.engine!r}: expected one of {', '.join(ENGINES)}")
    if settings.engine == "local" and (settings.address is not None or settings.workers != 1 or settings.gpus_per_worker):
        raise SettingsError("address, workers and gpus_per_worker (--address, --workers, --gpus-per-worker) need engine ray")
    if settings.gpus_per_worker < 0:
        raise SettingsError(f"gpus_per_worker must not be negative, got {settings.gpus_per_worker}")


def _ray_settings(settings: GenerateSettings | ScoreSettings):
    from charactereval_lib.engine.ray_cluster import RaySettings

    return RaySettings(address=settings.address, workers=settings.workers, gpus_per_worker=settings.gpus_per_worker)


@dataclass(frozen=True)
class GenerateSettings(_Settings):
    """How replies are generated (S4: a platform choice, recorded in run.json). Decoding values
    left None are not sent: the provider's or the model's default applies."""

    backend: str
    model: str
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    concurrency: int = 32
    max_tokens: int = 1024
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    preset: str | None = None
    limit: int | None = None
    ids: str | None = None
    retry_errors: bool = False
    max_attempts: int = 8
    retry_base_delay: float = 1.0
    retry_max_delay: float = 60.0
    timeout: float = 300.0
    # hf backend; None: cpu in this process, and with engine ray cuda on a worker given a GPU.
    device: str | None = None
    dtype: str = "auto"
    batch_size: int = 8
    trust_remote_code: bool = False
    max_context: int | None = None
    context_tokenizer: str | None = None
    same_answer_limit: int = 3
    offline_latency: float = 0.0
    offline_fault_rate: float = 0.0
    price_in: float | None = None
    price_out: float | None = None
    # "local": this process; "ray" (hf backend only): batches on the workers of a Ray cluster (at
    # ``address``, else a local one), each a model replica with ``gpus_per_worker`` GPUs; the
    # records are written by this process either way.
    engine: str = "local"
    address: str | None = None
    workers: int = 1
    gpus_per_worker: float = 0.0

    def __post_init__(self) -> None:
        from charactereval_lib.engine.generation.backends import BACKENDS

        if self.backend not in BACKENDS:
            raise SettingsError(f"backend {self.backend!r}: expected one of {', '.join(BACKENDS)}")
        for name in ("limit", "concurrency", "max_tokens", "max_attempts", "batch_size", "timeout", "max_context",
                     "same_answer_limit"):
            _positive(name, getattr(self, name))
        for name in ("price_in", "price_out", "offline_latency", "retry_base_delay", "retry_max_delay"):
            _not_negative(name, getattr(self, name))
        if not 0 <= self.offline_fault_rate <= 1:
            raise SettingsError(f"offline_fault_rate must be a probability from 0 to 1, got {self.offline_fault_rate}")
        _check_engine(self)
        if self.engine == "ray" and self.backend != "hf":
            raise SettingsError(f"engine ray runs the hf backend's batches on workers; backend {self.backend!r} "
                                "sends its requests from this process (leave out engine ray)")
        self.decoding()  # a bad preset or max_tokens is reported now, not after the data loads

    def decoding(self):
        from charactereval_lib.engine.generation.base import DecodingParams

        return DecodingParams.resolve(preset=self.preset, max_tokens=self.max_tokens, temperature=self.temperature,
                                      top_p=self.top_p, seed=self.seed)

    def backend_options(self):
        from charactereval_lib.engine.generation.backends import BackendOptions
        from charactereval_lib.engine.generation.retry import RetryPolicy
        from charactereval_lib.engine.ray_cluster import AUTO_DEVICE

        policy = RetryPolicy(max_attempts=self.max_attempts, base_delay_s=self.retry_base_delay,
                             max_delay_s=self.retry_max_delay, timeout_s=self.timeout,
                             same_answer_limit=self.same_answer_limit)
        return BackendOptions(base_url=self.base_url, api_key_env=self.api_key_env, concurrency=self.concurrency,
                              policy=policy, device=self.device or (AUTO_DEVICE if self.engine == "ray" else "cpu"),
                              dtype=self.dtype, batch_size=self.batch_size,
                              trust_remote_code=self.trust_remote_code, max_context=self.max_context,
                              context_tokenizer=self.context_tokenizer, offline_latency_s=self.offline_latency,
                              offline_fault_rate=self.offline_fault_rate)


@dataclass(frozen=True)
class ScoreSettings(_Settings):
    """How rows are scored by the reward model (S6, S8); the mode is recorded with every score."""

    rm: str | None = None
    device: str | None = None
    mode: str = "faithful"
    shard: str | None = None
    batch_tokens: int = 16384
    prefix_reuse: bool = True
    causal_block: int | None = None
    verify: int | None = None
    # "local": this process; "ray": workers of a Ray cluster (at ``address``, else a local one),
    # each with ``gpus_per_worker`` GPUs; scores are written by this process either way.
    engine: str = "local"
    address: str | None = None
    workers: int = 1
    gpus_per_worker: float = 0.0

    def __post_init__(self) -> None:
        from charactereval_lib.charactereval.reward.scorer import MODES, parse_shard

        if self.mode not in MODES:
            raise SettingsError(f"mode {self.mode!r}: expected one of {', '.join(MODES)}")
        if self.shard is not None:
            parse_shard(self.shard)
        _positive("batch_tokens", self.batch_tokens)
        _positive("verify", self.verify)
        _check_engine(self)
        if self.engine == "ray" and self.verify:
            raise SettingsError("verify (--verify) runs in this process: leave out engine ray")

    def scorer_settings(self, *, dry_run: bool, progress: bool):
        from charactereval_lib.charactereval.reward.scorer import ScorerSettings, parse_shard, resolve_device

        if dry_run:
            device = self.device or "none"
        elif self.engine == "ray":
            # Resolved by each worker on its own node ("auto": cuda where Ray gave it a GPU).
            device = self.device or "auto"
        else:
            device = resolve_device(self.device)
        return ScorerSettings(
            mode=self.mode,
            device=device,
            shard=parse_shard(self.shard) if self.shard else None,
            fast_token_budget=self.batch_tokens,
            fast_reuse_prefix=self.prefix_reuse,
            fast_causal_block=self.causal_block,
            progress=progress,
        )


@dataclass(frozen=True)
class JudgeSettings(_Settings):
    """How rows are scored by an LLM judge (``score --scorer judge``) through an
    OpenAI-compatible endpoint. ``spec`` is a spec FILE for every metric or a DIR of
    ``<metric_en>.yaml`` (default: the shipped specs). Decoding defaults to temperature 0."""

    judge_model: str
    base_url: str | None = None
    spec: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    concurrency: int = 32
    temperature: float | None = 0.0
    max_tokens: int = 1024
    max_attempts: int = 8
    retry_base_delay: float = 1.0
    retry_max_delay: float = 60.0
    timeout: float = 300.0
    same_answer_limit: int = 3
    price_in: float | None = None
    price_out: float | None = None

    def __post_init__(self) -> None:
        if not self.judge_model:
            raise SettingsError("judge_model is required (--judge-model)")
        for name in ("concurrency", "max_tokens", "max_attempts", "timeout", "same_answer_limit"):
            _positive(name, getattr(self, name))
        for name in ("price_in", "price_out", "retry_base_delay", "retry_max_delay"):
            _not_negative(name, getattr(self, name))
        self.decoding()

    def decoding(self):
        """The judge's decoding parameters (what the request digest covers)."""
        from charactereval_lib.charactereval.judge import judge_params

        return judge_params(self.temperature, self.max_tokens)

    def backend_options(self):
        """The openai backend's operational settings, built as ``generate`` builds them."""
        return GenerateSettings(backend="openai", model=self.judge_model, **{
            name: getattr(self, name) for name in ("base_url", "api_key_env", "concurrency", "max_attempts",
                                                   "retry_base_delay", "retry_max_delay", "timeout",
                                                   "same_answer_limit")}).backend_options()


@dataclass(frozen=True)
class SummarizeSettings(_Settings):
    """Bootstrap settings of the intervals, which scorer's scores (``runs.SCORERS``; the reward
    model by default; ``judge_model`` picks one judge of a run that holds several), and whether
    a run mixing scorer configurations may be summarised."""

    n_boot: int = DEFAULT_N_BOOT
    seed: int = DEFAULT_SEED
    level: float = DEFAULT_LEVEL
    allow_mixed: bool = False
    scorer: str = runs.REWARD_MODEL
    judge_model: str | None = None

    def __post_init__(self) -> None:
        if self.scorer not in runs.SCORERS:
            raise SettingsError(f"scorer {self.scorer!r}: expected one of {', '.join(runs.SCORERS)}")
        _positive("n_boot", self.n_boot)
        if not 0 < self.level < 1:
            raise SettingsError(f"level must be between 0 and 1, got {self.level}")


@dataclass(frozen=True)
class PanelSettings(_Settings):
    """A panel of judges on one run (``charactereval.panel``): the judge models (two or more,
    each already scored the run), the verdict (``majority``, ties to the lowest grade, or
    ``mean``) and the bootstrap settings of the intervals."""

    judge_models: tuple[str, ...]
    verdict: str = "majority"
    n_boot: int = DEFAULT_N_BOOT
    seed: int = DEFAULT_SEED
    level: float = DEFAULT_LEVEL
    allow_mixed: bool = False

    def __post_init__(self) -> None:
        from charactereval_lib.charactereval.panel import VERDICTS

        if len(set(self.judge_models)) < 2 or len(set(self.judge_models)) != len(self.judge_models):
            raise SettingsError(f"a panel needs two or more different judge models (--judge-model), got "
                                f"{list(self.judge_models)}")
        if self.verdict not in VERDICTS:
            raise SettingsError(f"verdict {self.verdict!r}: expected one of {', '.join(VERDICTS)}")
        _positive("n_boot", self.n_boot)
        if not 0 < self.level < 1:
            raise SettingsError(f"level must be between 0 and 1, got {self.level}")


@dataclass(frozen=True)
class ReportSettings(SummarizeSettings):
    """What a rendered report shows beside the statistics' settings. ``scorer`` is the scorer of
    the report's main sections; the judge's grades are shown beside the reward model's whenever
    a run holds both (``judge_model`` picks the judge of a run that holds several)."""

    baselines: tuple[str, ...] = DEFAULT_BASELINES
    show_code: bool = False
    verify_data: bool = True
    # The judges a reward-model report shows beside it (empty: ``judge_model``, else every judge
    # of the run); ``batch`` also renders each one's own judge report.
    judges: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        super().__post_init__()
        from charactereval_lib.charactereval.paper_table import paper_models

        known = paper_models()
        unknown = [b for b in self.baselines if b not in known]
        if unknown:
            raise SettingsError(f"unknown baseline model(s) {unknown}; the paper's Table 4 has {known}")


# --- results -------------------------------------------------------------------------------------


@dataclass
class GenerateResult:
    run: runs.RunDir
    # A dry run (nothing sent) or a real session; exactly one is set.
    dry_run: Any = None
    session: Any = None
    # Every test sample's state after this call: ok, error, missing.
    state: dict[str, int] = field(default_factory=dict)
    backend: str = ""

    @property
    def failed(self) -> int:
        """Selected samples whose latest record is an error (this session's or kept from before)."""
        return self.session.failed if self.session is not None else 0

    def exit_code(self) -> int:
        from charactereval_lib.engine.generation.engine import EXIT_OK, exit_code

        return EXIT_OK if self.session is None else exit_code(self.session)


@dataclass
class TransformOutcome:
    run: runs.RunDir
    result: Any  # charactereval.transform.TransformResult
    warnings: list[str] = field(default_factory=list)


@dataclass
class ScoreOutcome:
    run: runs.RunDir
    settings: Any  # the scorer settings actually used (device resolved)
    report: Any = None  # ScoringReport of a scoring session
    verify: dict[str, Any] | None = None  # the report of --verify
    dry_run_rows: int | None = None  # rm_inputs written by a dry run
    warnings: list[str] = field(default_factory=list)


@dataclass
class JudgeOutcome:
    """What ``judge_score`` did: a judge session or a dry run."""

    run: runs.RunDir
    summary: Any = None  # engine.grading.judging.JudgeSummary of a judge session
    dry_run: Any = None  # charactereval.judge.JudgeDryRun
    judge_model: str = ""


@dataclass
class BattleOutcome:
    """What ``battle`` did: this session's judge calls and the battle summary."""

    out: runs.RunDir
    session: Any  # engine.grading.judging.JudgeSummary of this session's judge calls
    summary: dict[str, Any]  # battle_summary.json


@dataclass
class MetaevalOutcome:
    """What ``metaeval`` did: the scoring step and the agreement summary."""

    out: runs.RunDir
    summary: dict[str, Any]  # metaeval_summary.json
    scoring: Any = None  # the JudgeOutcome or ScoreOutcome of the scoring step


@dataclass
class PanelOutcome:
    """What ``panel`` wrote: the panel summary (``panel_summary.json``) in ``out``."""

    out: Path
    summary: dict[str, Any]
    warnings: list[str] = field(default_factory=list)


@dataclass
class RmTrainOutcome:
    """What ``convert_rm_train`` wrote: the LABELS file, its source and counts."""

    labels: Path
    source: Path
    records: int
    samples: int
    role_prefixed: int


@dataclass
class SummaryOutcome:
    run: runs.RunDir
    summary: dict[str, Any]
    warnings: list[str] = field(default_factory=list)


@dataclass
class ReportOutcome:
    notebook: Path
    html: Path
    warnings: list[str] = field(default_factory=list)


# --- stages --------------------------------------------------------------------------------------


def _data(data_dir: str | os.PathLike[str] | None, data: OfficialData | None) -> OfficialData:
    return data if data is not None else load_official_data(data_dir)


def generate(
    run: str | os.PathLike[str] | runs.RunDir,
    settings: GenerateSettings,
    *,
    data_dir: str | os.PathLike[str] | None = None,
    data: OfficialData | None = None,
    dry_run: bool = False,
    progress: bool = False,
) -> GenerateResult:
    """S3 + S4: the replies of the model under test, resuming (ids already ok are skipped).
    Raises ``GenerationInterrupted`` (records saved) when stopped by Ctrl-C or SIGTERM and
    ``RunAborted`` when the endpoint cannot be reached at all; works under Jupyter and papermill
    too (the engine runs its own event loop there)."""
    from charactereval_lib.charactereval.requests import generation_task, make_requests, read_ids_file, select_samples
    from charactereval_lib.engine.generation import engine
    from charactereval_lib.engine.generation.backends import make_backend
    from charactereval_lib.engine.generation.base import RunAborted

    run = runs.RunDir.resolve(run)
    faults.check_writable(run.path, "run directory")
    data = _data(data_dir, data)
    ids = read_ids_file(Path(settings.ids)) if settings.ids else None
    samples = select_samples(data, limit=settings.limit, ids=ids)
    run.check_protocol(PROTOCOL_VERSION)
    requests, task = make_requests(samples, data), generation_task(data)
    if dry_run:
        planned = engine.dry_run(run.path, requests, task, settings.decoding(), backend=settings.backend,
                                 model=settings.model, base_url=settings.base_url, retry_errors=settings.retry_errors,
                                 price_in=settings.price_in, price_out=settings.price_out)
        return GenerateResult(run, dry_run=planned, backend=settings.backend)
    if settings.backend == "openai":
        faults.check_endpoints([settings.base_url], "generate")
    if settings.engine == "ray":
        from charactereval_lib.engine.generation.ray_hf import RayHFBackend

        backend = RayHFBackend(settings.model, settings.decoding(), settings.backend_options(), _ray_settings(settings))
    else:
        backend = make_backend(settings.backend, settings.model, settings.decoding(), settings.backend_options())
    try:
        session = engine.run_generation(run.path, requests, backend, task, retry_errors=settings.retry_errors,
                                        progress=progress)
    except (engine.GenerationInterrupted, RunAborted):
        _record_workers(run, backend)
        raise
    _record_workers(run, backend)
    return GenerateResult(run, session=session, state=engine.run_state(run.path, task.all_ids),
                          backend=settings.backend)


def _record_workers(run: runs.RunDir, backend: Any) -> None:
    """A Ray session's workers as they ended, replacements for dead ones included (``run.json``
    got them as they started)."""
    pool = getattr(backend, "pool", None)
    if pool is not None:
        run.update_manifest(generation={"ray": pool.describe()})


def transform(
    run: str | os.PathLike[str] | runs.RunDir,
    *,
    data_dir: str | os.PathLike[str] | None = None,
    data: OfficialData | None = None,
) -> TransformOutcome:
    """S5: ``generations.jsonl`` -> ``rows.jsonl``."""
    from charactereval_lib.charactereval.transform import transform_run

    run = runs.RunDir.resolve(run)
    run.check_protocol(PROTOCOL_VERSION)
    faults.check_writable(run.path, "run directory")
    result = transform_run(run.path, _data(data_dir, data))
    return TransformOutcome(run, result, list(result.warnings))


def score(
    run: str | os.PathLike[str] | runs.RunDir,
    settings: ScoreSettings,
    *,
    data_dir: str | os.PathLike[str] | None = None,
    data: OfficialData | None = None,
    dry_run: bool = False,
    progress: bool = False,
) -> ScoreOutcome:
    """S6 + S8: score the rows not yet scored with this checkpoint and mode (resuming); a dry
    run writes the reward-model inputs only; ``settings.verify`` compares the two modes."""
    from charactereval_lib.charactereval.reward import scorer

    run = runs.RunDir.resolve(run)
    run.check_protocol(PROTOCOL_VERSION)
    faults.check_writable(run.path, "run directory")
    scorer_settings = settings.scorer_settings(dry_run=dry_run, progress=progress)
    engine = None
    if settings.engine == "ray" and not dry_run:
        from charactereval_lib.charactereval.reward.ray_scorer import RayEngine

        # Before any work: without Ray installed, this is the one line saying how to install it.
        engine = RayEngine(_ray_settings(settings))
    data = _data(data_dir, data)
    outcome = ScoreOutcome(run, scorer_settings)
    rm_dir = Path(settings.rm) if settings.rm else None
    if dry_run:
        outcome.dry_run_rows = scorer.dry_run(run.path, data, rm_dir, scorer_settings.shard)
        return outcome
    if rm_dir is None:
        raise runs.RunError("a reward-model checkpoint directory is required (see `charactereval rm download`)")
    from charactereval_lib.charactereval.reward.tiny import tiny_label

    label = tiny_label(rm_dir)
    if label:
        outcome.warnings.append(f"{rm_dir}: {label}")
    if settings.verify:
        outcome.verify = scorer.verify_run(run.path, rm_dir, data, scorer_settings, settings.verify)
        return outcome
    outcome.report = scorer.score_run(run.path, rm_dir, data, scorer_settings, engine)
    outcome.warnings += outcome.report.warnings
    return outcome


def judge_score(
    run: str | os.PathLike[str] | runs.RunDir,
    settings: JudgeSettings,
    *,
    data_dir: str | os.PathLike[str] | None = None,
    data: OfficialData | None = None,
    dry_run: bool = False,
    progress: bool = False,
) -> JudgeOutcome:
    """``score --scorer judge``: every row of ``rows.jsonl`` graded by an LLM judge into
    ``judge_scores.jsonl`` (resuming by request digest; see ``charactereval.judge``). A dry run
    writes ``judge_requests.jsonl`` and estimates tokens and cost, sending nothing. Raises
    ``JudgeInterrupted`` (records saved) on Ctrl-C / SIGTERM and ``RunAborted`` when the
    endpoint cannot be reached at all."""
    from charactereval_lib.charactereval import judge
    from charactereval_lib.engine.generation.backends import make_backend
    from charactereval_lib.engine.grading.judging import run_judging

    run = runs.RunDir.resolve(run).require_benchmark("charactereval")
    run.require(run.rows, "generate and transform the run first")
    run.check_protocol(PROTOCOL_VERSION)
    faults.check_writable(run.path, "run directory")
    data = _data(data_dir, data)
    specs = judge.load_specs(settings.spec)
    items = judge.judge_items(run, data, specs)
    params = settings.decoding()
    if dry_run:
        planned = judge.dry_run(run, items, settings.judge_model, params, price_in=settings.price_in,
                                price_out=settings.price_out)
        return JudgeOutcome(run, dry_run=planned, judge_model=settings.judge_model)
    faults.check_endpoints([settings.base_url], "judge")
    backend = make_backend("openai", settings.judge_model, params, settings.backend_options())
    summary = run_judging(run, run.judge_scores, items, backend, judge_model=settings.judge_model, params=params,
                          key_fields=judge.KEY_FIELDS, manifest_section=judge.MANIFEST_SECTION,
                          manifest_key=settings.judge_model, describe=judge.describe(backend.describe(), specs, data),
                          progress=progress)
    return JudgeOutcome(run, summary=summary, judge_model=settings.judge_model)


def battle(
    run_a: str | os.PathLike[str] | runs.RunDir,
    run_b: str | os.PathLike[str] | runs.RunDir,
    out: str | os.PathLike[str],
    settings: JudgeSettings,
    *,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = DEFAULT_SEED,
    data_dir: str | os.PathLike[str] | None = None,
    data: OfficialData | None = None,
    progress: bool = False,
) -> BattleOutcome:
    """Run A against run B: each sample both replied to judged pairwise in both presentation
    orders (``settings.spec``: a pairwise spec; default the shipped ``battles/role_play.yaml``),
    resuming into ``OUT/battle_judgements.jsonl``; then win / tie / loss and position
    consistency with intervals in ``OUT/battle_summary.json``."""
    from charactereval_lib.charactereval import battle as battles
    from charactereval_lib.charactereval.judge_specs import load_battle_spec
    from charactereval_lib.engine.generation.backends import make_backend
    from charactereval_lib.engine.grading.judging import run_judging
    from charactereval_lib.engine.grading.spec import load_spec

    _positive("n_boot", n_boot)
    run_a, run_b = (runs.RunDir.resolve(r).require_benchmark("charactereval") for r in (run_a, run_b))
    out_dir = runs.RunDir(Path(out))
    faults.check_writable(out_dir.path, "battle directory")
    pair = battles.check_pair(out_dir, run_a, run_b)
    data = _data(data_dir, data)
    spec = load_spec(settings.spec) if settings.spec else load_battle_spec()
    items = battles.battle_items(run_a, run_b, data, spec)
    params = settings.decoding()
    faults.check_endpoints([settings.base_url], "judge")
    backend = make_backend("openai", settings.judge_model, params, settings.backend_options())
    describe = {**backend.describe(), **pair, "judge_model": settings.judge_model, "spec": spec.source}
    session = run_judging(out_dir, out_dir.artifact(battles.JUDGEMENTS), items, backend,
                          judge_model=settings.judge_model, params=params, key_fields=battles.KEY_FIELDS,
                          manifest_section=battles.MANIFEST_SECTION, describe=describe, progress=progress)
    summary = battles.summarize_battle(out_dir, spec, n_boot=n_boot, seed=seed)
    return BattleOutcome(out_dir, session, summary)


def metaeval(
    labels: str | os.PathLike[str],
    out: str | os.PathLike[str],
    settings: JudgeSettings | ScoreSettings,
    *,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = DEFAULT_SEED,
    data_dir: str | os.PathLike[str] | None = None,
    data: OfficialData | None = None,
    progress: bool = False,
) -> MetaevalOutcome:
    """A scorer against human labels (format in ``charactereval.metaeval``): the labels become the
    rows of the run directory OUT, scored by the judge (``JudgeSettings``) or the reward model
    (``ScoreSettings``) exactly as a run is, resuming; then metascore, Cohen's kappa,
    Krippendorff's alpha and the confusion matrix with intervals in ``OUT/metaeval_summary.json``."""
    from charactereval_lib.charactereval import metaeval as meta

    _positive("n_boot", n_boot)
    faults.check_writable(out, "metaeval directory")
    data = _data(data_dir, data)
    records = meta.read_labels(labels, data)
    out_run = runs.RunDir(Path(out))
    meta.write_rows(out_run, records, data)
    if isinstance(settings, JudgeSettings):
        scorer, scoring = runs.JUDGE, judge_score(out_run, settings, data=data, progress=progress)
        scorer_model = settings.judge_model
    else:
        scorer, scoring = runs.REWARD_MODEL, score(out_run, settings, data=data, progress=progress)
        scorer_model = settings.rm
    judge_model = settings.judge_model if isinstance(settings, JudgeSettings) else None
    summary = meta.metaevaluate(records, meta.predictions(out_run, records, scorer, judge_model), n_boot=n_boot,
                                seed=seed)
    summary = {"labels": str(Path(labels).resolve()), "scorer": scorer, "scorer_model": scorer_model,
               "bootstrap": {"n_boot": n_boot, "seed": seed, "level": DEFAULT_LEVEL}, **summary,
               "created_at": runs.utc_now()}
    meta.write_summary(out_run, summary)
    return MetaevalOutcome(out_run, summary, scoring)


def panel(
    run: str | os.PathLike[str] | runs.RunDir,
    settings: PanelSettings,
    out: str | os.PathLike[str] | None = None,
) -> PanelOutcome:
    """Several judges' scores of one run combined (``charactereval.panel``): each row's verdict,
    panel metric means with intervals, the judges' Krippendorff's alpha with its interval and
    every judge's invalid answers, into ``OUT`` (default ``RUN/panel``). Each judge's records
    must come from one configuration unless ``allow_mixed``."""
    from charactereval_lib.charactereval import panel as panels

    run = _analysable(run)
    warnings = []
    for model in settings.judge_models:
        mixed = run.check_consistent(allow_mixed=settings.allow_mixed, scorer=runs.JUDGE,
                                     judge_model=run.select_judge(model))
        warnings += [f"MIXED SCORERS: {problem}" for problem in mixed]
    out_dir = Path(out) if out is not None else run.artifact(panels.DEFAULT_DIR)
    faults.check_writable(out_dir, "panel directory")
    summary = panels.summarize_panel(run, settings.judge_models, settings.verdict, out_dir, n_boot=settings.n_boot,
                                     seed=settings.seed, level=settings.level, warnings=warnings)
    return PanelOutcome(out_dir, summary, summary["warnings"])


def convert_rm_train(
    out: str | os.PathLike[str],
    *,
    source: str | os.PathLike[str] | None = None,
    keys: Mapping[str, str] | None = None,
    data_dir: str | os.PathLike[str] | None = None,
    data: OfficialData | None = None,
) -> RmTrainOutcome:
    """The reward model's training annotations as a metaeval LABELS file ``out``, written only
    once every record passed the checks of ``metaeval.rm_train_labels`` (``source``: that file
    as it is; default: the data directory's ``rm_train_data.json``, checked against the pinned
    digests). Agreement on these rows is in-sample: the reward model was trained on them."""
    from charactereval_lib.charactereval import metaeval as meta
    from charactereval_lib.charactereval.data import load_rm_train

    faults.check_writable(Path(out).parent, "labels directory")
    data = _data(data_dir, data)
    path, document = load_rm_train(data_dir, source)
    labels = meta.rm_train_labels(document, path, data, dict(keys or {}))
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    runs.write_jsonl_atomic(out, labels)
    return RmTrainOutcome(out, path, len(labels), len({label["id"] for label in labels}),
                          meta.role_prefixed(labels, data))


def _optional_data(data_dir: str | os.PathLike[str] | None) -> tuple[OfficialData | None, str | None]:
    """The official data when it can be loaded (per-metric failure counts need it), else None
    and the reason: a summary is still worth having without it."""
    try:
        return load_official_data(data_dir), None
    except DataError as exc:
        return None, f"per-metric failure counts unavailable ({exc})"


def run_warnings(run: runs.RunDir, *, allow_mixed: bool, scorer: str = runs.REWARD_MODEL,
                 judge_model: str | None = None) -> list[str]:
    """What a reader must know before any number of this run: refuses a run whose ``scorer``
    scores mix configurations unless ``allow_mixed`` (then the mix is the first warning)."""
    from charactereval_lib.charactereval import analysis

    mixed = run.check_consistent(allow_mixed=allow_mixed, scorer=scorer, judge_model=judge_model)
    notes = [f"MIXED SCORERS: {problem}" for problem in mixed]
    caveats = analysis.run_warnings(run.path, scorer=scorer, judge_model=judge_model, mix_said=bool(mixed))
    return notes + [_plain(warning) for warning in caveats]


def _report_scorers(run: runs.RunDir, settings: ReportSettings) -> tuple[list[str], list[str]]:
    """The judges a report shows (the judge of a judge report; for the reward model's, every
    judge it shows beside it: ``charactereval.judge.shown_judges``) and the warnings of every
    scorer it shows; each scorer's mixed configurations are refused unless ``allow_mixed``."""
    from charactereval_lib.charactereval.judge import shown_judges, side_warnings

    judge_models = shown_judges(run, settings.scorer, settings.judge_model, settings.judges)
    if settings.scorer == runs.JUDGE and not judge_models:
        raise runs.RunError(f"{run.path}: no judge scores (run `charactereval score RUN --scorer judge` first)")
    main_judge = judge_models[0] if settings.scorer == runs.JUDGE else None
    warnings = run_warnings(run, allow_mixed=settings.allow_mixed, scorer=settings.scorer, judge_model=main_judge)
    for model in judge_models:
        warnings = side_warnings(run, settings.scorer, model, settings.allow_mixed) + warnings
    return judge_models, warnings


def _plain(markdown: str) -> str:
    return markdown.replace("**", "")


def summarize(
    run: str | os.PathLike[str] | runs.RunDir,
    settings: SummarizeSettings = SummarizeSettings(),
    *,
    data_dir: str | os.PathLike[str] | None = None,
    out: str | os.PathLike[str] | None = None,
) -> SummaryOutcome:
    """S9 with intervals of one scorer's scores: ``summary.json`` and ``metrics.csv`` for the
    reward model (default), ``judge_summary.json`` and ``judge_metrics.csv`` for the judge, in
    the run directory or ``out``; refuses a run that mixes scorer configurations unless
    ``settings.allow_mixed``."""
    from charactereval_lib.charactereval.summary import summarize_run

    run = runs.RunDir.resolve(run).require_dir().require_benchmark("charactereval")
    faults.check_writable(out or run.path, "summary directory")
    judge_model = run.select_judge(settings.judge_model) if settings.scorer == runs.JUDGE else None
    warnings = run_warnings(run, allow_mixed=settings.allow_mixed, scorer=settings.scorer, judge_model=judge_model)
    data, note = _optional_data(data_dir)
    if note:
        warnings.append(note)
    summary = summarize_run(run, id2metric=data.id2metric if data else None, n_boot=settings.n_boot,
                            seed=settings.seed, level=settings.level, warnings=warnings, scorer=settings.scorer,
                            judge_model=judge_model, out=Path(out) if out else None)
    return SummaryOutcome(run, summary, warnings)


def _analysable(run: str | os.PathLike[str] | runs.RunDir) -> runs.RunDir:
    run = runs.RunDir.resolve(run).require_dir().require_benchmark("charactereval")
    run.require(run.rows, "generate and transform the run first")
    return run


def _notebook_parameters(settings: ReportSettings, data_dir: str | os.PathLike[str] | None, figures: Path) -> dict:
    """Parameters the report and the comparison share (paths absolute: the kernel may run elsewhere)."""
    return {
        "data_dir": str(Path(data_dir).resolve()) if data_dir else None,
        "verify_data": settings.verify_data,
        "baselines": list(settings.baselines),
        "n_boot": settings.n_boot,
        "seed": settings.seed,
        "level": settings.level,
        "figures_dir": str(figures.resolve()),
        "scorer": settings.scorer,
    }


def report(
    run: str | os.PathLike[str] | runs.RunDir,
    settings: ReportSettings = ReportSettings(),
    *,
    data_dir: str | os.PathLike[str] | None = None,
    out: str | os.PathLike[str] | None = None,
) -> ReportOutcome:
    """One run's report: ``OUT/report.ipynb`` (papermill) and ``OUT/report.html`` (OUT: the run
    directory unless given; a judge's report has its own names, see ``report_names``), both
    written only once the notebook ran through. The main sections show ``settings.scorer``'s
    scores; a run that also holds the other scorer's gets both side by side and their agreement."""
    from charactereval_lib.charactereval.judge import report_names
    from charactereval_lib.engine import report as notebooks

    run = _analysable(run)
    judge_models, warnings = _report_scorers(run, settings)
    judge_model = judge_models[0] if settings.scorer == runs.JUDGE else None
    names = report_names(settings.scorer, judge_model)
    out_dir = Path(out) if out else run.path
    parameters = {"run_dir": str(run.path.resolve()), "judge_model": judge_model, "judge_models": judge_models,
                  **_notebook_parameters(settings, data_dir, out_dir / names.figures)}
    notebook, html = notebooks.render(ANALYSE_NOTEBOOK, out_dir / names.notebook, out_dir / names.html,
                                      parameters, show_code=settings.show_code, title=f"CharacterEval report: "
                                      f"{run.name}" + (f" (judge {judge_model})" if judge_model else ""))
    return ReportOutcome(notebook, html, warnings)


def compare_problems(run_list: Sequence[runs.RunDir], scorer: str = runs.REWARD_MODEL,
                     judge_model: str | None = None) -> list[str]:
    """Why runs must not be compared as they are: the same run twice, or ``scorer``'s scores made
    with different configurations (checkpoint or judge model, mode) or protocol versions."""
    problems = []
    resolved = [r.path.resolve() for r in run_list]
    repeated = sorted({str(p) for p in resolved if resolved.count(p) > 1})
    if repeated:
        problems.append(f"the same run is given more than once: {', '.join(repeated)}")
    identities = {r.name: sorted(i.label() for i in r.scorer_identities(scorer, judge_model)) for r in run_list}
    if len({tuple(v) for v in identities.values()}) > 1:
        detail = "; ".join(f"{name}: {', '.join(labels) or 'unscored'}" for name, labels in identities.items())
        problems.append(f"the runs were scored with different scorer configurations ({detail})")
    protocols = {r.name: r.manifest().get("protocol_version") for r in run_list}
    if len(set(protocols.values())) > 1:
        problems.append(f"the runs follow different protocol versions ({protocols})")
    return problems


def compare(
    run_list: Sequence[str | os.PathLike[str] | runs.RunDir],
    out_dir: str | os.PathLike[str],
    settings: ReportSettings = ReportSettings(),
    *,
    data_dir: str | os.PathLike[str] | None = None,
) -> ReportOutcome:
    """A comparison report of several runs (the first is the reference): ``OUT/comparison.ipynb``
    and ``OUT/comparison.html``. The main sections compare ``settings.scorer``'s scores; when
    every run also holds the judge's (of the same judge model), the judge's means and each run's
    agreement of the two scorers follow. Refuses runs that cannot be compared unless
    ``allow_mixed``."""
    from charactereval_lib.charactereval.judge import common_judge
    from charactereval_lib.engine import report as notebooks

    if len(run_list) < 2:
        raise runs.RunError("compare needs at least two runs")
    resolved = [_analysable(r) for r in run_list]
    # A judge named for the batch that one run lacks is simply not common to the runs.
    judged = [_report_scorers(run, dataclasses.replace(settings, judges=tuple(
        j for j in settings.judges if j in run.judge_models()))) for run in resolved]
    # The judge's section needs one judge model in every run.
    judge_model, judge_note = common_judge([models for models, _ in judged], settings.judge_model)
    judges_text = ", ".join(f"{r.name}: {', '.join(m) or 'no judge scores'}" for r, (m, _) in zip(resolved, judged))
    if settings.scorer == runs.JUDGE and judge_model is None:
        raise runs.MixedRunError(f"cannot compare: the runs were not judged by one judge model ({judges_text})")
    problems = compare_problems(resolved, settings.scorer, judge_model)
    if judge_model is not None and settings.scorer == runs.REWARD_MODEL:
        problems += [p for p in compare_problems(resolved, runs.JUDGE, judge_model) if p not in problems]
    if problems and not settings.allow_mixed:
        raise runs.MixedRunError(f"cannot compare: {problems[0]} (--allow-mixed compares anyway, with a warning)")
    warnings = [f"NOT COMPARABLE: {p}" for p in problems]
    if judge_note:
        warnings.append(judge_note)
    if judge_model is None and any(m for m, _ in judged):
        warnings.append(f"the judge's section is left out: the runs were not judged by one judge model ({judges_text})")
    for run, (_, run_notes) in zip(resolved, judged):
        warnings += [f"{run.name}: {w}" for w in run_notes]
    out = Path(out_dir)
    parameters = {"run_dirs": [str(r.path.resolve()) for r in resolved], "judge_model": judge_model,
                  **_notebook_parameters(settings, data_dir, out / FIGURES_DIR)}
    title = "CharacterEval comparison: " + ", ".join(r.name for r in resolved)
    notebook, html = notebooks.render(COMPARE_NOTEBOOK, out / COMPARISON_NOTEBOOK, out / COMPARISON_HTML, parameters,
                                      show_code=settings.show_code, title=title)
    return ReportOutcome(notebook, html, warnings)


def overview(run: str | os.PathLike[str] | runs.RunDir) -> pd.DataFrame:
    """What a run directory holds so far: one line per artifact with its record count."""
    import pandas as pd

    run = runs.RunDir.resolve(run)
    statuses = pd.Series([g.get("status", "ok") for g in run.latest_generations().values()], dtype=object)
    lines = [
        ("requests.jsonl (dry run payloads)", len(runs.read_jsonl(run.requests).records)),
        ("generations: samples with a reply", int((statuses == "ok").sum())),
        ("generations: samples that failed", int((statuses != "ok").sum())),
        ("rows.jsonl: (id, metric) rows", len(run.read_rows())),
        ("rm_inputs.jsonl (dry run payloads)", len(runs.read_jsonl(run.artifact("rm_inputs.jsonl")).records)),
        ("scores: scored rows", len(run.latest_scores())),
        *((f"judge_scores: rows judged by {model}", len(run.latest_scores(scorer=runs.JUDGE, judge_model=model)))
          for model in run.judge_models()),
    ]
    return pd.DataFrame(lines, columns=["artifact", "count"]).assign(run=str(run.path))


# --- CoSER given-circumstance acting ---------------------------------------------------------------
# The second benchmark's stages: data, run (simulate + judge), dry run, summary, report and
# comparison. Kept together here so that the CharacterEval stages above stay as they are.

COSER_ROLES = ("actor", "env", "nsp", "judge")
# Upstream's defaults for the roles besides the actor (the model under test has none).
COSER_ROLE_DEFAULTS = {"env": "gpt-4o", "nsp": "gpt-4o-mini", "judge": "gpt-4o"}
COSER_RULES = ("system_role", "name_suffix", "output_example", "fix_repetition")
COSER_BACKENDS = ("openai", "offline")
COSER_REPORT_NOTEBOOK = "coser_report.ipynb"
COSER_COMPARE_NOTEBOOK = "coser_compare.ipynb"


@dataclass(frozen=True)
class CoserRunSettings(_Settings):
    """A CoSER run: the preset, the protocol version and each role's model, endpoint, key
    variable and model-name rules. A role's ``*_base_url`` / ``*_api_key_env`` left None takes
    ``base_url`` / ``api_key_env``; a rule left None follows upstream's rule for the model name;
    ``no_api_key`` sends every role a placeholder key (a local server)."""

    actor_model: str
    preset: str = "smoke"
    protocol: str | None = None  # None: the default version, coser-paper
    backend: str = "openai"
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    no_api_key: bool = False
    env_model: str = COSER_ROLE_DEFAULTS["env"]
    nsp_model: str = COSER_ROLE_DEFAULTS["nsp"]
    judge_model: str = COSER_ROLE_DEFAULTS["judge"]
    actor_base_url: str | None = None
    env_base_url: str | None = None
    nsp_base_url: str | None = None
    judge_base_url: str | None = None
    actor_api_key_env: str | None = None
    env_api_key_env: str | None = None
    nsp_api_key_env: str | None = None
    judge_api_key_env: str | None = None
    actor_system_role: str | None = None
    env_system_role: str | None = None
    nsp_system_role: str | None = None
    actor_name_suffix: bool | None = None
    env_name_suffix: bool | None = None
    nsp_name_suffix: bool | None = None
    actor_output_example: bool | None = None
    env_output_example: bool | None = None
    nsp_output_example: bool | None = None
    actor_fix_repetition: bool | None = None
    env_fix_repetition: bool | None = None
    nsp_fix_repetition: bool | None = None
    repair_model: str | None = None
    continue_from: int = 0
    wo_thought: bool = False
    limit: int | None = None
    concurrency: int = 64
    scene_concurrency: int = 256
    timeout: float = 300.0
    retry_base_delay: float = 1.0

    def __post_init__(self) -> None:
        from charactereval_lib.coser.run import PRESETS
        from charactereval_lib.coser.versions import VERSIONS

        if not self.actor_model:
            raise SettingsError("actor_model is required (--actor-model)")
        if self.preset not in PRESETS:
            raise SettingsError(f"preset {self.preset!r}: expected one of {', '.join(PRESETS)}")
        if self.protocol is not None and self.protocol not in VERSIONS:
            raise SettingsError(f"protocol {self.protocol!r}: expected one of {', '.join(sorted(VERSIONS))}")
        if self.backend not in COSER_BACKENDS:
            raise SettingsError(f"backend {self.backend!r}: expected one of {', '.join(COSER_BACKENDS)}")
        for role in ("actor", "env", "nsp"):
            value = getattr(self, f"{role}_system_role")
            if value not in (None, "system", "user"):
                raise SettingsError(f"{role}_system_role {value!r}: expected system or user")
        for name in ("limit", "concurrency", "scene_concurrency", "timeout"):
            _positive(name, getattr(self, name))
        if self.continue_from < 0 or self.retry_base_delay < 0:
            raise SettingsError("continue_from and retry_base_delay must not be negative")

    def simulation_settings(self):
        """The protocol's ``SimulationSettings``: each role's model, endpoint, key variable name
        and rules (only the rules given explicitly are set; the others keep upstream's rule)."""
        from charactereval_lib.coser.prompts import ModelRules, default_rules
        from charactereval_lib.coser.simulation import RoleSettings, SimulationSettings
        from charactereval_lib.coser.versions import DEFAULT_VERSION, get_version

        version = get_version(self.protocol or DEFAULT_VERSION)
        roles = {}
        for role in COSER_ROLES:
            model = getattr(self, f"{role}_model")
            key_env = getattr(self, f"{role}_api_key_env")
            key_env = self.api_key_env if key_env is None else key_env
            flags = {name: getattr(self, f"{role}_{name}", None) for name in COSER_RULES}
            rules = None
            if any(value is not None for value in flags.values()):
                base = default_rules(model, version)
                rules = ModelRules(**{name: getattr(base, name) if value is None else value
                                      for name, value in flags.items()})
            roles[role] = RoleSettings(model=model, base_url=getattr(self, f"{role}_base_url") or self.base_url,
                                       api_key_env="" if self.no_api_key else key_env, backend=self.backend,
                                       rules=rules)
        repair = None
        if self.repair_model:
            repair = RoleSettings(self.repair_model, roles["judge"].base_url, roles["judge"].api_key_env,
                                  self.backend)
        return SimulationSettings(version=version, repair=repair, continue_from=self.continue_from,
                                  thoughtless=self.wo_thought, **roles)

    def preset_settings(self):
        from charactereval_lib.coser.run import PRESETS

        return PRESETS[self.preset]


@dataclass(frozen=True)
class CoserSummarizeSettings(_Settings):
    """Bootstrap settings of a CoSER summary (resamples of whole scenes, 95% percentile)."""

    n_boot: int = DEFAULT_N_BOOT
    seed: int = DEFAULT_SEED

    def __post_init__(self) -> None:
        _positive("n_boot", self.n_boot)


@dataclass(frozen=True)
class CoserReportSettings(CoserSummarizeSettings):
    """A CoSER report's statistics and whether the HTML keeps the code cells; ``allow_mixed``
    compares runs whose settings differ (with a warning at the top)."""

    show_code: bool = False
    allow_mixed: bool = False


@dataclass
class CoserRunOutcome:
    """What ``coser_run`` did: the preset's (repeat, scene) count, the ones left unfinished with
    their reason, warnings (torn lines repaired) and this session's calls per role."""

    run: runs.RunDir
    scenes: int
    errors: list[str]
    warnings: list[str]
    calls: dict[str, int]

    def exit_code(self) -> int:
        return 1 if self.errors else 0


def _coser_scenes(settings: CoserRunSettings, data_dir: str | os.PathLike[str] | None):
    """(located data dir, the preset's scenes after ``limit``, the critic prompts)."""
    from charactereval_lib.coser.data import load_test_set, locate_data_dir
    from charactereval_lib.coser.run import select_scenes
    from charactereval_lib.coser.upstream import load_critic_prompts

    located = locate_data_dir(data_dir)
    scenes = select_scenes(load_test_set(located), settings.preset_settings())
    if settings.limit:
        scenes = scenes[: settings.limit]
    shortest = min(scenes, key=lambda scene: len(scene.raw["dialogues"]), default=None)
    if shortest is not None and settings.continue_from > len(shortest.raw["dialogues"]):
        raise SettingsError(f"continue_from {settings.continue_from} (--continue-from): scene {shortest.key!r} has "
                            f"only {len(shortest.raw['dialogues'])} original lines")
    return located, scenes, load_critic_prompts(located)


def coser_data_fetch(data_dir: str | os.PathLike[str] | None = None, *, mirror: str | None = None,
                     progress: bool = False, with_results: bool = False) -> list[str]:
    """CoSER data step: download the pinned files that are missing or altered, then verify all;
    the problems left (empty: every file matches its digests)."""
    from charactereval_lib.coser.data import fetch_data

    fetch_data(data_dir, mirror=mirror, progress=progress, with_results=with_results)
    return coser_data_verify(data_dir, with_results=with_results)


def coser_data_verify(data_dir: str | os.PathLike[str] | None = None, *, with_results: bool = False) -> list[str]:
    """CoSER data step: one problem line per pinned file that is missing or altered."""
    from charactereval_lib.coser.data import verify

    return verify(data_dir, with_results=with_results)


def coser_data_dir(data_dir: str | os.PathLike[str] | None = None) -> Path:
    """Where the CoSER data is looked up: ``data_dir``, ``$COSER_DATA_DIR``, else data/coser/."""
    from charactereval_lib.coser.data import locate_data_dir

    return locate_data_dir(data_dir)


def coser_dry_run(settings: CoserRunSettings, *, data_dir: str | os.PathLike[str] | None = None,
                  prices: Mapping[str, tuple[float, float]] | None = None) -> list[str]:
    """Calls, tokens and (with ``prices``: role -> USD per million input, output tokens) cost per
    role of the preset's scenes, estimated from their real system prompts; nothing is sent."""
    from charactereval_lib.coser.run import dry_run

    _, scenes, critic = _coser_scenes(settings, data_dir)
    return dry_run(scenes, settings.simulation_settings(), settings.preset_settings(), critic, dict(prices or {}))


def coser_run(run: str | os.PathLike[str] | runs.RunDir, settings: CoserRunSettings, *,
              data_dir: str | os.PathLike[str] | None = None, progress: bool = False) -> CoserRunOutcome:
    """Simulate and judge every (repeat, scene) of the preset not finished yet (resuming: the same
    call continues a run; other settings are refused), under the run's writer lock; ``progress``
    shows a bar of finished scene runs."""
    from charactereval_lib.coser.run import LOCK, run_coser, start_run
    from charactereval_lib.coser.simulation import ROLES, RoleClients
    from charactereval_lib.engine.generation.engine import run_closing
    from charactereval_lib.engine.generation.retry import RetryPolicy

    simulation = settings.simulation_settings()
    preset = settings.preset_settings()
    located, scenes, critic = _coser_scenes(settings, data_dir)
    run = runs.RunDir.resolve(run)
    if settings.backend == "openai":
        faults.check_endpoints([simulation.role(name).base_url for name in ROLES], "coser run")
    faults.check_writable(run.path, "run directory")
    run.path.mkdir(parents=True, exist_ok=True)
    with run.writer_lock(LOCK, "CoSER run"):
        start_run(run, simulation, preset, scenes, str(located))
        policy = RetryPolicy(base_delay_s=settings.retry_base_delay, timeout_s=settings.timeout)
        clients = RoleClients(simulation, concurrency=settings.concurrency, policy=policy)
        outcome = run_closing(clients, lambda: run_coser(run, scenes, simulation, preset, critic, clients,
                                                         scene_concurrency=settings.scene_concurrency,
                                                         progress=progress))
    return CoserRunOutcome(run, outcome["scenes"], outcome["errors"], outcome["warnings"], outcome["calls"])


def coser_import(path: str | os.PathLike[str], run: str | os.PathLike[str] | runs.RunDir, *,
                 protocol: str | None = None, actor_model: str | None = None, score_formula: str | None = None,
                 models: Mapping[str, str] | None = None,
                 data_dir: str | os.PathLike[str] | None = None, metrics: bool = True,
                 progress: bool = False):
    """An official paper-era ``exp/evaluation/*.json`` file as a new CoSER run (``coser.official.
    import_evaluation``): validated whole first, every dimension re-scored from its recorded
    critique, the reproduction report returned and kept in ``run.json``. ``protocol`` and
    ``score_formula`` None: as the file's layout and name say (``import_evaluation``).
    ``models``: the other roles' models (``env_model``, ``nsp_model``, ``judge_model``) where they
    are known more precisely than the experiment name the files were written under (e.g. a dated
    snapshot)."""
    from charactereval_lib.coser.official import import_evaluation
    from charactereval_lib.coser.versions import get_version

    return import_evaluation(run, path, version=get_version(protocol) if protocol else None, data_dir=data_dir,
                             actor_model=actor_model, score_formula=score_formula, metrics=metrics, progress=progress,
                             **dict(models or {}))


def _coser_run_dir(run: str | os.PathLike[str] | runs.RunDir) -> runs.RunDir:
    from charactereval_lib.coser.run import JUDGEMENTS

    run = runs.RunDir.resolve(run).require_dir().require_benchmark("coser")
    run.require(run.artifact(JUDGEMENTS), "run `charactereval coser run` first")
    return run


def coser_summarize(run: str | os.PathLike[str] | runs.RunDir,
                    settings: CoserSummarizeSettings = CoserSummarizeSettings()) -> SummaryOutcome:
    """CoSER statistics (``coser.run.compute_summary``) written to ``RUN/coser_summary.json``;
    the warnings are the reasons the run is not comparable with the paper's anchor."""
    from charactereval_lib.coser.report import comparability
    from charactereval_lib.coser.run import summarize

    run = _coser_run_dir(run)
    faults.check_writable(run.path, "run directory")
    summary = summarize(run, n_boot=settings.n_boot, seed=settings.seed)
    return SummaryOutcome(run, summary, comparability(run.manifest()))


def coser_analysis(run: str | os.PathLike[str] | runs.RunDir,
                   settings: CoserSummarizeSettings = CoserSummarizeSettings()):
    """One CoSER run loaded for a report (``coser.report.CoserAnalysis``): its summary computed
    afresh (nothing written), its settings, the anchor and the tables and figures the notebooks show."""
    from charactereval_lib.coser.report import load_analysis

    return load_analysis(_coser_run_dir(run), n_boot=settings.n_boot, seed=settings.seed)


def coser_report(run: str | os.PathLike[str] | runs.RunDir,
                 settings: CoserReportSettings = CoserReportSettings(), *,
                 out: str | os.PathLike[str] | None = None) -> ReportOutcome:
    """One CoSER run's report: ``OUT/report.ipynb`` (papermill) and ``OUT/report.html`` (OUT:
    the run directory unless given), both written only once the notebook ran through. The
    warnings say why the run is not comparable with the paper, if it is not."""
    from charactereval_lib.coser.report import comparability
    from charactereval_lib.engine import report as notebooks

    run = _coser_run_dir(run)
    out_dir = Path(out) if out else run.path
    parameters = {"run_dir": str(run.path.resolve()), "n_boot": settings.n_boot, "seed": settings.seed,
                  "figures_dir": str((out_dir / FIGURES_DIR).resolve())}
    notebook, html = notebooks.render(COSER_REPORT_NOTEBOOK, out_dir / REPORT_NOTEBOOK, out_dir / REPORT_HTML,
                                      parameters, show_code=settings.show_code, title=f"CoSER report: {run.name}")
    return ReportOutcome(notebook, html, comparability(run.manifest()))


def coser_compare(run_list: Sequence[str | os.PathLike[str] | runs.RunDir], out_dir: str | os.PathLike[str],
                  settings: CoserReportSettings = CoserReportSettings()) -> ReportOutcome:
    """A comparison report of several CoSER runs (the first is the reference):
    ``OUT/comparison.ipynb`` and ``OUT/comparison.html``. Runs that differ in protocol version
    or in a model besides the actor's are refused unless ``allow_mixed``."""
    from charactereval_lib.coser.report import comparability, compare_problems
    from charactereval_lib.engine import report as notebooks

    if len(run_list) < 2:
        raise runs.RunError("coser compare needs at least two runs")
    resolved = [_coser_run_dir(r) for r in run_list]
    problems = compare_problems(resolved)
    if problems and not settings.allow_mixed:
        raise runs.MixedRunError(f"cannot compare: {problems[0]} (--allow-mixed compares anyway, with a warning)")
    warnings = [f"NOT COMPARABLE: {p}" for p in problems]
    warnings += [f"{r.name}: {w}" for r in resolved for w in comparability(r.manifest())]
    out = Path(out_dir)
    parameters = {"run_dirs": [str(r.path.resolve()) for r in resolved], "n_boot": settings.n_boot,
                  "seed": settings.seed, "figures_dir": str((out / FIGURES_DIR).resolve())}
    title = "CoSER comparison: " + ", ".join(r.name for r in resolved)
    notebook, html = notebooks.render(COSER_COMPARE_NOTEBOOK, out / COMPARISON_NOTEBOOK, out / COMPARISON_HTML,
                                      parameters, show_code=settings.show_code, title=title)
    return ReportOutcome(notebook, html, warnings)


@dataclass(frozen=True)
class LeaderboardOutcome:
    out: Path
    content: dict[str, Any]
    warnings: list[str]


def leaderboard(paths: Sequence[str | os.PathLike[str]], out_dir: str | os.PathLike[str], *,
                data_dir: str | os.PathLike[str] | None = None) -> LeaderboardOutcome:
    """The leaderboard site of the runs in ``paths`` (runs, or folders searched for runs of any
    registered benchmark) written into ``out_dir``: boards, run pages with the sample explorer,
    ``leaderboard.json`` and ``leaderboard.csv`` (``charactereval_lib.leaderboard``). The
    official CharacterEval data, when it loads, gives the explorer its contexts and the rules the
    row counts of failed samples."""
    from charactereval_lib.leaderboard import build

    data, reason = _optional_data(data_dir)
    content, warnings = build(paths, out_dir, context={"charactereval": data})
    return LeaderboardOutcome(Path(out_dir), content, ([reason] if reason else []) + warnings)
