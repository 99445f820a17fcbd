"""The offline backend: deterministic, model-free replies for demos, tests and CI.

Each reply is derived from the SHA-256 of the request payload, so the same request always gets
the same reply and a different model name or parameter gets a different one. Replies look like a
role-play line (``角色名：…``; some carry a second line for S5 to cut) but MEAN NOTHING: scores of
an offline run say nothing about any model. Latency and transient or permanent faults can be
simulated, deterministically per (request, attempt), to exercise the retry and resume paths.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import Counter
from typing import Any

from charactereval_lib.engine.generation.base import STATUS_OK, ConfigError, DecodingParams, GenerationRequest, GenerationResult, body_sha256, build_payload
from charactereval_lib.engine.generation.estimate import estimate_request_tokens, estimate_tokens
from charactereval_lib.engine.generation.retry import PermanentError, RetryingBackend, RetryPolicy, TransientError

# Generic phrases written for this backend (not from the test set).
_OPENERS = ("", "嗯，", "哈哈，", "（点点头）", "唉，", "好啊，", "（笑了笑）", "哼，")
_BODIES = (
    "这件事我早就想好了。",
    "你说得也有道理。",
    "我们明天再商量吧。",
    "别担心，有我在。",
    "这可不像你会说的话。",
    "我倒想听听你的看法。",
    "先坐下喝口茶吧。",
    "事情没那么简单。",
)
OFFLINE_NOTICE = "offline backend: deterministic placeholder replies that mean nothing"
# The mark every placeholder reply carries in its record: a run's files say what made its
# replies even without its run.json (``engine.reports.evidence``).
BACKEND_MARK = {"backend": "offline"}


def offline_reply(role: str, digest: str, separator: str) -> str:
    """The reply for a request digest: ``role``, the benchmark's speaker ``separator``, opener and
    body, and, for one request in four, a second line."""
    raw = bytes.fromhex(digest)
    text = role + separator + _OPENERS[raw[0] % len(_OPENERS)] + _BODIES[raw[1] % len(_BODIES)]
    if raw[2] % 4 == 0:
        text += "\n" + _BODIES[raw[3] % len(_BODIES)]
    return text


def _chance(digest: str, salt: str) -> float:
    """A deterministic number in [0, 1) for (request, salt)."""
    return int(hashlib.sha256(f"{digest}:{salt}".encode()).hexdigest()[:8], 16) / 2**32


class OfflineBackend(RetryingBackend):
    name = "offline"

    def __init__(
        self,
        model: str,
        params: DecodingParams,
        *,
        separator: str,
        concurrency: int = 32,
        policy: RetryPolicy | None = None,
        latency_s: float = 0.0,
        fault_rate: float = 0.0,
        permanent_fault_rate: float = 0.0,
    ) -> None:
        super().__init__(concurrency=concurrency, policy=policy or RetryPolicy())
        for name, rate in (("fault_rate", fault_rate), ("permanent_fault_rate", permanent_fault_rate)):
            if not 0.0 <= rate <= 1.0:
                raise ConfigError(f"{name} must be between 0 and 1, got {rate}")
        self.model = model
        self.params = params
        self.separator = separator
        self.latency_s = latency_s
        self.fault_rate = fault_rate
        self.permanent_fault_rate = permanent_fault_rate
        self._attempts: Counter[int] = Counter()

    def identity(self) -> dict[str, Any]:
        return {"backend": self.name, "model": self.model, "parameters": self.params.as_dict()}

    def describe(self) -> dict[str, Any]:
        return {
            **self.identity(),
            "notice": OFFLINE_NOTICE,
            "concurrency": self.concurrency,
            "retry_policy": self.policy.as_dict(),
            "simulated": {"latency_s": self.latency_s, "fault_rate": self.fault_rate,
                          "permanent_fault_rate": self.permanent_fault_rate},
            "usage": "character-based token estimate (estimate.py)",
        }

    def payload(self, request: GenerationRequest) -> dict[str, Any]:
        return build_payload(self.model, request.messages, request.params or self.params)

    async def attempt(self, request: GenerationRequest, payload: dict[str, Any], body: bytes) -> GenerationResult:
        self._attempts[request.id] += 1
        attempt = self._attempts[request.id]
        digest = body_sha256(body)
        if self.latency_s:
            await asyncio.sleep(self.latency_s)
        if _chance(digest, "permanent") < self.permanent_fault_rate:
            raise PermanentError("SimulatedPermanentFault", "offline backend: simulated permanent failure")
        if _chance(digest, f"attempt-{attempt}") < self.fault_rate:
            raise TransientError("SimulatedFault", f"offline backend: simulated transient failure (attempt {attempt})")
        reply = offline_reply(request.role, digest, self.separator)
        prompt, completion = estimate_request_tokens(request.messages), estimate_tokens(reply)
        return GenerationResult(
            id=request.id,
            status=STATUS_OK,
            model_output=reply,
            request_sha256=digest,
            finish_reason="stop",
            usage={"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion},
            model=self.model,
            extra=dict(BACKEND_MARK),
        )
