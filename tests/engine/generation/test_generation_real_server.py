"""Interop with an OpenAI-compatible server nobody here wrote: ``transformers serve`` hosting a
tiny random Llama built in this test (tokenizer trained here, chat template, nothing downloaded)
on a free loopback port. The messages on the wire equal requests.jsonl; a server killed mid-run
leaves error records and exit status 1, and a resume after its restart completes the run;
greedy replies repeat exactly and equal the hf backend's on the same weights. Needs the test
extra ``transformers[serving]``; skipped, with the reason, without it."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="transformers[serving] (the test extra) is not installed")
pytest.importorskip("uvicorn", reason="transformers[serving] (the test extra) is not installed")
transformers = pytest.importorskip("transformers")

from charactereval_lib.charactereval.requests import generation_task, make_requests  # noqa: E402
from charactereval_lib.engine.generation.backends import BackendOptions, make_backend  # noqa: E402
from charactereval_lib.engine.generation.base import DecodingParams, build_payload, request_sha256  # noqa: E402
from charactereval_lib.engine.generation.engine import EXIT_FAILED, EXIT_OK, dry_run, exit_code, run_generation  # noqa: E402
from charactereval_lib.engine.generation.retry import RetryPolicy  # noqa: E402
from charactereval_lib.engine.storage import artifacts, runs  # noqa: E402
from charactereval_lib.testing.mockserver import MockServer  # noqa: E402
from charactereval_lib.testing.tiny_chat_model import build_model, build_tokenizer  # noqa: E402
from tests.generation_support import synthetic_data  # noqa: E402

SERVE = Path(sys.executable).parent / "transformers"
MAX_TOKENS = 8
SAMPLES = 20
POLICY = RetryPolicy(max_attempts=2, base_delay_s=0.05, max_delay_s=0.1, timeout_s=30)

if not SERVE.exists():
    pytest.skip(f"the `transformers` command is not beside {sys.executable}", allow_module_level=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Served:
    """``transformers serve MODEL`` in its own process group, so that a kill takes all of it."""

    def __init__(self, model_dir: Path, port: int, log: Path) -> None:
        self.model_dir, self.port, self.log = model_dir, port, log
        self.proc: subprocess.Popen | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> Served:
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [str(SERVE), "serve", str(self.model_dir), "--host", "127.0.0.1", "--port", str(self.port),
                 "--device", "cpu", "--log-level", "warning"],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                env={**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"},
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"transformers serve exited: {self.log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=1):
                    return self
            except OSError:
                time.sleep(0.2)
        self.kill()
        pytest.fail(f"transformers serve did not answer within 60 s: {self.log.read_text()[-2000:]}")

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("served") / "tiny-llama"
    build_model(path, build_tokenizer(path))
    return path


@pytest.fixture
def served(model_dir, tmp_path):
    server = Served(model_dir, free_port(), tmp_path / "serve.log").start()
    yield server
    server.kill()


def openai_backend(base_url: str, model: str, *, max_tokens: int = MAX_TOKENS):
    # A local server needs no key: the explicit no-key mode sends a placeholder.
    return make_backend("openai", model, DecodingParams.resolve(max_tokens=max_tokens),
                        BackendOptions(base_url=base_url, api_key_env="", concurrency=1, policy=POLICY))


def replies(run: Path) -> dict[int, dict]:
    latest = artifacts.latest_by_key(artifacts.read_jsonl(run / runs.GENERATIONS).records, "id")
    return {key[0]: record for key, record in latest.items()}


@pytest.mark.slow
def test_transformers_serve_interop_kill_restart_resume_and_hf_equality(served, model_dir, tmp_path):
    data = synthetic_data(SAMPLES)
    model = str(model_dir)  # the served model id, as GET /v1/models lists it
    with urllib.request.urlopen(f"{served.base_url}/models", timeout=5) as answer:
        assert [m["id"] for m in json.load(answer)["data"]] == [model]

    # 1. Kill the server after a few replies: the rest fail, truthfully named, and exit status 1.
    run = tmp_path / "run"
    state: dict = {}

    def generate() -> None:
        state["summary"] = run_generation(run, make_requests(data.samples, data), openai_backend(served.base_url, model), generation_task(data),
                                          progress=False)

    worker = threading.Thread(target=generate)
    worker.start()
    deadline = time.monotonic() + 30
    while not (run / runs.GENERATIONS).exists() or (run / runs.GENERATIONS).read_bytes().count(b"\n") < 3:
        assert time.monotonic() < deadline and worker.is_alive(), "no replies from transformers serve"
        time.sleep(0.01)
    served.kill()
    worker.join(60)
    first = state["summary"]
    assert 3 <= first.ok < SAMPLES and first.failed == SAMPLES - first.ok and exit_code(first) == EXIT_FAILED
    assert set(first.errors) <= {"ConnectionRefused", "ConnectionLost"}

    # 2. Restart, resume with --retry-errors through a recording proxy: complete, and every
    # message on the wire is the one in requests.jsonl.
    served.start()
    dry_run(run, make_requests(data.samples, data), generation_task(data), DecodingParams.resolve(), backend="openai",
            model=model)
    wanted = {r["id"]: r["messages"] for r in artifacts.read_jsonl(run / runs.REQUESTS).records}
    with MockServer(forward_to=served.base_url) as proxy:
        resumed = run_generation(run, make_requests(data.samples, data), openai_backend(proxy.base_url, model), generation_task(data), retry_errors=True,
                                 progress=False)
        assert resumed.pending == SAMPLES - first.ok and exit_code(resumed) == EXIT_OK
        fresh = run_generation(tmp_path / "again", make_requests(data.samples, data), openai_backend(proxy.base_url, model), generation_task(data),
                               progress=False)
    assert fresh.ok == SAMPLES
    sent = proxy.received[-SAMPLES:]
    # The body goes out as canonical JSON (keys sorted, the bytes its digest covers): compare objects.
    assert sorted(json.dumps(p["messages"], ensure_ascii=False, sort_keys=True) for p in sent) == \
        sorted(json.dumps(m, ensure_ascii=False, sort_keys=True) for m in wanted.values())
    params = DecodingParams.resolve(max_tokens=MAX_TOKENS)
    resumed_records, fresh_records = replies(run), replies(tmp_path / "again")
    for sample_id, messages in wanted.items():
        sha = request_sha256(build_payload(model, messages, params))
        assert resumed_records[sample_id]["request_sha256"] == fresh_records[sample_id]["request_sha256"] == sha
        assert resumed_records[sample_id]["model"] == model
    # Greedy (the tiny model's generation config does not sample): the same text every time.
    texts = {i: r["model_output"] for i, r in resumed_records.items()}
    assert texts == {i: r["model_output"] for i, r in fresh_records.items()}

    # 3. The hf backend on the same weights writes the same greedy text (one prompt per batch,
    # as the server runs them, so padding cannot change the arithmetic).
    hf = make_backend("hf", model, params, BackendOptions(batch_size=1, dtype="float32"))
    run_generation(tmp_path / "hf", make_requests(data.samples, data), hf, generation_task(data), progress=False)
    assert {i: r["model_output"] for i, r in replies(tmp_path / "hf").items()} == texts

    # 4. A request for another model id is the server's 400, with its reason kept.
    run_generation(tmp_path / "wrong", make_requests(data.samples[:1], data), openai_backend(served.base_url, "tiny"), generation_task(data),
                   progress=False)
    error = replies(tmp_path / "wrong")[data.samples[0].id]["error"]
    assert error["status"] == 400 and error["message"] == f"Server is pinned to '{model}'; requested 'tiny'."
