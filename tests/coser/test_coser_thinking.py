"""CoSER's thinking blocks (seed 004 C17a/F19 against G08; docs/platform-rules.md#thinking-blocks):
the summary counts, per role, the replies that started with a block and what the run's rule did
with them; the report shows it; the board separates and labels a run that kept its blocks exactly
as CharacterEval's board does, through one implementation (``engine.leaderboard.board``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from charactereval_lib.apps.leaderboard import read_runs
from charactereval_lib.charactereval.eligibility import SPEC as CHARACTEREVAL_SPEC
from charactereval_lib.coser.benchmark import TURNS
from charactereval_lib.coser.eligibility import SPEC
from charactereval_lib.coser.report import load_analysis, summary_lines
from charactereval_lib.coser.statistics import compute_summary
from charactereval_lib.engine import thinking
from charactereval_lib.engine.leaderboard.board import thinking_rule
from charactereval_lib.engine.storage import artifacts, runs
from charactereval_lib.testing.leaderboard_runs import coser_run

BLOCK = "\n<think>\nwho speaks next?\n</think>\n\n"


def _run(path: Path, rule: str | None, blocks: dict[str, int]) -> Path:
    """A synthetic run of 2 scenes x 1 repeat (one actor, env and nsp turn each) whose first
    ``blocks[kind]`` turns of a kind start with a thinking block; ``rule``: the recorded rule
    (None: a run made before it was recorded)."""
    coser_run(path, actor="reasoner", scenes=2, repeats=1,
              identity={thinking.KEY: rule} if rule else None)
    records = artifacts.read_jsonl(path / TURNS).records
    seen: dict[str, int] = {}
    for record in records:
        seen[record["kind"]] = seen.get(record["kind"], 0) + 1
        record["reply"] = (BLOCK if seen[record["kind"]] <= blocks.get(record["kind"], 0) else "") + "a line"
    artifacts.write_jsonl_atomic(path / TURNS, records)
    return path


def _view(path: Path):
    views, _ = read_runs([path], {})
    [view] = views
    return view


@pytest.mark.parametrize("rule, treated", [(thinking.REMOVED, "removed"), (thinking.KEPT, "kept")])
def test_the_summary_counts_blocks_per_role_and_what_the_rule_did_with_them(tmp_path, rule, treated):
    run = _run(tmp_path / "run", rule, {"actor": 2, "nsp": 1})
    blocks = compute_summary(runs.RunDir(run), n_boot=10)["thinking_blocks"]
    other = "kept" if treated == "removed" else "removed"
    assert blocks["rule"] == rule
    assert blocks["roles"] == {"actor": {"replies": 2, "with_block": 2, treated: 2, other: 0},
                               "env": {"replies": 2, "with_block": 0, "removed": 0, "kept": 0},
                               "nsp": {"replies": 2, "with_block": 1, treated: 1, other: 0}}
    assert blocks["total"] == {"replies": 6, "with_block": 3, treated: 3, other: 0}


def test_the_report_shows_a_row_per_role_and_summarize_the_total(tmp_path):
    run = _run(tmp_path / "run", thinking.REMOVED, {"actor": 1})
    table = load_analysis(runs.RunDir(run), n_boot=10, seed=0).judge_table()
    rows = dict(zip(table["what"], table["count"]))
    what = "replies starting with a <think> block"
    assert rows[f"{what}: actor (removed before the simulation used it)"] == "1 of 2"
    assert rows[f"{what}: env (removed before the simulation used it)"] == "0 of 2"
    assert rows[f"{what}: total (removed before the simulation used it)"] == "1 of 6"
    summary = compute_summary(runs.RunDir(run), n_boot=10)
    [line] = [ln for ln in summary_lines(summary, run / "coser_summary.json") if "session(s) judged" in ln]
    assert line.endswith(", replies starting with a <think> block 1 (removed before the simulation used it)")
    kept = _run(tmp_path / "kept", thinking.KEPT, {})
    table = load_analysis(runs.RunDir(kept), n_boot=10, seed=0).judge_table()
    assert dict(zip(table["what"], table["count"]))[
        f"{what}: actor (kept in the simulation as received, upstream's rule)"] == "0 of 2"


def test_a_run_without_turn_records_says_its_count_is_not_recorded(tmp_path):
    run = _run(tmp_path / "run", thinking.KEPT, {})
    (run / TURNS).unlink()
    assert compute_summary(runs.RunDir(run), n_boot=10)["thinking_blocks"] is None
    table = load_analysis(runs.RunDir(run), n_boot=10, seed=0).judge_table()
    [row] = [c for w, c in zip(table["what"], table["count"]) if w.startswith("replies starting with a <think>")]
    assert row.startswith("not recorded (no turn records")
    view = _view(run)
    assert view.facts["thinking_blocks_scored"] == 0 and view.model == "reasoner (keep_thinking=True)"


def _thinking_reasons(view) -> list[str]:
    return [r for r in SPEC.check(view) if r.startswith("thinking")]


def test_a_kept_block_keeps_a_run_off_the_board_and_keep_thinking_is_labelled(tmp_path):
    # The default rule removed the blocks: nothing to hold against the run, no label.
    view = _view(_run(tmp_path / "removed", thinking.REMOVED, {"actor": 2, "env": 1}))
    assert view.facts["thinking_blocks_scored"] == 0 and _thinking_reasons(view) == []
    assert view.model == "reasoner"
    # --keep-thinking, and blocks went into the dialogue as received.
    view = _view(_run(tmp_path / "kept", thinking.KEPT, {"actor": 2, "env": 1}))
    assert view.facts["thinking_blocks_scored"] == 3
    assert _thinking_reasons(view) == [
        "thinking: 3 replies start with a <think> block that the simulation used as received (in the dialogue, so "
        "the judge's input and the length term, or in the next speaker's parse) (thinking kept: made with "
        "--keep-thinking, or before the rule)"]
    assert view.model == "reasoner (keep_thinking=True)"
    # --keep-thinking without a block: both rules give the same dialogue, ranked, but labelled.
    view = _view(_run(tmp_path / "none", thinking.KEPT, {}))
    assert _thinking_reasons(view) == [] and view.model == "reasoner (keep_thinking=True)"
    # Made before the rule was recorded: upstream's rule ran, so a block counts; no label.
    view = _view(_run(tmp_path / "before", None, {"actor": 1}))
    assert _thinking_reasons(view)[0].startswith("thinking: 1 reply starts with a <think> block")
    assert view.model == "reasoner"


def test_both_boards_use_the_one_thinking_rule_of_the_engine():
    rules = [next(r for r in spec.rules if r.name == "thinking") for spec in (SPEC, CHARACTEREVAL_SPEC)]
    shared = thinking_rule("text", ("x", "y"), "z").check.__qualname__
    assert all(r.check.__qualname__ == shared and r.check.__module__ == "charactereval_lib.engine.leaderboard.board"
               for r in rules)
