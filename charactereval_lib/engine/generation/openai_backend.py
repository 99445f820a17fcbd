"""The OpenAI-compatible backend: any chat-completions endpoint (OpenAI, vLLM, API providers).

Requests go out through ``http_client.ChatClient`` (aiohttp, without the ``openai`` SDK's per-request
cost), and the policy of ``retry.py`` is the only retry policy. The API key is read from the
environment here and never leaves this object: it is not in the manifest, the records, the
error messages or the logs.
"""

from __future__ import annotations

import email.utils
import json
import os
import re
import time
import urllib.parse
from collections.abc import Mapping
from typing import Any

from charactereval_lib.engine.generation.base import STATUS_OK, ConfigError, DecodingParams, GenerationRequest, GenerationResult, build_payload, redact
from charactereval_lib.engine.generation.context import ContextWindow, chat_prompt_ids
from charactereval_lib.engine.generation.http_client import ChatClient, StatusError
from charactereval_lib.engine.generation.retry import PermanentError, RetryingBackend, RetryPolicy, TransientError

DEFAULT_API_KEY_ENV = "OPENAI_API_KEY"
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
# Statuses worth another attempt besides 429 and 5xx: request timeout, conflict (lock timeouts).
_RETRYABLE_4XX = {408, 409}
# Fields of a chat completion that report how the server answered, kept in each record.
_REPORTED = ("system_fingerprint", "service_tier")


# The api_key_env value of a server that needs no key (a local one): a placeholder is sent then,
# as the openai SDK did (it refuses to send no key at all), so such servers see what they saw.
NO_API_KEY = ""
PLACEHOLDER_KEY = "no-key"


def read_api_key(env_name: str) -> str:
    """The key from the named environment variable, checked before anything is sent: a missing
    key is a ConfigError, not 200 failed requests. ``NO_API_KEY`` (the empty name) says the
    server needs none."""
    if env_name == NO_API_KEY:
        return PLACEHOLDER_KEY
    if not _ENV_NAME.match(env_name):
        # Do not echo the value: users sometimes pass the key itself here.
        raise ConfigError("--api-key-env takes the NAME of an environment variable (letters, digits, _), not a key")
    key = os.environ.get(env_name)
    if key:
        return key
    raise ConfigError(f"the API key variable {env_name} is not set (set it, name another one with --api-key-env, "
                      "or pass --api-key-env '' for a local server that needs no key)")


