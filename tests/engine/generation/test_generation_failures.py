"""How the generation client reports and handles failures of real endpoints: the server's own
reason in every error record, what happened to a connection named truthfully, a dead endpoint
stopping the run at once, deterministic failures not retried for minutes, over-long prompts never
sent, and the exit status that tells scripts about failed samples. Real HTTP to the local mock
server (or to a port where nothing listens)."""

from __future__ import annotations

import socket
import time
from collections import Counter

import pytest

from charactereval_lib.charactereval.requests import generation_task, make_requests
from charactereval_lib.engine.generation.backends import BackendOptions, make_backend
from charactereval_lib.engine.generation.base import DecodingParams
from charactereval_lib.engine.generation.engine import run_generation
from charactereval_lib.engine.generation.retry import RetryPolicy
from charactereval_lib.engine.storage import artifacts, runs
from charactereval_lib.testing.mockserver import HTML_502, SERVED_MODEL, TEXT_500, MockServer
from tests.generation_support import keys_by_id, synthetic_data

pytestmark = pytest.mark.usefixtures("fake_key")

MODEL = "test-model"
FAST = RetryPolicy(max_attempts=4, base_delay_s=0.01, max_delay_s=0.05, timeout_s=0.5)


def backend_at(base_url: str, *, policy: RetryPolicy = FAST, concurrency: int = 4, **options):
    return make_backend("openai", MODEL, DecodingParams.resolve(),
                        BackendOptions(base_url=base_url, concurrency=concurrency, policy=policy, **options))


def latest(run_dir) -> dict[int, dict]:
    read = artifacts.read_jsonl(run_dir / runs.GENERATIONS)
    return {key[0]: record for key, record in artifacts.latest_by_key(read.records, "id").items()}


