"""The generation run: which samples still need a reply, drive a backend, record every outcome.

A generation session is the engine's resumable job (``engine.storage.jobs``) keyed by sample id:
``generations.jsonl`` is an append-only log with one writer (a lock file keeps a second
``generate`` out); the latest record of an id is its state. Resuming the same command skips ids
whose state is ok (and, unless ``retry_errors``, ids that failed); it refuses when the run was
made with another model, decoding parameters or protocol version, because one run must hold
replies of one configuration. Every record is flushed as it arrives (by a writer thread), so an
interrupt (Ctrl-C, SIGTERM) keeps everything received and a SIGKILL loses only the requests in
flight and the lines still queued for the disk.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from charactereval_lib.engine import thinking as thinking_rules
from charactereval_lib.engine.generation.base import (
    STATUS_OK,
    Backend,
    DecodingParams,
    GenerationRequest,
    GenerationResult,
    RunAborted,
    preset_source,
    reasoning_tokens,
)
from charactereval_lib.engine.generation.estimate import CostEstimate, estimate_cost
from charactereval_lib.engine.generation.served import ServedCounts, ServedGuard
from charactereval_lib.engine.storage import artifacts, jobs, runs

LOCK_FILE = ".generate.lock"


# Exit statuses of `generate` (docs/generation.md, "Exit status of generate"); `exit_code` picks one for a finished session.
EXIT_OK = 0  # every selected sample has an ok reply
EXIT_FAILED = 1  # some selected sample ended in error, or the run was aborted (RunAborted)
EXIT_BAD_INPUT = 2  # bad arguments, settings, data or a missing API key: nothing was sent
EXIT_INTERRUPTED = 130  # Ctrl-C or SIGTERM; everything received is saved


@dataclass(frozen=True)
class GenerationTask:
    """What a benchmark tells the engine about a generation run: the protocol it follows, the
    digests of the data the requests were built from, and every id a complete run covers."""

    protocol_version: str
    data_sha256: dict[str, str]
    all_ids: frozenset[int]
    # How a leading thinking block is treated when the replies are scored (``engine.thinking``);
    # part of the run's identity when the benchmark sets it.
    thinking: str | None = None


class GenerationInterrupted(jobs.JobInterrupted):
    """The run was stopped (Ctrl-C / SIGTERM); everything received so far is saved."""

    def __init__(self, summary: SessionSummary) -> None:
        super().__init__("generation", summary)


# --- what is left to do ----------------------------------------------------------------------


class RunPlan(jobs.KeyPlan[GenerationRequest]):
    """A generation session's plan (``kept_failed``: ids whose latest record is an error that this
    session leaves alone, without retry_errors)."""


def generation_job(run: runs.RunDir) -> jobs.Job:
    return jobs.Job(run.path, run.path / LOCK_FILE, "`generate`")


def plan_run(run_dir: Path, requests: Sequence[GenerationRequest], *, retry_errors: bool = False) -> RunPlan:
    plan = jobs.plan_keys(Path(run_dir) / runs.GENERATIONS, requests, lambda request: (request.id,), ("id",),
                          jobs.by_status(retry_failed=retry_errors))
    return RunPlan(**vars(plan))


def run_identity(backend: Backend, protocol_version: str, thinking: str | None = None) -> dict[str, Any]:
    """What a resumed run must keep: protocol version, the thinking-block rule (when the
    benchmark has one) and the backend's reply-changing settings."""
    return {"protocol_version": protocol_version, **({thinking_rules.KEY: thinking} if thinking else {}),
            **backend.identity()}


def check_resume(run_dir: Path, identity: dict[str, Any]) -> None:
    """Refuse to add replies of another configuration to a run that already has generations."""
    run_dir = Path(run_dir)
    if not artifacts.read_jsonl(run_dir / runs.GENERATIONS).records:
        return
    previous = runs.load_manifest(run_dir).get("generation") or {}
    recorded = previous.get("identity")
    if recorded is None:
        origin = previous.get("backend", "unknown origin, no generation section in run.json")
        raise runs.RunError(
            f"{run_dir}: already holds generations not made by `generate` ({origin}); use a new RUN directory"
        )
    if thinking_rules.KEY in identity:
        recorded = {**recorded, thinking_rules.KEY: thinking_rules.recorded(recorded)}
    jobs.check_identity(run_dir, recorded, identity)


# --- what happened ---------------------------------------------------------------------------


