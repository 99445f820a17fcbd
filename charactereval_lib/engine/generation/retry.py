"""Concurrent requests with retries and adaptive concurrency, for request/response backends.

Policy (recorded in run.json with every run):

- Transient failures (429, 408/409, 5xx, timeouts, connection errors, malformed responses) are
  retried with exponential back-off and "equal jitter": attempt *n* waits a uniform time in
  ``[d/2, d]`` with ``d = min(max_delay, base_delay * 2**(n-1))``. A ``Retry-After`` (or
  ``retry-after-ms``) answer is honoured instead: the wait is that value (capped) plus up to one
  ``base_delay`` of jitter so that throttled clients do not return in lockstep.
- Permanent failures (400 including content filters, 401, 403, 404, 422) are recorded at once.
- A deterministic failure is not retried for minutes: when the server gives the same answer
  (status and body) to ``same_answer_limit`` attempts of one request in a row, e.g. a 500 for a
  prompt the model cannot take, the request is recorded as failed with ``"repeated": n``.
  Timeouts, 429s and connection failures never count: they say nothing about the request.
- A dead endpoint stops the run: a refused connection or an unresolvable host name before the
  server ever answered this backend raises ``EndpointUnreachable`` instead of being retried and
  recorded for every sample. Once the server has answered, the same failures are a server going
  away (a restart) and are retried like any transient failure.
- Concurrency follows AIMD: a 429 halves the concurrency limit (never below 1), at most once per
  "epoch" so that a burst of 429s from requests sent under the old limit counts once; each
  success adds ``1/limit``, i.e. about one slot per limit's worth of successes, up to the
  configured maximum. A request waiting out its back-off holds no slot.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import random
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from charactereval_lib.engine.generation.base import (
    ConfigError,
    EndpointUnreachable,
    GenerationRequest,
    GenerationResult,
    body_sha256,
    canonical_json,
    error_result,
)


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 8
    base_delay_s: float = 1.0
    max_delay_s: float = 60.0
    # A server asking for a longer pause than this is still retried, after this long.
    max_retry_after_s: float = 300.0
    # Per attempt; long generations on a busy server can take minutes.
    timeout_s: float = 300.0
    # The same server error this many times in a row for one request ends its retries.
    same_answer_limit: int = 3

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ConfigError(f"max_attempts must be at least 1, got {self.max_attempts}")
        if self.same_answer_limit < 1:
            raise ConfigError(f"same_answer_limit must be at least 1, got {self.same_answer_limit}")
        if self.base_delay_s < 0 or self.max_delay_s < 0 or self.timeout_s <= 0:
            raise ConfigError("retry delays must be >= 0 and the timeout > 0")

    def delay(self, attempt: int, retry_after_s: float | None, rng: random.Random) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        if retry_after_s is not None:
            return min(max(retry_after_s, 0.0), self.max_retry_after_s) + rng.uniform(0, self.base_delay_s)
        ceiling = min(self.max_delay_s, self.base_delay_s * 2 ** (attempt - 1))
        return rng.uniform(ceiling / 2, ceiling)

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "backoff": "exponential, equal jitter; Retry-After honoured"}


class TransientError(Exception):
    """An attempt failed in a way that may succeed later."""

    def __init__(self, error_class: str, message: str, *, status: int | None = None,
                 retry_after_s: float | None = None, throttled: bool = False, connected: bool = True,
                 unreachable: bool = False, answer: str | None = None) -> None:
        super().__init__(message)
        self.error_class = error_class
        self.message = message
        self.status = status
        self.retry_after_s = retry_after_s
        # A 429: the server asks us to slow down, which lowers the concurrency limit.
        self.throttled = throttled
        # Whether the attempt reached a server at all, and whether it failed because the address
        # is refused or does not resolve (see RetryingBackend.complete).
        self.connected = connected
        self.unreachable = unreachable
        # The server's answer (status and body) when it is one that may repeat for this request
        # every time, e.g. a 500 for a prompt the model cannot take; None for timeouts, 429s and
        # connection failures, which say nothing about the request itself.
        self.answer = answer


class PermanentError(Exception):
    """An attempt failed in a way that retrying cannot fix; recorded at once."""

    def __init__(self, error_class: str, message: str, *, status: int | None = None, content_filter: bool = False,
                 **fields: Any) -> None:
        super().__init__(message)
        self.error_class = error_class
        self.message = message
        self.status = status
        self.content_filter = content_filter
        self.fields = fields


class AdaptiveLimiter:
    """A FIFO semaphore whose size follows AIMD (see the module docstring). Lock-free: it lives
    on one event loop, and a release hands its slot straight to the oldest waiter."""

    def __init__(self, max_limit: int, *, decrease_factor: float = 0.5) -> None:
        if max_limit < 1:
            raise ConfigError(f"concurrency must be at least 1, got {max_limit}")
        self.max_limit = max_limit
        self.limit = float(max_limit)
        self.decrease_factor = decrease_factor
        self.in_flight = 0
        self.epoch = 0
        self.decreases = 0
        self.lowest = float(max_limit)
        self._waiters: collections.deque[asyncio.Future[None]] = collections.deque()

    @property
    def slots(self) -> int:
        return max(1, int(self.limit))

    async def acquire(self) -> int:
        """Wait for a free slot; returns the epoch the request is sent in."""
        if self.in_flight < self.slots and not self._waiters:
            self.in_flight += 1
            return self.epoch
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter  # _wake counted the slot as ours before resolving the future
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release(self.epoch)  # handed a slot we no longer want: pass it on
            else:
                with contextlib.suppress(ValueError):
                    self._waiters.remove(waiter)
            raise
        return self.epoch

    def release(self, epoch: int, *, success: bool = False, throttled: bool = False) -> None:
        self.in_flight -= 1
        if throttled and epoch == self.epoch:
            self.limit = max(1.0, self.limit * self.decrease_factor)
            self.epoch += 1
            self.decreases += 1
            self.lowest = min(self.lowest, self.limit)
        elif success and self.limit < self.max_limit:
            self.limit = min(float(self.max_limit), self.limit + 1.0 / self.limit)
        self._wake()

    def _wake(self) -> None:
        while self._waiters and self.in_flight < self.slots:
            waiter = self._waiters.popleft()
            if not waiter.done():
                self.in_flight += 1
                waiter.set_result(None)

    def stats(self) -> dict[str, Any]:
        return {"max": self.max_limit, "final": round(self.limit, 2), "lowest": round(self.lowest, 2),
                "decreases": self.decreases}


class RetryingBackend(ABC):
    """A backend that sends one request per sample: concurrency, retries and outcomes are here;
    subclasses implement a single attempt."""

    name: str = "retrying"

    def __init__(self, *, concurrency: int, policy: RetryPolicy, rng_seed: int | None = None) -> None:
        self.concurrency = concurrency
        self.policy = policy
        self.limiter: AdaptiveLimiter | None = None
        self._rng = random.Random(rng_seed)
        # Whether any attempt of this backend has reached the server (see EndpointUnreachable).
        self._reached = False

    @abstractmethod
    def payload(self, request: GenerationRequest) -> dict[str, Any]:
        """The exact payload sent for a request (its digest goes into the record)."""

    def reject(self, request: GenerationRequest, sha: str) -> GenerationResult | None:
        """An error result for a request that must not be sent (e.g. a prompt longer than the
        model's context), or None to send it."""
        return None

    @abstractmethod
    async def attempt(self, request: GenerationRequest, payload: dict[str, Any], body: bytes) -> GenerationResult:
        """One attempt: a result with status ok, or raise TransientError / PermanentError. ``body``
        is ``payload`` as canonical JSON (what the digest covers), encoded once for every attempt."""

    async def complete(self, request: GenerationRequest) -> GenerationResult:
        """All attempts for one request, ending in an ok or error result."""
        assert self.limiter is not None
        payload = self.payload(request)
        body = canonical_json(payload)
        sha = body_sha256(body)
        rejected = self.reject(request, sha)
        if rejected is not None:
            return rejected
        started: float | None = None
        last: TransientError | None = None
        same_answers = 0
        for attempt in range(1, self.policy.max_attempts + 1):
            epoch = await self.limiter.acquire()
            sent = time.monotonic()
            # Time from the first send: waiting for a slot is queueing, not this request's cost.
            started = sent if started is None else started
            outcome: dict[str, bool] = {}
            try:
                result = await self.attempt(request, payload, body)
                outcome["success"] = True
            except TransientError as exc:
                repeated = exc.answer is not None and last is not None and exc.answer == last.answer
                same_answers = same_answers + 1 if repeated else 1
                last = exc
                outcome["throttled"] = exc.throttled
            except PermanentError as exc:
                self._reached = True
                return error_result(
                    request.id, sha, exc.error_class, exc.message, attempts=attempt, status_code=exc.status,
                    content_filter=exc.content_filter, latency_s=_seconds(time.monotonic() - sent),
                    elapsed_s=_seconds(time.monotonic() - started), **exc.fields,
                )
            finally:
                self.limiter.release(epoch, **outcome)
            if outcome.get("success"):
                self._reached = True
                result.request_sha256 = sha
                result.attempts = attempt
                result.latency_s = _seconds(time.monotonic() - sent)
                result.elapsed_s = _seconds(time.monotonic() - started)
                return result
            self._reached = self._reached or last.connected
            if last.unreachable and not self._reached:
                raise EndpointUnreachable(last.message)
            if last.answer is not None and same_answers >= self.policy.same_answer_limit:
                return error_result(
                    request.id, sha, last.error_class, last.message, attempts=attempt, status_code=last.status,
                    elapsed_s=_seconds(time.monotonic() - started), details={"repeated": same_answers},
                )
            if attempt < self.policy.max_attempts:
                await asyncio.sleep(self.policy.delay(attempt, last.retry_after_s, self._rng))
        assert last is not None
        return error_result(
            request.id, sha, last.error_class, last.message, attempts=self.policy.max_attempts,
            status_code=last.status, elapsed_s=_seconds(time.monotonic() - started),
        )

    async def stream(self, requests: Sequence[GenerationRequest]) -> AsyncGenerator[GenerationResult, None]:
        """Run every request concurrently (bounded by the limiter); yield results as they finish.
        Closing the iterator cancels whatever is still in flight."""
        self.limiter = AdaptiveLimiter(self.concurrency)
        done: asyncio.Queue[asyncio.Task[GenerationResult]] = asyncio.Queue()
        tasks = []
        for request in requests:
            task = asyncio.create_task(self.complete(request))
            task.add_done_callback(done.put_nowait)
            tasks.append(task)
        try:
            for _ in range(len(tasks)):
                yield (await done.get()).result()
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def call(self, request: GenerationRequest) -> GenerationResult:
        """One request, awaited by a caller whose next request depends on this reply (a
        multi-turn simulation). Concurrent calls share one limiter, as the requests of ``stream``
        do; the retry policy is the same."""
        if self.limiter is None:
            self.limiter = AdaptiveLimiter(self.concurrency)
        return await self.complete(request)

    def stats(self) -> dict[str, Any]:
        return {"concurrency": self.limiter.stats() if self.limiter else None}

    async def aclose(self) -> None:  # noqa: B027 - a default that backends holding connections override
        """Nothing to release by default."""


def _seconds(value: float) -> float:
    return round(value, 4)

