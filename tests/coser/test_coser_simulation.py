"""The CoSER simulation engine end to end on the local mock server with deterministic actors,
environment, NSP and judge (``testing.coser_script``): a smoke run through the CLI, injected
faults, a SIGKILL mid-scene whose resume equals an uninterrupted run, and Ctrl-C / SIGTERM
ending in one interrupted line with the session's counts."""

from __future__ import annotations

import functools
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from charactereval_lib import cli
from charactereval_lib.coser.benchmark import JUDGEMENTS, SCENES, TURNS
from charactereval_lib.coser.prompts import NSP
from charactereval_lib.coser.run import LOCK
from charactereval_lib.engine.storage.artifacts import read_jsonl
from charactereval_lib.engine.storage.runs import load_manifest
from charactereval_lib.testing.coser_script import scripted_reply
from charactereval_lib.testing.mockserver import MockServer
from tests.coser_golden import data_dir
from tests.generation_support import interruptible

ROOT = Path(__file__).resolve().parents[2]


def run_args(run: Path, url: str, *extra: str) -> list[str]:
    return ["coser", "run", str(run), "--preset", "smoke", "--actor-model", "mock-actor", "--base-url", url,
            "--no-api-key", "--data-dir", str(data_dir()), "--retry-base-delay", "0.01", "--timeout", "5", *extra]


def outcome(run: Path) -> dict:
    """What a run produced: every scene's simulation and every dimension's critique and scores."""
    scenes = {(r["repeat"], r["scene"]): (r["simulation"], r["ended_by"], r["rounds"])
              for r in read_jsonl(run / SCENES).records if r["status"] == "done"}
    judged = {(r["repeat"], r["scene"], r["dimension"]): (r["status"], r["critique"], r["scores"])
              for r in read_jsonl(run / JUDGEMENTS).records if r.get("kind") == "dimension"}
    return {"scenes": scenes, "judged": judged}


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("coser") / "clean"
    with MockServer(reply=scripted_reply) as server:
        assert cli.main(run_args(run, server.base_url)) == 0
    return run


def test_smoke_run_records_every_turn_judges_four_dimensions_and_summarizes(clean_run, capsys):
    result = outcome(clean_run)
    assert len(result["scenes"]) == 2 and len(result["judged"]) == 8
    for simulation, ended_by, rounds in result["scenes"].values():
        speakers = [m["role"] for m in simulation if m["role"] != NSP]
        assert all(a != b for a, b in zip(speakers, speakers[1:])), "no speaker twice in a row"
        assert 1 <= rounds <= 20 and (ended_by == "max_rounds") == (rounds == 20)
        if ended_by == "end_chat":
            assert rounds >= 6 and simulation[-1] == {"role": NSP, "content": "<END CHAT>"}
        # paper: the stored actor message carries the speaker's name prefix
        assert all(m["content"].startswith(m["role"] + ":") for m in simulation if m["role"] != NSP)
    assert all(status == "ok" for status, _, _ in result["judged"].values())
    turns = read_jsonl(clean_run / TURNS).records
    assert all(t["temperatures"] == [0] for t in turns)
    manifest = json.loads((clean_run / "run.json").read_text())
    assert manifest["protocol_version"] == "coser-paper"
    assert manifest["coser"]["models"]["actor"] == "mock-actor" and manifest["coser"]["preset"] == "smoke"
    assert "sk-" not in (clean_run / "run.json").read_text()
    assert cli.main(["coser", "summarize", str(clean_run), "--n-boot", "200"]) == 0
    summary = json.loads((clean_run / "coser_summary.json").read_text())
    overall = summary["overall"]
    assert set(overall) == {"Storyline Consistency", "Anthropomorphism", "Character Fidelity", "Storyline Quality",
                            "average"}
    # The smoke run's few scenes are too few for an interval (below 4 scenes: none).
    assert all(v["mean"] is not None and (v["low"] is None) == (summary["counts"]["scenes"] < 4)
               for v in overall.values())
    assert set(summary["by_split"]) == {"id", "ood"} and summary["judge_failures"] == 0
    assert summary["rouge_l_mean"] is not None
    # A second run on the finished directory sends nothing.
    with MockServer(reply=scripted_reply) as server:
        assert cli.main(run_args(clean_run, server.base_url)) == 0
        assert server.received == []


