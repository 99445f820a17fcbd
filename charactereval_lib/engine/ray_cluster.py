"""Ray for the engine's scale-out (``--engine ray``): the cluster, a pool of actors, and the
stream of work units through them.

- ``cluster``: connects to an existing cluster (``address``) or starts a local one whose
  workers import this package from where the driver does; a cluster started here is shut down
  on leaving, one already connected (a notebook's, a test's) is left running.
- ``ActorPool``: ``workers`` actors of one class, each with its share of CPUs and GPUs; every
  actor is loaded (and has answered ``info()``) before any work is sent, so a model missing on
  a node is one clear error, not a stream of failed units.
- ``ActorPool.results``: each work unit's result as it finishes, exactly once. A worker that
  dies (its process or its node) has every unit it held put back at the head of the queue for
  the others, and a replacement starts, at most as many times as there are workers. The caller
  (the driver) alone writes the results, so nodes share no filesystem for the output.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import signal
import socket
import threading
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from charactereval_lib.engine import faults, runs

INSTALL_HINT = "--engine ray needs Ray, an optional extra: pip install 'charactereval-workbench[ray]' (or pip install ray)"
# Device placeholder for workers: each resolves it itself (cuda when Ray gave it a GPU).
AUTO_DEVICE = "auto"
# How long the driver waits for a result before looking at its stop flag again.
WAIT_S = 0.2


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

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise runs.RunError(f"--workers {self.workers}: needs at least 1")
        if self.gpus_per_worker < 0:
            raise runs.RunError(f"--gpus-per-worker {self.gpus_per_worker}: cannot be negative")


@dataclass
class WorkerInfo:
    node: str
    pid: int
    device: str
    gpus: list[str]

    @classmethod
    def here(cls, device: str) -> WorkerInfo:
        """This worker process: its node, pid, device and the GPUs Ray gave it."""
        gpus = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        return cls(socket.gethostname(), os.getpid(), device, [g for g in gpus.split(",") if g])

    def label(self) -> str:
        return f"{self.node}:{self.device}" + (f" (GPU {','.join(self.gpus)})" if self.gpus else "")


def worker_device(device: str | None) -> str:
    """A worker's torch device: the one asked for, or for ``auto`` cuda when Ray gave the worker
    a GPU (CUDA is visible), else cpu."""
    if device not in (None, AUTO_DEVICE):
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


@contextlib.contextmanager
def cluster(address: str | None, cpus_needed: float = 1.0, *, log_to_driver: bool = False) -> Iterator[Any]:
    """The ``ray`` module, connected to the cluster at ``address`` or to a local one started here
    with at least ``cpus_needed`` CPUs; a cluster this call started is shut down on leaving.
    ``log_to_driver``: the workers' output is printed here too."""
    ray = import_ray()
    started_here = not ray.is_initialized()
    if started_here:
        # Ray's driver puts its own SIGTERM handler in place when it connects: the caller's
        # (the command's: stop like Ctrl-C, exit 130) goes back on top.
        previous = signal.getsignal(signal.SIGTERM)
        try:
            if address:
                ray.init(address=address, log_to_driver=log_to_driver)
            else:
                import charactereval_lib

                # Workers of a local cluster import this package from where the driver does.
                package_root = str(Path(charactereval_lib.__file__).resolve().parent.parent)
                path = os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH")) if p)
                ray.init(num_cpus=max(os.cpu_count() or 1, math.ceil(cpus_needed)), include_dashboard=False,
                         runtime_env={"env_vars": {"PYTHONPATH": path}}, log_to_driver=log_to_driver)
        except (ConnectionError, ValueError, RuntimeError, TimeoutError) as exc:
            where = f"--address {address}" if address else "a local Ray cluster"
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise faults.Unreachable(f"{where}: Ray could not connect ({first})") from None
        with contextlib.suppress(ValueError, TypeError):  # not the main thread; a handler set outside Python
            signal.signal(signal.SIGTERM, previous)
    try:
        yield ray
    finally:
        if started_here:
            ray.shutdown()


def cluster_size(ray: Any) -> dict[str, Any]:
    """Live nodes, CPUs and GPUs of the connected cluster (for the manifest)."""
    resources = ray.cluster_resources()
    return {"nodes": sum(1 for n in ray.nodes() if n.get("Alive")), "cpus": resources.get("CPU", 0),
            "gpus": resources.get("GPU", 0)}


