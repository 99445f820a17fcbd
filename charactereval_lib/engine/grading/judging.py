"""Judge runs: model-graded specs sent through the generation engine, graded, and appended.

A judge run is a generation run whose replies are graded: every item (one row to grade) carries
the spec and the judge messages built from it; the backends of ``engine.generation`` send them
(async, retries, adaptive concurrency, no key anywhere), ``grade_reply`` parses each reply, and
one record per outcome is appended to a JSON Lines score file. A benchmark decides what an item
is (CharacterEval: a (sample, metric) row). CoSER does not judge through here: its critic reads
a whole simulated scene and answers in JSON, one call per dimension (``coser.judge``).

A judge session is the engine's resumable job (``engine.storage.jobs``) keyed by the item's key among one
judge model's records. Resume is by request digest: an item is done when the latest record of its
key is ok and was made from exactly the same payload (judge model, messages, decoding
parameters). A changed prompt or judge model therefore re-judges; a changed grading rule that is
not in the request (parser, choice scores, invalid rule) re-grades the stored reply without a
call; a failed call (status error, no score) is retried by the next run. Invalid answers are ok
records with ``invalid: true``: kept, counted, never re-asked. A sample evals refuses to fill a
prompt from (``SampleRefusedError``) is never sent: ``make_item`` marks it, and it gets a failed
record (error class ``refused_sample``, the reason naming sample and field), counted as not
graded.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from charactereval_lib.engine.generation.base import (
    STATUS_OK,
    Backend,
    DecodingParams,
    GenerationRequest,
    GenerationResult,
    RunAborted,
    build_payload,
    request_sha256,
)
from charactereval_lib.engine.generation.engine import CallSession, drive, run_closing
from charactereval_lib.engine.generation.served import ServedGuard
from charactereval_lib.engine.grading.errors import SampleRefusedError
from charactereval_lib.engine.grading.spec import ModelGradedSpec, build_judge_messages, grade_reply
from charactereval_lib.engine.storage import jobs, runs

SCORER = "judge"
# Judges grade: the same answer for the same question unless asked otherwise.
DEFAULT_TEMPERATURE = 0.0
JUDGE_LOCK = ".judge.lock"


@dataclass(frozen=True)
class JudgeItem:
    """One thing to grade: ``key`` identifies it in the score file (e.g. id and metric_en) and is
    copied into its record; ``messages`` are the judge messages built from ``spec``."""

    key: Mapping[str, Any]
    spec: ModelGradedSpec
    messages: list[dict[str, str]]
    # Why the sample cannot be filled into the spec's prompt (nothing is sent), else None.
    refused: str | None = None
    # The fill arguments grading depends on: the eval-level eval type (the parse type of a spec
    # without its own) and the number of replies shown (the choices of a from_n spec).
    grading: Mapping[str, Any] = field(default_factory=dict)

    def grade(self, reply: str) -> dict[str, Any]:
        """``grade_reply`` of a reply to this item's messages."""
        return grade_reply(self.spec, reply, **self.grading)


def make_item(key: Mapping[str, Any], spec: ModelGradedSpec, sample: Mapping[str, Any], **fill: Any) -> JudgeItem:
    """The item of one sample: its judge messages (``build_judge_messages`` with ``fill``), or,
    when evals would refuse the sample, no messages and the one-line reason naming the sample
    (``key``) and the field."""
    grading = {name: fill[name] for name in ("eval_type", "multicomp_n") if name in fill}
    try:
        return JudgeItem(key, spec, build_judge_messages(spec, sample, **fill), grading=grading)
    except SampleRefusedError as error:
        where = ", ".join(f"{name} {value}" for name, value in key.items())
        return JudgeItem(key, spec, [], f"sample ({where}): {error}", grading=grading)


class JudgeInterrupted(jobs.JobInterrupted):
    """The judge run was stopped (Ctrl-C / SIGTERM); every record received is saved."""

    def __init__(self, summary: JudgeSummary) -> None:
        super().__init__("judging", summary)


@dataclass
class JudgePlan(jobs.KeyPlan[JudgeItem]):
    """What a judge session still has to send (``retried``: items whose latest record is a failed
    call), and what it skips."""

    # Records of answered items whose stored reply grades differently under the spec as it is now
    # (another parser, choice scores or invalid rule; none of these is in the request): appended
    # again, re-graded, without a call.
    regraded: list[dict[str, Any]] = field(default_factory=list)


def judge_job(run: runs.RunDir) -> jobs.Job:
    return jobs.Job(run.path, run.path / JUDGE_LOCK, "judge run")


