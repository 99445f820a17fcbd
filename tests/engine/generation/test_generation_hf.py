"""The Hugging Face backend on a tiny randomly initialised Llama with a BPE tokenizer and a chat
template built here (nothing downloaded), through the engine."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from charactereval_lib.charactereval.requests import generation_task, make_requests  # noqa: E402
from charactereval_lib.engine.generation.backends import BackendOptions, make_backend  # noqa: E402
from charactereval_lib.engine.generation.base import DecodingParams  # noqa: E402
from charactereval_lib.engine.generation.engine import run_generation  # noqa: E402
from charactereval_lib.engine.storage import artifacts, runs  # noqa: E402
from charactereval_lib.testing.tiny_chat_model import build_model, build_tokenizer  # noqa: E402
from tests.generation_support import expected_sha, synthetic_data  # noqa: E402

MAX_TOKENS = 6


def build_gpt2(path: Path, tokenizer, n_positions: int) -> None:
    """A model with learned absolute positions: a prompt longer than ``n_positions`` fails inside
    its position embedding (an IndexError), as in the issue."""
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=len(tokenizer), n_positions=n_positions, n_embd=32, n_layer=1,
                                     n_head=2, bos_token_id=tokenizer.bos_token_id,
                                     eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    transformers.GPT2LMHeadModel(config).save_pretrained(path)
    tokenizer.save_pretrained(path)


# The GPT-2 model's context: between the shortest and the longest synthetic prompts.
SHORT_CONTEXT = 64


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tiny-llama")
    tokenizer = build_tokenizer(root / "random")
    assert tokenizer.eos_token_id == 0
    build_model(root / "random", tokenizer)
    tokenizer.save_pretrained(root / "silent")
    build_model(root / "silent", tokenizer, silent=True)
    build_gpt2(root / "short", tokenizer, SHORT_CONTEXT)
    return {"random": root / "random", "silent": root / "silent", "short": root / "short"}


def generate(model_dir: Path, run: Path, data, *, batch_size: int, params: DecodingParams | None = None):
    params = params or DecodingParams.resolve(max_tokens=MAX_TOKENS)
    backend = make_backend("hf", str(model_dir), params, BackendOptions(batch_size=batch_size, dtype="float32"))
    summary = run_generation(run, make_requests(data.samples, data), backend, generation_task(data), progress=False)
    latest = artifacts.latest_by_key(artifacts.read_jsonl(run / runs.GENERATIONS).records, "id")
    return backend, summary, {key[0]: record for key, record in latest.items()}


def test_prompt_is_the_chat_template_on_the_s3_messages_without_a_system_message(model_dirs):
    data = synthetic_data(2)
    backend = make_backend("hf", str(model_dirs["random"]), DecodingParams.resolve(max_tokens=MAX_TOKENS))
    request = make_requests(data.samples, data)[1]
    text = backend.tokenizer.decode(backend.prompt_ids(request))
    expected = "<s>" + "".join(f"<|{m['role']}|>{m['content']}</s>" for m in request.messages) + "<|assistant|>"
    assert text == expected
    assert "system" not in text and request.messages[0]["role"] == "user"


def test_batched_left_padded_greedy_equals_one_at_a_time(model_dirs, tmp_path):
    data = synthetic_data(7)  # prompts of four different lengths
    backend, summary, batched = generate(model_dirs["random"], tmp_path / "batched", data, batch_size=3)
    _, _, single = generate(model_dirs["random"], tmp_path / "single", data, batch_size=1)
    assert summary.ok == 7 and not summary.errors
    assert {i: r["model_output"] for i, r in batched.items()} == {i: r["model_output"] for i, r in single.items()}
    shas = expected_sha(data, str(model_dirs["random"]), DecodingParams.resolve(max_tokens=MAX_TOKENS))
    requests = {r.id: r for r in make_requests(data.samples, data)}
    for sample_id, record in batched.items():
        assert record["status"] == "ok" and record["request_sha256"] == shas[sample_id]
        assert record["usage"]["prompt_tokens"] == len(backend.prompt_ids(requests[sample_id]))
        # A random model rarely ends on its own: either it stopped or it used every token.
        finished = record["finish_reason"]
        assert (finished, record["usage"]["completion_tokens"] == MAX_TOKENS) in {("length", True), ("stop", False),
                                                                                 ("stop", True)}
        assert record["model"] == str(model_dirs["random"])
    # Length-sorted batches: the longest prompts share the first batch.
    assert sorted(r["batch_size"] for r in batched.values()) == [1, 3, 3, 3, 3, 3, 3]
    generation = runs.load_manifest(tmp_path / "batched")["generation"]
    assert generation["decoding"] == "greedy" and generation["dtype"] == "float32"
    assert generation["trust_remote_code"] is False and len(generation["chat_template_sha256"]) == 64


def test_an_immediate_end_token_is_an_empty_reply_kept_with_finish_stop(model_dirs, tmp_path):
    data = synthetic_data(3)
    _, summary, records = generate(model_dirs["silent"], tmp_path / "run", data, batch_size=2)
    assert summary.empty == 3
    for record in records.values():
        assert (record["status"], record["model_output"], record["finish_reason"]) == ("ok", "", "stop")
        assert record["usage"]["completion_tokens"] == 1


def test_sampling_with_a_seed_is_reproducible(model_dirs, tmp_path):
    data = synthetic_data(4)
    params = DecodingParams.resolve(temperature=1.0, top_p=0.9, seed=5, max_tokens=MAX_TOKENS)
    _, _, first = generate(model_dirs["random"], tmp_path / "a", data, batch_size=2, params=params)
    _, _, second = generate(model_dirs["random"], tmp_path / "b", data, batch_size=2, params=params)
    assert {i: r["model_output"] for i, r in first.items()} == {i: r["model_output"] for i, r in second.items()}
    assert runs.load_manifest(tmp_path / "a")["generation"]["decoding"] == "sampling"


def test_a_prompt_longer_than_the_context_is_an_error_record_and_the_batch_goes_on(model_dirs, tmp_path):
    data = synthetic_data(8)
    backend, summary, records = generate(model_dirs["short"], tmp_path / "run", data, batch_size=8)
    lengths = {r.id: len(backend.prompt_ids(r)) for r in make_requests(data.samples, data)}
    too_long = {i for i, n in lengths.items() if n + MAX_TOKENS > SHORT_CONTEXT}
    assert 0 < len(too_long) < len(data.samples)  # the batch mixes both kinds
    assert set(records) == set(lengths)  # every sample has a record
    for sample_id, record in records.items():
        if sample_id in too_long:
            assert record["status"] == "error" and record["attempts"] == 0
            assert record["error"] == {
                "class": "PromptTooLong", "prompt_tokens": lengths[sample_id], "max_tokens": MAX_TOKENS,
                "max_context": SHORT_CONTEXT,
                "message": f"prompt of {lengths[sample_id]} tokens + max_tokens {MAX_TOKENS} > context of "
                           f"{SHORT_CONTEXT} tokens (max_position_embeddings of the model config); not generated"}
        else:
            assert record["status"] == "ok", record
    assert summary.errors == {"PromptTooLong": len(too_long)}
    assert runs.load_manifest(tmp_path / "run")["generation"]["max_context"] == SHORT_CONTEXT


def test_a_sample_that_fails_inside_generate_is_an_error_record_for_it_alone(model_dirs, tmp_path):
    # A max_context larger than the model's positions is taken at its word (rope-scaled models
    # can go past their config), so the long prompts reach the model and fail there.
    data = synthetic_data(8)
    params = DecodingParams.resolve(max_tokens=MAX_TOKENS)
    backend = make_backend("hf", str(model_dirs["short"]), params,
                           BackendOptions(batch_size=8, dtype="float32", max_context=4096))
    summary = run_generation(tmp_path / "run", make_requests(data.samples, data), backend, generation_task(data), progress=False)
    records = {k[0]: r for k, r in artifacts.latest_by_key(artifacts.read_jsonl(tmp_path / "run" / runs.GENERATIONS).records,
                                                        "id").items()}
    lengths = {r.id: len(backend.prompt_ids(r)) for r in make_requests(data.samples, data)}
    assert set(records) == set(lengths)
    failed = {i for i, r in records.items() if r["status"] == "error"}
    assert failed and failed == {i for i, n in lengths.items() if n + MAX_TOKENS > SHORT_CONTEXT}
    assert all(records[i]["error"]["class"] == "IndexError" and records[i]["attempts"] == 1 for i in failed)
    assert summary.ok == len(data.samples) - len(failed)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")
def test_runs_on_cuda_in_bfloat16(model_dirs, tmp_path):
    data = synthetic_data(5)
    backend = make_backend("hf", str(model_dirs["random"]), DecodingParams.resolve(max_tokens=MAX_TOKENS),
                           BackendOptions(batch_size=2, dtype="bfloat16", device="cuda"))
    summary = run_generation(tmp_path / "run", make_requests(data.samples, data), backend, generation_task(data), progress=False)
    assert summary.ok == 5 and not summary.errors
    generation = runs.load_manifest(tmp_path / "run")["generation"]
    assert generation["loaded_dtype"] == "bfloat16" and generation["device"] == "cuda"


@pytest.fixture(scope="module")
def sampling_model(model_dirs, tmp_path_factory):
    """The random model with a generation config that samples, as many chat models ship."""
    import shutil

    path = tmp_path_factory.mktemp("sampling") / "model"
    shutil.copytree(model_dirs["random"], path)
    transformers.GenerationConfig(do_sample=True, temperature=0.7, top_p=0.85, top_k=20, bos_token_id=1,
                                  eos_token_id=0, pad_token_id=0).save_pretrained(path)
    return path


@pytest.mark.parametrize("asked, used", [
    ({}, {"do_sample": True, "temperature": 0.7, "top_p": 0.85, "top_k": 20, "source": "the model's generation_config"}),
    ({"temperature": 0}, {"do_sample": False, "temperature": None, "top_p": None, "top_k": None,
                          "source": "asked, over the model's generation_config"}),
    ({"temperature": 0.5}, {"do_sample": True, "temperature": 0.5, "top_p": 0.85, "top_k": 20,
                            "source": "asked, over the model's generation_config"}),
], ids=["model-defaults", "greedy-asked", "temperature-asked"])
def test_without_settings_the_models_own_generation_config_decides_and_the_values_used_are_recorded(
        sampling_model, tmp_path, asked, used):
    # Seed 001 row 9 / U1: the model's defaults unless settings are given; greedy only when asked.
    data = synthetic_data(2)
    params = DecodingParams.resolve(max_tokens=MAX_TOKENS, seed=3, **asked)
    _, summary, _ = generate(sampling_model, tmp_path / "run", data, batch_size=2, params=params)
    assert summary.ok == 2
    generation = runs.load_manifest(tmp_path / "run")["generation"]
    assert {k: generation["decoding_used"][k] for k in used} == used
    assert generation["decoding_used"]["max_new_tokens"] == MAX_TOKENS
    assert generation["decoding"] == ("sampling" if used["do_sample"] else "greedy")
    assert generation["identity"]["unset_decoding"] == "the model's generation_config"


@pytest.mark.parametrize("name", ["{tmp}/no-such-model", "./no-such-model", "../no-such-model", "~/no-such-model-here"])
def test_a_model_path_that_is_not_there_is_one_line_before_anything_is_loaded(name, official_dir, tmp_path, monkeypatch,
                                                                             capsys):
    """Not transformers' "Repo id must be in the form ..." after seconds of imports; and a Hub id
    (NAME or ORG/NAME) is left to the Hub."""
    from charactereval_lib.cli import main
    from charactereval_lib.engine.generation.hf import check_model_path

    monkeypatch.chdir(tmp_path)
    model = name.format(tmp=tmp_path)
    assert main(["generate", str(tmp_path / "run"), "--backend", "hf", "--model", model, "--limit", "1",
                 "--data-dir", str(official_dir)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: {model}: no such model directory (a path; a Hugging Face Hub model is named NAME or "
                   "ORG/NAME)"]
    assert not (tmp_path / "run").exists()
    check_model_path("some-org/some-model")


class _HubAnswering:
    """A local stand-in for the Hub's API ($HF_ENDPOINT): every request answered with ``status``,
    each one counted (a retry would show)."""

    def __init__(self, status: int) -> None:
        import http.server
        import threading

        seen = self.paths = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                seen.append(self.path)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b'{"error": "Repository not found"}')

            def log_message(self, *args) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize("status", [404, 401])
def test_a_hub_model_that_is_not_there_is_one_line_from_one_request(status, official_dir, tmp_path):
    """The real command in its own process: one request to the Hub's API, no retry messages, one
    line, and no run directory made. (Seconds, not the Hub client's 49 s of retries.)"""
    import subprocess
    import sys

    hub = _HubAnswering(status)
    env = {**os.environ, "HF_ENDPOINT": hub.url, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "0",
           "HF_TOKEN": ""}
    try:
        done = subprocess.run([sys.executable, "-m", "charactereval_lib.cli", "generate", str(tmp_path / "run"),
                               "--backend", "hf", "--model", "no-such-org/no-such-model", "--limit", "1",
                               "--data-dir", str(official_dir)], env=env, capture_output=True, text=True, timeout=300)
    finally:
        hub.close()
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        f"error: no-such-org/no-such-model: no such model on the Hugging Face Hub ({hub.url} answered {status}; a "
        "gated or private one needs `hf auth login` or $HF_TOKEN), and not a local directory"]
    assert hub.paths == ["/api/models/no-such-org/no-such-model"]
    assert not (tmp_path / "run").exists()


def test_an_offline_hub_and_an_unreachable_one_are_one_line(tmp_path, monkeypatch):
    from charactereval_lib.engine.generation.base import ConfigError
    from charactereval_lib.engine.generation.hub import check_hub_model

    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ConfigError, match=r"^some-org/some-model: not a local directory, and not in the Hugging "
                                          r"Face cache \(HF_HUB_OFFLINE is set"):
        check_hub_model("some-org/some-model")
    monkeypatch.delenv("HF_HUB_OFFLINE")
    # A port nothing listens on: refused at once.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("HF_ENDPOINT", f"http://127.0.0.1:{port}")
    with pytest.raises(ConfigError, match=r"cannot reach the Hugging Face Hub at http://127.0.0.1:\d+ .* not in the "
                                          "local cache"):
        check_hub_model("some-org/some-model")
    check_hub_model(str(tmp_path))  # a local directory: nothing asked
