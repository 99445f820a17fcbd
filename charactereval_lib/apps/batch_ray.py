"""The Ray task lifecycle of ``charactereval batch`` with ``engine: ray`` (``batch`` orchestrates):
each model's parts submitted as tasks with the requests of its plan, their results gathered in
config order, tasks no live node can run failed after a wait, and on Ctrl-C or SIGTERM every
running task stopped (asked, then killed) before the driver leaves, since Ray kills a job's
workers the moment its driver disconnects. It runs the stages of ``batch_stages``, as the
sequential loop of ``batch`` does, and never imports ``batch``.
"""

from __future__ import annotations

import signal
import time
from typing import Any

from charactereval_lib.apps.batch_stages import (
    BatchConfig,
    BatchError,
    BatchResult,
    interrupted_result,
    new_result,
    run_stages,
)
from charactereval_lib.engine.registry.batching import GENERATION, PARTS, SCORING, ModelResult
from charactereval_lib.engine.storage import runs

# How long Ray tasks get, after Ctrl-C or SIGTERM, to save what they received and end. They end
# as soon as they have (two generations of 400 samples, measured from the cancel to run.json
# written: 16-88 ms at load averages 3 to 11), so the wait only costs time when a task is stuck;
# one still running then is killed.
CANCEL_WAIT_S = 120.0
# How long a killed task's worker may take to be gone (Ray reports it within seconds).
KILL_WAIT_S = 30.0

# How often the driver asks Ray which nodes are alive (a call to the GCS), to find tasks no node can run.
NODE_CHECK_S = 2.0


def run_on_ray(config: BatchConfig, outcome: BatchResult) -> None:
    """Each model's generation stage as a Ray task, then (when it did not fail) its scoring
    stage, with the resource requests of ``config.ray``; the results in config order."""
    from charactereval_lib.engine.ray_cluster import WAIT_S, cause, cluster, cluster_size

    settings = config.ray
    # cluster() puts run_batch's SIGTERM handler back once Ray's driver has connected.
    with cluster(settings.address, settings.cpus, log_to_driver=True) as ray:
        available = cluster_size(ray)
        wanted = max(settings.gpus(spec, stage) for spec in config.models for stage in PARTS)
        if wanted > available["gpus"]:
            raise BatchError(f"{config.path}: ray: a task asks for {wanted:g} GPU(s), the cluster has "
                             f"{available['gpus']:g}; set generate_gpus/score_gpus to 0 on CPU")
        task = ray.remote(_run_stages_task)
        in_flight: dict[Any, tuple[int, str, float]] = {}
        results: dict[int, ModelResult] = {}

        def submit(index: int, stage: str, result: ModelResult) -> None:
            spec = config.models[index]
            ref = task.options(num_cpus=settings.cpus, num_gpus=settings.gpus(spec, stage), max_retries=0).remote(
                spec, config, result, (stage,))
            in_flight[ref] = (index, stage, time.monotonic())
            results[index] = result

        def fail(index: int, stage: str, error: str) -> None:
            failed = results[index]
            failed.status, failed.failed_step, failed.error = "failed", stage, error
            print(f"!! {failed.name}: {stage} failed: {failed.error}", flush=True)
            run = _generation_run(config, index, stage)
            if run is not None:
                _close_cancelled_generation(run)

        for index, spec in enumerate(config.models):
            submit(index, GENERATION, new_result(spec, config))
        homeless = _HomelessTasks(ray, settings.lost_node_wait)
        try:
            while in_flight:
                for ref in homeless.overdue({ref: (settings.cpus, settings.gpus(config.models[index], stage))
                                             for ref, (index, stage, _) in in_flight.items()}):
                    ray.cancel(ref, force=True)
                    index, stage, _ = in_flight.pop(ref)
                    fail(index, stage, f"Ray task: no node of the cluster has been able to run it for "
                                       f"{settings.lost_node_wait:g} s (lost nodes; `ray status`)")
                ready, _ = ray.wait(list(in_flight), num_returns=1, timeout=WAIT_S) if in_flight else ([], [])
                if not ready:
                    continue
                index, stage, _ = in_flight.pop(ready[0])
                try:
                    results[index] = ray.get(ready[0])
                except ray.exceptions.RayError as exc:
                    # The task itself failed (its worker or node died): that model failed, and a
                    # generation it left marked running is marked interrupted (a rerun resumes it).
                    fail(index, stage, f"Ray task: {cause(exc)}")
                    continue
                if stage == GENERATION and results[index].status == "ok":
                    submit(index, SCORING, results[index])
        except KeyboardInterrupt:
            _stop_tasks(ray, {ref: (config.models[index].name, _generation_run(config, index, stage))
                              for ref, (index, stage, _) in in_flight.items()}, CANCEL_WAIT_S)
            now = time.monotonic()
            for index, _stage, started in in_flight.values():
                results[index] = interrupted_result(config.models[index], config, results[index].seconds + now - started)
            outcome.interrupted = True
        outcome.models = [results[index] for index in sorted(results)]


