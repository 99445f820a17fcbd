"""BLEU and ROUGE-L of finished scenes in a child process, away from a run's event loop and its GIL.

In a thread (the design before), the metrics held the GIL the event loop needed: every call of
the loop that releases it (a socket send, hashing a payload) then waited for the metrics thread,
and ``bench_coser``'s client spent about twice the CPU per call (1.2-1.8 ms against 0.6-0.9 ms
without them) while 200 scenes waited for the loop. ``multiprocessing`` workers re-import the caller's main script (spawn, forkserver: an
unguarded user script would run again) and forking a threaded process is unsafe, so the child
here is ``python -m charactereval_lib.coser.metrics_worker``, fed JSON lines on its stdin and
answering in order on its stdout (floats survive JSON exactly: it writes their ``repr``).

One child per Python process, started on first use and kept for every later run (its start,
Python with numpy and NLTK, costs about half a second of CPU); it ends when its stdin closes: at exit, or when the parent
dies. Ctrl-C reaches the whole process group; the child ignores it and lets the parent decide.
"""

from __future__ import annotations

import atexit
import json
import queue
import signal
import subprocess
import sys
import threading
import time
from collections import deque
from concurrent.futures import Future
from pathlib import Path
from typing import Any

_MODULE = "charactereval_lib.coser.metrics_worker"
# The child imports the very package the parent runs (not another copy on its path): run from
# the directory that holds it, which ``-m`` puts first on sys.path.
_PACKAGE_ROOT = Path(__file__).resolve().parents[2]


class MetricsWorkerError(RuntimeError):
    """The child failed a computation or ended before answering."""


class _Child:
    """One child process, the thread that writes its jobs and the one that reads its answers."""

    def __init__(self, on_exit: Any) -> None:
        self.process = subprocess.Popen([sys.executable, "-m", _MODULE], cwd=_PACKAGE_ROOT, stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE)
        self.jobs: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self.waiting: deque[Future] = deque()
        self.cpu_s = 0.0
        self._on_exit = on_exit
        threading.Thread(target=self._write, name="coser-metrics-writer", daemon=True).start()
        self._reader = threading.Thread(target=self._read, name="coser-metrics-reader", daemon=True)
        self._reader.start()

    def _write(self) -> None:
        # A blocking write to a full pipe waits here, never on the event loop.
        try:
            while (job := self.jobs.get()) is not None:
                self.process.stdin.write(job)
                self.process.stdin.flush()
        except OSError:  # the child is gone; _read fails what waits
            pass
        finally:
            try:
                self.process.stdin.close()
            except OSError:
                pass

    def _read(self) -> None:
        ended = "ended"
        try:
            for line in self.process.stdout:
                answer = json.loads(line)
                self.cpu_s += answer["cpu_s"]
                future = self.waiting.popleft()
                if "error" in answer:
                    future.set_exception(MetricsWorkerError(f"BLEU/ROUGE-L failed: {answer['error']}"))
                else:
                    future.set_result(answer["metrics"])
        except (ValueError, KeyError, IndexError):  # not an answer to a job: stop trusting the child
            ended = f"answered {line[:80]!r}, not a computation's result, and was stopped"
            self.process.kill()
        code = self.process.wait()
        self._on_exit(self, MetricsWorkerError(f"the BLEU/ROUGE-L process {ended} (exit code {code}) before "
                                               "answering"))

    def close(self, timeout_s: float) -> None:
        self.jobs.put(None)
        try:
            self.process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._reader.join()  # its last answers are counted and the end is reported before this returns


class MetricsWorker:
    """``surface_metrics(text, reference)`` computed by the child: ``submit`` returns a
    concurrent future (``asyncio.wrap_future`` awaits it). A child that dies fails the
    computations it had not answered; the next ``submit`` starts a new one."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._child: _Child | None = None
        self._ended_cpu_s = 0.0

    @property
    def cpu_s(self) -> float:
        """CPU seconds the children have spent computing metrics (not starting up)."""
        with self._lock:
            return self._ended_cpu_s + (self._child.cpu_s if self._child else 0.0)

    def submit(self, text: str, reference: str) -> Future:
        future: Future = Future()
        # Running from the start: a cancelled run cannot cancel it under the reader's feet (the
        # reader sets every answer it gets).
        future.set_running_or_notify_cancel()
        job = json.dumps([text, reference], ensure_ascii=False).encode("utf-8") + b"\n"
        with self._lock:
            # A child that has exited but whose reader has not said so yet takes no more jobs.
            if self._child is None or self._child.process.poll() is not None:
                self._child = _Child(self._ended)
            self._child.waiting.append(future)
            self._child.jobs.put(job)
        return future

    def _ended(self, child: _Child, error: MetricsWorkerError) -> None:
        with self._lock:
            if self._child is child:
                self._child = None
            self._ended_cpu_s += child.cpu_s
            waiting, child.waiting = list(child.waiting), deque()
        for future in waiting:
            future.set_exception(error)

    def close(self, timeout_s: float = 10.0) -> None:
        with self._lock:
            child, self._child = self._child, None
        if child is not None:
            child.close(timeout_s)


_worker: MetricsWorker | None = None
_worker_lock = threading.Lock()


def metrics_worker() -> MetricsWorker:
    """This process's worker (made on first use, closed at exit)."""
    global _worker
    with _worker_lock:
        if _worker is None:
            _worker = MetricsWorker()
            atexit.register(_worker.close)
        return _worker


def main() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # NLTK's import pulls in scipy.stats (about a second of CPU) for collocation statistics that
    # BLEU never uses, and falls back where scipy is missing: here it is (None in sys.modules makes
    # its import fail), which cuts the child's start-up from about 1.5 to 0.5 s of CPU.
    sys.modules["scipy"] = None
    from charactereval_lib.coser.metrics import surface_metrics

    out = sys.stdout.buffer
    for line in sys.stdin.buffer:
        text, reference = json.loads(line)
        started = time.process_time()
        try:
            answer: dict[str, Any] = {"metrics": surface_metrics(text, reference)}
        except Exception as exc:  # reported to the parent, which fails that scene's metrics with it
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        answer["cpu_s"] = time.process_time() - started
        out.write(json.dumps(answer, ensure_ascii=False).encode("utf-8") + b"\n")
        out.flush()


if __name__ == "__main__":
    main()
