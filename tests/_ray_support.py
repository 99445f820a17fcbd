"""What the Ray test files share: one local cluster per module, a driver SIGKILLed mid-run and
the clean-up of its processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """One local cluster for the module: two CPUs (the machine's), no dashboard; workers import
    this checkout and keep checkpoint digests in a private cache."""
    ray = pytest.importorskip("ray")
    cache = tmp_path_factory.mktemp("ray-cache")
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": str(REPO), "XDG_CACHE_HOME": str(cache)}},
    )
    yield ray
    ray.shutdown()


def end_session(sid: int) -> None:
    """SIGKILL every process left in session ``sid`` (Ray's agents can outlive a killed driver)."""
    import psutil

    for process in psutil.process_iter():
        try:
            if os.getsid(process.pid) == sid:
                process.kill()
        except (ProcessLookupError, psutil.Error):
            pass


def kill_driver_mid_run(request, script: str, args: list[str], records: Path, cwd: Path,
                        env: dict[str, str] | None = None, at_least: int = 3) -> None:
    """Run ``script`` as a driver that starts its own local cluster and SIGKILL it once
    ``records`` holds ``at_least`` lines. Its own session, so that whatever of its cluster
    outlives it can be found and ended (also when the test fails)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
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
