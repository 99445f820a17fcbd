"""A judge run of the real CLI in a subprocess, killed with SIGKILL mid-run and resumed with the
same command: nothing lost, nothing duplicated. Real data from $CHARACTEREVAL_DATA_DIR."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from charactereval_lib.charactereval import judge
from charactereval_lib.engine.storage import artifacts
from charactereval_lib.testing.mockserver import MockServer, judge_grade, request_key
from tests.charactereval.test_judge import make_run

ROOT = Path(__file__).resolve().parents[2]


def judge_command(run: Path, base_url: str, data_dir: Path) -> list[str]:
    return [sys.executable, "-m", "charactereval_lib.cli", "score", str(run), "--scorer", "judge",
            "--judge-model", "judge-x", "--base-url", base_url, "--no-api-key", "--concurrency", "4",
            "--quiet", "--data-dir", str(data_dir)]


@pytest.mark.slow
def test_judge_run_killed_and_resumed_loses_and_duplicates_nothing(official_data, official_dir, tmp_path):
    run = make_run(tmp_path / "run", official_data, 30)
    rows = run.read_rows()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with MockServer(latency_s=0.05, default_action="judge") as server:
        process = subprocess.Popen(judge_command(run.path, server.base_url, official_dir), cwd=ROOT, env=env,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and process.poll() is None:
            if len(artifacts.read_jsonl(run.judge_scores).records) >= 8:
                break
            time.sleep(0.01)
        assert process.poll() is None, f"the judge run ended before it could be killed: {process.communicate()}"
        process.send_signal(signal.SIGKILL)
        process.wait(10)
        killed_at = len(artifacts.read_jsonl(run.judge_scores).records)
        assert 8 <= killed_at < len(rows)
        assert run.manifest()["judge_scoring"]["judges"]["judge-x"]["status"] == "running"  # the kill left no false "complete"

        resumed = subprocess.run(judge_command(run.path, server.base_url, official_dir), cwd=ROOT, env=env, check=False,
                                 capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    assert f"skipped {killed_at} already judged" in resumed.stdout

    records = artifacts.read_jsonl(run.judge_scores).records
    keys = Counter((r["id"], r["metric_en"]) for r in records)
    assert len(records) == len(rows) and set(keys.values()) == {1}
    assert set(keys) == {(r["id"], r["metric_en"]) for r in rows}
    assert all(r["status"] == "ok" and r["invalid"] is False for r in records)
    # Each grade belongs to its own request: the mock judge's grade is a function of the request.
    items = judge.judge_items(run, official_data, judge.load_specs())
    expected = {(i.key["id"], i.key["metric_en"]): str(judge_grade(request_key(i.messages))) for i in items}
    assert {(r["id"], r["metric_en"]): r["choice"] for r in records} == expected
    assert run.manifest()["judge_scoring"]["judges"]["judge-x"]["status"] == "complete"
    assert len(run.manifest()["judge_scoring"]["judges"]["judge-x"]["sessions"]) == 1  # the killed session never finished
