"""What every generation backend shares: requests, decoding parameters, results, the interface.

A backend turns S3 requests into results, one per request, in any order; the engine writes each
result as one record of ``generations.jsonl``. Parameters that can change a reply (model,
decoding parameters, protocol version) form the run's *identity*, which a resumed run must keep.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import AsyncGenerator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

STATUS_OK = "ok"
STATUS_ERROR = "error"

# ChatGLM3's chat() defaults, which the official generation script used implicitly (it calls the
# model's chat() without decoding arguments): sampling with temperature 0.8 and top_p 0.8.
PRESETS: dict[str, dict[str, float]] = {"chatglm3": {"temperature": 0.8, "top_p": 0.8}}
# Where each preset's values were read, recorded in run.json beside them (``preset_source``).
# ChatGLM3's: seed 001 §0 and row 9, the model code at that revision (its chat() and
# process_response are the same on the main branch). Of chat()'s other defaults, max_length=8192
# (prompt and reply together) and num_beams=1 have no request counterpart, and process_response's
# strip() is the model wrapper's, not the protocol's (S5 does not strip).
PRESET_SOURCES: dict[str, dict[str, Any]] = {
    "chatglm3": {
        "repository": "THUDM/chatglm3-6b", "revision": "b098244a71", "revision_date": "2023-12-29",
        "file": "modeling_chatglm.py", "function": "ChatGLMForConditionalGeneration.chat",
        "defaults": {"do_sample": True, "temperature": 0.8, "top_p": 0.8, "max_length": 8192, "num_beams": 1},
        "called_by": "the official generation script, get_response.py: model.chat(tokenizer, query, messages), "
                     "no decoding arguments",
    },
}
DEFAULT_MAX_TOKENS = 1024
# Body keys a request parameter (``--request-param``) may not set: the request's own fields, the
# decoding settings that have their own option, and streaming (replies are read whole).
RESERVED_REQUEST_PARAMS = ("model", "messages", "max_tokens", "temperature", "top_p", "seed", "stream")
# Request-body keys that choose where a request goes, not how its reply is decoded (OpenRouter's
# provider routing object and its list of fallback models).
ROUTING_PARAMS = ("provider", "models")


class ConfigError(ValueError):
    """A generation setting that cannot work (reported as one line)."""


class RunAborted(Exception):
    """The run cannot go on; every record received so far is saved. The engine attaches the
    session's summary (``summary``) before the exception leaves ``run_generation``."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.summary: Any = None


class EndpointUnreachable(RunAborted):
    """The endpoint refused the connection or its name does not resolve, before it ever answered:
    a wrong address or a server that is not running, which retries would only wait out."""


@dataclass(frozen=True)
class GenerationRequest:
    id: int
    role: str
    messages: list[dict[str, str]]
    # Decoding parameters of this request only, replacing the backend's (a protocol that changes
    # the temperature between attempts of one turn, e.g. CoSER's 0 first and 1 on retries).
    params: DecodingParams | None = None