@dataclass
class CallSession:
    """The counters every session of model calls keeps (a generation's ``SessionSummary``, a
    judge's ``JudgeSummary``): the calls it had to make, its failed calls by error class, the
    refusals and tokens of its replies, and how it ended. A subclass says which calls are
    ``done``."""

    pending: int
    errors: Counter = field(default_factory=Counter)
    refusals: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    elapsed_s: float = 0.0
    interrupted: bool = False
    # Why the session stopped early (RunAborted), e.g. the endpoint refused every connection.
    aborted: str | None = None
    concurrency: dict[str, Any] | None = None
    # What the server reported about the answered calls: model names and system fingerprints.
    served: ServedCounts = field(default_factory=ServedCounts)

    @property
    def done(self) -> int:
        raise NotImplementedError

    @property
    def remaining(self) -> int:
        return self.pending - self.done

    def count_usage(self, usage: dict[str, Any] | None) -> None:
        self.prompt_tokens += int((usage or {}).get("prompt_tokens") or 0)
        self.completion_tokens += int((usage or {}).get("completion_tokens") or 0)

    def rate(self) -> float:
        """Calls done per second."""
        return self.done / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def errors_by_class(self) -> str:
        return ", ".join(f"{name} {count}" for name, count in self.errors.most_common())


@dataclass
class SessionSummary(CallSession):
    already_ok: int = 0
    errors_kept: int = 0
    ok: int = 0
    empty: int = 0
    content_filtered: int = 0
    # Where the server reports them (see base.reasoning_tokens): their sum, and how many replies had the count.
    reasoning_tokens: int = 0
    reasoning_reported: int = 0

    def add(self, result: GenerationResult) -> None:
        if result.status == STATUS_OK:
            self.ok += 1
            self.empty += result.model_output == ""
        else:
            self.errors[(result.error or {}).get("class", "unknown")] += 1
        self.refusals += result.refusal
        self.content_filtered += result.content_filter
        usage = result.usage or {}
        self.count_usage(usage)
        reasoning = reasoning_tokens(usage)
        if reasoning is not None:
            self.reasoning_tokens += reasoning
            self.reasoning_reported += 1
        if result.status == STATUS_OK:
            self.served.add(result.model, result.extra.get("system_fingerprint"))

    @property
    def done(self) -> int:
        return self.ok + sum(self.errors.values())

    @property
    def failed(self) -> int:
        """Selected samples whose latest record is an error: this session's failures and the
        earlier ones it left alone (no retry_errors)."""
        return sum(self.errors.values()) + self.errors_kept

    def line(self) -> str:
        errors = sum(self.errors.values())
        by_class, rate = self.errors_by_class(), self.rate()
        text = (
            f"{'interrupted after' if self.interrupted else 'generated'} {self.done}/{self.pending}: ok {self.ok}, "
            f"errors {errors}{f' ({by_class})' if by_class else ''}, empty {self.empty}, refusals {self.refusals}, "
            f"content-filtered {self.content_filtered}; tokens in {self.prompt_tokens:,} out "
            f"{self.completion_tokens:,}"
            + (f" (reasoning {self.reasoning_tokens:,})" if self.reasoning_reported else "")
            + f"; {self.elapsed_s:.1f} s ({rate:.1f}/s)"
        )
        if self.already_ok or self.errors_kept:
            text += f"; skipped {self.already_ok} already ok"
            if self.errors_kept:
                text += f" and {self.errors_kept} earlier error(s) (--retry-errors retries them)"
        if self.concurrency and self.concurrency.get("decreases"):
            text += f"; 429s lowered concurrency to {self.concurrency['lowest']:g} ({self.concurrency['decreases']}x)"
        return text

    def as_dict(self) -> dict[str, Any]:
        return {
            "pending": self.pending,
            "already_ok": self.already_ok,
            "errors_kept": self.errors_kept,
            "ok": self.ok,
            "errors": dict(self.errors),
            "empty": self.empty,
            "refusals": self.refusals,
            "content_filtered": self.content_filtered,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "reasoning_tokens": self.reasoning_tokens if self.reasoning_reported else None,
            "served_models": dict(self.served.models),
            "system_fingerprints": dict(self.served.fingerprints),
            "model_not_reported": self.served.not_reported,
            "elapsed_s": round(self.elapsed_s, 3),
            "interrupted": self.interrupted,
            "aborted": self.aborted,
            "concurrency": self.concurrency,
        }


def exit_code(summary: SessionSummary) -> int:
    """The exit status for a session (see the EXIT_* constants): scripts and ``batch`` must notice
    a run in which any selected sample failed, even when most succeeded."""
    if summary.interrupted:
        return EXIT_INTERRUPTED
    if summary.aborted or summary.failed:
        return EXIT_FAILED
    return EXIT_OK


