"""Thinking blocks (seed 004 C17a/F19 against G08): a reply's leading ``<think>`` block is removed
before anything scored sees it, unless the run keeps it; both benchmarks through the mock server."""

from __future__ import annotations

import json

import pytest

from charactereval_lib import cli
from charactereval_lib.charactereval import layout
from charactereval_lib.charactereval.analysis import load_run
from charactereval_lib.coser.report import load_analysis
from charactereval_lib.engine import thinking
from charactereval_lib.engine.storage import artifacts, runs
from charactereval_lib.testing.coser_script import role_of, scripted_reply
from charactereval_lib.testing.mockserver import MockServer, echo_reply, request_key, thinking_block
from tests.coser_golden import data_dir as coser_data_dir


@pytest.mark.parametrize("text, expected", [
    ("<think>plan</think>answer", "answer"),
    ("  \n<think>\nline 1\nline 2\n</think>\n\n answer\nsecond", "answer\nsecond"),
    ("<think>a</think>b<think>c</think>d", "b<think>c</think>d"),  # only the leading block
    ("answer <think>x</think>", "answer <think>x</think>"),  # not at the start
    ("<think>cut by the token limit", "<think>cut by the token limit"),  # never closed: not a block
    ("<THINK>x</THINK>y", "<THINK>x</THINK>y"),  # case-sensitive
    ("\n answer with whitespace \n", "\n answer with whitespace \n"),  # no block: unchanged
])
def test_only_a_leading_closed_block_and_the_whitespace_around_it_is_removed(text, expected):
    assert thinking.strip_leading_block(text) == expected
    assert thinking.apply(text, thinking.KEPT) == text


def _thinking_plan(key: str, attempt: int, payload: dict) -> str:
    return "thinking" if int(key[:2], 16) % 2 else "multiline"


@pytest.mark.parametrize("keep", [False, True], ids=["default", "keep-thinking"])
def test_charactereval_s5_cuts_the_answer_not_the_block(official_dir, tmp_path, capsys, keep):
    data = official_dir
    run = tmp_path / "run"
    with MockServer(plan=_thinking_plan) as server:
        assert cli.main(["generate", str(run), "--backend", "openai", "--model", "m", "--base-url", server.base_url,
                         "--no-api-key", "--data-dir", str(data), "--quiet", "--limit", "24",
                         *(["--keep-thinking"] if keep else [])]) == 0
        keys = {request_key(p["messages"]): p for p in server.received}
    assert cli.main(["transform", str(run), "--data-dir", str(data)]) == 0
    manifest = runs.load_manifest(run)
    rule = thinking.KEPT if keep else thinking.REMOVED
    assert manifest["generation"]["identity"]["thinking"] == rule and manifest["transform"]["thinking"] == rule
    generations = {g["id"]: g["model_output"] for g in artifacts.read_jsonl(run / runs.GENERATIONS).records}
    with_block = {i for i, text in generations.items() if text.startswith("\n<think>")}
    assert with_block and len(with_block) < len(generations)  # replies with and without a block
    rows = artifacts.read_jsonl(run / layout.ROWS).records
    for row in rows:
        raw = generations[row["id"]]
        if row["id"] in with_block and keep:
            assert row["model_output"] == ""  # upstream: the block's leading newline is the first line
        else:
            assert row["model_output"].startswith("echo ") and row["model_output"] == echo_line(raw)
    scored_with_block = len({r["id"] for r in rows} & with_block)
    assert manifest["transform"]["thinking_blocks_removed"] == (0 if keep else scored_with_block)
    assert keys  # every request went over the wire
    header = load_run(run).header_markdown()
    assert f"Thinking blocks: {rule}" in header


def echo_line(raw: str) -> str:
    return thinking.strip_leading_block(raw).split("\n")[0]


def test_resuming_a_run_with_the_other_thinking_rule_is_refused(official_dir, tmp_path, capsys):
    data = official_dir
    run = tmp_path / "run"
    base = ["generate", str(run), "--backend", "offline", "--model", "m", "--data-dir", str(data), "--quiet"]
    assert cli.main([*base, "--limit", "2"]) == 0
    capsys.readouterr()
    assert cli.main([*base, "--limit", "3", "--keep-thinking"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "thinking 'leading <think> block removed' -> 'kept (upstream)'" in err


def _coser_thinking_reply(payload: dict) -> str:
    reply = scripted_reply(payload)
    if role_of(payload) in ("actor", "env", "nsp"):
        return thinking_block(request_key(payload["messages"])) + reply
    return reply


@pytest.mark.parametrize("keep", [False, True], ids=["default", "keep-thinking"])
def test_coser_dialogue_judge_input_and_length_term_never_see_a_removed_block(tmp_path, keep):
    run = tmp_path / "run"
    with MockServer(reply=_coser_thinking_reply) as server:
        assert cli.main(["coser", "run", str(run), "--preset", "smoke", "--actor-model", "mock-actor", "--base-url",
                         server.base_url, "--no-api-key", "--data-dir", str(coser_data_dir()), "--retry-base-delay",
                         "0.01", "--timeout", "5", "--no-progress", *(["--keep-thinking"] if keep else [])]) == 0
        judged = [p for p in server.received if role_of(p) == "judge"]
    identity = runs.load_manifest(run)["coser"]["identity"]
    assert identity["thinking"] == (thinking.KEPT if keep else thinking.REMOVED)
    scenes = artifacts.read_jsonl(run / "coser_scenes.jsonl").records
    dialogue = json.dumps([s["simulation"] for s in scenes], ensure_ascii=False)
    judge_input = json.dumps([p["messages"] for p in judged], ensure_ascii=False)
    assert judged and ("<think>" in dialogue) == keep and ("<think>" in judge_input) == keep
    turns = artifacts.read_jsonl(run / "coser_turns.jsonl").records
    assert turns and all("<think>" in t["reply"] for t in turns if t.get("kind") in ("actor", "env"))  # nothing lost
    analysis = load_analysis(layout.CharacterEvalRun(run), n_boot=10, seed=0)
    settings = analysis.settings_table()
    assert dict(zip(settings["setting"], settings["value"]))["identity / thinking"] == identity["thinking"]
    # The summary counts every reply's block per role and says what the rule did with it.
    blocks = analysis.summary.thinking_blocks
    assert blocks.rule == identity["thinking"]
    for kind in ("actor", "env", "nsp"):
        counts = blocks.roles[kind]
        assert counts.with_block == counts.replies == sum(1 for t in turns if t["kind"] == kind) > 0
        assert (counts.kept, counts.removed) == ((counts.with_block, 0) if keep else (0, counts.with_block))
    if not keep:
        # The NSP still reads the label after the block: the scenes end by <END CHAT> or 20 rounds as
        # the scripted NSP decides, never by an unparsed name.
        assert all(s["status"] == "done" for s in scenes)


def test_the_echo_reply_of_the_mock_server_has_no_block():
    assert thinking.strip_leading_block(echo_reply("ab" * 32)) == echo_reply("ab" * 32)
