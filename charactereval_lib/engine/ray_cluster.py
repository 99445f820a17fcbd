"""Ray for the engine's scale-out (``--engine ray``): the cluster, a pool of actors, and the
stream of work units through them.

- ``check_ray_address``: whether an address is a Ray cluster, asked within seconds before Ray
  (which can wait for minutes on a wrong one) is given it: a TCP connection, then a
  cluster-id call to the GCS in hand-written HTTP/2 (Ray itself is not imported for it).

- ``cluster``: connects to an existing cluster (``address``) or starts a local one whose
  workers import this package from where the driver does; a cluster started here is shut down
  on leaving, one already connected (a notebook's, a test's) is left running. Ray's own notices
  of dead nodes and raylets (log dumps of tens of lines) stay in its log folder: the pool says
  what a loss means for the run in one line.
- ``ActorPool``: ``workers`` actors of one class, each with its share of CPUs and GPUs; every
  actor is loaded (and has answered ``info()``) before any work is sent, so a model missing on
  a node is one clear error, not a stream of failed units.
- ``ActorPool.results``: each work unit's result as it finishes, exactly once. A worker that
  dies (its process or its node) has every unit it held put back at the head of the queue for
  the others at once, and a replacement is asked of Ray without waiting for it: it joins the
  pool when Ray has room for it (at most as many replacements run as there are workers). Only
  when no worker is left does the driver wait, ``lost_node_wait_s`` at most. The caller (the
  driver) alone writes the results, so nodes share no filesystem for the output.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import re
import signal
import socket
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from charactereval_lib.engine import faults
from charactereval_lib.engine.storage import runs

INSTALL_HINT = "--engine ray needs Ray, an optional extra: pip install 'charactereval-workbench[ray]' (or pip install ray)"
# Device placeholder for workers: each resolves it itself (cuda when Ray gave it a GPU).
AUTO_DEVICE = "auto"
# How long the driver waits for a result before looking at its stop flag again.
WAIT_S = 0.2
# The default of RaySettings.lost_node_wait_s (--lost-node-wait): long enough for an autoscaler
# or an operator to bring a node back, short enough that a stalled run is noticed.
LOST_NODE_WAIT_S = 300.0
# Enough of a Ray node id (56 hex digits) to tell a cluster's nodes apart in a label.
NODE_ID_CHARS = 12


def import_ray():
    try:
        import ray
    except ImportError:
        raise runs.RunError(INSTALL_HINT) from None
    return ray


def check_ray_address(address: str) -> None:
    """A Ray address answers before it is handed to Ray (which can wait for minutes on a wrong
    one): ``HOST:PORT`` (the GCS) and ``ray://HOST:PORT`` (the client server) are connected to
    with a bounded wait; ``auto`` needs a cluster started on this machine."""
    what = f"--address {address}"
    if address == "auto":
        found = os.environ.get("RAY_ADDRESS") or _ray_current_cluster()
        if not found or found == "auto":
            raise faults.Unreachable(f"{what}: no Ray cluster was started on this machine (`ray start --head`), "
                              "and RAY_ADDRESS is not set")
        what, address = f"{what} ({found})", found
    target = address[len("ray://"):] if address.startswith("ray://") else address
    host, sep, port = target.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536 or any(c in host for c in "/ @!?#"):
        raise runs.RunError(f"{what}: expected auto, HOST:PORT or ray://HOST:PORT (e.g. 10.0.0.5:6379)")
    host = host.strip("[]")
    problem = faults.connect_problem(host, int(port))
    if problem is None and not address.startswith("ray://"):
        problem = _gcs_problem(host, int(port))
    if problem:
        raise faults.Unreachable(f"{what}: {problem}")


# Ray's GCS (a HOST:PORT address) is a gRPC server. A TCP connection alone proves little (a proxy
# or firewall may accept any), and an HTTP/2 greeting neither (a proxy may speak HTTP/2): the GCS
# is asked for its cluster id, the call `ray.init` makes first, in the plainest HTTP/2 (literal
# header fields, an empty request message). A gRPC server answers HTTP status 200 whatever the
# call's outcome (a cluster with token authentication refuses it, in a 200 response); a proxy
# answers another status.
_GCS_METHOD = "/ray.rpc.NodeInfoGcsService/GetClusterId"
_HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
_DATA, _HEADERS, _RST_STREAM, _SETTINGS, _GOAWAY = 0, 1, 3, 4, 7
_END_STREAM, _END_HEADERS, _PADDED, _PRIORITY = 0x1, 0x4, 0x8, 0x20
# ":status: 200", entry 8 of HPACK's static table: the first field of a gRPC server's answer.
_STATUS_200 = 0x88


def _frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return len(payload).to_bytes(3, "big") + bytes([kind, flags]) + stream.to_bytes(4, "big") + payload


def _literal(name: str, value: str) -> bytes:
    """An HPACK literal header field without indexing, new name, no Huffman coding."""
    encoded = b"\x00"
    for text in (name, value):
        data = text.encode()
        if len(data) > 126:
            raise ValueError(f"header field too long for this encoder: {text!r}")
        encoded += bytes([len(data)]) + data
    return encoded


def _gcs_problem(host: str, port: int, timeout_s: float = faults.CONNECT_TIMEOUT_S) -> str | None:
    """Why the server at ``host:port`` is not a Ray cluster's GCS, or None when it answered a
    cluster-id call as a gRPC server does within ``timeout_s``."""
    headers = b"".join(_literal(name, value) for name, value in (
        (":method", "POST"), (":scheme", "http"), (":path", _GCS_METHOD), (":authority", f"{host}:{port}"),
        ("content-type", "application/grpc"), ("te", "trailers")))
    request = (_HTTP2_PREFACE + _frame(_SETTINGS, 0, 0) + _frame(_HEADERS, _END_HEADERS, 1, headers)
               + _frame(_DATA, _END_STREAM, 1, bytes(5)))  # an empty, uncompressed message
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as conn:
            conn.sendall(request)
            buffer = b""
            while chunk := conn.recv(65536):
                buffer += chunk
                while len(buffer) >= 9 and len(buffer) >= 9 + int.from_bytes(buffer[:3], "big"):
                    length, kind, flags = int.from_bytes(buffer[:3], "big"), buffer[3], buffer[4]
                    stream = int.from_bytes(buffer[5:9], "big") & 0x7FFFFFFF
                    payload, buffer = buffer[9:9 + length], buffer[9 + length:]
                    if kind == _HEADERS and stream == 1:
                        block = payload[1:] if flags & _PADDED else payload
                        block = block[5:] if flags & _PRIORITY else block
                        if block[:1] == bytes([_STATUS_200]):
                            return None
                    if kind in (_HEADERS, _RST_STREAM, _GOAWAY):
                        return "something accepts connections there, but it is not a Ray cluster (no gRPC " \
                               "answer to a cluster-id call)"
    except OSError as exc:
        return f"no answer from a Ray cluster within {timeout_s:g} s ({exc.strerror or exc})"
    return "the connection was closed without an answer to a cluster-id call (not a Ray cluster)"


def _ray_current_cluster() -> str | None:
    """The address a cluster started on this machine left where ``ray.init(address="auto")``
    looks for it, if any."""
    import tempfile

    try:
        return (Path(tempfile.gettempdir()) / "ray" / "ray_current_cluster").read_text().strip() or None
    except OSError:
        return None


@dataclass(frozen=True)
class RaySettings:
    # An existing cluster ("auto", "ray://host:10001", "host:6379"); None starts a local one.
    address: str | None = None
    workers: int = 1
    gpus_per_worker: float = 0.0
    cpus_per_worker: float = 1.0
    # Units queued per worker, so a worker never waits for the driver between two units.
    in_flight_per_worker: int = 2
    # Once every worker is lost: how long a replacement may take to start (be scheduled and load
    # its model) before the run stops, everything received so far saved.
    lost_node_wait_s: float = LOST_NODE_WAIT_S

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise runs.RunError(f"--workers {self.workers}: needs at least 1")
        if self.gpus_per_worker < 0:
            raise runs.RunError(f"--gpus-per-worker {self.gpus_per_worker}: cannot be negative")
        if self.lost_node_wait_s <= 0:
            raise runs.RunError(f"--lost-node-wait {self.lost_node_wait_s:g}: must be positive")


@dataclass
class WorkerInfo:
    node: str
    pid: int
    device: str
    gpus: list[str]
    # Ray's id of the node: on one machine several nodes share the host name.
    node_id: str = ""

    @classmethod
    def here(cls, device: str) -> WorkerInfo:
        """This worker process: its node, pid, device and the GPUs Ray gave it."""
        import ray

        gpus = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        return cls(socket.gethostname(), os.getpid(), device, [g for g in gpus.split(",") if g],
                   ray.get_runtime_context().get_node_id())

    def where(self) -> str:
        """The worker's node: host name and the start of Ray's node id."""
        return f"{self.node}/{self.node_id[:NODE_ID_CHARS]}" if self.node_id else self.node

    def label(self) -> str:
        return f"{self.where()}:{self.device}" + (f" (GPU {','.join(self.gpus)})" if self.gpus else "")


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
    ``log_to_driver``: the workers' output is printed here too. Ray's notices about its nodes
    are not (see ``_quiet_node_notices``)."""
    ray = import_ray()
    started_here = not ray.is_initialized()
    if started_here:
        # Ray's driver puts its own SIGTERM handler in place when it connects: the caller's
        # (the command's: stop like Ctrl-C, exit 130) goes back on top.
        previous = signal.getsignal(signal.SIGTERM)
        # Ray's INFO lines (connecting, the dashboard's address) are not the command's output.
        quiet = {"log_to_driver": log_to_driver, "logging_level": logging.WARNING}
        try:
            if address:
                ray.init(address=address, **quiet)
            else:
                import charactereval_lib

                # Workers of a local cluster import this package from where the driver does.
                package_root = str(Path(charactereval_lib.__file__).resolve().parent.parent)
                path = os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH")) if p)
                ray.init(num_cpus=max(os.cpu_count() or 1, math.ceil(cpus_needed)), include_dashboard=False,
                         runtime_env={"env_vars": {"PYTHONPATH": path}}, **quiet)
        except (ConnectionError, ValueError, RuntimeError, TimeoutError) as exc:
            where = f"--address {address}" if address else "a local Ray cluster"
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise faults.Unreachable(f"{where}: Ray could not connect ({first})") from None
        with contextlib.suppress(ValueError, TypeError):  # not the main thread; a handler set outside Python
            signal.signal(signal.SIGTERM, previous)
    try:
        with _quiet_node_notices() if started_here else contextlib.nullcontext():
            yield ray
    finally:
        if started_here:
            ray.shutdown()


