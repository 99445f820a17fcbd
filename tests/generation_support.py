"""Helpers shared by the generation tests: synthetic samples (never test-set text), request keys
as the mock server computes them, a scan for leaked secrets, and children that a test interrupts
or kills mid-run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from charactereval_lib.charactereval.data import OfficialData
from charactereval_lib.charactereval.requests import make_requests
from charactereval_lib.engine.generation.base import DecodingParams, build_payload, request_sha256
from charactereval_lib.testing.mockserver import request_key
from charactereval_lib.testing.synthetic import synthetic_chat_data as synthetic_data  # noqa: F401 - shared

ROOT = Path(__file__).resolve().parent.parent
# A key no test writes anywhere on purpose: it must never show up in a run directory or output.
FAKE_KEY = "sk-test-DO-NOT-LEAK-7f3a9c2e41b8d605"


def keys_by_id(data: OfficialData) -> dict[int, str]:
    """The mock server's plan key of each sample's request."""
    return {r.id: request_key(r.messages) for r in make_requests(data.samples, data)}


def expected_sha(data: OfficialData, model: str, params: DecodingParams) -> dict[int, str]:
    return {r.id: request_sha256(build_payload(model, r.messages, params)) for r in make_requests(data.samples, data)}


def files_containing(root: Path, secret: str) -> list[Path]:
    """Every file under ``root`` whose bytes contain ``secret``."""
    needle = secret.encode()
    return [p for p in Path(root).rglob("*") if p.is_file() and needle in p.read_bytes()]


def interruptible() -> None:
    """``preexec_fn`` of a child that a test interrupts: SIGINT back to its default, because a
    launcher that runs the suite as a background job (``cmd &``, nohup) ignores it, the child
    would inherit that, and neither Python's KeyboardInterrupt nor Ray's task cancellation
    would ever fire."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def end_session(sid: int) -> None:
    """SIGKILL every process left in session ``sid`` (Ray's agents can outlive a killed driver)."""
    import psutil

    for process in psutil.process_iter():
        try:
            if os.getsid(process.pid) == sid:
                process.kill()
        except (ProcessLookupError, psutil.Error):
            pass


def slow_writes(seconds: float) -> str:
    """Lines of a child script that make it wait ``seconds`` after each record it writes: they
    widen the window in which ``kill_mid_run`` kills it mid-run."""
    return textwrap.dedent(
        f"""
        import time
        from charactereval_lib.engine.storage import artifacts
        _write = artifacts.JsonlAppender.write
        def _slow_write(self, record):
            _write(self, record)
            time.sleep({seconds})
        artifacts.JsonlAppender.write = _slow_write
        """
    )


def kill_mid_run(request, script: str, args: list[str], records: Path, cwd: Path,
                        env: dict[str, str] | None = None, at_least: int = 3) -> None:
    """Run ``python -c script args`` and SIGKILL it once ``records`` holds ``at_least`` lines. Its
    own session, so that whatever it started (a Ray driver's local cluster) can be found and
    ended, also when the test fails."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    child = subprocess.Popen([sys.executable, "-c", script, *args], cwd=cwd, env=env, stderr=subprocess.PIPE,
                             start_new_session=True)
    request.addfinalizer(lambda: end_session(child.pid))
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if records.exists() and records.read_bytes().count(b"\n") >= at_least:
            break
        if child.poll() is not None:
            pytest.fail(f"driver ended early: {child.stderr.read().decode()[-2000:]}")
        time.sleep(0.01)
    child.send_signal(signal.SIGKILL)
    child.wait()
    child.stderr.close()
