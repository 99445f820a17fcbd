"""Build a backend by name, for the CLI and notebooks."""

from __future__ import annotations

from dataclasses import dataclass

from charactereval_lib.engine.generation.base import Backend, ConfigError, DecodingParams
from charactereval_lib.engine.generation.retry import RetryPolicy

BACKENDS = ("openai", "hf", "offline")


@dataclass(frozen=True)
class BackendOptions:
    """Operational settings; none of them changes a reply (they may change between resumes)."""

    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    concurrency: int = 32
    policy: RetryPolicy = RetryPolicy()
    device: str = "cpu"
    dtype: str = "auto"
    batch_size: int = 8
    trust_remote_code: bool = False
    # Tokens of context of the model (prompt + max_tokens must fit). The hf backend reads it from
    # the model config unless given; for a server it is checked only when given, counting tokens
    # with context_tokenizer (default: the model name as a local path or hub id).
    max_context: int | None = None
    context_tokenizer: str | None = None
    offline_latency_s: float = 0.0
    offline_fault_rate: float = 0.0
    # What the offline backend's replies put between the speaker and the line: the benchmark's
    # own (the engine knows none); the offline backend refuses to start without it.
    offline_separator: str | None = None


def make_backend(name: str, model: str, params: DecodingParams, options: BackendOptions = BackendOptions()) -> Backend:
    if params.request_params and name != "openai":
        raise ConfigError(f"request parameters ({', '.join(params.request_params)}) go into the body of an HTTP "
                          f"request: the openai backend sends them, the {name} backend has none")
    if name == "openai":
        from charactereval_lib.engine.generation.openai_backend import OpenAIBackend

        return OpenAIBackend(model, params, base_url=options.base_url, api_key_env=options.api_key_env,
                             concurrency=options.concurrency, policy=options.policy, max_context=options.max_context,
                             context_tokenizer=options.context_tokenizer)
    if name == "hf":
        from charactereval_lib.engine.generation.hf import HFBackend

        return HFBackend(model, params, device=options.device, dtype=options.dtype, batch_size=options.batch_size,
                         trust_remote_code=options.trust_remote_code, max_context=options.max_context)
    if name == "offline":
        from charactereval_lib.engine.generation.offline import OfflineBackend

        if options.offline_separator is None:
            raise ConfigError("the offline backend needs the benchmark's speaker separator (offline_separator)")
        return OfflineBackend(model, params, separator=options.offline_separator, concurrency=options.concurrency,
                              policy=options.policy,
                              latency_s=options.offline_latency_s, fault_rate=options.offline_fault_rate)
    raise ConfigError(f"unknown backend {name!r} (known: {', '.join(BACKENDS)})")
