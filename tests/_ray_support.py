"""What the Ray test files share: one local cluster for the whole test session.

Starting a Ray node takes from seconds to minutes on a busy machine, and several starting at once
(one per test module, per killed driver, per xdist worker) time out ("node timed out during
startup"). So the first test process that needs Ray starts one head node (``ray start --head
--block``, ``CPUS`` logical CPUs) under a file lock in a folder every xdist worker of the session shares, and
waits for it with a generous deadline, starting it again when Ray gives up on its own fixed 30 s
wait for the node to register; every other test process, driver and child connects to it
by address. The controller process stops it when the session ends (``stop_shared_cluster``,
from conftest), by the process id it started.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# Set by the controller (conftest) before xdist starts its workers, who inherit it.
SESSION_DIR_ENV = "CHARACTEREVAL_TEST_RAY_DIR"
# How long a head node may take to start on a busy machine before the tests give up.
START_DEADLINE_S = 600.0
# Ray's own wait for a raylet to register with the GCS (short by default) is what gives up first on
# a machine running two suites at once ("node timed out during startup"); the head node and every
# driver or worker started by a test inherit the longer wait.
os.environ.setdefault("RAY_raylet_start_wait_time_s", str(int(START_DEADLINE_S)))
# Logical CPUs: one xdist worker runs the Ray files (their xdist_group), one test at a time, but
# a killed driver's two workers may still hold theirs while the resuming driver's pool starts.
CPUS = 4



def check_ray_section(ray: dict, lost: int, cpus: int = CPUS) -> None:
    """The ``ray`` section of a run.json written by two workers on a cluster of ``cpus`` CPUs,
    ``lost`` of them lost and a replacement asked for each: the ones that started before the run
    ended are in ``worker_devices`` too (the others were still loading, or found no room)."""
    assert ray["workers"] == 2 and ray["cluster"]["cpus"] == cpus and ray["workers_lost"] == lost
    assert ray["replacements_requested"] == lost and 0 <= ray["replacements_started"] <= lost
    devices = ray["worker_devices"]
    assert len(devices) == 2 + ray["replacements_started"] and all(d.endswith(":cpu") for d in devices)


def scorer_settings(mode: str = "faithful"):
    from charactereval_lib.charactereval.reward import scorer

    # A small fast-mode budget: several work units, so both workers get some.
    return scorer.ScorerSettings(mode=mode, progress=False, fast_token_budget=300)


def reference(run_dir: Path, data_dir: Path, data, rm_dir: Path, mode: str) -> dict:
    """The single-process scorer's records for the rows of ``data_dir``, by (id, metric)."""
    from _reward_support import write_rows
    from charactereval_lib.charactereval import layout
    from charactereval_lib.charactereval.reward import scorer
    from charactereval_lib.engine.storage import artifacts

    ref = run_dir.parent / f"reference-{mode}"
    write_rows(ref, data_dir)
    scorer.score_run(ref, rm_dir, data, scorer_settings(mode))
    return {(r["id"], r["metric_en"]): r for r in artifacts.read_jsonl(ref / layout.SCORES).records}


def keys_once(path: Path) -> list[tuple[int, str]]:
    """The (id, metric) of every score in ``path``, checking that none was written twice."""
    from charactereval_lib.engine.storage import artifacts

    keys = [(r["id"], r["metric_en"]) for r in artifacts.read_jsonl(path).records]
    assert len(keys) == len(set(keys)), "a row was written twice"
    return keys


def _ray_cli() -> str:
    return str(Path(sys.executable).with_name("ray"))


def shared_cluster_address() -> str:
    """The address of the session's cluster, started here if no test process has yet. Ray's
own start-up is bounded by ``START_DEADLINE_S``; the lock waits for whoever is starting it."""
    pytest.importorskip("ray")
    root = Path(os.environ.get(SESSION_DIR_ENV) or tempfile.gettempdir()) / "ray-cluster"
    root.mkdir(parents=True, exist_ok=True)
    with open(root / "lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process starting it: wait for its address
        address_file = root / "address"
        if address_file.exists():
            return address_file.read_text()
        deadline = time.monotonic() + START_DEADLINE_S
        address = ""
        while not address:
            address = _start_head(root, deadline)
        address_file.write_text(address)
        return address


def _start_head(root: Path, deadline: float) -> str:
    """Start a head node and return its address once it answers, or "" when Ray gave up on its
    own start-up and the deadline leaves time for another try: Ray waits a fixed 30 s for its
    raylet to register, which a machine busy with other test processes can exceed."""
    from charactereval_lib.engine import faults, ray_cluster
    from tests.generation_support import end_session

    # Short: Ray's socket paths under it must fit in 107 bytes.
    temp = Path(tempfile.mkdtemp(prefix="ray-", dir="/tmp"))
    (root / "temp").write_text(str(temp))
    env = {**os.environ, "PYTHONPATH": str(REPO), "XDG_CACHE_HOME": str(root / "cache"),
           # Drivers of the tests connect without a token.
           "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0"}
    with open(root / "head.log", "w") as log:
        head = subprocess.Popen(
            [_ray_cli(), "start", "--head", "--block", f"--num-cpus={CPUS}", "--num-gpus=0",
             "--include-dashboard=false", "--disable-usage-stats", "--port=0", f"--temp-dir={temp}"],
            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, preexec_fn=_ignore_sigint)
    (root / "head.pid").write_text(str(head.pid))
    current = temp / "ray_current_cluster"
    while True:
        if head.poll() is not None:
            log_text = (root / "head.log").read_text()
            if "timed out during startup" in log_text and time.monotonic() < deadline:
                end_session(head.pid)  # what the failed node had started
                shutil.rmtree(temp, ignore_errors=True)
                return ""
            pytest.fail(f"the test Ray cluster did not start: {log_text[-3000:]}")
        address = current.read_text().strip() if current.exists() else ""
        if address:
            try:
                ray_cluster.check_ray_address(address)
                return address
            except faults.Unreachable:
                pass
        if time.monotonic() > deadline:
            pytest.fail(f"the test Ray cluster did not answer within {START_DEADLINE_S:g} s")
        time.sleep(0.2)


def _ignore_sigint() -> None:
    """The node, and every worker it starts, ignores SIGINT, as one started in the background
    (``&``, nohup) does, whatever launched the suite: Ray's cancellation of a task must reach it
    there too (``batch_ray._run_stages_task``), and the tests must not depend on how they were run."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def stop_shared_cluster(session_dir: Path) -> None:
    """End the session's head node (and the processes it started) and remove its files."""
    root = session_dir / "ray-cluster"
    pid_file = root / "head.pid"
    if pid_file.exists():
        pid = int(pid_file.read_text())
        try:
            os.kill(pid, signal.SIGTERM)  # `ray start --block` stops its node's processes
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and _alive(pid):
                time.sleep(0.2)
            os.killpg(pid, signal.SIGKILL)  # whatever of its session is left
        except ProcessLookupError:
            pass
    temp = root / "temp"
    if temp.exists():
        shutil.rmtree(temp.read_text(), ignore_errors=True)
    shutil.rmtree(session_dir, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        finished, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:  # not our child (a worker started it): ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True
    return finished == 0