def run_state(run_dir: Path, all_ids: frozenset[int]) -> dict[str, int]:
    """The state of every id of the task after this session: its latest record's status."""
    latest = runs.RunDir.resolve(Path(run_dir)).latest_generations()
    statuses = Counter(record.get("status") for record in latest.values())
    return {"ok": statuses.get(STATUS_OK, 0), "error": sum(statuses.values()) - statuses.get(STATUS_OK, 0),
            "missing": len(all_ids - latest.keys())}


# --- the run ---------------------------------------------------------------------------------


async def generate_async(
    run_dir: Path,
    requests: Sequence[GenerationRequest],
    backend: Backend,
    task: GenerationTask,
    *,
    retry_errors: bool = False,
    progress: bool = True,
) -> SessionSummary:
    """Generate the replies still missing for ``requests`` into ``run_dir`` (see module
    docstring). Raises GenerationInterrupted (carrying the summary) when cancelled; the records
    are saved."""
    run = runs.RunDir.resolve(Path(run_dir))
    run_dir = run.path
    identity = run_identity(backend, task.protocol_version, task.thinking)
    job = generation_job(run)
    with job.locked():
        check_resume(run_dir, identity)
        plan = plan_run(run_dir, requests, retry_errors=retry_errors)
        summary = SessionSummary(pending=len(plan.pending), already_ok=plan.done, errors_kept=plan.kept_failed)
        started_at = runs.utc_now()
        run.update_manifest(
            protocol_version=task.protocol_version,
            generation={**backend.describe(), **preset_source(identity.get("parameters")), "identity": identity,
                        "protocol_version": task.protocol_version,
                        "data_sha256": task.data_sha256, "status": "running", "started_at": started_at},
        )
        started = time.monotonic()
        try:
            with job.appender(run.generations, background=True) as appender:
                for warning in [*plan.warnings, *job.warnings]:
                    print(f"warning: {warning}", file=sys.stderr)
                await _drive(appender, plan, backend, summary, progress)
        except RunAborted as exc:
            summary.aborted = str(exc)
            exc.summary = summary
            raise
        finally:
            summary.elapsed_s = time.monotonic() - started
            summary.concurrency = backend.stats().get("concurrency")
            _finish_manifest(run_dir, task, backend, summary, started_at)
    if summary.interrupted:
        raise GenerationInterrupted(summary)
    return summary


async def _drive(appender: artifacts.JsonlAppender, plan: RunPlan, backend: Backend, summary: SessionSummary,
                 progress: bool) -> None:
    # The run's replies come from one served model (engine.generation.served): its recorded ones name it.
    guard = ServedGuard("generate", (record.get("model") for _, record in plan.finished))

    def record(result: GenerationResult) -> dict[str, Any]:
        if result.status == STATUS_OK:
            guard.check(result.model)
        summary.add(result)
        return result.to_record()

    summary.interrupted = await drive(appender, plan.pending, backend, record, progress=progress, desc="generate")


async def drive(
    appender: artifacts.JsonlAppender,
    requests: Sequence[GenerationRequest],
    backend: Backend,
    to_record: Callable[[GenerationResult], dict[str, Any]],
    *,
    progress: bool,
    desc: str,
) -> bool:
    """Stream ``requests`` through ``backend`` and append ``to_record(result)`` with ``appender``
    as each result arrives (a background appender flushes in a writer thread, so the event loop
    never waits for the disk; a kill loses only what is in flight or still queued; the caller
    closes it, which writes what is queued).
    Shared by generation and judging so both get the same concurrency, retries, progress bar and
    signal handling. Returns True when the run was cancelled (Ctrl-C, SIGTERM)."""
    from tqdm import tqdm

    stop_on_sigterm = cancel_on_sigterm()
    bar = tqdm(total=len(requests), disable=not progress, unit="req", desc=desc, dynamic_ncols=True)
    stream = backend.stream(requests)
    failed = 0
    interrupted = False
    try:
        async for result in stream:
            appender.write(to_record(result))
            bar.update(1)
            if result.status != STATUS_OK:
                failed += 1
                bar.set_postfix(errors=failed, refresh=False)
    except asyncio.CancelledError:
        interrupted = True
    finally:
        await stream.aclose()
        bar.close()
        stop_on_sigterm()
    return interrupted


