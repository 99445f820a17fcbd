"""CoSER simulation throughput against a local OpenAI-compatible server with a fixed latency.

Starts ``testing.mockserver --coser-script`` (deterministic actors, environment, NSP and judge)
in its own process, then in the same run:
  (a) ours: every scene of the test set simulated and judged through the engine (scenes
      concurrent, turns sequential, every turn recorded in a run directory);
  (b) sequential: the upstream-style loop, one call at a time (scene after scene, turn after
      turn, the 4 judge calls one by one), on a subset of scenes, extrapolated per call to (a)'s
      number of calls (a full sequential pass at 200 ms a call would take about 20 minutes).
The ideal for (a) is the longest scene's chain of sequential calls times the latency (its
simulation turns, then its slowest dimension's judge calls). For (a) it also reports where the
time goes: the client's CPU time per call (the server and the BLEU/ROUGE-L worker run in their own
processes, whose CPU is reported beside it: on two cores all three share them), the event loop's
lag (how late a 10 ms timer fires: p50, p99, max), each call's latency as the scene sees it (p50,
p99) against the server's fixed latency, and the CPU seconds of the client's own steps: building
prompts (agents, histories, critic prompts), encoding and digesting requests, writing records
(encoding on the loop, appending in the writer threads) and the metrics (in their worker). With
``--baseline-python PATH --baseline DIR`` (another checkout and the interpreter of its own
environment, e.g. the commit before a change) that checkout's bench_coser.py runs first, in a
fresh process from a neutral directory, and its (a) is reported beside ours: before and after on
the same machine at nearly the same load. Needs $COSER_DATA_DIR.

With ``--repeat N``, (a) runs N times (each with a fresh metrics child, as a new command has) and
the run of median wall time is reported, beside every run's figures and load.

    python benchmarks/bench_coser.py [--latency 0.2] [--sequential-scenes 4] [--repeat 3] [--json FILE]
                                     [--baseline-python PATH --baseline DIR] [--scenes N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from charactereval_lib.coser import simulation
from charactereval_lib.coser.benchmark import JUDGEMENTS, TURNS
from charactereval_lib.coser.data import load_test_set
from charactereval_lib.coser.metrics_worker import metrics_worker
from charactereval_lib.coser.run import Preset, run_coser, start_run
from charactereval_lib.coser.simulation import RoleClients, RoleSettings, SimulationSettings
from charactereval_lib.coser.upstream import load_critic_prompts
from charactereval_lib.engine.generation import retry
from charactereval_lib.engine.generation.retry import RetryPolicy
from charactereval_lib.engine.storage.artifacts import JsonlAppender, read_jsonl
from charactereval_lib.engine.storage.runs import RunDir


def settings(url: str) -> SimulationSettings:
    role = lambda model: RoleSettings(model, base_url=url, api_key_env="")  # noqa: E731
    return SimulationSettings(actor=role("bench-actor"), env=role("gpt-4o"), nsp=role("gpt-4o-mini"),
                              judge=role("gpt-4o"))


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else values[0]


# The client's steps whose CPU time is reported: (owner, attribute) wrapped while a run is timed.
STEPS = {
    "prompt_building": [(simulation, "build_scene_agents"), (simulation.SceneState, "broadcast"),
                        (simulation, "judge_inputs")],
    "request_encoding": [(retry, "canonical_json"), (retry, "body_sha256")],
    "record_writing": [(JsonlAppender, "write"), (JsonlAppender, "_append")],
}


@contextmanager
def step_cpu(seconds: dict[str, float]):
    """CPU seconds of the calling thread inside each step (writer threads included), summed per
    step into ``seconds``; the functions are restored afterwards."""
    saved = []

    def timed(step, function):
        def wrapper(*args, **kwargs):
            started = time.thread_time()
            try:
                return function(*args, **kwargs)
            finally:
                seconds[step] += time.thread_time() - started
        return wrapper

    for step, targets in STEPS.items():
        seconds[step] = 0.0
        for owner, name in targets:
            function = owner.__dict__[name]
            saved.append((owner, name, function))
            setattr(owner, name, timed(step, function))
    try:
        yield
    finally:
        for owner, name, function in saved:
            setattr(owner, name, function)


def run(url: str, scenes, critic, path: Path, concurrency: int, server: psutil.Process
        ) -> tuple[float, RunDir, dict]:
    """Wall seconds, the run directory, and where the time went (client, server and metrics CPU,
    the client's steps, loop lag, call latency)."""
    run_dir = RunDir(path)
    path.mkdir(parents=True)
    s, preset = settings(url), Preset("bench", None, 1)
    start_run(run_dir, s, preset, scenes, "bench")
    lags: list[float] = []
    latencies: list[float] = []

    async def watch_loop() -> None:
        while True:
            before = time.perf_counter()
            await asyncio.sleep(0.01)
            lags.append(time.perf_counter() - before - 0.01)

    async def main():
        clients = RoleClients(s, concurrency=concurrency, policy=RetryPolicy(base_delay_s=0.05))
        ask = clients.ask

        async def timed_ask(*args, **kwargs):
            sent = time.perf_counter()
            try:
                return await ask(*args, **kwargs)
            finally:
                latencies.append(time.perf_counter() - sent)

        clients.ask = timed_ask
        watcher = asyncio.create_task(watch_loop())
        try:
            return await run_coser(run_dir, scenes, s, preset, critic, clients, scene_concurrency=concurrency)
        finally:
            watcher.cancel()
            await clients.aclose()

    steps: dict[str, float] = {}
    server_cpu, metrics_cpu = sum(server.cpu_times()[:2]), metrics_worker().cpu_s
    cpu, started = time.process_time(), time.perf_counter()
    with step_cpu(steps):
        outcome = asyncio.run(main())
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    server_cpu, metrics_cpu = sum(server.cpu_times()[:2]) - server_cpu, metrics_worker().cpu_s - metrics_cpu
    assert not outcome["errors"], outcome["errors"][:3]
    calls = len(latencies)
    breakdown = {
        "calls": calls, "client_cpu_s": round(cpu, 2), "client_cpu_ms_per_call": round(1000 * cpu / calls, 3),
        "client_step_cpu_s": {step: round(value, 3) for step, value in steps.items()},
        "server_cpu_s": round(server_cpu, 2), "server_cpu_ms_per_call": round(1000 * server_cpu / calls, 3),
        "metrics_worker_cpu_s": round(metrics_cpu, 2),
        # CPU the three processes got per second of the run: about 1 on an idle two-core machine
        # (the client alone is under 0.5); far less on a busy one, where the wall time measures
        # the CPU share, not the client.
        "cpu_s_per_wall_s": round((cpu + server_cpu + metrics_cpu) / elapsed, 2),
        "loop_lag_ms": {"p50": round(1000 * percentile(lags, 50), 1), "p99": round(1000 * percentile(lags, 99), 1),
                        "max": round(1000 * max(lags), 1)},
        "call_latency_ms": {"p50": round(1000 * percentile(latencies, 50), 1),
                            "p99": round(1000 * percentile(latencies, 99), 1)},
    }
    return elapsed, run_dir, breakdown


def chain_lengths(run_dir: RunDir) -> tuple[int, int]:
    """(longest per-scene chain of sequential calls, total calls)."""
    turns = Counter()
    for t in read_jsonl(run_dir.artifact(TURNS)).records:
        turns[t["scene"]] += len(t["temperatures"])
    judge = Counter()
    total_judge = 0
    for r in read_jsonl(run_dir.artifact(JUDGEMENTS)).records:
        if r.get("kind") == "dimension":
            calls = sum(1 + ("repair_model" in a) for a in r["attempts"])
            judge[r["scene"]] = max(judge[r["scene"]], calls)
            total_judge += calls
    return max(turns[s] + judge[s] for s in turns), sum(turns.values()) + total_judge


def run_baseline(args) -> dict:
    """The baseline checkout's own (a), with its load average at start."""
    load = os.getloadavg()
    done = subprocess.run([args.baseline_python, str(Path(args.baseline) / "benchmarks" / "bench_coser.py"), "--latency",
                           str(args.latency), "--concurrency", str(args.concurrency), "--sequential-scenes", "1"],
                          cwd="/", capture_output=True, text=True, check=True)
    figures = json.loads(done.stdout[done.stdout.index("{"):])
    commit = subprocess.run(["git", "-C", str(args.baseline), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip() or None
    return {"checkout": str(args.baseline), "commit": commit, "load_average_1_5_15_at_start": [round(x, 2) for x in load],
            **{k: figures[k] for k in ("ours_wall_s", "ideal_s", "ours_over_ideal")}}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--sequential-scenes", type=int, default=4)
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=1, help="measure (a) this many times; the median is reported")
    parser.add_argument("--scenes", type=int, default=None, help="only the first N scenes of the test set (a smoke run)")
    parser.add_argument("--json", metavar="FILE", help="also write the figures here")
    parser.add_argument("--baseline-python", metavar="PATH", help="interpreter of the baseline checkout's environment")
    parser.add_argument("--baseline", metavar="DIR", help="the baseline checkout (its benchmarks/bench_coser.py runs)")
    args = parser.parse_args()
    baseline = run_baseline(args) if args.baseline else None
    load_at_start = os.getloadavg()
    scenes = load_test_set()[: args.scenes]
    critic = load_critic_prompts()
    server = subprocess.Popen([sys.executable, "-m", "charactereval_lib.testing.mockserver", "--coser-script",
                               "--latency", str(args.latency)], stdout=subprocess.PIPE, text=True)
    try:
        url = server.stdout.readline().split()[-1]
        with tempfile.TemporaryDirectory() as tmp:
            process = psutil.Process(server.pid)
            runs = []
            for i in range(args.repeat):
                load = os.getloadavg()
                wall, run_dir, breakdown = run(url, scenes, critic, Path(tmp) / f"ours{i}", args.concurrency, process)
                metrics_worker().close()  # the next run starts its own, as a new command does
                runs.append({"wall_s": round(wall, 2), "load_average_1_5_15_at_start": [round(x, 2) for x in load],
                             "breakdown": breakdown, "run_dir": run_dir})
            median = sorted(runs, key=lambda r: r["wall_s"])[len(runs) // 2]
            ours, run_dir, breakdown = median["wall_s"], median["run_dir"], median["breakdown"]
            chain, calls = chain_lengths(run_dir)
            subset = scenes[:: max(1, len(scenes) // args.sequential_scenes)][: args.sequential_scenes]
            seq, seq_dir, _ = run(url, subset, critic, Path(tmp) / "seq", 1, process)
            _, seq_calls = chain_lengths(seq_dir)
    finally:
        server.terminate()
        server.wait()
    ideal = chain * args.latency
    seq_full = seq / seq_calls * calls
    result = {
        "machine": f"{os.cpu_count()} CPU cores, mock server in its own process, {args.latency * 1000:.0f} ms latency",
        "load_average_1_5_15_at_start": [round(x, 2) for x in load_at_start],
        "load_average_1_5_15_at_end": [round(x, 2) for x in os.getloadavg()],
        "scenes": len(scenes), "calls": calls, "latency_s": args.latency, "longest_chain_calls": chain,
        "ours_wall_s": round(ours, 2), "ideal_s": round(ideal, 2), "ours_over_ideal": round(ours / ideal, 3),
        "ours_runs": [{"wall_s": r["wall_s"], "over_ideal": round(r["wall_s"] / ideal, 3),
                       "load_average_1_5_15_at_start": r["load_average_1_5_15_at_start"],
                       "client_cpu_ms_per_call": r["breakdown"]["client_cpu_ms_per_call"]} for r in runs],
        "sequential_scenes_measured": len(subset), "sequential_calls_measured": seq_calls,
        "sequential_wall_s_measured": round(seq, 2), "sequential_s_per_call": round(seq / seq_calls, 4),
        "sequential_full_s_extrapolated": round(seq_full, 1),
        "sequential_over_ideal_extrapolated": round(seq_full / ideal, 1),
        # The chain at the pace the sequential loop got from this machine (its per-call time over
        # the latency is the machine's scheduling delay, with almost no client work per call).
        "ours_over_chain_at_sequential_pace": round(ours / (chain * seq / seq_calls), 3),
        "speedup_vs_sequential": round(seq_full / ours, 1),
        "ours_breakdown": breakdown,
    }
    if baseline:
        result["baseline"] = baseline
        result["ours_wall_over_baseline_wall"] = round(ours / baseline["ours_wall_s"], 3)
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