def item_sha256(item: JudgeItem, model: str, params: DecodingParams) -> str:
    """The request digest of an item: the same digest the backend records (``build_payload``)."""
    return request_sha256(build_payload(model, item.messages, params))


def plan_judging(
    path: Path, items: Sequence[JudgeItem], model: str, params: DecodingParams, key_fields: Sequence[str]
) -> JudgePlan:
    """Which items still need a judge call (see the module docstring for the resume rule)."""

    def classify(item: JudgeItem, record: dict[str, Any] | None) -> str:
        if record is None:
            return jobs.PENDING
        if record.get("status") != STATUS_OK:
            return jobs.RETRY
        return jobs.DONE if record.get("request_sha256") == item_sha256(item, model, params) else jobs.PENDING

    # One file may hold several judges' records: another judge's newer record of the same key
    # must not hide this judge's own (its digest could never match anyway).
    plan = jobs.plan_keys(Path(path), items, lambda item: tuple(item.key[k] for k in key_fields), key_fields,
                          classify, select=lambda r: r.get("judge_model", model) == model)
    regraded = []
    for item, record in plan.finished:
        grade = item.grade(record.get("reply") or "")
        if any(record.get(name) != value for name, value in grade.items()):
            regraded.append({**record, **grade})
    return JudgePlan(**vars(plan), regraded=regraded)


def judge_record(item: JudgeItem, result: GenerationResult, judge_model: str) -> dict[str, Any]:
    """The score-file record of one outcome: the item's key, the grade (choice, score, invalid)
    and the raw reply, with what the backend recorded about the call. A failed call has
    ``status: error`` and no grade."""
    record = result.to_record()
    del record["id"]
    reply = record.pop("model_output")
    grade: dict[str, Any] = {"choice": None, "score": None, "invalid": None, "spec": item.spec.name,
                             "parser": item.spec.parser}
    if result.status == STATUS_OK:
        grade = item.grade(reply or "")
    grade["reply"] = reply
    return {**item.key, "scorer": SCORER, "judge_model": judge_model, **grade, **record}


def refused_record(item: JudgeItem, judge_model: str) -> dict[str, Any]:
    """The failed record of a refused item: no call, no grade, the reason as its error."""
    result = GenerationResult(0, "error", None, "", attempts=0,
                              error={"class": "refused_sample", "message": item.refused})
    return judge_record(item, result, judge_model)


@dataclass
class JudgeSummary(CallSession):
    """What one judge session did; ``line`` is what the CLI prints."""

    already_done: int = 0
    errors_retried: int = 0
    regraded: int = 0
    graded: int = 0
    invalid: int = 0
    # The reason of each refused sample (never sent, counted among the failures).
    refused: list[str] = field(default_factory=list)

    def add(self, record: Mapping[str, Any]) -> None:
        """Count one written record."""
        if record["status"] == STATUS_OK:
            self.graded += 1
            self.invalid += bool(record["invalid"])
            self.served.add_record(record)
        else:
            error = record.get("error") or {}
            self.errors[error.get("class", "unknown")] += 1
            if error.get("class") == "refused_sample":
                self.refused.append(error.get("message", ""))
        self.refusals += bool(record.get("refusal"))
        self.count_usage(record.get("usage"))

    @property
    def done(self) -> int:
        """Calls that ended this session (graded or failed)."""
        return self.graded + sum(self.errors.values())

    @property
    def failed(self) -> int:
        return sum(self.errors.values())

    def line(self) -> str:
        """One line for the terminal: counts, invalid answers, failures, tokens, rate."""
        errors = sum(self.errors.values())
        by_class, rate = self.errors_by_class(), self.rate()
        text = (
            f"{'interrupted after' if self.interrupted else 'judged'} {self.done}/{self.pending}: graded {self.graded} "
            f"(invalid answers {self.invalid}, refusals {self.refusals}), failed calls {errors}"
            f"{f' ({by_class})' if by_class else ''}; tokens in {self.prompt_tokens:,} out "
            f"{self.completion_tokens:,}; {self.elapsed_s:.1f} s ({rate:.1f}/s); skipped {self.already_done} already judged"
        )
        if self.regraded:
            text += f" ({self.regraded} of them re-graded from their stored reply: the spec's grading changed)"
        if self.refused:
            text += (f"; {len(self.refused)} sample(s) refused as openai/evals refuses them, not graded "
                     f"(first: {self.refused[0]})")
        if errors > len(self.refused):
            text += "; re-run the same command to retry the failed calls"
        return text

    def as_dict(self) -> dict[str, Any]:
        """The session's counts as recorded in run.json."""
        return {
            "pending": self.pending, "already_done": self.already_done, "errors_retried": self.errors_retried,
            "regraded": self.regraded,
            "graded": self.graded, "invalid": self.invalid, "errors": dict(self.errors), "refusals": self.refusals,
            "prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens,
            "elapsed_s": round(self.elapsed_s, 3), "interrupted": self.interrupted, "aborted": self.aborted,
            "concurrency": self.concurrency, "refused": self.refused, "served": self.served.as_dict(),
        }