def test_faults_are_survived_and_leave_the_simulation_unchanged(clean_run, tmp_path):
    """429, 5xx, connection resets and empty replies on the first attempts; a judge that answers
    malformed JSON (one repair call) or names the wrong dimension (retried at temperature 1)."""
    faults = ["429:0", "500", "reset", "empty", "503"]

    def plan(key: str, attempt: int, payload: dict) -> str:
        index = int(key[:4], 16) % 7
        return faults[index] if attempt == 1 and index < len(faults) else "ok"

    run = tmp_path / "faults"
    with MockServer(reply=functools.partial(scripted_reply, faulty_judge=True), plan=plan) as server:
        assert cli.main(run_args(run, server.base_url)) == 0
    assert {"429", "500", "reset", "empty", "503"} <= set(server.actions)
    faulty, clean = outcome(run), outcome(clean_run)
    assert faulty["scenes"] == clean["scenes"]
    retried = [t for t in read_jsonl(run / TURNS).records if len(t["temperatures"]) > 1]
    assert retried and all(t["temperatures"][:2] == [0, 1] for t in retried)
    statuses = [a["status"] for r in read_jsonl(run / JUDGEMENTS).records if r.get("kind") == "dimension"
                for a in r["attempts"]]
    assert "wrong_dimension" in statuses and any(
        a.get("repair_model") for r in read_jsonl(run / JUDGEMENTS).records if r.get("kind") == "dimension"
        for a in r["attempts"])
    assert all(status == "ok" for status, _, _ in faulty["judged"].values())


def test_a_judge_that_never_answers_validly_fails_the_dimension_only(tmp_path):
    """Every Anthropomorphism answer names another dimension (upstream: KeyError, the run dies)."""

    def reply(payload):
        system = payload["messages"][0]["content"]
        if system.startswith("You are a literary critic") and system.count("Anthropomorphism") > 1:
            return json.dumps({"Storyline Quality": {"flaws": []}})
        return scripted_reply(payload)

    run = tmp_path / "badjudge"
    with MockServer(reply=reply) as server:
        assert cli.main(run_args(run, server.base_url, "--limit", "1")) == 0
    judged = {r["dimension"]: r for r in read_jsonl(run / JUDGEMENTS).records if r.get("kind") == "dimension"}
    assert judged["Anthropomorphism"]["status"] == "failed" and len(judged["Anthropomorphism"]["attempts"]) == 11
    assert judged["Storyline Quality"]["status"] == "ok"


def test_sigkill_mid_scene_then_resume_equals_an_uninterrupted_run(clean_run, tmp_path):
    run = tmp_path / "killed"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with MockServer(reply=scripted_reply, latency_s=0.03) as server:
        proc = subprocess.Popen([sys.executable, "-m", "charactereval_lib.cli", *run_args(run, server.base_url)],
                                cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if len(read_jsonl(run / TURNS).records) >= 9:
                break
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert proc.returncode == -signal.SIGKILL
        recorded = read_jsonl(run / TURNS).records
        assert 9 <= len(recorded) and not read_jsonl(run / SCENES).records, "killed mid-scene"
        sent_before = len(server.received)
        assert cli.main(run_args(run, server.base_url)) == 0
    assert outcome(run) == outcome(clean_run)
    # The resumed scenes continued from their last recorded turn: no recorded turn was asked again.
    steps = [(t["repeat"], t["scene"], t["step"]) for t in read_jsonl(run / TURNS).records]
    assert len(steps) == len(set(steps))
    assert len(server.received) - sent_before == len(read_jsonl(clean_run / TURNS).records) - len(recorded) + 8


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_an_interrupt_ends_in_one_line_with_the_counts_and_the_run_resumes(stop, clean_run, tmp_path):
    run = tmp_path / "stopped"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with MockServer(reply=scripted_reply, latency_s=0.05) as server:
        proc = subprocess.Popen([sys.executable, "-m", "charactereval_lib.cli", *run_args(run, server.base_url),
                                 "--quiet"], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, preexec_fn=interruptible)
        deadline = time.monotonic() + 120
        while len(read_jsonl(run / TURNS).records) < 4:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no turns recorded within 120 s"
            time.sleep(0.01)
        proc.send_signal(stop)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 130, (out, err)
        assert err.splitlines() == [err.strip()] and "Traceback" not in err
        said = re.match(r"CoSER run interrupted: (\d+) done, (\d+) failed, (\d+) remaining; every record received "
                        r"is saved: re-run the same command to resume$", err.strip())
        assert said, err
        counts = dict(zip(("done", "failed", "remaining"), map(int, said.groups())))
        # A busy machine may let the first scene finish before the signal lands, never both.
        assert sum(counts.values()) == 2 and counts["remaining"] >= 1 and counts["failed"] == 0
        turns = read_jsonl(run / TURNS)
        assert not turns.warnings and len(turns.records) >= 4 and not (run / LOCK).exists()
        coser = load_manifest(run)["coser"]
        assert coser["status"] == "interrupted" and {k: coser["session"][k] for k in counts} == counts

        server.latency_s = 0.0
        assert cli.main(run_args(run, server.base_url, "--quiet")) == 0
    assert outcome(run) == outcome(clean_run)
    assert load_manifest(run)["coser"]["status"] == "complete"
