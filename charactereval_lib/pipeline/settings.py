"""Typed settings of CharacterEval's pipeline stages (``engine.registry.settings.Settings``: frozen
pydantic models that also load from YAML mappings)."""

from __future__ import annotations

from typing import Any

from charactereval_lib.charactereval import layout
from charactereval_lib.charactereval.calibration import METASCORE_THRESHOLD
from charactereval_lib.charactereval.protocol import COLON
from charactereval_lib.engine.ray_cluster import LOST_NODE_WAIT_S
from charactereval_lib.engine.registry.settings import Names, Number, Settings, SettingsError, not_negative, positive
from charactereval_lib.engine.stats import DEFAULT_LEVEL, DEFAULT_N_BOOT, DEFAULT_SEED

# Paper models overlaid by default: the strongest open model, GPT-4, and one released run.
DEFAULT_BASELINES = ("GPT-4", "Baichuan2-13B", "ChatGLM3-6B")
# Where reward-model scoring and local (hf) generation run: this process, or the workers of a
# Ray cluster.
ENGINES = ("local", "ray")


def _check_engine(settings: GenerateSettings | ScoreSettings) -> None:
    """The engine and its Ray options (``engine``, ``address``, ``workers``, ``gpus_per_worker``)."""
    positive("workers", settings.workers)
    if settings.engine not in ENGINES:
        raise SettingsError(f"engine {settings.engine!r}: expected one of {', '.join(ENGINES)}")
    lost_node_wait = settings.lost_node_wait != type(settings).default("lost_node_wait")
    if settings.engine == "local" and (settings.address is not None or settings.workers != 1 or settings.gpus_per_worker
                                       or lost_node_wait):
        raise SettingsError("address, workers, gpus_per_worker and lost_node_wait (--address, --workers, "
                            "--gpus-per-worker, --lost-node-wait) need engine ray")
    if settings.gpus_per_worker < 0:
        raise SettingsError(f"gpus_per_worker must not be negative, got {settings.gpus_per_worker}")
    positive("lost_node_wait", settings.lost_node_wait)


def _ray_settings(settings: GenerateSettings | ScoreSettings):
    from charactereval_lib.engine.ray_cluster import RaySettings

    return RaySettings(address=settings.address, workers=settings.workers, gpus_per_worker=settings.gpus_per_worker,
                       lost_node_wait_s=settings.lost_node_wait)


class GenerateSettings(Settings):
    """How replies are generated (S4: a platform choice, recorded in run.json). Decoding values
    left None are not sent: the provider's or the model's default applies."""

    backend: str
    model: str
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    concurrency: int = 32
    max_tokens: int = 1024
    temperature: Number | None = None
    top_p: Number | None = None
    seed: int | None = None
    preset: str | None = None
    # Further request-body keys of the model under test, sent as given (openai backend).
    request_params: dict[str, Any] | None = None
    limit: int | None = None
    ids: str | None = None
    retry_errors: bool = False
    max_attempts: int = 8
    retry_base_delay: Number = 1.0
    retry_max_delay: Number = 60.0
    timeout: Number = 300.0
    # hf backend; None: cpu in this process, and with engine ray cuda on a worker given a GPU.
    device: str | None = None
    dtype: str = "auto"
    batch_size: int = 8
    trust_remote_code: bool = False
    max_context: int | None = None
    context_tokenizer: str | None = None
    same_answer_limit: int = 3
    offline_latency: Number = 0.0
    offline_fault_rate: Number = 0.0
    price_in: Number | None = None
    price_out: Number | None = None
    # Score a leading <think> block as upstream does (seed 004 G08) instead of removing it before
    # S5's first-line cut (C17a, the default); recorded in the run's identity (engine.thinking).
    keep_thinking: bool = False
    # "local": this process; "ray" (hf backend only): batches on the workers of a Ray cluster (at
    # ``address``, else a local one), each a model replica with ``gpus_per_worker`` GPUs; the
    # records are written by this process either way.
    engine: str = "local"
    address: str | None = None
    workers: int = 1
    gpus_per_worker: Number = 0.0
    # Seconds a run with every Ray worker lost waits for a replacement before it stops.
    lost_node_wait: Number = LOST_NODE_WAIT_S

    def model_post_init(self, context: Any) -> None:
        from charactereval_lib.engine.generation.backends import BACKENDS

        if self.backend not in BACKENDS:
            raise SettingsError(f"backend {self.backend!r}: expected one of {', '.join(BACKENDS)}")
        for name in ("limit", "concurrency", "max_tokens", "max_attempts", "batch_size", "timeout", "max_context",
                     "same_answer_limit"):
            positive(name, getattr(self, name))
        for name in ("price_in", "price_out", "offline_latency", "retry_base_delay", "retry_max_delay"):
            not_negative(name, getattr(self, name))
        if not 0 <= self.offline_fault_rate <= 1:
            raise SettingsError(f"offline_fault_rate must be a probability from 0 to 1, got {self.offline_fault_rate}")
        _check_engine(self)
        if self.request_params and self.backend != "openai":
            raise SettingsError(f"request_params (--request-param) go into the body of an HTTP request: backend openai "
                                f"sends them, backend {self.backend!r} has none")
        if self.engine == "ray" and self.backend != "hf":
            raise SettingsError(f"engine ray runs the hf backend's batches on workers; backend {self.backend!r} "
                                "sends its requests from this process (leave out engine ray)")
        self.decoding()  # a bad preset or max_tokens is reported now, not after the data loads

    def decoding(self):
        from charactereval_lib.engine.generation.base import DecodingParams

        return DecodingParams.resolve(preset=self.preset, max_tokens=self.max_tokens, temperature=self.temperature,
                                      top_p=self.top_p, seed=self.seed, request_params=self.request_params)

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
                              offline_separator=COLON,
                              offline_fault_rate=self.offline_fault_rate)


