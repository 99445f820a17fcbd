"""The HTTP side of the OpenAI-compatible backend: one aiohttp session POSTing chat-completion
payloads and reading the answers as plain JSON.

It replaces the ``openai`` SDK's client, which cost 1.25-1.44 ms of CPU per request against
about 0.35 ms for this (benchmarks/bench_judge.py, bench_generation.py), enough to make the client
the bottleneck at high concurrency on few cores. It keeps what the records rely on from the SDK:
the same base URL rules (``OPENAI_BASE_URL``, ``/chat/completions`` appended), the same headers
that carry meaning (the key, ``OpenAI-Organization`` / ``OpenAI-Project`` from the SDK's
variables), the SDK's error class for each status and its reading of an error body (the
``error`` object of a JSON body, else the body as JSON or text), and its reading of a success
(JSON when the content type says so, else the text). Retries stay in ``retry.py``.
"""

from __future__ import annotations

import asyncio
import json
import os
import weakref
from collections.abc import Mapping
from typing import Any

DEFAULT_BASE_URL = "https://api.openai.com/v1"
# The SDK's headers that change what a server does (organisation and project of the key).
_ENV_HEADERS = (("OPENAI_ORG_ID", "OpenAI-Organization"), ("OPENAI_PROJECT_ID", "OpenAI-Project"))

# The SDK's exception class for each error status (names are recorded as the error class).
_STATUS_CLASSES = {400: "BadRequestError", 401: "AuthenticationError", 403: "PermissionDeniedError",
                   404: "NotFoundError", 409: "ConflictError", 422: "UnprocessableEntityError",
                   429: "RateLimitError"}


def status_class(status: int) -> str:
    return _STATUS_CLASSES.get(status) or ("InternalServerError" if status >= 500 else "APIStatusError")


class ErrorResponse:
    """What an error status leaves to read: its headers and body text."""

    def __init__(self, headers: Mapping[str, str], text: str) -> None:
        self.headers = headers
        self.text = text


class StatusError(Exception):
    """An error status, read as the SDK reads it: ``body`` is the ``error`` object of a JSON body
    (else the JSON value, else the stripped text), ``code`` its ``code`` as a string."""

    def __init__(self, status: int, headers: Mapping[str, str], text: str) -> None:
        super().__init__(f"Error code: {status}")
        self.error_class = status_class(status)
        self.status_code = status
        self.response = ErrorResponse(headers, text)
        body: Any = text.strip()
        try:
            body = json.loads(body)
        except ValueError:
            pass
        self.body = body.get("error", body) if isinstance(body, Mapping) else body
        code = self.body.get("code") if isinstance(self.body, dict) else None
        self.code = str(code) if code is not None else None


class ChatClient:
    """POST a payload to ``{base_url}/chat/completions``. The connection pool is taken on first
    use, in the event loop that uses it, and shared with the other clients of that loop (see
    ``_shared_session``)."""

    def __init__(self, base_url: str | None, api_key: str, timeout_s: float) -> None:
        self.base_url = (base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL).rstrip("/") + "/"
        self._url = self.base_url + "chat/completions"
        self._headers = {"Authorization": f"Bearer {api_key}", "Content-Type": "application/json",
                         "Accept": "application/json"}
        for variable, header in _ENV_HEADERS:
            if os.environ.get(variable):
                self._headers[header] = os.environ[variable]
        self._timeout_s = timeout_s
        self._session: Any = None

    async def post(self, body: bytes) -> Any:
        """POST ``body`` (a JSON payload, already encoded: the caller digests the same bytes) and
        return the decoded JSON of a success (or its text when the content type is not JSON).
        Raises StatusError for an error status, json.JSONDecodeError for a body that is not JSON,
        and aiohttp's or the socket's exceptions when the connection fails."""
        if self._session is None:
            self._session = _shared_session(self._timeout_s)
        async with self._session.post(self._url, data=body, headers=self._headers) as response:
            raw = await response.read()
            if response.status >= 400:
                raise StatusError(response.status, response.headers, _text(raw, response))
            content_type = response.headers.get("content-type", "*").split(";")[0]
            if not content_type.endswith("json"):
                return _text(raw, response)
            return json.loads(raw)

    async def close(self) -> None:
        if self._session is not None:
            session, self._session = self._session, None
            await _release_session(session)


# One aiohttp session (one connection pool) per event loop and timeout, shared by its clients:
# the five roles of a CoSER run talk to one server, and a pool per role opened 672 connections
# for at most 256 requests in flight (bench_coser), each a connect on the client and an accept
# on the server. Headers, the key among them, go with each request, never with the session.
# event loop -> {timeout_s: [session, clients using it]}
_sessions: weakref.WeakKeyDictionary[Any, dict[float, list[Any]]] = weakref.WeakKeyDictionary()


def _shared_session(timeout_s: float) -> Any:
    per_loop = _sessions.setdefault(asyncio.get_running_loop(), {})
    entry = per_loop.get(timeout_s)
    if entry is None or entry[0].closed:
        entry = per_loop[timeout_s] = [_open_session(timeout_s), 0]
    entry[1] += 1
    return entry[0]


async def _release_session(session: Any) -> None:
    for per_loop in list(_sessions.values()):
        for timeout_s, entry in list(per_loop.items()):
            if entry[0] is session:
                entry[1] -= 1
                if entry[1] > 0:
                    return
                del per_loop[timeout_s]
    await session.close()


def _open_session(timeout_s: float) -> Any:
    import aiohttp

    # No total limit: each request's connect and every read wait at most timeout_s, as the
    # SDK's timeout did, so a connect timeout and a read timeout stay distinguishable.
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=timeout_s, sock_read=timeout_s)
    # The engine's limiter bounds the requests in flight; the connector must not queue them.
    return aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=0))


def _text(raw: bytes, response: Any) -> str:
    return raw.decode(response.get_encoding() if response.charset else "utf-8", errors="replace")