class OpenAIBackend(RetryingBackend):
    name = "openai"

    def __init__(
        self,
        model: str,
        params: DecodingParams,
        *,
        base_url: str | None = None,
        api_key_env: str = DEFAULT_API_KEY_ENV,
        concurrency: int = 32,
        policy: RetryPolicy | None = None,
        max_context: int | None = None,
        context_tokenizer: str | None = None,
    ) -> None:
        super().__init__(concurrency=concurrency, policy=policy or RetryPolicy())
        self.model = model
        self.params = params
        self.base_url = base_url
        self.api_key_env = api_key_env
        self._key = read_api_key(api_key_env)
        self.transport = "aiohttp"
        self._client = ChatClient(base_url, self._key, self.policy.timeout_s)
        self.context_tokenizer = (context_tokenizer or model) if max_context is not None else None
        self._counter = _load_counting_tokenizer(self.context_tokenizer) if self.context_tokenizer else None
        self.context = ContextWindow(max_context, params.max_tokens, "--max-context") if max_context else None

    def reject(self, request: GenerationRequest, sha: str) -> GenerationResult | None:
        if self.context is None:
            return None
        return self.context.reject(request.id, sha, len(chat_prompt_ids(self._counter, request.messages)))

    def identity(self) -> dict[str, Any]:
        return {"backend": self.name, "model": self.model, "parameters": self.params.as_dict()}

    def describe(self) -> dict[str, Any]:
        return {
            **self.identity(),
            "base_url": self.base_url,
            "api_key_env": self.api_key_env,
            "api_key_sent": self.api_key_env != NO_API_KEY,
            "concurrency": self.concurrency,
            "retry_policy": self.policy.as_dict(),
            "sent_parameters": self.params.sent(),
            "http_transport": self.transport,
            "max_context": self.context.max_context if self.context else None,
            "context_tokenizer": self.context_tokenizer,
        }

    def payload(self, request: GenerationRequest) -> dict[str, Any]:
        return build_payload(self.model, request.messages, request.params or self.params)

    async def attempt(self, request: GenerationRequest, payload: dict[str, Any], body: bytes) -> GenerationResult:
        try:
            # The payload goes out exactly as recorded: the very bytes its digest covers.
            response = await self._client.post(body)
        except StatusError as exc:
            raise self._classify_status(exc) from None
        except json.JSONDecodeError as exc:
            message = self._clean(f"unparsable response: {exc}")
            raise TransientError("MalformedResponse", message, answer=message) from None
        except (OSError, _client_errors()) as exc:  # TimeoutError is an OSError
            raise self._connection_failure(exc) from None
        if not isinstance(response, dict):
            raise TransientError("MalformedResponse", self._clean(f"not a JSON object: {str(response)[:200]!r}"))
        return self._result(request, response)

    def _result(self, request: GenerationRequest, response: Any) -> GenerationResult:
        """Read a chat completion from its JSON. Parsing the plain dict (not the SDK's models)
        is cheaper and tolerates servers that add or omit optional fields."""
        try:
            choice = response["choices"][0]
            message = choice["message"]
            content, refusal_text = message.get("content"), message.get("refusal")
            if not isinstance(content, (str, type(None))):
                raise TypeError(f"message content is {type(content).__name__}")
        except (TypeError, KeyError, IndexError, AttributeError) as exc:
            detail = f"not a chat completion ({type(exc).__name__}: {exc})"
            raise TransientError("MalformedResponse", self._clean(detail)) from None
        usage = response.get("usage") if isinstance(response.get("usage"), dict) else None
        model = response.get("model")
        finish_reason = choice.get("finish_reason")
        if finish_reason == "content_filter":
            # A filtered reply is a failed call, not the model's answer: the provider withheld it.
            raise PermanentError(
                "ContentFilterError", "the provider's content filter stopped the reply (finish_reason content_filter)",
                content_filter=True, finish_reason=finish_reason, usage=usage, model=model,
                extra={"filtered_output": content},
            )
        # What the server says about how it answered, where it says it (OpenAI: the backend
        # configuration and the tier): the record keeps it next to what was sent.
        reported = {name: response[name] for name in _REPORTED if response.get(name) is not None}
        if refusal_text is not None:
            reported["refusal_text"] = refusal_text
        # Only the reply text counts; reasoning models' thinking is not part of what the protocol scores.
        return GenerationResult(
            id=request.id,
            status=STATUS_OK,
            model_output=content if content is not None else "",
            request_sha256="",
            finish_reason=finish_reason,
            usage=usage,
            model=model,
            refusal=refusal_text is not None,
            extra=reported,
        )

    def _connection_failure(self, exc: BaseException) -> TransientError:
        """Say what happened, in our words (an HTTP library's own words can mislead: the SDK called a
        refused connection "Request timed out")."""
        error_class = connection_failure_class(exc)
        where = self._endpoint()
        message = {
            "ConnectionRefused": f"connection refused by {where.netloc} (is the server running on that port?)",
            "NameNotResolved": f"the host name {where.hostname} does not resolve",
            "ConnectionLost": f"{where.netloc} closed the connection before answering",
            "ConnectTimeout": f"no connection to {where.netloc} within {self.policy.timeout_s:g} s",
            "ReadTimeout": f"no answer within {self.policy.timeout_s:g} s",
        }.get(error_class) or self._clean(_describe_cause(exc))
        # Refused or unresolvable: nothing reached a server. Only these can mean a wrong address.
        unreachable = error_class in ("ConnectionRefused", "NameNotResolved")
        connected = error_class not in ("ConnectionRefused", "NameNotResolved", "ConnectTimeout")
        return TransientError(error_class, message, connected=connected, unreachable=unreachable)

    def _endpoint(self) -> Any:
        return urllib.parse.urlsplit(self._client.base_url)

    def _classify_status(self, exc: StatusError) -> Exception:
        status = exc.status_code
        error_class = exc.error_class
        message = self._clean(_api_message(exc))
        if status == 429:
            return TransientError(error_class, message, status=status, retry_after_s=retry_after(exc.response.headers),
                                  throttled=True)
        if status >= 500 or status in _RETRYABLE_4XX:
            return TransientError(error_class, message, status=status, retry_after_s=retry_after(exc.response.headers),
                                  answer=f"{status} {message}")
        if _is_content_filter(exc):
            return PermanentError("ContentFilterError", message, status=status, content_filter=True)
        return PermanentError(error_class, message, status=status)

    def _clean(self, text: str) -> str:
        return redact(text, self._key)

    async def aclose(self) -> None:
        await self._client.close()


def _load_counting_tokenizer(name: str) -> Any:
    """The served model's tokenizer (a local directory or a cached hub id), to count prompt tokens
    exactly as the server's chat template will."""
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(name)
    except Exception as exc:
        raise ConfigError(f"--max-context needs the served model's tokenizer to count prompt tokens; {name!r} "
                          f"cannot be loaded ({type(exc).__name__}); pass --context-tokenizer PATH") from None
    if not getattr(tokenizer, "chat_template", None):
        raise ConfigError(f"--max-context: the tokenizer {name!r} has no chat template to count prompt tokens with")
    return tokenizer


