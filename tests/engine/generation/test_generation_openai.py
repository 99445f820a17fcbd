"""The OpenAI-compatible backend through the engine, against a real HTTP server on 127.0.0.1
that injects the failures real endpoints produce. Assertions are exact: the server's plan is
keyed by each request's messages, so every sample's fate is known in advance."""

from __future__ import annotations

import time
from collections import Counter

import pytest

from charactereval_lib.charactereval.requests import generation_task, make_requests
from charactereval_lib.charactereval.transform import generation_outputs
from charactereval_lib.engine.generation.backends import BackendOptions, make_backend
from charactereval_lib.engine.generation.base import DecodingParams
from charactereval_lib.engine.generation.engine import generation_job, run_generation
from charactereval_lib.engine.generation.retry import RetryPolicy
from charactereval_lib.engine.storage import artifacts, runs
from charactereval_lib.testing.mockserver import SERVED_MODEL, SYSTEM_FINGERPRINT, MockServer, echo_reply, multiline_reply
from tests.generation_support import FAKE_KEY, expected_sha, files_containing, keys_by_id, synthetic_data

pytestmark = pytest.mark.usefixtures("fake_key")

MODEL = "test-model"
MAX_ATTEMPTS = 4
# Per attempt; the server's "timeout" action hangs longer than this.
TIMEOUT_S = 0.5
FAST = RetryPolicy(max_attempts=MAX_ATTEMPTS, base_delay_s=0.01, max_delay_s=0.05, timeout_s=TIMEOUT_S)


def backend_for(server: MockServer, params: DecodingParams | None = None, *, concurrency: int = 8,
                policy: RetryPolicy = FAST):
    options = BackendOptions(base_url=server.base_url, concurrency=concurrency, policy=policy)
    return make_backend("openai", MODEL, params or DecodingParams.resolve(), options)


def latest(run_dir) -> dict[int, dict]:
    read = artifacts.read_jsonl(run_dir / runs.GENERATIONS)
    assert not read.warnings
    return {key[0]: record for key, record in artifacts.latest_by_key(read.records, "id").items()}


# Scenario -> (actions per attempt, expected status, error class, expected attempts).
SCENARIOS = {
    "ok": (["ok"], "ok", None, 1),
    "multiline": (["multiline"], "ok", None, 1),
    "empty": (["empty"], "ok", None, 1),
    "refusal": (["refusal"], "ok", None, 1),
    "finish_filter": (["finish_filter"], "error", "ContentFilterError", 1),
    "429_then_ok": (["429:0.3", "ok"], "ok", None, 2),
    "5xx_then_ok": (["500", "503", "ok"], "ok", None, 3),
    "timeout_then_ok": (["timeout", "ok"], "ok", None, 2),
    "reset_then_ok": (["reset", "ok"], "ok", None, 2),
    "malformed_then_ok": (["malformed", "ok"], "ok", None, 2),
    "filter400": (["filter400"], "error", "ContentFilterError", 1),
    "bad400": (["bad400"], "error", "BadRequestError", 1),
    "401": (["401"], "error", "AuthenticationError", 1),
    "404": (["404"], "error", "NotFoundError", 1),
    # The same 500 three times in a row is taken as deterministic (RetryPolicy.same_answer_limit).
    "always_500": (["500"], "error", "InternalServerError", 3),
    "always_reset": (["reset"], "error", "ConnectionLost", MAX_ATTEMPTS),
    "always_timeout": (["timeout"], "error", "ReadTimeout", MAX_ATTEMPTS),
}


