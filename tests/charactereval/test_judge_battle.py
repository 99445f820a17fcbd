"""Battles through the judge engine against the mock judge: a judge that always prefers the
first position (consistency 0, every battle a tie) and an order-blind one (consistency 1)."""

from __future__ import annotations

import json

import pytest

from charactereval_lib import pipeline
from charactereval_lib.charactereval import battle, layout
from charactereval_lib.cli import main
from charactereval_lib.engine.storage import artifacts, runs
from charactereval_lib.testing.mockserver import MockServer

COUNT = 8


def write_runs(tmp_path, data):
    """Two runs whose replies say which run they come from (A's contain "AAA")."""
    samples = [s for s in data.samples if data.id2metric.get(str(s.id))][:COUNT]
    made = []
    for name, mark in (("a", "AAA"), ("b", "BBB")):
        run = layout.CharacterEvalRun(tmp_path / name)
        rows = [{"id": s.id, "role": s.role, "novel_name": s.novel_name, "metric_en": m, "metric_zh": z,
                 "model_output": f"{s.role}：{mark} {s.id}"} for s in samples for m, z in data.id2metric[str(s.id)]]
        artifacts.write_jsonl_atomic(run.rows, rows)
        made.append(run)
    return made


def first_reply(payload) -> str:
    content = payload["messages"][-1]["content"]
    return content.split("[Reply 1]", 1)[1].split("[Reply 2]", 1)[0]


def settings(server) -> pipeline.JudgeSettings:
    return pipeline.JudgeSettings(judge_model="judge-x", base_url=server.base_url, api_key_env="", concurrency=8)


def test_a_judge_that_always_prefers_the_first_position_is_never_consistent(official_data, tmp_path):
    run_a, run_b = write_runs(tmp_path, official_data)
    with MockServer(plan=lambda key, attempt, payload: "judge:1") as server:
        outcome = pipeline.battle(run_a, run_b, tmp_path / "battle", settings(server), n_boot=200, data=official_data)
    summary = outcome.summary
    assert summary["n"] == COUNT and summary["invalid"] == 0
    assert summary["position_consistency"]["value"] == 0.0 and summary["tie"]["value"] == 1.0
    assert summary["win"]["value"] == 0.0 and summary["loss"]["value"] == 0.0
    records = artifacts.read_jsonl(tmp_path / "battle" / battle.JUDGEMENTS).records
    assert sorted(r["order"] for r in records) == ["ab"] * COUNT + ["ba"] * COUNT


def test_an_order_blind_judge_is_always_consistent_and_resumes(official_data, official_dir, tmp_path, capsys):
    run_a, run_b = write_runs(tmp_path, official_data)

    def prefers_a(key, attempt, payload):
        return "judge:1" if "AAA" in first_reply(payload) else "judge:2"

    out = tmp_path / "battle"
    with MockServer(plan=prefers_a) as server:
        command = ["battle", str(run_a.path), str(run_b.path), "--out", str(out), "--judge-model", "judge-x",
                   "--base-url", server.base_url, "--no-api-key", "--n-boot", "200", "--data-dir", str(official_dir)]
        assert main(command) == 0
        sent = len(server.received)
        assert main(command) == 0  # resumed: everything already judged, nothing sent
        assert len(server.received) == sent == 2 * COUNT
    printed = capsys.readouterr().out
    assert "position_consistency" in printed and f"skipped {2 * COUNT} already judged" in printed
    summary = json.loads((out / battle.SUMMARY).read_text())
    assert summary["win"]["value"] == 1.0 and summary["position_consistency"]["value"] == 1.0
    assert summary["win"]["n_clusters"] == COUNT
    # Another pair of runs in the same battle directory is refused.
    with pytest.raises(runs.RunError, match="holds the battle"):
        pipeline.battle(run_b, run_a, out, pipeline.JudgeSettings(judge_model="j", api_key_env=""),
                        data=official_data)
