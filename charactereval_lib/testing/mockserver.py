"""A local OpenAI-compatible chat-completions server for tests, benchmarks and demos.

It answers ``POST /v1/chat/completions`` with a reply derived from the request (so a client can
check that every record belongs to its own request) and can inject, per request and per attempt,
the failures a real endpoint produces: 429 with ``Retry-After``, 5xx, hangs past the client's
timeout, connection resets, malformed JSON, content-filter 400s, moderation 403s (OpenRouter's
shape) and plain 403s, other 4xx, empty and multi-line replies, and replies that start with a
reasoning model's ``<think>`` block. Its replies mean nothing. Built on ``aiohttp``, one of the
workbench's own dependencies.

As a deterministic judge (actions ``judge``, ``judge_multiline``, ``judge_invalid``) it answers
in the ``cot_classify`` shape: reasoning, then the grade alone on the last line; the grade is
derived from the request (``judge_grade``) or fixed (``judge:N``).

Run standalone (e.g. in its own process for a benchmark)::

    python -m charactereval_lib.testing.mockserver --latency 0.2
    # prints "listening on http://127.0.0.1:PORT/v1" and serves until killed
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

SERVED_MODEL = "mock-served-model"
# ``MockServer.served_model`` that reports the model each request names (as a server that serves
# what it is asked does).
AS_REQUESTED = "<as requested>"
SYSTEM_FINGERPRINT = "fp_mock"
# Reasoning tokens an answer reports (usage.completion_tokens_details, as OpenAI and OpenRouter do)
# when its request asks for reasoning (a ``reasoning_effort`` or ``reasoning`` key).
REASONING_TOKENS = 7

# Actions a plan can name (see ``MockServer.respond``); "429" and "slow" take ":seconds".
ACTIONS = (
    "ok", "multiline", "empty", "thinking", "refusal", "finish_filter", "429", "500", "503", "timeout",
    "reset", "malformed", "filter400", "bad400", "401", "403", "moderation403", "404", "slow",
    # Answers shaped like other servers' (FastAPI's {"detail": ...}, plain text, an HTML page):
    "detail400", "detail404", "text500", "html502",
    # A deterministic judge (see the module docstring); "judge" takes an optional ":grade".
    "judge", "judge_multiline", "judge_invalid",
)


TEXT_500 = "Internal Server Error: index out of range in self"
# A proxy's error page: long, mostly markup.
HTML_502 = ("<html><head><title>502 Bad Gateway</title></head><body><center><h1>502 Bad Gateway</h1></center>"
            + "<!-- padding -->" * 200 + "</body></html>")


def request_key(messages: Any) -> str:
    """The key a plan uses for a request: SHA-256 of its messages as canonical JSON."""
    text = json.dumps(messages, ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def echo_reply(key: str) -> str:
    """The reply of an ``ok`` answer: derived from the request, so records can be checked."""
    return f"echo {key[:16]}"


def multiline_reply(key: str) -> str:
    return f"echo {key[:16]}\nsecond line {key[16:24]}"


def thinking_block(key: str) -> str:
    """What a ``thinking`` answer puts before its reply: a reasoning model's leading block, several
    lines long, with whitespace around it."""
    return f"\n<think>\nreasoning about {key[:8]}\nand more\n</think>\n\n"


def judge_grade(key: str) -> int:
    """The grade 1-5 the judge actions give a request (from its key, so tests can predict it)."""
    return int(key[:8], 16) % 5 + 1


def judge_reply(key: str, action: str) -> str:
    """A judge answer: ``judge`` gives one line of reasoning and the grade; ``judge_multiline``
    several lines whose earlier ones hold other digits (a parser must take the last line);
    ``judge_invalid`` no grade at all."""
    name, _, argument = action.partition(":")
    grade = argument or str(judge_grade(key))
    if name == "judge_invalid":
        return f"Request {key[:8]}: I cannot grade this reply."
    if name == "judge_multiline":
        return f"1) the reply stays in character.\n2) it answers the last line.\nOverall:\n{grade}"
    return f"The reply was read ({key[:8]}).\n{grade}"


# A plan maps a request key to the action of each attempt (the last one repeats); a callable plan
# gets (key, attempt number starting at 1, payload) and returns the action.
Plan = Mapping[str, Sequence[str]] | Callable[[str, int, dict[str, Any]], str]


@dataclass
class MockServer:
    latency_s: float = 0.0
    plan: Plan = field(default_factory=dict)
    # Seconds a "timeout" action waits before answering (longer than the client's timeout).
    hang_s: float = 5.0
    host: str = "127.0.0.1"
    port: int = 0
    # What the server saw: every payload in arrival order, attempts per key, actions taken.
    received: list[dict[str, Any]] = field(default_factory=list)
    attempts: Counter = field(default_factory=Counter)
    actions: Counter = field(default_factory=Counter)
    authorizations: set[str] = field(default_factory=set)
    keep_payloads: bool = True
    # Forward every request to this OpenAI-compatible base URL and pass its answer back (a
    # recording proxy in front of a real server); the plan is not used then.
    forward_to: str | None = None
    # Deterministic mode: the text of an ``ok`` answer is ``reply(payload)`` instead of the echo
    # (e.g. ``testing.coser_script``, which plays every CoSER role).
    reply: Callable[[dict[str, Any]], str] | None = None
    # The action of a request the plan does not name ("judge" makes a deterministic judge).
    default_action: str = "ok"
    # The model every completion says served it (``model``): ``AS_REQUESTED`` reports the model
    # each request named; None leaves the field out (a server that reports no model).
    served_model: str | None = SERVED_MODEL
    # Requests being answered right now, and the most ever at once (checks client concurrency).
    in_flight: int = 0
    max_in_flight: int = 0

    _loop: asyncio.AbstractEventLoop | None = None
    _thread: threading.Thread | None = None
    _runner: web.AppRunner | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def action_for(self, key: str, attempt: int, payload: dict[str, Any]) -> str:
        if callable(self.plan):
            return self.plan(key, attempt, payload)
        steps = self.plan.get(key)
        if not steps:
            return self.default_action
        return steps[min(attempt, len(steps)) - 1]

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            return await self._answer(request)
        finally:
            self.in_flight -= 1

    async def _answer(self, request: web.Request) -> web.StreamResponse:
        try:
            payload = await request.json()
        except json.JSONDecodeError:
            return _error(400, "invalid_request_error", "body is not JSON")
        messages = payload.get("messages")
        if not isinstance(messages, list) or not payload.get("model"):
            return _error(400, "invalid_request_error", "model and messages are required")
        key = request_key(messages)
        self.attempts[key] += 1
        attempt = self.attempts[key]
        if self.keep_payloads:
            self.received.append(payload)
        self.authorizations.add(request.headers.get("Authorization", ""))
        if self.forward_to:
            return await self._forward(request)
        action = self.action_for(key, attempt, payload)
        self.actions[action.split(":")[0]] += 1
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        return await self.respond(request, action, key, messages, payload)

    async def _forward(self, request: web.Request) -> web.Response:
        import aiohttp

        url = self.forward_to.rstrip("/") + "/chat/completions"
        async with aiohttp.ClientSession() as session:
            async with session.post(url, data=await request.read(), headers={"Content-Type": "application/json",
                                    "Authorization": request.headers.get("Authorization", "")}) as upstream:
                return web.Response(status=upstream.status, body=await upstream.read(),
                                    content_type=upstream.content_type)

    async def respond(self, request: web.Request, action: str, key: str, messages: list,
                      payload: dict[str, Any] | None = None) -> web.StreamResponse:
        name, _, argument = action.partition(":")
        served = (payload or {}).get("model") if self.served_model == AS_REQUESTED else self.served_model
        if name in ("ok", "multiline", "empty", "slow", "thinking"):
            if name == "slow":
                await asyncio.sleep(float(argument or 1.0))
            default = self.reply(payload or {"messages": messages}) if self.reply else echo_reply(key)
            content = {"multiline": multiline_reply(key), "empty": "",
                       "thinking": thinking_block(key) + default}.get(name, default)
            reasoning = REASONING_TOKENS if {"reasoning_effort", "reasoning"} & (payload or {}).keys() else None
            return _completion(content, messages, "stop", served, reasoning_tokens=reasoning)
        if name.startswith("judge"):
            return _completion(judge_reply(key, action), messages, "stop", served)
        if name == "refusal":
            return _completion(None, messages, "stop", served, refusal="I can't help with that.")
        if name == "finish_filter":
            return _completion("partial", messages, "content_filter", served)
        if name == "429":
            return _error(429, "rate_limit_exceeded", "Rate limit reached", {"Retry-After": argument or "1"})
        if name in ("500", "503"):
            return _error(int(name), "server_error", "The server had an error")
        if name == "timeout":
            await asyncio.sleep(self.hang_s)
            return _completion(echo_reply(key), messages, "stop", served)
        if name == "reset":
            if request.transport is not None:
                request.transport.abort()
            raise asyncio.CancelledError  # nothing more can be sent on an aborted connection
        if name == "malformed":
            return web.Response(status=200, text='{"id": "x", "choices": [', content_type="application/json")
        if name == "filter400":
            return _error(400, "content_filter",
                          "The response was filtered due to the prompt triggering content management policy.")
        if name == "bad400":
            return _error(400, "invalid_request_error", "Invalid request: context too long")
        if name == "401":
            # Real providers echo (part of) the key they were sent: the client must redact it.
            sent = request.headers.get("Authorization", "").removeprefix("Bearer ")
            return _error(401, "invalid_api_key", f"Incorrect API key provided: {sent}.")
        if name == "403":
            return _error(403, "permission_denied", "This key has no access to the model")
        if name == "moderation403":
            # OpenRouter's moderation refusal: the status alone says nothing, the metadata does.
            body = {"error": {"code": 403, "message": "Your input was flagged by moderation",
                              "metadata": {"reasons": ["violence"], "flagged_input": "...", "provider_name": "mock",
                                           "model_slug": SERVED_MODEL}}}
            return web.json_response(body, status=403)
        if name == "404":
            return _error(404, "model_not_found", "The model does not exist")
        if name == "detail400":
            # What `transformers serve` answers when the request names another model than it serves.
            return web.json_response({"detail": f"Server is pinned to '{SERVED_MODEL}'; requested 'x'."}, status=400)
        if name == "detail404":
            return web.json_response({"detail": "Not Found"}, status=404)
        if name == "text500":
            return web.Response(status=500, text=TEXT_500, content_type="text/plain")
        if name == "html502":
            return web.Response(status=502, text=HTML_502, content_type="text/html")
        raise ValueError(f"mock server: unknown action {action!r} (known: {', '.join(ACTIONS)})")

    # --- lifecycle: a background thread with its own event loop ------------------------------

    def start(self) -> MockServer:
        ready = threading.Event()
        failure: list[BaseException] = []

        def serve() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            asyncio.set_event_loop(loop)
            try:
                loop.run_until_complete(self._start_site())
            except BaseException as exc:  # report any start failure to the caller
                failure.append(exc)
                ready.set()
                return
            ready.set()
            loop.run_forever()
            loop.run_until_complete(self._runner.cleanup())
            # Handlers still hanging on a "timeout" action are cancelled, not left half-done.
            pending = asyncio.all_tasks(loop)
            for task in pending:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.close()

        self._thread = threading.Thread(target=serve, name="mock-openai-server", daemon=True)
        self._thread.start()
        ready.wait(30)
        if failure:
            raise failure[0]
        return self

    async def _start_site(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.handle)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, backlog=1024)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # the port the OS chose for port 0

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop = None

    def __enter__(self) -> MockServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _completion(content: str | None, messages: list, finish_reason: str, model: str | None, refusal: str | None = None,
                reasoning_tokens: int | None = None) -> web.Response:
    prompt_chars = sum(len(m.get("content") or "") for m in messages if isinstance(m, dict))
    completion_chars = len(content or refusal or "")
    body = {
        "id": "chatcmpl-mock",
        "object": "chat.completion",
        "created": 0,
        "model": model,
        "system_fingerprint": SYSTEM_FINGERPRINT,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content, "refusal": refusal},
                "finish_reason": finish_reason,
            }
        ],
        "usage": {
            "prompt_tokens": prompt_chars,
            "completion_tokens": completion_chars,
            "total_tokens": prompt_chars + completion_chars,
        },
    }
    if model is None:
        del body["model"]
    if reasoning_tokens is not None:
        body["usage"]["completion_tokens_details"] = {"reasoning_tokens": reasoning_tokens}
    return web.json_response(body, dumps=lambda o: json.dumps(o, ensure_ascii=False))


def _error(status: int, code: str, message: str, headers: dict[str, str] | None = None) -> web.Response:
    body = {"error": {"message": message, "type": "invalid_request_error" if status < 500 else "server_error", "code": code}}
    return web.json_response(body, status=status, headers=headers)


async def _serve_forever(server: MockServer) -> None:
    await server._start_site()
    print(f"listening on {server.base_url}", flush=True)
    await asyncio.Event().wait()


def main() -> None:
    parser = argparse.ArgumentParser(description="A local OpenAI-compatible server whose replies mean nothing.")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds every request waits before its answer")
    parser.add_argument("--coser-script", action="store_true",
                        help="answer as deterministic CoSER actors, environment, NSP and judge (testing.coser_script)")
    parser.add_argument("--default-action", default="ok", choices=ACTIONS,
                        help="how every request is answered (judge: a deterministic 1-5 judge)")
    parser.add_argument("--echo-model", action="store_true",
                        help=f"report the model each request names as the one that served it (default: {SERVED_MODEL})")
    args = parser.parse_args()
    reply = None
    if args.coser_script:
        from charactereval_lib.testing.coser_script import scripted_reply as reply
    server = MockServer(latency_s=args.latency, port=args.port, keep_payloads=False, reply=reply,
                        default_action=args.default_action, served_model=AS_REQUESTED if args.echo_model else SERVED_MODEL)
    try:
        asyncio.run(_serve_forever(server))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
