"""``score RUN --engine ray``: the scorer's work units on Ray actors, written by the driver only.

- One actor per worker loads the tokenizer and the checkpoint once (from the same path on its
  node; its identity must equal the driver's) and scores whole work units with the scorer's own
  ``score_rows``: the units are ``scorer.work_units`` (fast mode: exactly the single-process
  batches), so the scores are bitwise those of the single-process scorer in the same mode on the
  same device type, and fast mode's prefix reuse still applies within each sample.
- Only pending rows are sent (``score_run`` decides, as for a local run). Each finished unit's
  records come back to the driver, which alone appends them to the scores file: no shared
  filesystem between nodes, and a killed driver resumes exactly like a local run.
- A worker that dies (its process or its node) has every unit it held put back at the head of
  the queue for the others; a replacement worker is started, at most as many times as there are
  workers. A unit fails as a whole, so nothing is written twice.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import socket
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from charactereval_lib.engine import runs
from charactereval_lib.charactereval.reward.scorer import (
    RowInput,
    ScorerSettings,
    encode_rows,
    resolve_device,
    score_rows,
    work_units,
)

INSTALL_HINT = "--engine ray needs Ray, an optional extra: pip install 'charactereval-workbench[ray]' (or pip install ray)"
# Device placeholder for workers: each resolves it itself (cuda when Ray gave it a GPU).
AUTO_DEVICE = "auto"


def import_ray():
    try:
        import ray
    except ImportError:
        raise runs.RunError(INSTALL_HINT) from None
    return ray


@dataclass(frozen=True)
class RaySettings:
    # An existing cluster ("auto", "ray://host:10001", "host:6379"); None starts a local one.
    address: str | None = None
    workers: int = 1
    gpus_per_worker: float = 0.0
    cpus_per_worker: float = 1.0
    # Units queued per worker, so a worker never waits for the driver between two units.
    in_flight_per_worker: int = 2


@dataclass
class WorkerInfo:
    node: str
    pid: int
    device: str
    gpus: list[str]


class ScoringWorker:
    """The actor: loads the model once, then scores work units (lists of rows)."""

    def __init__(self, rm_dir: str, settings: ScorerSettings, ckpt_sha: str) -> None:
        from charactereval_lib.charactereval.reward.checkpoint import checkpoint_identity, load_model
        from charactereval_lib.charactereval.reward.tokenizer import load_tokenizer

        device = resolve_device(None if settings.device == AUTO_DEVICE else settings.device)
        # No bar per worker: the driver shows the one progress bar.
        self.settings = replace(settings, device=device, progress=False)
        self.ckpt_sha = ckpt_sha
        found = checkpoint_identity(rm_dir)["sha256"]
        if found != ckpt_sha:
            raise runs.RunError(f"{socket.gethostname()}:{rm_dir}: checkpoint {found[:12]} differs from the driver's {ckpt_sha[:12]}")
        self.tokenizer = load_tokenizer(rm_dir)
        self.model = load_model(rm_dir, device)

    def info(self) -> WorkerInfo:
        gpus = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        return WorkerInfo(socket.gethostname(), os.getpid(), self.settings.device, [g for g in gpus.split(",") if g])

    def score(self, rows: list[RowInput]) -> list[dict[str, Any]]:
        records: list[dict[str, Any]] = []
        score_rows(rows, self.tokenizer, self.model, self.settings, self.ckpt_sha, records.append)
        return records


class RayEngine:
    """``scorer.score_run(..., engine=RayEngine(RaySettings(...)))``."""

    def __init__(self, settings: RaySettings, on_result: Callable[[list[WorkerInfo], int], None] | None = None) -> None:
        self.ray = import_ray()  # fails here, in one line, when Ray is not installed
        if settings.workers < 1:
            raise runs.RunError(f"--workers {settings.workers}: needs at least 1")
        if settings.gpus_per_worker < 0:
            raise runs.RunError(f"--gpus-per-worker {settings.gpus_per_worker}: cannot be negative")
        self.settings = settings
        # Called after each finished unit with every worker started so far (replacements included)
        # and the number of rows written; the driver-side hook for progress and fault injection.
        self.on_result = on_result
        self.workers: list[WorkerInfo] = []
        self.cluster: dict[str, Any] = {}
        self.restarts = 0

    def describe(self) -> dict[str, Any]:
        return {
            "engine": "ray",
            "ray": {
                "address": self.settings.address or "local",
                "workers": self.settings.workers,
                "gpus_per_worker": self.settings.gpus_per_worker,
                "cpus_per_worker": self.settings.cpus_per_worker,
                "cluster": self.cluster,
                "worker_devices": [f"{w.node}:{w.device}" + (f" (GPU {','.join(w.gpus)})" if w.gpus else "") for w in self.workers],
                "worker_restarts": self.restarts,
            },
        }

    @contextlib.contextmanager
    def session(self, rm_dir: Path, settings: ScorerSettings, ckpt_sha: str) -> Iterator[Callable]:
        """Connects to (or starts) the cluster and starts the workers; yields the scoring function."""
        from charactereval_lib.charactereval.reward.tokenizer import load_tokenizer

        ray = self.ray
        started_here = not ray.is_initialized()
        if started_here:
            self._init_cluster()
        handles: list = []
        try:
            resources = ray.cluster_resources()
            self.cluster = {
                "nodes": sum(1 for n in ray.nodes() if n.get("Alive")),
                "cpus": resources.get("CPU", 0),
                "gpus": resources.get("GPU", 0),
            }
            actor = ray.remote(ScoringWorker).options(
                num_cpus=self.settings.cpus_per_worker, num_gpus=self.settings.gpus_per_worker, max_restarts=0
            )

            def start_worker():
                handles.append(actor.remote(str(Path(rm_dir).resolve()), settings, ckpt_sha))
                return handles[-1]

            for _ in range(self.settings.workers):
                start_worker()
            try:
                # Every worker loads its model before any work is sent: a checkpoint missing on
                # a node is one clear error now rather than a stream of failed units later.
                self.workers = ray.get([h.info.remote() for h in handles])
            except ray.exceptions.RayError as exc:
                raise runs.RunError(f"a Ray worker could not start: {_cause(exc)}") from None
            tokenizer = load_tokenizer(rm_dir)
            yield lambda pending, emit: self._dispatch(pending, tokenizer, settings, list(handles), start_worker, emit)
        finally:
            for handle in handles:
                ray.kill(handle)
            if started_here:
                ray.shutdown()

    def _init_cluster(self) -> None:
        if self.settings.address:
            self.ray.init(address=self.settings.address, log_to_driver=False)
            return
        import charactereval_lib

        # Workers of a local cluster import this package from where the driver does.
        package_root = str(Path(charactereval_lib.__file__).resolve().parent.parent)
        path = os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH")) if p)
        # Enough CPUs declared for every worker to start on this machine.
        cpus = max(os.cpu_count() or 1, math.ceil(self.settings.workers * self.settings.cpus_per_worker))
        self.ray.init(num_cpus=cpus, include_dashboard=False, runtime_env={"env_vars": {"PYTHONPATH": path}}, log_to_driver=False)

    def _dispatch(
        self,
        pending: Sequence[RowInput],
        tokenizer: Any,
        settings: ScorerSettings,
        handles: list,
        start_worker: Callable[[], Any],
        emit: Callable[[dict[str, Any]], None],
    ) -> tuple[int, int]:
        from tqdm.auto import tqdm

        ray = self.ray
        encoded = encode_rows(pending, tokenizer)
        units = [[pending[i] for i in unit] for unit in work_units(pending, encoded, settings)]
        queue = deque(range(len(units)))
        live = {h: 0 for h in handles}  # units in flight per live worker
        in_flight: dict[Any, tuple[Any, int]] = {}
        written: set[tuple[int, str]] = set()
        bar = tqdm(total=len(pending), unit="row", desc=f"scoring ({settings.mode}, ray x{len(handles)})", disable=not settings.progress)

        def feed(handle) -> None:
            while queue and live[handle] < self.settings.in_flight_per_worker:
                unit = queue.popleft()
                in_flight[handle.score.remote(units[unit])] = (handle, unit)
                live[handle] += 1

        try:
            for handle in handles:
                feed(handle)
            while in_flight:
                [ref], _ = ray.wait(list(in_flight), num_returns=1)
                handle, unit = in_flight.pop(ref)
                try:
                    records = ray.get(ref)
                except ray.exceptions.RayActorError:
                    # The worker died with this unit: it goes back to the head of the queue, as
                    # each of the worker's other units will when its result fails in turn.
                    queue.appendleft(unit)
                    if handle in live:
                        del live[handle]
                        self._replace(live, start_worker)
                    if not live:
                        raise runs.RunError("every Ray worker died; the rows scored so far are saved: re-run to resume") from None
                    for h in list(live):
                        feed(h)
                    continue
                except ray.exceptions.RayTaskError as exc:
                    # A unit that fails on a live worker would fail on any other.
                    raise runs.RunError(f"scoring failed on a Ray worker: {_cause(exc)}") from None
                for record in records:
                    key = (record["id"], record["metric_en"])
                    if key not in written:
                        written.add(key)
                        emit(record)
                bar.update(len(records))
                if self.on_result is not None:
                    self.on_result(self.workers, len(written))
                if handle in live:
                    live[handle] -= 1
                    feed(handle)
        finally:
            bar.close()
        return sum(len(ids) for ids, _, _ in encoded), sum(1 for _, _, t in encoded if t)

    def _replace(self, live: dict, start_worker: Callable[[], Any]) -> None:
        """Start a replacement for a dead worker, at most ``workers`` times in a session."""
        if self.restarts >= self.settings.workers:
            return
        self.restarts += 1
        replacement = start_worker()
        try:
            self.workers.append(self.ray.get(replacement.info.remote()))
        except self.ray.exceptions.RayError:
            return
        live[replacement] = 0


def _cause(exc: BaseException) -> str:
    """The last line of a worker's error (Ray wraps it in its remote traceback), without the
    exception's qualified class name."""
    cause = getattr(exc, "cause", None) or exc
    text = str(cause).strip().splitlines()
    return re.sub(r"^[\w.]+(Error|Exception): ", "", text[-1]) if text else type(cause).__name__