class ActorPool:
    """``settings.workers`` actors of one class (see ``running``). ``what`` names the work in
    errors ("scoring"); ``fatal`` is the exception raised when the work cannot go on (the rows or
    records received so far stay saved)."""

    def __init__(
        self,
        settings: RaySettings,
        *,
        what: str,
        fatal: type[Exception] = runs.RunError,
        on_result: Callable[[list[WorkerInfo], int], None] | None = None,
    ) -> None:
        self.ray = import_ray()  # fails here, in one line, when Ray is not installed
        if settings.address:
            # Before any work, and within seconds: Ray itself can wait for minutes on a wrong address.
            faults.check_ray_address(settings.address)
        self.settings = settings
        self.what = what
        self.fatal = fatal
        # Called after each finished unit with every worker started so far (replacements
        # included) and the number of units finished; the driver's hook for fault injection.
        self.on_result = on_result
        self.handles: list[Any] = []  # the live workers' actors
        self.workers: list[WorkerInfo] = []  # every worker started, dead ones included
        self.cluster: dict[str, Any] = {}
        self.restarts = 0

    def describe(self) -> dict[str, Any]:
        return {
            "address": self.settings.address or "local",
            "workers": self.settings.workers,
            "gpus_per_worker": self.settings.gpus_per_worker,
            "cpus_per_worker": self.settings.cpus_per_worker,
            "cluster": self.cluster,
            "worker_devices": [w.label() for w in self.workers],
            "worker_restarts": self.restarts,
        }

    @contextlib.contextmanager
    def running(self, actor_class: type, *args: Any) -> Iterator[ActorPool]:
        """Connects to (or starts) the cluster and starts every worker, ``actor_class(*args)``
        (with an ``info()`` method returning its ``WorkerInfo``); kills them on leaving."""
        settings = self.settings
        with cluster(settings.address, settings.workers * settings.cpus_per_worker) as ray:
            try:
                self.cluster = cluster_size(ray)
                wanted = settings.workers * settings.gpus_per_worker
                if wanted > self.cluster["gpus"]:
                    # Ray would keep the workers waiting for GPUs that never come.
                    raise runs.RunError(f"--workers {settings.workers} x --gpus-per-worker {settings.gpus_per_worker:g}: "
                                        f"the cluster has {self.cluster['gpus']:g} GPU(s)")
                self._actor = ray.remote(actor_class).options(
                    num_cpus=settings.cpus_per_worker, num_gpus=settings.gpus_per_worker, max_restarts=0
                )
                self._args = args
                for _ in range(settings.workers):
                    self._start()
                try:
                    self.workers = ray.get([h.info.remote() for h in self.handles])
                except ray.exceptions.RayError as exc:
                    raise runs.RunError(f"a Ray worker could not start: {cause(exc)}") from None
                yield self
            finally:
                for handle in self.handles:
                    ray.kill(handle)

    def _start(self) -> Any:
        self.handles.append(self._actor.remote(*self._args))
        return self.handles[-1]

    def results(self, units: Sequence[Any], method: str, stop: threading.Event | None = None) -> Iterator[tuple[int, Any]]:
        """``(index, actor.method(units[index]))`` for every unit as it finishes, each once
        (see the module docstring). Returns early when ``stop`` is set; units still in flight are
        then dropped (their actors are killed when the pool closes)."""
        ray = self.ray
        queue = deque(range(len(units)))
        live = {h: 0 for h in self.handles}  # units in flight per live worker
        # A unit is in at most one worker's hands at a time, so none can come back twice.
        in_flight: dict[Any, tuple[Any, int]] = {}
        finished = 0

        def feed(handle: Any) -> None:
            while queue and live[handle] < self.settings.in_flight_per_worker:
                unit = queue.popleft()
                in_flight[getattr(handle, method).remote(units[unit])] = (handle, unit)
                live[handle] += 1

        for handle in list(live):
            feed(handle)
        while in_flight:
            if stop is not None and stop.is_set():
                return
            ready, _ = ray.wait(list(in_flight), num_returns=1, timeout=WAIT_S)
            if not ready:
                continue
            handle, unit = in_flight.pop(ready[0])
            try:
                result = ray.get(ready[0])
            except ray.exceptions.RayActorError:
                # The worker died (or is unreachable) with this unit: it goes back to the head of
                # the queue, as each of the worker's other units will when its result fails in
                # turn. The worker is killed for good, so no late result of it can come back.
                queue.appendleft(unit)
                if handle in live:
                    del live[handle]
                    self.handles.remove(handle)
                    ray.kill(handle)
                    self._replace(live)
                if not live:
                    raise self.fatal("every Ray worker died; what was received so far is saved: re-run to resume") from None
                for h in list(live):
                    feed(h)
                continue
            except ray.exceptions.RayTaskError as exc:
                # A unit that fails on a live worker would fail on any other.
                raise self.fatal(f"{self.what} failed on a Ray worker: {cause(exc)}") from None
            if handle in live:
                live[handle] -= 1
                feed(handle)
            finished += 1
            yield unit, result
            if self.on_result is not None:
                self.on_result(self.workers, finished)

    def _replace(self, live: dict) -> None:
        """Start a replacement for a dead worker, at most ``workers`` times in a session."""
        if self.restarts >= self.settings.workers:
            return
        self.restarts += 1
        replacement = self._start()
        try:
            self.workers.append(self.ray.get(replacement.info.remote()))
        except self.ray.exceptions.RayError:
            self.handles.remove(replacement)
            return
        live[replacement] = 0


def cause(exc: BaseException) -> str:
    """The last line of a worker's error (Ray wraps it in its remote traceback), without the
    exception's qualified class name."""
    found = getattr(exc, "cause", None) or exc
    text = str(found).strip().splitlines()
    return re.sub(r"^[\w.]+(Error|Exception): ", "", text[-1]) if text else type(found).__name__
