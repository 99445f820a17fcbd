"""One resumable job over keyed JSON Lines records, shared by every stage that calls a model.

Generation, judging, reward-model scoring and CoSER runs all append one record per outcome to
JSON Lines files of a run, each record carrying its key; the latest record of a key is its state
(a torn last line left by a crash is skipped when reading and cut off before appending, see
``artifacts.read_jsonl`` and ``artifacts.repair_torn_tail``). A session of such a job:

- refuses to continue a run made under other settings (``check_identity``, one line naming every
  setting that differs);
- holds the writer lock (``Job.locked``), so that a second writer stops at once instead of
  interleaving records; a lock left by a killed writer is taken over, and a clean exit removes it;
- plans what is still to do from the latest record of each key (``Job.plan``);
- appends through ``Job.appender`` (a repaired tail becomes a warning);
- on Ctrl-C or SIGTERM raises ``JobInterrupted`` carrying what it did (done, failed, remaining).

Warnings (a torn line skipped, a tail repaired) are collected in ``Job.warnings`` for the caller
to show: nothing is dropped silently.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

from charactereval_lib.engine.storage import artifacts, runs

Item = TypeVar("Item")

# What ``classify`` says about an item given the latest record of its key (None: no record).
DONE = "done"  # finished: skipped
PENDING = "pending"  # never tried, or its record was made from another request: sent
RETRY = "retry"  # its latest record is a failure that this session tries again
KEEP_FAILED = "keep-failed"  # its latest record is a failure that this session leaves alone

Classify = Callable[[Any, "dict[str, Any] | None"], str]


class PartialSummary(Protocol):
    """What an interrupted session had done: every job's session summary has these."""

    done: int
    failed: int
    remaining: int

    def line(self) -> str: ...


class JobInterrupted(Exception):
    """A job session stopped by Ctrl-C or SIGTERM; every record received is saved and the same
    command resumes. ``summary`` is the session's summary as far as it got."""

    def __init__(self, what: str, summary: PartialSummary) -> None:
        super().__init__(f"{what} interrupted: {summary.done} done, {summary.failed} failed, "
                         f"{summary.remaining} remaining")
        self.summary = summary


@dataclass
class KeyPlan(Generic[Item]):
    """What a session still has to do, in item order, and what it skips."""

    pending: list[Item] = field(default_factory=list)
    # Items already done, each with the latest record of its key.
    finished: list[tuple[Item, dict[str, Any]]] = field(default_factory=list)
    # Pending items whose latest record is a failure (tried again).
    retried: int = 0
    # Items whose latest record is a failure that this session leaves alone.
    kept_failed: int = 0
    # Torn lines skipped while reading the output.
    warnings: list[str] = field(default_factory=list)

    @property
    def done(self) -> int:
        return len(self.finished)


def by_status(retry_failed: bool = True) -> Classify:
    """The usual rule: an item with an ok record is done, one without a record is pending, and
    one whose latest record failed is retried (or, without ``retry_failed``, left alone)."""

    def classify(item: Any, record: dict[str, Any] | None) -> str:
        if record is None:
            return PENDING
        if record.get("status") == "ok":
            return DONE
        return RETRY if retry_failed else KEEP_FAILED

    return classify


RETRY_FAILED = by_status()


def recorded_is_done(item: Any, record: dict[str, Any] | None) -> str:
    """The rule for records that exist only once their work succeeded (a failure writes none)."""
    return PENDING if record is None else DONE


def latest_records(path: Path, key_fields: Sequence[str], *, select: Callable[[Any], bool] | None = None,
                   warnings: list[str] | None = None) -> dict[tuple, dict[str, Any]]:
    """The latest record of each key in the JSON Lines file ``path`` (missing: none), among the
    records ``select`` accepts; torn-line warnings go to ``warnings``."""
    read = artifacts.read_jsonl(Path(path))
    if warnings is not None:
        warnings.extend(read.warnings)
    records = read.records if select is None else (r for r in read.records if select(r))
    return artifacts.latest_by_key(records, *key_fields)