def canonical_json(payload: Any) -> bytes:
    """A request payload as canonical JSON (sorted keys, no spaces, UTF-8): what its digest covers
    and, encoded once, what an HTTP backend sends."""
    return json.dumps(payload, ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode("utf-8")


def request_sha256(payload: Any) -> str:
    """Digest of an exact request payload (canonical JSON), recorded with every generation."""
    return body_sha256(canonical_json(payload))


def body_sha256(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


@dataclass(frozen=True)
class DecodingParams:
    """Decoding parameters (S4, a platform choice). ``None`` means "not sent": the provider's or
    the model's default applies, and the manifest says so by recording null."""

    max_tokens: int = DEFAULT_MAX_TOKENS
    temperature: float | None = None
    top_p: float | None = None
    seed: int | None = None
    preset: str | None = None
    # Further request-body keys sent as given (reasoning_effort, chat_template_kwargs, a router's
    # provider pin, a vendor's extra_body keys); part of the payload, so of its digest.
    request_params: Mapping[str, Any] | None = None

    @classmethod
    def resolve(
        cls,
        *,
        preset: str | None = None,
        max_tokens: int | None = None,
        temperature: float | None = None,
        top_p: float | None = None,
        seed: int | None = None,
        request_params: Mapping[str, Any] | None = None,
    ) -> DecodingParams:
        """Explicit flags win over the preset's values."""
        if preset and preset not in PRESETS:
            raise ConfigError(f"unknown preset {preset!r} (known: {', '.join(PRESETS)})")
        base = PRESETS[preset] if preset else {}
        if max_tokens is not None and max_tokens < 1:
            raise ConfigError(f"max_tokens must be at least 1, got {max_tokens}")
        # The OpenAI API's ranges; a value outside them is a typo, refused before any call.
        if temperature is not None and not 0 <= temperature <= 2:
            raise ConfigError(f"temperature must be from 0 to 2, got {temperature}")
        if top_p is not None and not 0 < top_p <= 1:
            raise ConfigError(f"top_p must be above 0 and at most 1, got {top_p}")
        return cls(
            max_tokens=DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens,
            temperature=temperature if temperature is not None else base.get("temperature"),
            top_p=top_p if top_p is not None else base.get("top_p"),
            seed=seed,
            preset=preset,
            request_params=check_request_params(request_params),
        )

    def sent(self) -> dict[str, Any]:
        """The parameters put into the request payload: only those that were chosen."""
        values = {"max_tokens": self.max_tokens, "temperature": self.temperature, "top_p": self.top_p, "seed": self.seed}
        return {**{k: v for k, v in values.items() if v is not None}, **(self.request_params or {})}

    @property
    def do_sample(self) -> bool:
        """Whether decoding samples (a local model greedy-decodes otherwise)."""
        return (self.temperature is not None and self.temperature > 0) or self.top_p is not None

    def as_dict(self) -> dict[str, Any]:
        values = asdict(self)
        if not self.request_params:
            # Runs made before request parameters existed keep their recorded identity.
            del values["request_params"]
        return values


def preset_source(parameters: Mapping[str, Any] | None) -> dict[str, Any]:
    """``{"preset_source": ...}`` for a run's recorded parameters that name a preset, else ``{}``."""
    preset = (parameters or {}).get("preset")
    return {"preset_source": PRESET_SOURCES[preset]} if preset in PRESET_SOURCES else {}


def check_request_params(params: Mapping[str, Any] | None, fixed: Sequence[str] = RESERVED_REQUEST_PARAMS,
                         why: str = "it has its own option", where: str = "request parameter"
                         ) -> dict[str, Any] | None:
    """The extra request-body parameters as a plain dict (None when there are none), or a
    ConfigError naming the first key that is ``fixed`` (and ``why``) or not a body key."""
    if not params:
        return None
    for key in params:
        if not isinstance(key, str) or not key:
            raise ConfigError(f"{where} {key!r}: expected a non-empty string key")
        if key == "extra_body":
            raise ConfigError(f"{where} 'extra_body': give its keys as parameters of their own (the OpenAI SDK "
                              "merges extra_body into the request body, and so does this option)")
        if key in fixed:
            raise ConfigError(f"{where} {key!r} cannot be set: {why}")
    if "provider" in params:
        check_provider_routing(params["provider"], f"{where} 'provider'")
    return dict(params)


def _strings(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) and item for item in value)


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


# OpenRouter's provider routing object, as its documentation gives it (PROVIDER_ROUTING_DOCS,
# "The provider object can contain the following fields"): each field and what it takes.
PROVIDER_ROUTING_DOCS = "https://openrouter.ai/docs/features/provider-routing"
_STRINGS = "a list of strings"
_PROVIDER_FIELDS: dict[str, tuple[str, Any]] = {
    "order": (_STRINGS, _strings),
    "only": (_STRINGS, _strings),
    "ignore": (_STRINGS, _strings),
    "quantizations": (_STRINGS, _strings),
    "allow_fallbacks": ("true or false", lambda v: isinstance(v, bool)),
    "require_parameters": ("true or false", lambda v: isinstance(v, bool)),
    "zdr": ("true or false", lambda v: isinstance(v, bool)),
    "enforce_distillable_text": ("true or false", lambda v: isinstance(v, bool)),
    "data_collection": ('"allow" or "deny"', lambda v: v in ("allow", "deny")),
    "sort": ("a string or an object", lambda v: isinstance(v, (str, Mapping))),
    "preferred_min_throughput": ("a number or an object", lambda v: _number(v) or isinstance(v, Mapping)),
    "preferred_max_latency": ("a number or an object", lambda v: _number(v) or isinstance(v, Mapping)),
    "max_price": ("an object", lambda v: isinstance(v, Mapping)),
}


def check_provider_routing(value: Any, where: str) -> None:
    """A router's provider pin must have the documented shape of OpenRouter's provider routing
    object (``_PROVIDER_FIELDS``): a ConfigError names the first key that does not. A pin of
    another shape would be sent as it is and read by the router as no pin at all, or refused."""
    shape = f"OpenRouter's provider routing object, {PROVIDER_ROUTING_DOCS}"
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: expected an object such as {{\"only\": [\"openai\"], \"allow_fallbacks\": false}} "
                          f"({shape}), got {json.dumps(value)}")
    for key, item in value.items():
        if key not in _PROVIDER_FIELDS:
            raise ConfigError(f"{where}: unknown key {key!r}; expected some of {sorted(_PROVIDER_FIELDS)} ({shape})")
        expected, valid = _PROVIDER_FIELDS[key]
        if not valid(item):
            raise ConfigError(f"{where}: {key!r} must be {expected}, got {json.dumps(item)} ({shape})")


def reasoning_tokens(usage: Mapping[str, Any] | None) -> int | None:
    """Reasoning tokens of a reply where the server reports them (OpenAI and OpenRouter:
    ``usage.completion_tokens_details.reasoning_tokens``); None when it does not."""
    details = (usage or {}).get("completion_tokens_details")
    value = details.get("reasoning_tokens") if isinstance(details, Mapping) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def build_payload(model: str, messages: list[dict[str, str]], params: DecodingParams) -> dict[str, Any]:
    """The exact chat-completions payload of a request; its digest is the record's request_sha256."""
    return {"model": model, "messages": messages, **params.sent()}


@dataclass
class GenerationResult:
    """One outcome, written as one record of ``generations.jsonl``."""

    id: int
    status: str
    model_output: str | None
    request_sha256: str
    attempts: int = 1
    error: dict[str, Any] | None = None
    finish_reason: str | None = None
    usage: dict[str, int] | None = None
    # Seconds of the attempt that produced this outcome, and from first send to outcome (retries
    # and back-off included).
    latency_s: float | None = None
    elapsed_s: float | None = None
    model: str | None = None
    # The API marked the reply as a refusal (message.refusal), or a content filter stopped it
    # (finish_reason content_filter, a content-filter 400, or a 400/403 whose error body carries
    # a moderation marker; see openai_backend._is_content_filter). Text is not inspected.
    refusal: bool = False
    content_filter: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def to_record(self) -> dict[str, Any]:
        # Built by hand: dataclasses.asdict deep-copies every value, a visible cost per request.
        return {
            "id": self.id,
            "status": self.status,
            "model_output": self.model_output,
            "request_sha256": self.request_sha256,
            "attempts": self.attempts,
            "error": self.error,
            "finish_reason": self.finish_reason,
            "usage": self.usage,
            "latency_s": self.latency_s,
            "elapsed_s": self.elapsed_s,
            "model": self.model,
            "refusal": self.refusal,
            "content_filter": self.content_filter,
            **self.extra,
        }


def error_result(
    request_id: int,
    sha: str,
    error_class: str,
    message: str,
    *,
    attempts: int,
    status_code: int | None = None,
    details: dict[str, Any] | None = None,
    **fields: Any,
) -> GenerationResult:
    """A permanent failure: ``model_output`` null so that S5 drops the sample and reports count it.
    ``details`` go into the record's ``error`` object beside class, message and status."""
    error: dict[str, Any] = {"class": error_class, "message": message}
    if status_code is not None:
        error["status"] = status_code
    error.update(details or {})
    return GenerationResult(request_id, STATUS_ERROR, None, sha, attempts=attempts, error=error, **fields)


class Backend(Protocol):
    """The interface the engine drives. ``stream`` yields exactly one result per request, in
    completion order; closing the iterator early stops the work still in flight."""

    name: str

    def identity(self) -> dict[str, Any]:
        """Settings that can change a reply; a resumed run must match them."""
        ...

    def describe(self) -> dict[str, Any]:
        """Everything recorded in run.json (operational settings included); never secrets."""
        ...

    def stream(self, requests: Sequence[GenerationRequest]) -> AsyncGenerator[GenerationResult, None]: ...

    def stats(self) -> dict[str, Any]:
        """Operational figures of the last stream (e.g. how concurrency adapted), for run.json."""
        ...

    async def aclose(self) -> None: ...


# --- secrets ----------------------------------------------------------------------------------

_WINDOW = 8


def redact(text: str, secret: str | None, *, limit: int = 500) -> str:
    """Remove a secret from a message before it is stored or printed.

    Providers echo keys back, sometimes masked (``sk-ab****wxyz``), so any word that contains the
    secret, a masking run of ``*``, or any 8-character piece of the secret is replaced. Long
    messages (HTML error pages) are cut to ``limit`` characters.
    """
    if secret:
        text = text.replace(secret, "[redacted]")
        pieces = {secret[i : i + _WINDOW] for i in range(len(secret) - _WINDOW + 1)} if len(secret) >= _WINDOW else set()

        def scrub(match: re.Match[str]) -> str:
            word = match.group(0)
            if "***" in word or any(word[i : i + _WINDOW] in pieces for i in range(len(word) - _WINDOW + 1)):
                return "[redacted]"
            return word

        text = re.sub(r"[^\s'\"`,;()<>]+", scrub, text)
    return text if len(text) <= limit else text[:limit] + "…"