class _HomelessTasks:
    """Tasks no live node can run (each node has too few CPUs or GPUs for them): Ray would keep
    them waiting for a node for ever, after the node that could run them was lost. Each is
    overdue once it has been so for ``wait_s``; a node that joins in time runs it."""

    def __init__(self, ray: Any, wait_s: float) -> None:
        self.ray = ray
        self.wait_s = wait_s
        self.since: dict[Any, float] = {}
        self.checked = 0.0

    def overdue(self, tasks: dict[Any, tuple[float, float]]) -> list[Any]:
        """Of ``tasks`` (each reference with the CPUs and GPUs it asks for), those overdue now."""
        now = time.monotonic()
        if now - self.checked < NODE_CHECK_S:
            return []
        self.checked = now
        nodes = [n.get("Resources", {}) for n in self.ray.nodes() if n.get("Alive")]
        fits = {ref: any(n.get("CPU", 0) >= cpus and n.get("GPU", 0) >= gpus for n in nodes)
                for ref, (cpus, gpus) in tasks.items()}
        self.since = {ref: self.since.get(ref, now) for ref, fit in fits.items() if not fit}
        return [ref for ref, since in self.since.items() if now - since >= self.wait_s]


def _run_stages_task(spec: Any, config: BatchConfig, result: ModelResult, stages: tuple[str, ...]) -> ModelResult:
    """``run_stages`` as a Ray task. Ray stops a running task (``ray.cancel``) by raising
    KeyboardInterrupt in it through ``_thread.interrupt_main``, which does nothing in a process
    that ignores SIGINT; Ray's workers ignore it whenever whatever started their node did (a batch
    or ``ray start`` run in the background, with ``&`` or nohup), and the task would generate on
    until the driver left and Ray killed it mid-write. So while the task runs SIGINT has Python's
    own handler. (Ray blocks SIGINT in its workers: a Ctrl-C at a terminal still never reaches them.)"""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return run_stages(spec, config, result, stages)
    finally:
        signal.signal(signal.SIGINT, previous)


def _generation_run(config: BatchConfig, index: int, stage: str) -> runs.RunDir | None:
    return runs.RunDir.resolve(config.output_dir / config.models[index].name) if stage == GENERATION else None


def _stop_tasks(ray: Any, tasks: dict[Any, tuple[str, runs.RunDir | None]], wait_s: float) -> None:
    """Stop the running Ray tasks ``tasks`` (each mapped to its model's name and, for a generation
    task, the run it generates into) before the driver leaves: Ray kills a job's workers the
    moment its driver disconnects, whatever they are writing. Each task gets Ctrl-C
    (``ray.cancel``): a generation saves what it received and records that it was interrupted,
    as on Ctrl-C in one process, and the task ends. The wait lasts until every task has ended,
    at most ``wait_s``, or until another Ctrl-C; a task still running then is killed
    (``_close_cancelled_generation``). Another Ctrl-C during these waits ends the wait, not the
    batch: its summary is still written."""
    refs = list(tasks)
    for ref in refs:
        ray.cancel(ref)
    running, again = _wait_for_tasks(ray, refs, wait_s)
    why = "at the second interrupt" if again else f"{wait_s:g} s after the interrupt"
    for ref in running:
        ray.cancel(ref, force=True)
    alive, _ = _wait_for_tasks(ray, running, KILL_WAIT_S) if running else ([], False)
    for ref in running:
        name, run = tasks[ref]
        if ref in alive:
            print(f"!! {name}: its Ray task was still running {why} and could not be killed; its run may be "
                  "incomplete", flush=True)
            continue
        print(f"!! {name}: its Ray task was still running {why}: killed", flush=True)
        if run is not None:
            _close_cancelled_generation(run)


def _wait_for_tasks(ray: Any, refs: list[Any], timeout: float) -> tuple[list[Any], bool]:
    """The tasks of ``refs`` still running once all ended or ``timeout`` passed, and whether a
    Ctrl-C ended the wait early (the tasks still running at that moment)."""
    try:
        return ray.wait(refs, num_returns=len(refs), timeout=timeout)[1], False
    except KeyboardInterrupt:
        return ray.wait(refs, num_returns=len(refs), timeout=0)[1], True


def _close_cancelled_generation(run: runs.RunDir) -> None:
    """The last resort for a generation whose task ``_stop_tasks`` had to kill (it did not end
    within its wait after Ctrl-C: stuck in a call that never returns to the interpreter, or
    deaf to KeyboardInterrupt), so it could not record how it ended: a generation still marked
    running is marked interrupted, its records (flushed as they came) are kept."""
    if run.manifest_path.exists() and (runs.load_manifest(run.path).get("generation") or {}).get("status") == "running":
        runs.update_manifest(run.path, generation={"status": "interrupted"})