def plan_keys(path: Path, items: Iterable[Item], key_of: Callable[[Item], tuple], key_fields: Sequence[str],
              classify: Classify = RETRY_FAILED, *, select: Callable[[Any], bool] | None = None) -> KeyPlan[Item]:
    """Which ``items`` still need doing given the records ``path`` holds: each item's key
    (``key_of``, the values of ``key_fields`` in its records) is looked up among the latest
    records ``select`` accepts, and ``classify`` decides from that record."""
    plan: KeyPlan[Item] = KeyPlan()
    latest = latest_records(path, key_fields, select=select, warnings=plan.warnings)
    for item in items:
        record = latest.get(key_of(item))
        outcome = classify(item, record)
        if outcome == DONE:
            assert record is not None
            plan.finished.append((item, record))
        elif outcome == KEEP_FAILED:
            plan.kept_failed += 1
        elif outcome in (PENDING, RETRY):
            plan.pending.append(item)
            plan.retried += outcome == RETRY
        else:
            raise ValueError(f"classify returned {outcome!r}")
    return plan


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, Mapping):
        flat: dict[str, Any] = {}
        for key, item in value.items():
            flat.update(_flatten(item, f"{prefix}{key}."))
        return flat
    return {prefix.rstrip("."): value}


def check_identity(where: Path | str, recorded: Mapping[str, Any], current: Mapping[str, Any]) -> None:
    """Refuse to resume a run whose records were made under other settings: ``recorded`` (what
    run.json says the existing output was made with) against ``current``, compared setting by
    setting (nested settings by dotted name); MixedRunError names every one that differs."""
    old, new = _flatten(recorded), _flatten(current)
    changed = [f"{key} {old.get(key)!r} -> {new.get(key)!r}" for key in sorted(old.keys() | new.keys())
               if old.get(key) != new.get(key)]
    if changed:
        raise runs.MixedRunError(f"{where}: cannot resume with different settings ({'; '.join(changed)}); "
                                 "re-run with the original settings or use a new RUN directory")


class Job:
    """One writer session of a resumable job: ``where`` is what its lock guards (a run
    directory, or one output file when several writers may share the run), ``lock`` the lock
    file, ``what`` the job's name in the one-line refusal a second writer gets (``hint``: what
    to do instead, appended to it)."""

    def __init__(self, where: Path, lock: Path, what: str, *, hint: str = "") -> None:
        self.where = Path(where)
        self.lock = Path(lock)
        self.what = what
        self.hint = hint
        self.warnings: list[str] = []

    def locked(self) -> contextlib.AbstractContextManager[None]:
        """Hold the writer lock while the block runs (``runs.exclusive_lock``), or raise RunError
        at once naming the job and its lock file."""
        return runs.exclusive_lock(
            self.lock, f"{self.where}: another {self.what} is writing it (lock {self.lock.name}){self.hint}")

    def plan(self, path: Path, items: Iterable[Item], key_of: Callable[[Item], tuple], key_fields: Sequence[str],
             classify: Classify = RETRY_FAILED, *, select: Callable[[Any], bool] | None = None) -> KeyPlan[Item]:
        """``plan_keys``, its warnings kept in ``warnings``."""
        plan = plan_keys(path, items, key_of, key_fields, classify, select=select)
        self.warnings.extend(plan.warnings)
        return plan

    def read(self, path: Path) -> list[Any]:
        """The records of the JSON Lines file ``path`` (``artifacts.read_jsonl``), its warnings kept
        in ``warnings``."""
        read = artifacts.read_jsonl(Path(path))
        self.warnings.extend(read.warnings)
        return read.records

    def latest(self, path: Path, key_fields: Sequence[str], *,
               select: Callable[[Any], bool] | None = None) -> dict[tuple, dict[str, Any]]:
        """``latest_records``, its warnings kept in ``warnings``."""
        return latest_records(path, key_fields, select=select, warnings=self.warnings)

    def appender(self, path: Path, *, background: bool = False) -> artifacts.JsonlAppender:
        """A ``artifacts.JsonlAppender`` on ``path`` (its torn tail repaired first, said in ``warnings``)."""
        appender = artifacts.JsonlAppender(path, background=background)
        if appender.repair_message:
            self.warnings.append(appender.repair_message)
        return appender