def test_every_fault_gives_the_exact_record_and_nothing_is_lost_or_leaked(server, tmp_path, capfd):
    names = list(SCENARIOS)
    data = synthetic_data(2 * len(names))
    keys = keys_by_id(data)
    scenario = {s.id: names[i % len(names)] for i, s in enumerate(data.samples)}
    server.plan = {keys[i]: SCENARIOS[name][0] for i, name in scenario.items()}
    run = tmp_path / "run"

    summary = run_generation(run, make_requests(data.samples, data), backend_for(server), generation_task(data), progress=False)

    records = artifacts.read_jsonl(run / runs.GENERATIONS).records
    assert sorted(r["id"] for r in records) == sorted(s.id for s in data.samples)  # one each
    shas = expected_sha(data, MODEL, DecodingParams.resolve())
    for sample_id, record in latest(run).items():
        name = scenario[sample_id]
        _, status, error_class, attempts = SCENARIOS[name]
        key = keys[sample_id]
        assert (record["status"], record["attempts"]) == (status, attempts), name
        assert record["request_sha256"] == shas[sample_id]
        assert server.attempts[key] == attempts, name  # nothing sent beyond what is recorded
        if status == "ok":
            assert record["error"] is None and record["model"] == SERVED_MODEL
            expected = {"multiline": multiline_reply(key), "empty": "", "refusal": ""}.get(name, echo_reply(key))
            assert record["model_output"] == expected, name
            assert record["refusal"] is (name == "refusal")
            assert record["usage"]["prompt_tokens"] > 0 and record["finish_reason"] == "stop"
            assert record["system_fingerprint"] == SYSTEM_FINGERPRINT  # what the server reported back
        else:
            assert record["model_output"] is None and record["error"]["class"] == error_class, name
            assert record["content_filter"] is (error_class == "ContentFilterError")
        if name == "429_then_ok":
            assert record["elapsed_s"] >= 0.3  # Retry-After honoured
        if name == "401":
            assert "[redacted]" in record["error"]["message"]

    # S5 sees None for every failure and the raw text (first line cut later) for the rest.
    outputs = generation_outputs(records)
    assert sum(v is None for v in outputs.values()) == sum(SCENARIOS[n][1] == "error" for n in scenario.values())
    assert summary.ok + sum(summary.errors.values()) == len(data.samples)
    assert summary.errors["ContentFilterError"] == 4 and summary.refusals == 2 and summary.empty == 4
    assert summary.errors["ReadTimeout"] == 2 and summary.errors["ConnectionLost"] == 2

    # The key went out as a bearer token but was written nowhere and printed nowhere.
    assert server.authorizations == {f"Bearer {FAKE_KEY}"}
    assert files_containing(run, FAKE_KEY) == []
    out, err = capfd.readouterr()
    assert FAKE_KEY not in out + err
    manifest = runs.load_manifest(run)
    assert manifest["generation"]["http_transport"] == "aiohttp"
    assert manifest["generation"]["api_key_env"] == "OPENAI_API_KEY"
    assert manifest["generation"]["retry_policy"]["max_attempts"] == MAX_ATTEMPTS


def test_payload_carries_only_chosen_parameters(server, tmp_path):
    data = synthetic_data(3)
    run_generation(tmp_path / "default", make_requests(data.samples, data), backend_for(server), generation_task(data), progress=False)
    assert all(set(p) == {"model", "messages", "max_tokens"} and p["max_tokens"] == 1024 for p in server.received)

    server.received.clear()
    params = DecodingParams.resolve(preset="chatglm3", seed=11, max_tokens=300)
    run_generation(tmp_path / "preset", make_requests(data.samples, data), backend_for(server, params), generation_task(data), progress=False)
    assert all({k: p[k] for k in ("temperature", "top_p", "seed", "max_tokens")}
               == {"temperature": 0.8, "top_p": 0.8, "seed": 11, "max_tokens": 300} for p in server.received)
    generation = runs.load_manifest(tmp_path / "preset")["generation"]
    assert generation["sent_parameters"] == {"max_tokens": 300, "temperature": 0.8, "top_p": 0.8, "seed": 11}
    assert generation["parameters"]["preset"] == "chatglm3"


def test_concurrency_is_bounded_and_429_storms_lower_it_until_it_recovers(server, tmp_path):
    data = synthetic_data(160)
    server.latency_s = 0.02
    storm = {"left": 30}

    def plan(key, attempt, payload):
        # The first 30 requests to arrive are throttled; everything after succeeds.
        if storm["left"] > 0:
            storm["left"] -= 1
            return "429:0.05"
        return "ok"

    server.plan = plan
    backend = backend_for(server, concurrency=16, policy=RetryPolicy(max_attempts=8, base_delay_s=0.01, timeout_s=5))
    summary = run_generation(tmp_path / "run", make_requests(data.samples, data), backend, generation_task(data), progress=False)

    assert summary.ok == len(data.samples) and not summary.errors
    assert server.max_in_flight <= 16
    stats = summary.concurrency
    assert stats["decreases"] >= 2 and stats["lowest"] <= 4
    assert stats["final"] > stats["lowest"] + 1  # additive recovery after the storm
    assert "429s lowered concurrency" in summary.line()


