"""best RUN RUN RUN: the best of n runs' replies in one judge prompt (evals' multicomp), through
the pipeline and the CLI against the mock judge: a judge that knows the best run whatever its
position, one that always names position 1, resume, and the one-line refusals."""

from __future__ import annotations

import json
import re

import pytest

from charactereval_lib import pipeline
from charactereval_lib.charactereval import best, layout
from charactereval_lib.cli import main
from charactereval_lib.engine.storage import artifacts, runs
from charactereval_lib.testing.mockserver import MockServer
from tests.charactereval.test_judge_battle import settings

COUNT = 6
MARKS = ("AAA", "BBB", "CCC")


def write_runs(tmp_path, data):
    """Three runs whose replies say which run they come from (run b's contain "BBB")."""
    samples = [s for s in data.samples if data.id2metric.get(str(s.id))][:COUNT]
    made = []
    for mark in MARKS:
        run = layout.CharacterEvalRun(tmp_path / mark.lower()[0])
        rows = [{"id": s.id, "role": s.role, "novel_name": s.novel_name, "metric_en": m, "metric_zh": z,
                 "model_output": f"{s.role}：{mark} {s.id}"} for s in samples for m, z in data.id2metric[str(s.id)]]
        artifacts.write_jsonl_atomic(run.rows, rows)
        made.append(run)
    return made


def shown_marks(payload) -> list[str]:
    """The runs' marks in the order the prompt numbers the replies."""
    content = payload["messages"][-1]["content"]
    return re.findall(r"\[Reply \d\]\n[^\n：]*：(AAA|BBB|CCC)", content)


def test_a_judge_that_knows_the_best_run_picks_it_in_every_position(official_data, official_dir, tmp_path, capsys):
    runs_ = write_runs(tmp_path, official_data)

    def prefers_b(key, attempt, payload):
        return f"judge:{shown_marks(payload).index('BBB') + 1}"

    out = tmp_path / "best"
    with MockServer(plan=prefers_b) as server:
        command = ["best", *(str(r.path) for r in runs_), "--out", str(out), "--judge-model", "judge-x",
                   "--base-url", server.base_url, "--no-api-key", "--n-boot", "200", "--data-dir", str(official_dir)]
        assert main(command) == 0
        sent = len(server.received)
        assert main(command) == 0  # resumed: everything already judged, nothing sent
        assert len(server.received) == sent == 3 * COUNT
        assert {tuple(shown_marks(p)) for p in server.received} == {MARKS, MARKS[1:] + MARKS[:1], MARKS[2:] + MARKS[:2]}
        prompt = server.received[0]["messages"][-1]["content"]
        assert prompt.startswith("You are comparing 3 replies") and '"1" or "2" or "3"' in prompt
    printed = capsys.readouterr().out
    assert f"skipped {3 * COUNT} already judged" in printed and "position 3" in printed
    summary = json.loads((out / best.SUMMARY).read_text())
    assert [row["value"] for row in summary["chosen"]] == [0.0, 1.0, 0.0]
    assert [row["count"] for row in summary["positions"]] == [COUNT] * 3
    assert summary["judgements"] == 3 * COUNT and summary["invalid"] == 0 and summary["samples"] == COUNT
    assert summary["chosen"][1]["n_clusters"] == COUNT and summary["warnings"] == []
    records = artifacts.read_jsonl(out / best.JUDGEMENTS).records
    assert sorted(r["order"] for r in records) == sorted([0, 1, 2] * COUNT)
    # The same OUT with another set of runs or orders is refused.
    with pytest.raises(runs.RunError, match="holds best-of-n judgements"):
        pipeline.best(runs_[:2], out, pipeline.JudgeSettings(judge_model="j", api_key_env=""), data=official_data)


def test_evals_single_order_favours_whoever_stands_first(official_data, tmp_path):
    runs_ = write_runs(tmp_path, official_data)
    with MockServer(plan=lambda key, attempt, payload: "judge:1") as server:
        outcome = pipeline.best(runs_, tmp_path / "best", settings(server), orders="given", n_boot=100,
                                data=official_data)
        assert len(server.received) == COUNT
    summary = outcome.summary
    assert [row["value"] for row in summary["chosen"]] == [1.0, 0.0, 0.0]
    assert summary["positions"][0]["value"] == 1.0
    assert any("one order" in warning for warning in summary["warnings"])


def test_best_refusals_are_one_line(official_data, official_dir, tmp_path, capsys):
    run_a, run_b, _ = write_runs(tmp_path, official_data)
    for argv, problem in (([str(run_a.path)], "at least two runs"),
                          ([str(run_a.path), str(run_a.path)], "given twice")):
        code = main(["best", *argv, "--out", str(tmp_path / "o"), "--judge-model", "j", "--no-api-key",
                     "--data-dir", str(official_dir)])
        err = capsys.readouterr().err
        assert code == 2 and problem in err and len(err.strip().splitlines()) == 1
    many = [layout.CharacterEvalRun(tmp_path / f"r{i}") for i in range(10)]
    for run in many:
        artifacts.write_jsonl_atomic(run.rows, run_a.read_rows())
    with pytest.raises(runs.RunError, match="reads the answer '10' as '1'"):
        pipeline.best(many, tmp_path / "o", pipeline.JudgeSettings(judge_model="j", api_key_env=""),
                      data=official_data)
