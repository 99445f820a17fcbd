"""`generate --request-param KEY=JSON`: further request-body keys of the model under test (seed
004 H25, J19; seed 001 U1), through the CLI against the local mock server: sent as given, recorded
in run.json, part of each request's digest, named in the board's row label when they set
reasoning; reasoning tokens summed per run; keys with an option of their own refused in one line."""

from __future__ import annotations

import json

import pytest

from charactereval_lib import cli
from charactereval_lib.engine.generation.base import request_sha256
from charactereval_lib.engine.leaderboard.board import model_label
from charactereval_lib.engine.storage import artifacts, runs
from charactereval_lib.testing.mockserver import REASONING_TOKENS, MockServer

PIN = {"only": ["openai"], "allow_fallbacks": False}


def generate(run, url, official_dir, *extra):
    return cli.main(["generate", str(run), "--backend", "openai", "--model", "m", "--base-url", url, "--no-api-key",
                     "--data-dir", str(official_dir), "--limit", "3", "--quiet", *extra])


def test_request_params_are_sent_recorded_digested_and_labelled(tmp_path, official_dir):
    run = tmp_path / "run"
    with MockServer() as server:
        assert generate(run, server.base_url, official_dir, "--request-param", 'reasoning_effort="high"',
                        "--request-param", "chat_template_kwargs={\"enable_thinking\": true}",
                        "--request-param", f"provider={json.dumps(PIN)}") == 0
    assert len(server.received) == 3
    for payload in server.received:
        assert payload["reasoning_effort"] == "high" and payload["provider"] == PIN
        assert payload["chat_template_kwargs"] == {"enable_thinking": True}
    digests = {request_sha256(p) for p in server.received}
    assert {r["request_sha256"] for r in artifacts.read_jsonl(run / runs.GENERATIONS).records} == digests
    generation = runs.load_manifest(run)["generation"]
    assert generation["parameters"]["request_params"] == {
        "reasoning_effort": "high", "chat_template_kwargs": {"enable_thinking": True}, "provider": PIN}
    assert generation["sent_parameters"]["reasoning_effort"] == "high"
    # The server reported reasoning tokens on every reply: summed per session and per run.
    assert generation["sessions"][-1]["reasoning_tokens"] == 3 * REASONING_TOKENS
    assert generation["reasoning_tokens"] == 3 * REASONING_TOKENS
    assert model_label("m", generation["parameters"]) == \
        "m (chat_template_kwargs.enable_thinking=True, reasoning_effort=high)"


def test_a_resume_with_other_request_params_is_refused(tmp_path, official_dir, capsys):
    run = tmp_path / "run"
    with MockServer() as server:
        assert generate(run, server.base_url, official_dir) == 0
        assert runs.load_manifest(run)["generation"]["reasoning_tokens"] is None  # none reported
        assert "request_params" not in runs.load_manifest(run)["generation"]["parameters"]
        assert generate(run, server.base_url, official_dir, "--request-param", 'reasoning_effort="low"') == 2
    assert "request_params" in capsys.readouterr().err


@pytest.mark.parametrize(("value", "message"), [
    ("temperature=0.5", "request parameter 'temperature' cannot be set: it has its own option"),
    ("extra_body={}", "give its keys as parameters of their own"),
    ("reasoning_effort=high", "the value after = is not JSON"),
    ("=1", "expected KEY=JSON"),
])
def test_a_bad_request_param_is_one_line_and_exit_2(tmp_path, official_dir, capsys, value, message):
    with pytest.raises(SystemExit) as exc:
        code = generate(tmp_path / "run", "http://127.0.0.1:9/v1", official_dir, "--request-param", value)
        raise SystemExit(code)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and message in err
    assert not (tmp_path / "run" / runs.GENERATIONS).exists()


def test_request_params_need_the_openai_backend(tmp_path, official_dir, capsys):
    assert cli.main(["generate", str(tmp_path / "run"), "--backend", "offline", "--model", "m", "--data-dir",
                     str(official_dir), "--limit", "1", "--quiet", "--request-param", 'reasoning_effort="high"']) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "backend 'offline' has none" in err


def test_batch_entries_take_request_params(tmp_path):
    from charactereval_lib.apps import batch

    path = tmp_path / "batch.yaml"
    path.write_text("""models:
  - {name: a, backend: openai, model: m, rm: r, request_params: {reasoning_effort: high}}
  - {name: c, benchmark: coser, run: {actor_model: m, actor_request_params: {reasoning_effort: low}}}
""", encoding="utf-8")
    a, c = batch.load_config(path).models
    assert a.generate.decoding().sent()["reasoning_effort"] == "high"
    assert c.settings["run"].simulation_settings().actor.request_params == {"reasoning_effort": "low"}
    path.write_text("- {name: c, benchmark: coser, run: {actor_model: m, judge_request_params: {temperature: 1}}}\n",
                    encoding="utf-8")
    with pytest.raises(batch.BatchError, match="judge request parameter 'temperature' cannot be set: the CoSER "
                                               r"protocol fixes it \(seed 004 H26\)"):
        batch.load_config(path)
