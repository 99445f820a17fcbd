"""``score --engine ray`` on a real multi-node cluster losing nodes mid-run: a head node with no
CPUs and worker nodes of one CPU each, every node its own raylet (``ray.cluster_utils.Cluster``),
one node stopped gracefully and another killed, with and without room for a replacement. Every
run ends complete (or, with no worker left, stops in one line and a rerun completes it), bitwise
the single-process scorer's records, none twice, with one stderr line per lost worker and
neither a traceback nor Ray's log dumps."""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import socket
import tempfile
from pathlib import Path

import pytest

from _ray_support import REPO, keys_once, reference
from charactereval_lib.charactereval import layout
from charactereval_lib.charactereval.reward import scorer
from charactereval_lib.cli import main
from charactereval_lib.engine.storage import artifacts, runs

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("private_digest_cache")]

# Ray marks a killed node dead after health_check_failure_threshold missed checks, one every
# health_check_period_ms (by default 3 s x 5); shorter here, so an abrupt loss is seen in seconds.
HEALTH_CHECKS = {"health_check_initial_delay_ms": 0, "health_check_period_ms": 500, "health_check_failure_threshold": 3}
# Two rows (whole samples) per faithful unit: a score run of the 24 samples is some twenty
# units, so a node lost after the first finished ones still had work queued for it.
UNIT_ROWS = 2


@pytest.fixture(scope="module")
def nodes(tmp_path_factory):
    """The head node (no CPUs: it runs no worker); each test adds its worker nodes and the
    fixture removes whatever a test left."""
    pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    temp = Path(tempfile.mkdtemp(prefix="rayn-", dir="/tmp"))  # short: Ray's socket paths must fit 107 bytes
    (temp / "ray").mkdir()
    with pytest.MonkeyPatch.context() as env:
        # The nodes' workers import this checkout and cache digests privately; Ray's files,
        # its address file included, stay in this folder, away from any other cluster here.
        env.setenv("PYTHONPATH", str(REPO))
        env.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("ray-cache")))
        env.setenv("RAY_TMPDIR", str(temp))
        env.setenv("RAY_USAGE_STATS_ENABLED", "0")
        cluster = Cluster(initialize_head=True, head_node_args={
            "num_cpus": 0, "include_dashboard": False, "temp_dir": str(temp / "ray"), "_system_config": HEALTH_CHECKS})
        try:
            yield cluster
        finally:
            cluster.shutdown()
            shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture
def add_nodes(nodes):
    """``add_nodes(n)``: n worker nodes of one CPU; all removed after the test."""
    def add(n: int) -> list:
        return [nodes.add_node(num_cpus=1) for _ in range(n)]

    yield add
    for node in list(nodes.worker_nodes):
        nodes.remove_node(node, allow_graceful=False)


def losing(nodes, at: dict[int, bool]):
    """An ``on_result`` hook that removes, once ``at`` (finished units -> graceful) is reached,
    the node of the first worker still on a live node: gracefully (its raylet stopped), or
    abruptly, as a machine that dies: its raylet and the worker killed. (A worker whose raylet
    alone is killed goes on serving the driver for seconds, long enough to finish a small run.)"""
    live = {n.node_id for n in nodes.worker_nodes}

    def hook(workers, finished):
        if finished in at:
            graceful = at.pop(finished)
            worker = next(w for w in workers if w.node_id in live)
            live.discard(worker.node_id)
            nodes.remove_node(next(n for n in nodes.worker_nodes if n.node_id == worker.node_id), graceful)
            if not graceful:
                with contextlib.suppress(ProcessLookupError):  # it noticed its raylet's death first
                    os.kill(worker.pid, signal.SIGKILL)

    return hook


def score_args(run_dir: Path, rm_dir: Path, data_dir: Path, address: str, *extra: str) -> list[str]:
    return ["score", str(run_dir), "--rm", str(rm_dir), "--data-dir", str(data_dir), "--engine", "ray",
            "--address", address, "--quiet", *extra]


