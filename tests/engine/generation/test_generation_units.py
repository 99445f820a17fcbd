"""Generation building blocks: decoding parameters, back-off, Retry-After, AIMD, redaction,
offline replies, estimates, resume planning."""

from __future__ import annotations

import asyncio
import dataclasses
import email.utils
import hashlib
import json
import random
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from charactereval_lib.charactereval.protocol import COLON, PROTOCOL_VERSION
from charactereval_lib.charactereval.requests import make_requests
from charactereval_lib.engine.generation.base import ConfigError, DecodingParams, GenerationResult, build_payload, redact
from charactereval_lib.engine.generation.engine import check_resume, plan_run
from charactereval_lib.engine.generation.estimate import estimate_cost, estimate_tokens
from charactereval_lib.engine.generation.offline import offline_reply
from charactereval_lib.engine.generation.openai_backend import read_api_key, retry_after
from charactereval_lib.engine.generation.retry import AdaptiveLimiter, RetryPolicy
from charactereval_lib.engine.storage import runs
from tests.generation_support import FAKE_KEY, synthetic_data

# --- decoding parameters (S4) ------------------------------------------------------------------


def test_default_sends_no_sampling_parameters_and_1024_tokens():
    params = DecodingParams.resolve()
    assert params.sent() == {"max_tokens": 1024}
    assert not params.do_sample
    payload = build_payload("m", [{"role": "user", "content": "x"}], params)
    assert payload == {"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": 1024}


def test_chatglm3_preset_and_explicit_flags_win():
    assert DecodingParams.resolve(preset="chatglm3").sent() == {"max_tokens": 1024, "temperature": 0.8, "top_p": 0.8}
    mixed = DecodingParams.resolve(preset="chatglm3", temperature=0.3, seed=7, max_tokens=64)
    assert mixed.sent() == {"max_tokens": 64, "temperature": 0.3, "top_p": 0.8, "seed": 7}
    assert mixed.do_sample
    assert DecodingParams.resolve(temperature=0.0).do_sample is False
    with pytest.raises(ConfigError, match="unknown preset"):
        DecodingParams.resolve(preset="nope")
    with pytest.raises(ConfigError, match="max_tokens"):
        DecodingParams.resolve(max_tokens=0)


# --- back-off and Retry-After ------------------------------------------------------------------


@given(attempt=st.integers(1, 30), base=st.floats(0.001, 5), cap=st.floats(0.01, 120), seed=st.integers(0, 2**32))
def test_backoff_is_exponential_with_equal_jitter_and_capped(attempt, base, cap, seed):
    policy = RetryPolicy(base_delay_s=base, max_delay_s=cap)
    ceiling = min(cap, base * 2 ** (attempt - 1))
    delay = policy.delay(attempt, None, random.Random(seed))
    assert ceiling / 2 <= delay <= ceiling


@given(after=st.floats(0, 1000), seed=st.integers(0, 2**32))
def test_retry_after_is_honoured_capped_with_a_little_jitter(after, seed):
    policy = RetryPolicy(base_delay_s=0.5, max_retry_after_s=300)
    delay = policy.delay(3, after, random.Random(seed))
    assert min(after, 300) <= delay <= min(after, 300) + 0.5


