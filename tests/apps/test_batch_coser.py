"""``batch`` runs a CoSER model too: an entry that names ``benchmark: coser`` goes through CoSER's
stages from the registry (run, summarize, report), here against the scripted mock server that
plays every CoSER role; an interrupted CoSER model stops the batch as an interrupted CharacterEval
one does."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from charactereval_lib.cli import main
from charactereval_lib.coser.benchmark import JUDGEMENTS, SUMMARY, TURNS
from charactereval_lib.engine.storage.artifacts import read_jsonl
from charactereval_lib.testing.coser_script import scripted_reply
from charactereval_lib.testing.mockserver import MockServer
from tests.coser_golden import data_dir
from tests.generation_support import interruptible

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_a_coser_entry_runs_summarizes_and_reports_in_a_batch(tmp_path, capsys):
    config = tmp_path / "batch.yaml"
    with MockServer(reply=scripted_reply) as server:
        config.write_text(f"""output_dir: {tmp_path / "out"}
models:
  - name: coser-smoke
    benchmark: coser
    data_dir: {data_dir()}
    run: {{actor_model: mock-actor, preset: smoke, base_url: "{server.base_url}", no_api_key: true,
           retry_base_delay: 0.01, timeout: 5}}
    summarize: {{n_boot: 20}}
    report: {{n_boot: 20}}
""", encoding="utf-8")
        assert main(["batch", str(config), "--quiet"]) == 0
    out = capsys.readouterr().out
    run = tmp_path / "out" / "coser-smoke"
    assert f"ok      coser-smoke: {run / 'report.html'}" in out
    assert (run / JUDGEMENTS).exists() and json.loads((run / SUMMARY).read_text(encoding="utf-8"))
    summary = json.loads((tmp_path / "out" / "batch-summary.json").read_text(encoding="utf-8"))
    [model] = summary["models"]
    assert (model["name"], model["status"], model["benchmark"]) == ("coser-smoke", "ok", "coser")
    # A model with no unfinished session says 0, not null; its headline is the board's score.
    assert model["failed_samples"] == 0
    headline = model["headline"]
    assert headline["scorer"] == "judge gpt-4o-2024-08-06" and headline["n"] == 2 and headline["headline"].startswith("average")
    # Two scenes: too few for an interval (fewer than 4 clusters), so the headline has none.
    assert headline["score"] is not None and headline["ci"] == [None, None]
    assert summary["comparisons"] == [{"benchmark": "coser", "report": None,
                                       "error": "skipped: 1 model(s) finished, a comparison needs two"}]


def test_an_interrupted_coser_model_stops_the_batch_and_is_marked_interrupted(tmp_path):
    config = tmp_path / "batch.yaml"
    out = tmp_path / "out"
    with MockServer(reply=scripted_reply, latency_s=0.05) as server:
        config.write_text(f"""output_dir: {out}
models:
  - name: first
    benchmark: coser
    data_dir: {data_dir()}
    run: {{actor_model: mock-actor, preset: smoke, base_url: "{server.base_url}", no_api_key: true,
           retry_base_delay: 0.01, timeout: 5}}
  - name: second
    benchmark: coser
    data_dir: {data_dir()}
    run: {{actor_model: mock-actor, preset: smoke, base_url: "{server.base_url}", no_api_key: true}}
""", encoding="utf-8")
        proc = subprocess.Popen([sys.executable, "-m", "charactereval_lib.cli", "batch", str(config), "--quiet"],
                                cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, preexec_fn=interruptible)
        deadline = time.monotonic() + 120
        while len(read_jsonl(out / "first" / TURNS).records) < 4:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no turns recorded within 120 s"
            time.sleep(0.01)
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, (stdout, stderr)
    assert "Traceback" not in stderr
    summary = json.loads((out / "batch-summary.json").read_text(encoding="utf-8"))
    # Not recorded as a failure with the batch going on to the next model.
    assert summary["interrupted"] and [(m["name"], m["status"]) for m in summary["models"]] == [("first", "interrupted")]
    assert json.loads((out / "first" / "run.json").read_text(encoding="utf-8"))["coser"]["status"] == "interrupted"