def closed_port() -> int:
    """A loopback port where nothing listens (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# --- 1. the server's reason is kept --------------------------------------------------------------


def test_error_records_keep_the_servers_reason_whatever_its_shape(server, tmp_path):
    data = synthetic_data(4)
    keys = keys_by_id(data)
    actions = dict(zip(keys.values(), (["detail400"], ["detail404"], ["text500"], ["html502"]), strict=True))
    server.plan = actions
    run_generation(tmp_path / "run", make_requests(data.samples, data), backend_at(server.base_url), generation_task(data), progress=False)

    errors = {actions[keys[i]][0]: record["error"] for i, record in latest(tmp_path / "run").items()}
    assert errors["detail400"]["message"] == f"Server is pinned to '{SERVED_MODEL}'; requested 'x'."
    assert errors["detail400"]["status"] == 400
    assert errors["detail404"]["message"] == "Not Found"
    assert errors["text500"]["message"] == TEXT_500
    # A page of markup is shortened, and still says what it is.
    assert errors["html502"]["message"].startswith("<html><head><title>502 Bad Gateway")
    assert len(errors["html502"]["message"]) < 400 < len(HTML_502)


# --- 6. what happened to the connection, named truthfully -----------------------------------------


def test_a_refused_connection_is_named_as_such_and_stops_the_run_at_once(tmp_path):
    from charactereval_lib.engine.generation.base import EndpointUnreachable

    data = synthetic_data(20)
    port = closed_port()
    slow = RetryPolicy(max_attempts=8, base_delay_s=5, timeout_s=30)
    started = time.monotonic()
    with pytest.raises(EndpointUnreachable) as info:
        run_generation(tmp_path / "run", make_requests(data.samples, data), backend_at(f"http://127.0.0.1:{port}/v1", policy=slow), generation_task(data),
                       progress=False)
    assert time.monotonic() - started < 3
    message = str(info.value)
    assert "refused" in message and f"127.0.0.1:{port}" in message and "timed out" not in message
    assert "\n" not in message
    # Nothing was delivered, so nothing is recorded as this model's failure; the engine says why it stopped.
    assert latest(tmp_path / "run") == {}
    generation = runs.load_manifest(tmp_path / "run")["generation"]
    assert generation["status"] == "aborted" and "refused" in generation["sessions"][-1]["aborted"]
    assert info.value.summary is not None and info.value.summary.aborted == message


def test_an_unresolvable_host_name_stops_the_run_at_once(tmp_path):
    from charactereval_lib.engine.generation.base import EndpointUnreachable

    data = synthetic_data(4)
    started = time.monotonic()
    with pytest.raises(EndpointUnreachable, match="does not resolve") as info:
        run_generation(tmp_path / "run", make_requests(data.samples, data), backend_at("http://no-such-host.invalid/v1"), generation_task(data),
                       progress=False)
    assert time.monotonic() - started < 10
    assert "no-such-host.invalid" in str(info.value)


def test_a_server_that_goes_away_mid_run_is_retried_and_recorded_not_a_dead_endpoint(tmp_path):
    import threading

    data = synthetic_data(6)
    mock = MockServer()
    answered = []
    stopper = threading.Thread(target=mock.stop)

    def plan(key, attempt, payload):
        # The third request is the last one answered: the server then shuts down (from another
        # thread, as its own loop is answering), and the rest find nothing listening.
        answered.append(key)
        if len(answered) == 3:
            stopper.start()
        return "ok" if len(answered) <= 3 else "timeout"

    mock.plan = plan
    mock.start()
    summary = run_generation(tmp_path / "run", make_requests(data.samples, data), backend_at(mock.base_url, concurrency=1), generation_task(data),
                             progress=False)
    stopper.join(10)
    assert summary.ok >= 2 and set(summary.errors) <= {"ConnectionRefused", "ConnectionLost"}
    refused = [r for r in latest(tmp_path / "run").values() if (r["error"] or {}).get("class") == "ConnectionRefused"]
    assert refused and all(r["attempts"] == FAST.max_attempts and "refused" in r["error"]["message"]
                           for r in refused)


def test_a_read_timeout_is_named_as_one(server, tmp_path):
    data = synthetic_data(1)
    server.plan = {k: ["timeout"] for k in keys_by_id(data).values()}
    run_generation(tmp_path / "run", make_requests(data.samples, data), backend_at(server.base_url,
                   policy=RetryPolicy(max_attempts=1, timeout_s=0.3)), generation_task(data), progress=False)
    error = latest(tmp_path / "run")[data.samples[0].id]["error"]
    assert error["class"] == "ReadTimeout" and "no answer within 0.3 s" in error["message"]


# --- 2. a deterministic failure is not retried for minutes ---------------------------------------


def test_the_same_server_error_three_times_in_a_row_ends_the_retries(server, tmp_path):
    data = synthetic_data(3)
    keys = list(keys_by_id(data).values())
    server.plan = {keys[0]: ["text500"], keys[1]: ["text500", "500", "text500", "500", "ok"], keys[2]: ["timeout"]}
    policy = RetryPolicy(max_attempts=8, base_delay_s=0.01, max_delay_s=0.02, timeout_s=0.3)
    summary = run_generation(tmp_path / "run", make_requests(data.samples, data), backend_at(server.base_url, policy=policy), generation_task(data),
                             progress=False)
    records = latest(tmp_path / "run")
    same, alternating, hanging = (records[s.id] for s in data.samples)
    assert server.attempts[keys[0]] == 3 and same["attempts"] == 3
    assert same["error"] == {"class": "InternalServerError", "message": TEXT_500, "status": 500, "repeated": 3}
    # Different answers are not a pattern: retried until they succeed.
    assert alternating["status"] == "ok" and alternating["attempts"] == 5
    # A timeout says nothing about the request: every attempt is spent.
    assert hanging["attempts"] == 8 and "repeated" not in hanging["error"]
    assert summary.errors == Counter({"InternalServerError": 1, "ReadTimeout": 1})


# --- issue 9.3: a missing API key is found before anything is sent; local servers need none ------


def test_a_missing_key_is_refused_before_sending_even_for_a_local_server(server, monkeypatch):
    from charactereval_lib.engine.generation.base import ConfigError

    monkeypatch.delenv("OPENAI_API_KEY")
    with pytest.raises(ConfigError, match="OPENAI_API_KEY is not set.*--api-key-env ''"):
        backend_at(server.base_url)
    assert sum(server.attempts.values()) == 0


def test_no_key_mode_sends_a_placeholder_to_a_local_server(server, tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY")
    data = synthetic_data(2)
    summary = run_generation(tmp_path / "run", make_requests(data.samples, data), backend_at(server.base_url, api_key_env=""), generation_task(data),
                             progress=False)
    assert summary.ok == 2 and server.authorizations == {"Bearer no-key"}
    generation = runs.load_manifest(tmp_path / "run")["generation"]
    assert generation["api_key_env"] == "" and generation["api_key_sent"] is False


# --- 3. the exit status tells scripts about failed samples ---------------------------------------


def test_exit_code_is_1_when_any_sample_failed_and_stays_so_until_it_is_retried(server, tmp_path):
    from charactereval_lib.engine.generation.engine import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, exit_code

    data = synthetic_data(10)
    keys = list(keys_by_id(data).values())
    server.plan = {keys[3]: ["401"]}
    run = tmp_path / "run"
    first = run_generation(run, make_requests(data.samples, data), backend_at(server.base_url), generation_task(data), progress=False)
    assert (first.ok, first.failed, exit_code(first)) == (9, 1, EXIT_FAILED)
    again = run_generation(run, make_requests(data.samples, data), backend_at(server.base_url), generation_task(data), progress=False)
    assert (again.pending, again.failed, exit_code(again)) == (0, 1, EXIT_FAILED)  # the error is still there
    server.plan = {}
    retried = run_generation(run, make_requests(data.samples, data), backend_at(server.base_url), generation_task(data), retry_errors=True, progress=False)
    assert (retried.ok, retried.failed, exit_code(retried)) == (1, 0, EXIT_OK)
    retried.interrupted = True
    assert exit_code(retried) == EXIT_INTERRUPTED


def test_exit_code_of_an_aborted_run_is_1(tmp_path):
    from charactereval_lib.engine.generation.base import RunAborted
    from charactereval_lib.engine.generation.engine import EXIT_FAILED, exit_code

    data = synthetic_data(3)
    with pytest.raises(RunAborted) as info:
        run_generation(tmp_path / "run", make_requests(data.samples, data), backend_at(f"http://127.0.0.1:{closed_port()}/v1"), generation_task(data),
                       progress=False)
    assert exit_code(info.value.summary) == EXIT_FAILED


# --- issue 9.2: only a positive limit -------------------------------------------------------------


@pytest.mark.parametrize("limit", [0, -5, 2.5, True])
def test_a_limit_that_is_not_a_positive_count_is_refused(limit):
    from charactereval_lib.charactereval.data import DataError
    from charactereval_lib.charactereval.requests import check_limit, select_samples

    with pytest.raises(DataError, match="--limit must be a positive number"):
        select_samples(synthetic_data(8), limit=limit)
    with pytest.raises(DataError):
        check_limit(limit)


def test_a_positive_limit_takes_the_first_samples():
    from charactereval_lib.charactereval.requests import select_samples

    data = synthetic_data(8)
    assert select_samples(data, limit=3) == data.samples[:3] and select_samples(data) == data.samples


# --- 2. an over-long prompt is its own error class and is never sent ------------------------------


def test_with_max_context_an_over_long_prompt_is_recorded_without_sending_it(server, tmp_path):
    pytest.importorskip("transformers")
    from charactereval_lib.charactereval.requests import make_requests
    from charactereval_lib.engine.generation.context import chat_prompt_ids
    from charactereval_lib.testing.tiny_chat_model import build_tokenizer

    tokenizer = build_tokenizer(tmp_path / "tokenizer")
    data = synthetic_data(8)
    lengths = {r.id: len(chat_prompt_ids(tokenizer, r.messages)) for r in make_requests(data.samples, data)}
    max_tokens = 16
    max_context = sorted(lengths.values())[4] + max_tokens  # some prompts fit, some do not
    params = DecodingParams.resolve(max_tokens=max_tokens)
    backend = make_backend("openai", MODEL, params, BackendOptions(
        base_url=server.base_url, policy=FAST, max_context=max_context, context_tokenizer=str(tmp_path / "tokenizer")))
    summary = run_generation(tmp_path / "run", make_requests(data.samples, data), backend, generation_task(data), progress=False)

    keys = keys_by_id(data)
    too_long = {i for i, n in lengths.items() if n + max_tokens > max_context}
    assert too_long and summary.errors == Counter({"PromptTooLong": len(too_long)}) and summary.ok == 8 - len(too_long)
    for sample_id, record in latest(tmp_path / "run").items():
        if sample_id in too_long:
            assert record["attempts"] == 0 and server.attempts[keys[sample_id]] == 0
            assert record["error"]["class"] == "PromptTooLong"
            assert record["error"]["prompt_tokens"] == lengths[sample_id] and "--max-context" in record["error"]["message"]
    generation = runs.load_manifest(tmp_path / "run")["generation"]
    assert generation["max_context"] == max_context and generation["context_tokenizer"] == str(tmp_path / "tokenizer")