@contextlib.contextmanager
def _quiet_node_notices() -> Iterator[None]:
    """Ray's driver prints every error the cluster publishes, whatever ``log_to_driver`` says:
    a raylet that dies brings the last lines of its log (tens of lines, once per notice), a node
    marked dead a paragraph. They stay in Ray's log folder (``/tmp/ray/session_latest/logs``);
    the pool prints one line per lost worker instead. Ray has no setting for this: its driver
    looks its printer up by name for each notice, so a filter is put in front of it while
    connected. (The workers' own output, with ``log_to_driver``, goes through another path.)"""
    try:
        from ray._private import worker as ray_worker
    except ImportError:  # another Ray layout: its notices are printed as they were
        yield
        return
    printer = getattr(ray_worker, "print_to_stdstream", None)
    if printer is None:
        yield
        return

    def without_raylet_notices(data: dict, *args: Any, **kwargs: Any) -> None:
        if data.get("pid") != "raylet":
            printer(data, *args, **kwargs)

    ray_worker.print_to_stdstream = without_raylet_notices
    try:
        yield
    finally:
        ray_worker.print_to_stdstream = printer


def cluster_size(ray: Any) -> dict[str, Any]:
    """Live nodes, CPUs and GPUs of the connected cluster (for the manifest)."""
    resources = ray.cluster_resources()
    return {"nodes": sum(1 for n in ray.nodes() if n.get("Alive")), "cpus": resources.get("CPU", 0),
            "gpus": resources.get("GPU", 0)}


