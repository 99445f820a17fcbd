"""`charactereval generate` as a real process on the real data: SIGKILL and resume, Ctrl-C,
refusing changed settings, dry-run estimates, and the API key never printed or stored."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from charactereval_lib.charactereval.requests import make_requests
from charactereval_lib.engine.storage import artifacts, runs
from charactereval_lib.testing.mockserver import MockServer, request_key
from tests.generation_support import FAKE_KEY, files_containing, interruptible

ROOT = Path(__file__).resolve().parents[3]


def generate_cmd(run: Path, official_dir: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "charactereval_lib.cli", "generate", str(run), "--model", "m", "--quiet",
            "--data-dir", str(official_dir), *extra]


def env_with_key() -> dict[str, str]:
    return {**os.environ, "OPENAI_API_KEY": FAKE_KEY}


def run_cli(cmd: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=ROOT, env=env_with_key(), capture_output=True, text=True, timeout=120)


def record_lines(run: Path) -> int:
    path = run / runs.GENERATIONS
    return path.read_bytes().count(b"\n") if path.exists() else 0


def start_and_wait_for(cmd: list[str], run: Path, lines: int, timeout: float = 60) -> subprocess.Popen:
    """Start ``generate`` and return once ``lines`` records are on disk (or it ended)."""
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env_with_key(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, preexec_fn=interruptible)
    deadline = time.monotonic() + timeout
    while record_lines(run) < lines and proc.poll() is None:
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"generate wrote {record_lines(run)} of {lines} records within {timeout} s")
        time.sleep(0.005)
    return proc


def varied_plan(key: str, attempt: int, payload: dict) -> str:
    """Deterministic per request: some multi-line and empty replies, some first attempts fail."""
    kind = int(key[:2], 16) % 10
    if kind == 0:
        return "multiline"
    if kind == 1:
        return "empty"
    if kind == 2 and attempt == 1:
        return "500"
    return "ok"


def final_state(run: Path) -> dict[int, tuple]:
    read = artifacts.read_jsonl(run / runs.GENERATIONS)
    assert not read.warnings, read.warnings  # no torn line in the final parse
    latest = artifacts.latest_by_key(read.records, "id")
    return {key[0]: (r["status"], r["model_output"], r["request_sha256"], r["finish_reason"]) for key, r in latest.items()}


@pytest.mark.slow
def test_sigkill_several_times_then_resume_equals_an_uninterrupted_run(official_data, official_dir, tmp_path):
    count = 150
    options = ["--backend", "openai", "--limit", str(count), "--concurrency", "4", "--retry-base-delay", "0.01",
               "--timeout", "10"]
    with MockServer(latency_s=0.03, plan=varied_plan) as server:
        options += ["--base-url", server.base_url]
        reference = tmp_path / "reference"
        done = run_cli(generate_cmd(reference, official_dir, *options))
        assert done.returncode == 0, done.stderr

        run = tmp_path / "killed"
        outputs = []
        for target in (25, 50, 75):
            proc = start_and_wait_for(generate_cmd(run, official_dir, *options), run, target)
            proc.send_signal(signal.SIGKILL)
            out, err = proc.communicate(timeout=30)
            outputs.append(out + err)
            assert proc.returncode == -signal.SIGKILL, "generate finished before it could be killed"
            assert record_lines(run) < count
        finished = run_cli(generate_cmd(run, official_dir, *options))
        outputs.append(finished.stdout + finished.stderr)
        assert finished.returncode == 0, finished.stderr

    expected = final_state(reference)
    assert len(expected) == count and {s for s, *_ in expected.values()} == {"ok"}
    assert final_state(run) == expected
    records = artifacts.read_jsonl(run / runs.GENERATIONS).records
    # Killed requests were in flight, never recorded: each id was written exactly once.
    assert Counter(r["id"] for r in records) == Counter({i: 1 for i in expected})
    assert "skipped" in finished.stdout and f"{count} ok" in finished.stdout
    for text in outputs + [done.stdout + done.stderr]:
        assert FAKE_KEY not in text
    assert files_containing(run, FAKE_KEY) == [] and files_containing(reference, FAKE_KEY) == []
    assert len(runs.load_manifest(run)["generation"]["sessions"]) == 1  # only the clean finish got to write one


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_an_interrupt_stops_cleanly_and_the_run_resumes(stop, official_dir, tmp_path):
    count = 30
    run = tmp_path / "run"
    with MockServer(latency_s=0.2) as server:
        options = ["--backend", "openai", "--base-url", server.base_url, "--limit", str(count), "--concurrency", "2"]
        proc = start_and_wait_for(generate_cmd(run, official_dir, *options), run, 4)
        proc.send_signal(stop)
        out, err = proc.communicate(timeout=30)
        assert proc.returncode == 130, err
        assert "interrupted after" in out and "re-run the same command to resume" in err
        assert "Traceback" not in err
        saved = artifacts.read_jsonl(run / runs.GENERATIONS)
        assert not saved.warnings and 4 <= len(saved.records) < count
        generation = runs.load_manifest(run)["generation"]
        assert generation["status"] == "interrupted" and generation["sessions"][-1]["interrupted"] is True
        assert generation["sessions"][-1]["ok"] == len(saved.records)

        server.latency_s = 0.0
        resumed = run_cli(generate_cmd(run, official_dir, *options))
    assert resumed.returncode == 0, resumed.stderr
    records = artifacts.read_jsonl(run / runs.GENERATIONS).records
    assert len(records) == count and len({r["id"] for r in records}) == count
    assert f"skipped {len(saved.records)} already ok" in resumed.stdout


def test_resuming_with_other_settings_is_refused_in_one_line(official_dir, tmp_path):
    run = tmp_path / "run"
    first = run_cli(generate_cmd(run, official_dir, "--backend", "offline", "--limit", "3"))
    assert first.returncode == 0, first.stderr
    assert "mean nothing" in first.stderr
    for change, field in ((["--top-p", "0.9"], "parameters.top_p"), (["--preset", "chatglm3"], "parameters.preset"),
                          (["--max-tokens", "512"], "parameters.max_tokens")):
        refused = run_cli(generate_cmd(run, official_dir, "--backend", "offline", "--limit", "3", *change))
        assert refused.returncode == 2
        assert refused.stderr.count("\n") == 1 and field in refused.stderr and "new RUN directory" in refused.stderr
    # argparse keeps the last --model given.
    other_model = run_cli(generate_cmd(run, official_dir, "--backend", "offline", "--limit", "3", "--model", "other"))
    assert other_model.returncode == 2 and "model 'm' -> 'other'" in other_model.stderr
    again = run_cli(generate_cmd(run, official_dir, "--backend", "offline", "--limit", "5"))
    assert again.returncode == 0 and "generated 2/2" in again.stdout and "skipped 3 already ok" in again.stdout


def test_dry_run_prints_a_character_based_token_and_cost_estimate(official_data, official_dir, tmp_path):
    run = tmp_path / "run"
    first = run_cli(generate_cmd(run, official_dir, "--backend", "offline", "--limit", "4"))
    assert first.returncode == 0
    dry = run_cli(generate_cmd(run, official_dir, "--backend", "openai", "--limit", "10", "--dry-run",
                               "--price-in", "2.5", "--price-out", "10"))
    assert dry.returncode == 0, dry.stderr
    assert "10 request(s) written; nothing was sent" in dry.stdout
    assert "4 already ok" in dry.stdout
    assert "character-based" in dry.stdout and "6 request(s)" in dry.stdout and "estimated cost: ~$" in dry.stdout
    estimate = runs.load_manifest(run)["dry_run"]["estimate"]
    assert estimate["method"] == "character-based" and estimate["output_tokens_max"] == 6 * 1024
    from charactereval_lib.engine.generation.estimate import estimate_request_tokens

    pending = make_requests(official_data.samples[4:10], official_data)
    assert estimate["input_tokens"] == sum(estimate_request_tokens(r.messages) for r in pending)


def test_a_run_where_everything_fails_exits_1_and_never_shows_the_key(official_data, official_dir, tmp_path):
    run = tmp_path / "run"
    with MockServer(plan=lambda key, attempt, payload: "401") as server:
        failed = run_cli(generate_cmd(run, official_dir, "--backend", "openai", "--base-url", server.base_url,
                                      "--limit", "5"))
        assert server.attempts == Counter({request_key(r.messages): 1
                                           for r in make_requests(official_data.samples[:5], official_data)})
    assert failed.returncode == 1
    assert "AuthenticationError 5" in failed.stdout
    assert FAKE_KEY not in failed.stdout + failed.stderr
    assert files_containing(run, FAKE_KEY) == []
    leaked = run_cli(generate_cmd(run, official_dir, "--backend", "openai", "--api-key-env", FAKE_KEY, "--limit", "1"))
    assert leaked.returncode == 2 and "NAME of an environment variable" in leaked.stderr
    assert FAKE_KEY not in leaked.stdout + leaked.stderr