def _client_errors() -> type[BaseException]:
    import aiohttp

    return aiohttp.ClientError


# What went wrong below HTTP, most specific first. HTTP libraries wrap the socket error in their
# own types (and some report every failure, even a refusal, as a "connect timeout"), so the class
# names along the whole cause chain decide, not the outermost exception.
_DNS_ERRORS = {"gaierror", "ClientConnectorDNSError"}
_LOST_ERRORS = {"ConnectionResetError", "BrokenPipeError", "ServerDisconnectedError", "ClientPayloadError"}
_CONNECT_TIMEOUTS = {"ConnectionTimeoutError"}
_READ_TIMEOUTS = {"SocketTimeoutError", "ServerTimeoutError", "TimeoutError"}


def connection_failure_class(exc: BaseException) -> str:
    """ConnectionRefused, NameNotResolved, ConnectionLost, ConnectTimeout, ReadTimeout, or
    APIConnectionError when the cause is none of these."""
    names, cause, seen = set(), exc, set()
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        names.update(k.__name__ for k in type(cause).__mro__)
        cause = cause.__cause__ or cause.__context__
    for error_class, markers in (("ConnectionRefused", {"ConnectionRefusedError"}), ("NameNotResolved", _DNS_ERRORS),
                                 ("ConnectionLost", _LOST_ERRORS), ("ConnectTimeout", _CONNECT_TIMEOUTS),
                                 ("ReadTimeout", _READ_TIMEOUTS)):
        if names & markers:
            return error_class
    return "APIConnectionError"


# How much of an unstructured error body (a plain-text or HTML error page) a record keeps.
_RAW_BODY_CHARS = 300


def _api_message(exc: Any) -> str:
    """The server's own reason for an error status. OpenAI-style servers put it in
    ``error.message``, FastAPI-based ones (``transformers serve``, many proxies) in ``detail``,
    some in a bare ``error`` string; anything else is quoted from the raw body, shortened, because
    the SDK's "Error code: 400" alone says nothing."""
    body = exc.body
    if isinstance(body, Mapping):
        inner = body.get("error", body)
        if isinstance(inner, Mapping) and inner.get("message"):
            return str(inner["message"])
        for value in (body.get("message"), body.get("detail"), inner):
            if isinstance(value, str) and value:
                return value
        if body.get("detail"):  # FastAPI validation errors: a list of objects
            return json.dumps(body["detail"], ensure_ascii=False)[:_RAW_BODY_CHARS]
    text = " ".join(_raw_body(exc).split())
    if text:
        return text if len(text) <= _RAW_BODY_CHARS else text[:_RAW_BODY_CHARS] + "…"
    return f"HTTP {exc.status_code} with an empty body"


def _raw_body(exc: Any) -> str:
    try:
        return exc.response.text
    except Exception:  # a streamed body that was closed before it was read
        return ""


def _describe_cause(exc: BaseException) -> str:
    """``Connection error.`` alone says little; name the underlying transport error."""
    cause = exc.__cause__ or exc.__context__
    return f"{type(cause).__name__}: {cause}" if cause else str(exc)


# OpenRouter's moderation refusal (HTTP 403 "your input was flagged") carries these in
# ``error.metadata``; a 403 without them (a key without access, a blocked account) is not one.
_MODERATION_METADATA = {"flagged_input", "reasons"}


def _is_content_filter(exc: Any) -> bool:
    """OpenAI and Azure mark filtered prompts with code ``content_filter`` (Azure also
    ``content_policy_violation``); some servers only say so in the message; OpenRouter's
    moderation puts ``flagged_input``/``reasons`` in the error's ``metadata``. Only an explicit
    marker counts: a bare 400 or 403 stays an ordinary failure."""
    codes = {str(exc.code or "").lower()}
    body = exc.body if isinstance(exc.body, Mapping) else {}
    inner = body.get("error", body) if isinstance(body, Mapping) else {}
    if isinstance(inner, Mapping):
        codes.add(str(inner.get("code") or "").lower())
        metadata = inner.get("metadata")
        if isinstance(metadata, Mapping) and _MODERATION_METADATA <= metadata.keys():
            return True
    if codes & {"content_filter", "content_policy_violation"}:
        return True
    return "content management policy" in _api_message(exc).lower()


def retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds a server asks us to wait: ``retry-after-ms``, else ``Retry-After`` as seconds or as
    an HTTP date; None when absent or unreadable."""
    ms = headers.get("retry-after-ms")
    if ms:
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())