class ScoreSettings(Settings):
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
    gpus_per_worker: Number = 0.0
    # Seconds a run with every Ray worker lost waits for a replacement before it stops.
    lost_node_wait: Number = LOST_NODE_WAIT_S

    def model_post_init(self, context: Any) -> None:
        from charactereval_lib.charactereval.reward.scorer import MODES, parse_shard

        if self.mode not in MODES:
            raise SettingsError(f"mode {self.mode!r}: expected one of {', '.join(MODES)}")
        if self.shard is not None:
            parse_shard(self.shard)
        positive("batch_tokens", self.batch_tokens)
        positive("verify", self.verify)
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


class JudgeSettings(Settings):
    """How rows are scored by an LLM judge (``score --scorer judge``) through an
    OpenAI-compatible endpoint. ``spec`` is a spec FILE for every metric or a DIR of
    ``<metric_en>.yaml`` (default: the shipped specs); ``eval_type`` replaces every spec's
    answer format (evals' eval-level ``eval_type``). Decoding defaults to temperature 0.
    ``calibration``: a ``metaeval`` directory of the same judge model whose agreement with human
    labels ``score`` records beside the scores; ``metascore_threshold``: the metascore below
    which that agreement is warned about (``charactereval.calibration``)."""

    judge_model: str
    base_url: str | None = None
    spec: str | None = None
    eval_type: str | None = None
    calibration: str | None = None
    metascore_threshold: Number = METASCORE_THRESHOLD
    api_key_env: str = "OPENAI_API_KEY"
    concurrency: int = 32
    temperature: Number | None = 0.0
    max_tokens: int = 1024
    max_attempts: int = 8
    retry_base_delay: Number = 1.0
    retry_max_delay: Number = 60.0
    timeout: Number = 300.0
    same_answer_limit: int = 3
    price_in: Number | None = None
    price_out: Number | None = None

    def model_post_init(self, context: Any) -> None:
        from charactereval_lib.engine.grading.choices import EVAL_TYPES

        if not self.judge_model:
            raise SettingsError("judge_model is required (--judge-model)")
        if self.eval_type is not None and self.eval_type not in EVAL_TYPES:
            raise SettingsError(f"eval_type {self.eval_type!r}: expected one of {', '.join(EVAL_TYPES)}")
        if not 0 <= self.metascore_threshold <= 1:
            raise SettingsError(f"metascore_threshold must be between 0 and 1, got {self.metascore_threshold}")
        for name in ("concurrency", "max_tokens", "max_attempts", "timeout", "same_answer_limit"):
            positive(name, getattr(self, name))
        for name in ("price_in", "price_out", "retry_base_delay", "retry_max_delay"):
            not_negative(name, getattr(self, name))
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


class SummarizeSettings(Settings):
    """Bootstrap settings of the intervals, which scorer's scores (``layout.SCORERS``; the reward
    model by default; ``judge_model`` picks one judge of a run that holds several), and whether
    a run mixing scorer configurations may be summarised."""

    n_boot: int = DEFAULT_N_BOOT
    seed: int = DEFAULT_SEED
    level: Number = DEFAULT_LEVEL
    allow_mixed: bool = False
    scorer: str = layout.REWARD_MODEL
    judge_model: str | None = None

    def model_post_init(self, context: Any) -> None:
        if self.scorer not in layout.SCORERS:
            raise SettingsError(f"scorer {self.scorer!r}: expected one of {', '.join(layout.SCORERS)}")
        positive("n_boot", self.n_boot)
        if not 0 < self.level < 1:
            raise SettingsError(f"level must be between 0 and 1, got {self.level}")


class PanelSettings(Settings):
    """A panel of judges on one run (``charactereval.panel``): the judge models (two or more,
    each already scored the run), the verdict (``majority``, ties to the lowest grade, or
    ``mean``) and the bootstrap settings of the intervals."""

    judge_models: Names
    verdict: str = "majority"
    n_boot: int = DEFAULT_N_BOOT
    seed: int = DEFAULT_SEED
    level: Number = DEFAULT_LEVEL
    allow_mixed: bool = False

    def model_post_init(self, context: Any) -> None:
        from charactereval_lib.charactereval.panel import VERDICTS

        if len(set(self.judge_models)) < 2 or len(set(self.judge_models)) != len(self.judge_models):
            raise SettingsError(f"a panel needs two or more different judge models (--judge-model), got "
                                f"{list(self.judge_models)}")
        if self.verdict not in VERDICTS:
            raise SettingsError(f"verdict {self.verdict!r}: expected one of {', '.join(VERDICTS)}")
        positive("n_boot", self.n_boot)
        if not 0 < self.level < 1:
            raise SettingsError(f"level must be between 0 and 1, got {self.level}")


class ReportSettings(SummarizeSettings):
    """What a rendered report shows beside the statistics' settings. ``scorer`` is the scorer of
    the report's main sections; the judge's grades are shown beside the reward model's whenever
    a run holds both (``judge_model`` picks the judge of a run that holds several)."""

    baselines: Names = DEFAULT_BASELINES
    show_code: bool = False
    verify_data: bool = True
    # The judges a reward-model report shows beside it (empty: ``judge_model``, else every judge
    # of the run); ``batch`` also renders each one's own judge report.
    judges: Names = ()

    def model_post_init(self, context: Any) -> None:
        super().model_post_init(context)
        from charactereval_lib.charactereval.paper_table import paper_models

        known = paper_models()
        unknown = [b for b in self.baselines if b not in known]
        if unknown:
            raise SettingsError(f"unknown baseline model(s) {unknown}; the paper's Table 4 has {known}")