async def judge_async(
    run: runs.RunDir,
    output: Path,
    items: Sequence[JudgeItem],
    backend: Backend,
    *,
    judge_model: str,
    params: DecodingParams,
    key_fields: Sequence[str],
    manifest_section: str,
    describe: Mapping[str, Any],
    manifest_key: str | None = None,
    progress: bool = False,
) -> JudgeSummary:
    """Judge the items not yet judged into ``output`` (one writer per run: a lock file keeps a
    second judge run out). ``describe`` (settings, never secrets) and each session's counts go
    into ``run.json`` under ``manifest_section`` (under its ``judges`` entry ``manifest_key`` when
    given, so that several judges of one file each keep their own record). Raises
    JudgeInterrupted (records saved) when cancelled, ``RunAborted`` when the endpoint cannot be
    reached at all."""
    job = judge_job(run)
    with job.locked():
        plan = plan_judging(output, items, judge_model, params, key_fields)
        summary = JudgeSummary(len(plan.pending), already_done=plan.done, errors_retried=plan.retried,
                               regraded=len(plan.regraded))
        if plan.regraded:
            with job.appender(output) as appender:
                for record in plan.regraded:
                    appender.write(record)
        started_at = runs.utc_now()
        record_session(run, manifest_section, manifest_key, {**describe, "status": "running", "started_at": started_at})
        refused = [item for item in plan.pending if item.refused]
        if refused:
            with job.appender(output) as appender:
                for item in refused:
                    record = refused_record(item, judge_model)
                    summary.add(record)
                    appender.write(record)
        pending = [item for item in plan.pending if not item.refused]
        requests = [GenerationRequest(index, "", item.messages) for index, item in enumerate(pending)]
        # One judge's grades come from one served model (engine.generation.served): its recorded ones name it.
        guard = ServedGuard(f"judge {judge_model}", (record.get("model") for _, record in plan.finished))

        def to_record(result: GenerationResult) -> dict[str, Any]:
            if result.status == STATUS_OK:
                guard.check(result.model)
            record = judge_record(pending[result.id], result, judge_model)
            summary.add(record)
            return record

        started = time.monotonic()
        try:
            with job.appender(output, background=True) as appender:
                for warning in [*plan.warnings, *job.warnings]:
                    print(f"warning: {warning}", file=sys.stderr)
                summary.interrupted = await drive(appender, requests, backend, to_record, progress=progress,
                                                  desc="judge")
        except RunAborted as exc:
            summary.aborted = str(exc)
            exc.summary = summary
            raise
        finally:
            summary.elapsed_s = time.monotonic() - started
            summary.concurrency = backend.stats().get("concurrency")
            previous = session_record(run.manifest(), manifest_section, manifest_key)
            status = ("interrupted" if summary.interrupted else "aborted" if summary.aborted
                      else "complete" if summary.done == summary.pending and not summary.errors else "partial")
            session = {"started_at": started_at, "finished_at": runs.utc_now(), **summary.as_dict()}
            record_session(run, manifest_section, manifest_key, {
                "status": status, "finished_at": session["finished_at"],
                "sessions": [*previous.get("sessions", []), session]})
    if summary.interrupted:
        raise JudgeInterrupted(summary)
    return summary


def session_record(manifest: Mapping[str, Any], section: str, key: str | None) -> dict[str, Any]:
    """What ``run.json`` holds about one judge: the section itself, or its ``judges[key]`` entry."""
    recorded = manifest.get(section) or {}
    return recorded if key is None else (recorded.get("judges") or {}).get(key) or {}


def record_session(run: runs.RunDir, section: str, key: str | None, values: Mapping[str, Any]) -> None:
    """Merge ``values`` into one judge's record in ``run.json`` (see ``session_record``)."""
    if key is None:
        run.update_manifest(**{section: dict(values)})
        return
    judges = dict((run.manifest().get(section) or {}).get("judges") or {})
    judges[key] = {**(judges.get(key) or {}), **values}
    run.update_manifest(**{section: {"judges": judges}})


def run_judging(run: runs.RunDir, output: Path, items: Sequence[JudgeItem], backend: Backend, **options: Any) -> JudgeSummary:
    """Blocking ``judge_async`` for scripts, notebooks and the CLI (closes the backend)."""
    return run_closing(backend, lambda: judge_async(run, output, items, backend, **options))
