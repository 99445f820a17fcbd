"""Ctrl-C or SIGTERM stops the whole batch: the model in progress keeps what it received, the
next model never starts, and the batch says so (exit 130)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from charactereval_lib.engine import artifacts, runs
from tests.generation_support import interruptible


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_the_whole_batch(signum, official_dir, tiny_rm, tmp_path):
    rm = tiny_rm
    out = tmp_path / "out"
    config = tmp_path / "batch.yaml"
    config.write_text(
        f"""
output_dir: {out}
data_dir: {official_dir}
defaults: {{backend: offline, rm: {rm}, device: cpu, limit: 40,
            generate: {{offline_latency: 0.25, concurrency: 2}}}}
models:
  - {{name: first, model: offline-a}}
  - {{name: second, model: offline-b}}
""",
        encoding="utf-8",
    )
    env = {**os.environ, "TQDM_DISABLE": "1"}
    process = subprocess.Popen([sys.executable, "-m", "charactereval_lib.cli", "batch", str(config)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                               preexec_fn=interruptible)
    generations = out / "first" / runs.GENERATIONS
    deadline = time.monotonic() + 60
    while not (generations.exists() and len(artifacts.read_jsonl(generations).records) >= 4):
        assert time.monotonic() < deadline and process.poll() is None, process.communicate()
        time.sleep(0.1)
    process.send_signal(signum)
    stdout, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, (stdout, stderr)
    assert "STOPPED first" in stdout and "interrupted" in stdout
    assert not (out / "second").exists()
    summary = json.loads((out / "batch-summary.json").read_text(encoding="utf-8"))
    assert summary["interrupted"] and [m["status"] for m in summary["models"]] == ["interrupted"]
    # Everything received before the signal is saved, once per sample, and no torn line is left.
    read = artifacts.read_jsonl(generations)
    ids = [r["id"] for r in read.records]
    assert 4 <= len(ids) < 40 and len(ids) == len(set(ids)) and not read.warnings