class ActorPool:
    """``settings.workers`` actors of one class (see ``running``). ``what`` names the work in
    errors ("scoring"); ``fatal`` is the exception raised when the work cannot go on (the rows or
    records received so far stay saved), ``stranded`` the one raised when every worker is lost
    and none can be replaced in time (exit 1 by default: the cluster, not the input, failed)."""

    def __init__(
        self,
        settings: RaySettings,
        *,
        what: str,
        fatal: type[Exception] = runs.RunError,
        stranded: type[Exception] = faults.Unreachable,
        on_result: Callable[[list[WorkerInfo], int], None] | None = None,
    ) -> None:
        self.ray = import_ray()  # fails here, in one line, when Ray is not installed
        if settings.address:
            # Before any work, and within seconds: Ray itself can wait for minutes on a wrong address.
            check_ray_address(settings.address)
        self.settings = settings
        self.what = what
        self.fatal = fatal
        self.stranded = stranded
        # Called after each finished unit with every worker started so far (replacements
        # included) and the number of units finished; the driver's hook for fault injection.
        self.on_result = on_result
        self.handles: list[Any] = []  # every actor not given up: working or still starting
        self.workers: list[WorkerInfo] = []  # every worker that started, lost ones included
        self.cluster: dict[str, Any] = {}
        self.lost = 0
        self.requested = 0  # replacements asked of Ray
        self.replaced = 0  # replacements that started and joined the pool
        self._live: dict[Any, WorkerInfo] = {}  # the working actors
        self._starting: dict[Any, Any] = {}  # a replacement's info() reference -> its actor
        self._stranded_since: float | None = None  # when the last working actor was lost

    def describe(self) -> dict[str, Any]:
        return {
            "address": self.settings.address or "local",
            "workers": self.settings.workers,
            "gpus_per_worker": self.settings.gpus_per_worker,
            "cpus_per_worker": self.settings.cpus_per_worker,
            "cluster": self.cluster,
            "worker_devices": [w.label() for w in self.workers],
            "workers_lost": self.lost,
            "replacements_requested": self.requested,
            "replacements_started": self.replaced,
        }

    def devices(self) -> list[str]:
        """The devices the workers resolved (``auto`` becomes cuda or cpu on each), once each."""
        return list(dict.fromkeys(w.device for w in self.workers))

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
                started = [self._start() for _ in range(settings.workers)]
                try:
                    self.workers = ray.get([h.info.remote() for h in started])
                except ray.exceptions.RayError as exc:
                    raise runs.RunError(f"a Ray worker could not start: {cause(exc)}") from None
                self._live = dict(zip(started, self.workers, strict=True))
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
        load = dict.fromkeys(self._live, 0)  # units in flight per working actor
        # A unit is in at most one worker's hands at a time, so none can come back twice.
        in_flight: dict[Any, tuple[Any, int]] = {}
        finished = 0

        def feed() -> None:
            for handle in load:
                while queue and load[handle] < self.settings.in_flight_per_worker:
                    unit = queue.popleft()
                    in_flight[getattr(handle, method).remote(units[unit])] = (handle, unit)
                    load[handle] += 1

        feed()
        while in_flight or queue:
            if stop is not None and stop.is_set():
                return
            if not self._live:
                self._check_stranded()
            ready, _ = ray.wait([*in_flight, *self._starting], num_returns=1, timeout=WAIT_S)
            if not ready:
                continue
            if ready[0] in self._starting:
                joined = self._join(ready[0])
                if joined is not None:
                    load[joined] = 0
                    feed()
                continue
            handle, unit = in_flight.pop(ready[0])
            try:
                result = ray.get(ready[0])
            except ray.exceptions.RayActorError:
                if handle in load:
                    # Every unit the worker held goes back to the head of the queue now, not as
                    # each of its results fails in turn (on a node that stopped answering, each
                    # would take Ray's detection time).
                    others = [ref for ref, (h, _) in in_flight.items() if h is handle]
                    held = [unit, *(in_flight.pop(ref)[1] for ref in others)]
                    queue.extendleft(sorted(held, reverse=True))
                    del load[handle]
                    self._lose(handle, len(held))
                    feed()
                continue
            except ray.exceptions.RayTaskError as exc:
                # A unit that fails on a live worker would fail on any other.
                raise self.fatal(f"{self.what} failed on a Ray worker: {cause(exc)}") from None
            load[handle] -= 1
            feed()
            finished += 1
            yield unit, result
            if self.on_result is not None:
                self.on_result(self.workers, finished)

    def _lose(self, handle: Any, held: int) -> None:
        """A worker is gone (its process or its node): it is killed for good, so no late result
        of it can come back, said in one line, and a replacement is asked for."""
        info = self._live.pop(handle)
        self.handles.remove(handle)
        self.ray.kill(handle)
        self.lost += 1
        print(f"ray: lost the {self.what} worker on {info.where()} (pid {info.pid}); {held} unit(s) back in the "
              f"queue, {len(self._live)} worker(s) left", file=sys.stderr, flush=True)
        if not self._live:
            self._stranded_since = time.monotonic()
        self._request()

    def _request(self) -> None:
        """Ask Ray for a replacement without waiting for it: it joins when Ray has room (``_join``).
        At most ``workers`` replacements start in a session (a unit that kills every worker it
        reaches must not go round for ever), and as many requests again may fail to start."""
        if self.replaced + len(self._starting) >= self.settings.workers or self.requested >= 2 * self.settings.workers:
            return
        self.requested += 1
        replacement = self._start()
        self._starting[replacement.info.remote()] = replacement

    def _join(self, ref: Any) -> Any:
        """A replacement answered: it joins the pool (returned), or it failed to start (None)
        and another is asked for."""
        replacement = self._starting.pop(ref)
        try:
            info = self.ray.get(ref)
        except self.ray.exceptions.RayError as exc:
            # Placed on a node that was dying, or its model failed to load there.
            print(f"ray: a replacement {self.what} worker could not start: {cause(exc)}", file=sys.stderr, flush=True)
            self.handles.remove(replacement)
            self.ray.kill(replacement)
            self._request()
            return None
        self.replaced += 1
        self.workers.append(info)
        self._live[replacement] = info
        self._stranded_since = None
        return replacement

    def _check_stranded(self) -> None:
        """No worker left: the run stops once no replacement can come, or none came in time."""
        wait = self.settings.lost_node_wait_s
        waited = time.monotonic() - (self._stranded_since or time.monotonic())
        if self._starting and waited < wait:
            return
        why = (f"no replacement could start within {wait:g} s (the cluster has no room for one: `ray status`)"
               if self._starting else f"no replacement is left to try ({self.requested} requested, {self.replaced} "
                                      f"started; at most {self.settings.workers} start, {2 * self.settings.workers} "
                                      "are requested)")
        raise self.stranded(f"every Ray worker was lost and {why}; what was received so far is saved: re-run to resume")


def cause(exc: BaseException) -> str:
    """The last line of a worker's error (Ray wraps it in its remote traceback), without the
    exception's qualified class name."""
    found = getattr(exc, "cause", None) or exc
    text = str(found).strip().splitlines()
    return re.sub(r"^[\w.]+(Error|Exception): ", "", text[-1]) if text else type(found).__name__