def check_quiet(out: str, err: str, lost: int) -> list[str]:
    """stderr has one line per lost worker (and one per replacement that Ray placed on a node
    already dying), and neither output has Ray's notices (a raylet's log dump, printed on
    stdout) or a traceback; the other lines of stderr are returned."""
    lines = err.strip().splitlines()
    lost_lines = [line for line in lines if line.startswith("ray: lost the scoring worker on ")]
    assert len(lost_lines) == lost and all("unit(s) back in the queue" in line for line in lost_lines)
    for text in (out, err):
        assert "Traceback" not in text and "raylet" not in text and "state-dump" not in text
    return [line for line in lines if line not in lost_lines
            and not line.startswith("ray: a replacement scoring worker could not start: ")]


def test_lost_nodes_never_stall_a_run(nodes, add_nodes, setup, rm_dir, monkeypatch, capfd):
    """One scoring run, twice. First two workers on two nodes: one node stopped, the run goes on
    on the other (no room for a replacement); that one killed too, no worker is left and none
    can start: exit 1 after --lost-node-wait, the rows so far kept. The rerun: one worker and a
    spare node; the worker's node killed, the replacement starts on the spare and scores the rest.
    (One run each: every worker imports torch and every node starts Ray's agents, seconds of CPU.)"""
    from charactereval_lib.charactereval.reward import ray_scorer
    from charactereval_lib.pipeline import charactereval as stages

    data, data_dir, run_dir, rows = setup
    expected = reference(run_dir, data_dir, data, rm_dir, "faithful")
    capfd.readouterr()
    # The synthetic data has no official checksums.
    monkeypatch.setattr(stages, "load_official_data", functools.partial(stages.load_official_data, verify=False))
    monkeypatch.setattr(scorer, "FAITHFUL_UNIT_ROWS", UNIT_ROWS)
    engine = ray_scorer.RayEngine

    def losing_nodes(at: dict[int, bool]) -> None:
        monkeypatch.setattr(ray_scorer, "RayEngine", functools.partial(engine, on_result=losing(nodes, at)))

    add_nodes(2)
    losing_nodes({1: True, 4: False})
    status = main(score_args(run_dir, rm_dir, data_dir, nodes.address, "--workers", "2", "--lost-node-wait", "2"))
    out, err = capfd.readouterr()
    assert status == 1 and check_quiet(out, err, lost=2) == [
        "error: every Ray worker was lost and no replacement could start within 2 s (the cluster has no room for "
        "one: `ray status`); what was received so far is saved: re-run to resume"], err
    kept = keys_once(run_dir / layout.SCORES)
    assert 4 * UNIT_ROWS <= len(kept) < len(rows)
    assert all(r == expected[(r["id"], r["metric_en"])] for r in artifacts.read_jsonl(run_dir / layout.SCORES).records)

    add_nodes(2)
    losing_nodes({1: False})
    assert main(score_args(run_dir, rm_dir, data_dir, nodes.address, "--lost-node-wait", "120")) == 0
    out, err = capfd.readouterr()
    check_quiet(out, err, lost=1)
    # The closing line names the device the workers resolved, not "auto".
    assert f"scored {len(rows) - len(kept)} row(s) (faithful, cpu, ray x1" in out
    assert len(keys_once(run_dir / layout.SCORES)) == len(rows)
    assert {(r["id"], r["metric_en"]): r for r in artifacts.read_jsonl(run_dir / layout.SCORES).records} == expected
    ray = runs.load_manifest(run_dir)["scoring"]["ray"]
    assert ray["workers_lost"] == 1 and ray["replacements_started"] == 1 and ray["replacements_requested"] >= 1
    # Each worker named by its node: the replacement ran on the node that was spare.
    [spare] = nodes.worker_nodes
    lost, replacement = ray["worker_devices"]
    assert replacement == f"{socket.gethostname()}/{spare.node_id[:12]}:cpu" and lost != replacement
