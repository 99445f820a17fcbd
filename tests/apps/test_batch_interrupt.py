"""Ctrl-C or SIGTERM stops the whole batch: the model in progress keeps what it received, the
next model never starts, and the batch says so (exit 130)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from charactereval_lib.engine.storage import artifacts, runs
from tests.generation_support import interruptible


def start_slow_batch(tmp_path: Path, data_dir: Path, rm: Path, *, limit: int, engine: str = "",
                     new_session: bool = False) -> tuple[subprocess.Popen, Path]:
    """``charactereval batch`` as a child process over two offline models whose replies take
    0.25 s each, two at a time: a batch still generating when the test signals it. ``engine``:
    config lines choosing the engine; returns the process and the batch's output directory."""
    out = tmp_path / "out"
    config = tmp_path / "batch.yaml"
    config.write_text(
        f"""
output_dir: {out}
data_dir: {data_dir}
{engine}
defaults: {{backend: offline, rm: {rm}, device: cpu, limit: {limit},
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
                               start_new_session=new_session, preexec_fn=interruptible)
    return process, out


def wait_for_records(process: subprocess.Popen, paths: list[Path], at_least: int, timeout: float) -> None:
    """Until each of ``paths`` holds ``at_least`` records; fails if the batch ends first."""
    deadline = time.monotonic() + timeout
    while not all(p.exists() and len(artifacts.read_jsonl(p).records) >= at_least for p in paths):
        assert time.monotonic() < deadline and process.poll() is None, process.communicate()
        time.sleep(0.1)


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_the_whole_batch(signum, official_dir, tiny_rm, tmp_path):
    process, out = start_slow_batch(tmp_path, official_dir, tiny_rm, limit=40)
    generations = out / "first" / runs.GENERATIONS
    wait_for_records(process, [generations], 4, timeout=60)
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