def test_full_concurrency_is_used_when_the_server_is_healthy(server, tmp_path):
    data = synthetic_data(48)
    server.latency_s = 0.05
    run_generation(tmp_path / "run", make_requests(data.samples, data), backend_for(server, concurrency=12), generation_task(data), progress=False)
    assert server.max_in_flight == 12


def test_resume_skips_ok_ids_and_retries_errors_only_when_asked(server, tmp_path):
    data = synthetic_data(12)
    keys = keys_by_id(data)
    failing = {s.id for s in data.samples[::3]}
    server.plan = {keys[i]: ["500"] for i in failing}
    run = tmp_path / "run"
    policy = RetryPolicy(max_attempts=2, base_delay_s=0.01, timeout_s=5)

    first = run_generation(run, make_requests(data.samples, data), backend_for(server, policy=policy), generation_task(data), progress=False)
    assert first.ok == 8 and first.errors == Counter({"InternalServerError": 4})
    sent = sum(server.attempts.values())

    again = run_generation(run, make_requests(data.samples, data), backend_for(server, policy=policy), generation_task(data), progress=False)
    assert (again.pending, again.already_ok, again.errors_kept) == (0, 8, 4)
    assert sum(server.attempts.values()) == sent  # nothing was sent

    server.plan = {}
    retried = run_generation(run, make_requests(data.samples, data), backend_for(server, policy=policy), generation_task(data), retry_errors=True,
                             progress=False)
    assert retried.pending == 4 and retried.ok == 4
    state = latest(run)
    assert all(record["status"] == "ok" for record in state.values())
    records = artifacts.read_jsonl(run / runs.GENERATIONS).records
    # The log keeps the history: the 4 old errors, then one ok per id.
    assert len(records) == 16 and Counter(r["status"] for r in records) == {"ok": 12, "error": 4}
    sessions = runs.load_manifest(run)["generation"]["sessions"]
    assert [s["pending"] for s in sessions] == [12, 0, 4]
    assert runs.load_manifest(run)["generation"]["status"] == "complete"  # every sample has a record


def test_a_torn_last_line_is_cut_and_the_run_completes(server, tmp_path):
    data = synthetic_data(10)
    run = tmp_path / "run"
    run_generation(run, make_requests(data.samples[:4], data), backend_for(server), generation_task(data), progress=False)
    with open(run / runs.GENERATIONS, "a", encoding="utf-8") as log:
        log.write('{"id": 1004, "status": "ok", "model_out')  # a crash mid-write
    summary = run_generation(run, make_requests(data.samples, data), backend_for(server), generation_task(data), progress=False)
    assert summary.pending == 6
    read = artifacts.read_jsonl(run / runs.GENERATIONS)
    assert not read.warnings and sorted(r["id"] for r in read.records) == [s.id for s in data.samples]


def test_a_second_writer_is_refused(server, tmp_path):
    data = synthetic_data(2)
    run = tmp_path / "run"
    with generation_job(runs.RunDir.resolve(run)).locked():
        with pytest.raises(runs.RunError, match="another `generate` is writing"):
            run_generation(run, make_requests(data.samples, data), backend_for(server), generation_task(data), progress=False)


def test_permanent_failures_are_not_retried_and_cost_no_back_off(server, tmp_path):
    data = synthetic_data(6)
    keys = keys_by_id(data)
    server.plan = {k: ["401"] for k in keys.values()}
    slow_policy = RetryPolicy(max_attempts=5, base_delay_s=10, timeout_s=5)
    started = time.monotonic()
    summary = run_generation(tmp_path / "run", make_requests(data.samples, data), backend_for(server, policy=slow_policy), generation_task(data),
                             progress=False)
    assert time.monotonic() - started < 5
    assert summary.errors == Counter({"AuthenticationError": 6}) and sum(server.attempts.values()) == 6
