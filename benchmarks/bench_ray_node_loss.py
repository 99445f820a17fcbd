"""What a lost node costs a ``score --engine ray`` run: on a multi-node cluster on this machine
(``ray.cluster_utils.Cluster``: a head node with no CPUs, two worker nodes of one CPU each, Ray's
default health checks), two workers score the same rows; after the first units are written, one
worker's node is removed, gracefully (its raylet stopped) or abruptly (its raylet and the worker
killed, as a machine that dies), and no node has room for a replacement.

    python benchmarks/bench_ray_node_loss.py [--data-dir DIR] [--rows 120] [--rm DIR] [--out FILE]

Reported per kind of loss: seconds from the loss to the next row written (by the surviving
worker), to the loss being seen by the driver (its units back in the queue), and to the run's
end; whether the run is complete, without duplicates and bitwise the single-process scorer's.
The rows and the tiny random reward model (tokenizer trained on the data) are ``bench_ray.py``'s.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))


def lose_a_node(cluster, data, rows, rm_dir: Path, reference: dict, run_dir: Path, graceful: bool) -> dict:
    """One run on two new nodes, one of them removed after the second unit is written."""
    from bench_ray import write_run

    from charactereval_lib.charactereval import layout
    from charactereval_lib.charactereval.reward import scorer
    from charactereval_lib.charactereval.reward.ray_scorer import RayEngine, RaySettings
    from charactereval_lib.engine.storage import artifacts

    nodes = [cluster.add_node(num_cpus=1) for _ in range(2)]
    write_run(run_dir, data, rows)
    times: dict = {"written": []}

    def hook(workers, finished):
        now = time.perf_counter()
        times["written"].append(now)
        if finished == 2:
            victim = next(n for n in nodes if n.node_id == workers[0].node_id)
            times["loss"] = time.perf_counter()
            cluster.remove_node(victim, allow_graceful=graceful)
            nodes.remove(victim)
            if not graceful:  # a machine that dies: its worker with its raylet
                with contextlib.suppress(ProcessLookupError):
                    os.kill(workers[0].pid, signal.SIGKILL)

    engine = RayEngine(RaySettings(address=cluster.address, workers=2), on_result=hook)
    lose = engine.pool._lose

    def seen(handle, held):
        times["seen"] = time.perf_counter()
        lose(handle, held)

    engine.pool._lose = seen
    report = scorer.score_run(run_dir, rm_dir, data, scorer.ScorerSettings(progress=False), engine)
    end = time.perf_counter()
    for node in nodes:
        cluster.remove_node(node)
    written = artifacts.read_jsonl(run_dir / layout.SCORES).records
    keys = [(r["id"], r["metric_en"]) for r in written]
    loss = times["loss"]
    after = [t for t in times["written"] if t > loss]
    return {
        "loss": "graceful" if graceful else "abrupt",
        "seconds_to_next_row": round(after[0] - loss, 2) if after else None,
        "seconds_to_loss_seen": round(times["seen"] - loss, 2) if "seen" in times else None,
        "seconds_to_end": round(end - loss, 2),
        "complete": report.scored == len(rows) and len(set(keys)) == len(rows),
        "duplicates": len(keys) - len(set(keys)),
        "bitwise_equal_to_local": {(r["id"], r["metric_en"]): r for r in written} == reference,
        "ray": engine.describe()["ray"],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", default=os.environ.get("CHARACTEREVAL_DATA_DIR"))
    parser.add_argument("--rows", type=int, default=120, help="about this many rows, whole samples (default 120)")
    parser.add_argument("--rm", help="score with this checkpoint instead of a fresh tiny one (the smoke test's)")
    parser.add_argument("--out", help="also write the results as JSON here")
    args = parser.parse_args()
    if not args.data_dir:
        print("benchmark needs the official data: pass --data-dir or set CHARACTEREVAL_DATA_DIR", file=sys.stderr)
        return 2

    from bench_ray import write_run
    from bench_scoring import build_rows, pick_subset
    from ray.cluster_utils import Cluster

    from charactereval_lib.charactereval import layout
    from charactereval_lib.charactereval.data import load_official_data
    from charactereval_lib.charactereval.reward import scorer
    from charactereval_lib.charactereval.reward.tiny import make_tiny
    from charactereval_lib.engine.storage import artifacts

    data = load_official_data(args.data_dir)
    all_rows = build_rows(data)
    rows = [all_rows[i] for i in pick_subset(all_rows, args.rows)]
    results: dict = {"machine": {"cpus": os.cpu_count(), "load_average_at_start": os.getloadavg()[0]},
                     "rows": len(rows), "workers": 2, "runs": []}
    with tempfile.TemporaryDirectory(prefix="bench-ray-loss-", dir="/tmp") as tmp:
        tmp = Path(tmp)
        rm_dir = Path(args.rm) if args.rm else make_tiny(tmp / "rm", data_dir=args.data_dir, layers=4, hidden=256,
                                                         heads=8, vocab_size=8000)
        write_run(tmp / "local", data, rows)
        scorer.score_run(tmp / "local", rm_dir, data, scorer.ScorerSettings(progress=False))
        reference = {(r["id"], r["metric_en"]): r for r in artifacts.read_jsonl(tmp / "local" / layout.SCORES).records}
        # Workers import this checkout; Ray's files stay in the temporary folder.
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
        os.environ["RAY_TMPDIR"] = str(tmp)
        (tmp / "ray").mkdir()
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0, "include_dashboard": False,
                                                                 "temp_dir": str(tmp / "ray")})
        try:
            for graceful in (True, False):
                result = lose_a_node(cluster, data, rows, rm_dir, reference, tmp / f"run-{graceful}", graceful)
                results["runs"].append(result)
                print(json.dumps({k: v for k, v in result.items() if k != "ray"}), flush=True)
        finally:
            cluster.shutdown()
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