def cancel_on_sigterm() -> Any:
    """SIGTERM stops a run like Ctrl-C does (asyncio.run already handles SIGINT). Returns the
    function that removes the handler; a no-op where handlers cannot be installed (threads)."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    previous = signal.getsignal(signal.SIGTERM)
    try:
        loop.add_signal_handler(signal.SIGTERM, task.cancel)
    except (RuntimeError, NotImplementedError, ValueError):
        return lambda: None

    def remove() -> None:
        # The loop puts back the default (death by the signal): the caller's handler (the
        # command's, a batch's) must stop what comes after this run too.
        loop.remove_signal_handler(signal.SIGTERM)
        signal.signal(signal.SIGTERM, previous if previous is not None else signal.SIG_DFL)

    return remove


def _finish_manifest(run_dir: Path, task: GenerationTask, backend: Backend, summary: SessionSummary,
                     started_at: str) -> None:
    """The session's end: its status, and the backend's description as it ended (a Ray backend's
    workers include the replacements of dead ones, which ``run.json`` lacked at the start)."""
    previous = runs.load_manifest(run_dir).get("generation") or {}
    state = run_state(run_dir, task.all_ids)
    # complete: every id of the task has a record (state says how many are errors).
    if summary.interrupted:
        status = "interrupted"
    elif summary.aborted:
        status = "aborted"
    else:
        status = "complete" if state["missing"] == 0 else "partial"
    session = {"started_at": started_at, "finished_at": runs.utc_now(), **summary.as_dict()}
    sessions = [*previous.get("sessions", []), session]
    # The run's reasoning tokens: every session's that the server reported (None: never reported).
    reported = [s["reasoning_tokens"] for s in sessions if s.get("reasoning_tokens") is not None]
    runs.update_manifest(
        run_dir,
        generation={**backend.describe(), "status": status, "state": state, "finished_at": session["finished_at"],
                    "reasoning_tokens": sum(reported) if reported else None, "sessions": sessions},
    )


def run_generation(
    run_dir: Path | str,
    requests: Sequence[GenerationRequest],
    backend: Backend,
    task: GenerationTask,
    *,
    retry_errors: bool = False,
    progress: bool = True,
) -> SessionSummary:
    """Blocking entry point for scripts, notebooks and the CLI. Under Jupyter or papermill an
    event loop is already running in this thread, so the run gets its own loop in a worker
    thread (Ctrl-C there interrupts the kernel, which cancels nothing mid-flight: records
    already received are saved either way)."""

    return run_closing(backend, lambda: generate_async(Path(run_dir), requests, backend, task,
                                                       retry_errors=retry_errors, progress=progress))


def run_closing(closeable: Any, factory: Any) -> Any:
    """``run_coroutine(factory)``, then ``await closeable.aclose()`` however the run ended: a
    backend's connections belong to the loop that opened them."""

    async def main() -> Any:
        try:
            return await factory()
        finally:
            await closeable.aclose()

    return run_coroutine(main)


def run_coroutine(factory: Any) -> Any:
    """``asyncio.run(factory())``, also when this thread already runs an event loop (a notebook)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(factory())
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, factory()).result()



@dataclass
class DryRun:
    requests_written: int
    plan: RunPlan
    # For the requests a real run would still send (ids already ok are skipped).
    estimate: CostEstimate


def dry_run(
    run_dir: Path | str,
    requests: Sequence[GenerationRequest],
    task: GenerationTask,
    params: DecodingParams,
    *,
    backend: str,
    model: str,
    base_url: str | None = None,
    retry_errors: bool = False,
    price_in: float | None = None,
    price_out: float | None = None,
) -> DryRun:
    """Send nothing: write ``requests.jsonl`` with the exact messages, estimate tokens and cost of
    what is still pending, and record both (and the parameters that would be sent) in run.json."""
    run = runs.RunDir.resolve(Path(run_dir))
    written = artifacts.write_jsonl_atomic(run.requests, ({"id": r.id, "messages": r.messages} for r in requests))
    plan = plan_run(run.path, requests, retry_errors=retry_errors)
    estimate = estimate_cost(plan.pending, params.max_tokens, price_in=price_in, price_out=price_out)
    run.update_manifest(
        protocol_version=task.protocol_version,
        dry_run={
            "backend": backend,
            "model": model,
            "base_url": base_url,
            "parameters": params.as_dict(),
            **preset_source(params.as_dict()),
            "sent_parameters": params.sent(),
            "requests": written,
            "pending": len(plan.pending),
            "estimate": {
                "method": "character-based",
                "input_tokens": estimate.input_tokens,
                "output_tokens_typical": estimate.output_tokens_typical,
                "output_tokens_max": estimate.output_tokens_max,
                "price_in_usd_per_m": price_in,
                "price_out_usd_per_m": price_out,
            },
            "data_sha256": task.data_sha256,
        },
    )
    return DryRun(written, plan, estimate)