def test_retry_after_header_forms():
    assert retry_after({"retry-after": "2"}) == 2.0
    assert retry_after({"retry-after": "0.25"}) == 0.25
    assert retry_after({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    future = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 25 < retry_after({"retry-after": future}) <= 31
    assert retry_after({"retry-after": "soon"}) is None
    assert retry_after({}) is None
    assert retry_after({"retry-after": "-4"}) == 0.0


def test_policy_rejects_impossible_settings():
    with pytest.raises(ConfigError):
        RetryPolicy(max_attempts=0)
    with pytest.raises(ConfigError):
        RetryPolicy(timeout_s=0)


# --- AIMD concurrency ----------------------------------------------------------------------------


def test_limiter_halves_once_per_epoch_and_recovers_additively():
    async def scenario() -> None:
        limiter = AdaptiveLimiter(8)
        epochs = [await limiter.acquire() for _ in range(8)]
        assert limiter.in_flight == 8
        # A burst of 429s from requests sent under the same limit lowers it once.
        for epoch in epochs[:5]:
            limiter.release(epoch, throttled=True)
        assert limiter.limit == 4 and limiter.decreases == 1
        # A 429 from a request sent after the decrease counts again.
        epoch = await limiter.acquire()
        limiter.release(epoch, throttled=True)
        assert limiter.limit == 2 and limiter.decreases == 2
        for epoch in epochs[5:]:
            limiter.release(epoch, success=True)
        # Additive increase: +1/limit per success (about +1 per limit's worth), capped at the maximum.
        expected = 2.0
        for _ in epochs[5:]:
            expected += 1 / expected
        assert limiter.limit == pytest.approx(expected)
        for _ in range(200):
            limiter.release(await limiter.acquire(), success=True)
        assert limiter.limit == 8 and limiter.lowest == 2

    asyncio.run(scenario())


def test_limiter_never_goes_below_one_and_bounds_in_flight():
    async def scenario() -> None:
        limiter = AdaptiveLimiter(4)
        for _ in range(10):
            limiter.release(await limiter.acquire(), throttled=True)
        assert limiter.limit == 1.0 and limiter.slots == 1
        first = await limiter.acquire()
        waiter = asyncio.create_task(limiter.acquire())
        await asyncio.sleep(0.01)
        assert not waiter.done()  # one slot only
        limiter.release(first, success=True)
        await asyncio.wait_for(waiter, 1)

    asyncio.run(scenario())


def test_limiter_passes_on_a_slot_whose_waiter_was_cancelled():
    async def scenario() -> None:
        limiter = AdaptiveLimiter(1)
        held = await limiter.acquire()
        first = asyncio.create_task(limiter.acquire())
        second = asyncio.create_task(limiter.acquire())
        third = asyncio.create_task(limiter.acquire())
        await asyncio.sleep(0)
        third.cancel()  # gives up while waiting
        limiter.release(held)  # hands the slot to `first`...
        first.cancel()  # ...which no longer wants it, so `second` must get it
        await asyncio.gather(first, third, return_exceptions=True)
        await asyncio.wait_for(second, 1)
        assert limiter.in_flight == 1 and not limiter._waiters

    asyncio.run(scenario())


def test_records_carry_every_result_field():
    result = GenerationResult(7, "ok", "甲：好", "ab" * 32, extra={"batch_size": 2})
    field_names = {f.name for f in dataclasses.fields(GenerationResult)} - {"extra"}
    assert set(result.to_record()) == field_names | {"batch_size"}


# --- secrets -------------------------------------------------------------------------------------


def test_redact_removes_the_key_and_masked_or_partial_echoes():
    assert FAKE_KEY not in redact(f"Incorrect API key provided: {FAKE_KEY}.", FAKE_KEY)
    masked = FAKE_KEY[:6] + "*" * 20 + FAKE_KEY[-4:]
    assert redact(f"key {masked} is wrong", FAKE_KEY) == "key [redacted] is wrong"
    partial = "prefix" + FAKE_KEY[10:22] + "suffix"
    assert "[redacted]" in redact(f"got '{partial}'", FAKE_KEY)
    assert redact("nothing secret here", FAKE_KEY) == "nothing secret here"
    assert len(redact("x" * 5000, FAKE_KEY)) <= 501


def test_api_key_env_must_be_a_name_and_is_never_echoed(monkeypatch):
    with pytest.raises(ConfigError) as info:
        read_api_key(FAKE_KEY)
    assert FAKE_KEY not in str(info.value)
    monkeypatch.delenv("CE_TEST_KEY", raising=False)
    with pytest.raises(ConfigError, match="CE_TEST_KEY is not set"):
        read_api_key("CE_TEST_KEY")
    monkeypatch.setenv("CE_TEST_KEY", FAKE_KEY)
    assert read_api_key("CE_TEST_KEY") == FAKE_KEY


# --- offline replies and estimates ----------------------------------------------------------------


def test_offline_replies_are_deterministic_role_lines_some_multiline():
    digests = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(64)]
    replies = [offline_reply("甲乙", d, COLON) for d in digests]
    assert replies == [offline_reply("甲乙", d, COLON) for d in digests]
    assert all(r.startswith("甲乙：") for r in replies)
    multiline = [r for r in replies if "\n" in r]
    assert 0 < len(multiline) < len(replies)


def test_character_estimate_counts_cjk_as_one_token_and_prices():
    assert estimate_tokens("你好：") == 3
    assert estimate_tokens("abcdefgh") == 2
    data = synthetic_data(4)

    estimate = estimate_cost(make_requests(data.samples, data), 1024, price_in=2.0, price_out=8.0)
    assert estimate.output_tokens_max == 4 * 1024
    assert estimate.cost(0) == pytest.approx(estimate.input_tokens * 2.0 / 1e6)
    assert "character-based" in estimate.lines()[0]
    assert "$" in estimate.lines()[1]


# --- resume planning ------------------------------------------------------------------------------


def _record(sample_id: int, status: str) -> dict:
    return {"id": sample_id, "status": status, "model_output": "x" if status == "ok" else None}


def test_plan_uses_the_latest_record_and_tolerates_a_torn_tail(tmp_path):
    data = synthetic_data(5)
    ids = [s.id for s in data.samples]
    log = tmp_path / runs.GENERATIONS
    lines = [_record(ids[0], "error"), _record(ids[0], "ok"), _record(ids[1], "ok"), _record(ids[2], "error")]
    log.write_text("".join(json.dumps(r) + "\n" for r in lines) + '{"id": 9, "sta', encoding="utf-8")
    plan = plan_run(tmp_path, make_requests(data.samples, data))
    assert [s.id for s in plan.pending] == ids[3:]
    assert (plan.done, plan.kept_failed, plan.retried) == (2, 1, 0)
    assert plan.warnings and "torn last line" in plan.warnings[0]
    plan = plan_run(tmp_path, make_requests(data.samples, data), retry_errors=True)
    assert [s.id for s in plan.pending] == [ids[2], *ids[3:]] and plan.retried == 1


def test_resume_check_refuses_other_settings_and_foreign_generations(tmp_path):
    identity = {"protocol_version": PROTOCOL_VERSION, "backend": "offline", "model": "m",
                "parameters": DecodingParams.resolve().as_dict()}
    check_resume(tmp_path, identity)  # no generations yet: anything goes
    (tmp_path / runs.GENERATIONS).write_text(json.dumps(_record(1, "ok")) + "\n")
    runs.update_manifest(tmp_path, generation={"identity": identity})
    check_resume(tmp_path, identity)
    changed = {**identity, "parameters": DecodingParams.resolve(temperature=0.5).as_dict()}
    with pytest.raises(runs.RunError, match=r"parameters\.temperature None -> 0\.5"):
        check_resume(tmp_path, changed)
    with pytest.raises(runs.RunError, match=r"protocol_version 'charactereval-0\.9' ->"):
        runs.update_manifest(tmp_path, generation={"identity": {**identity, "protocol_version": "charactereval-0.9"}})
        check_resume(tmp_path, identity)
    runs.update_manifest(tmp_path, generation={"identity": None, "backend": "import-official"})
    with pytest.raises(runs.RunError, match="not made by `generate` \\(import-official\\)"):
        check_resume(tmp_path, identity)
