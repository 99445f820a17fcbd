"""ToyBench's settings and stages (see the package docstring), built on the library's engine:
its settings base, run directories, OpenAI-compatible backend and report kit."""

from __future__ import annotations

import html
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from charactereval_lib.engine import faults
from charactereval_lib.engine.generation.backends import BackendOptions, make_backend
from charactereval_lib.engine.generation.base import STATUS_OK, DecodingParams, GenerationRequest
from charactereval_lib.engine.generation.engine import run_closing
from charactereval_lib.engine.registry.settings import Settings, SettingsError
from charactereval_lib.engine.reports import kit
from charactereval_lib.engine.storage import artifacts, runs
from tests.toybench import NAME, PROTOCOL_VERSION

DATA_ENV = "TOYBENCH_DATA_DIR"
QUESTIONS = "questions.jsonl"
ANSWERS = "answers.jsonl"
SUMMARY = "toy_summary.json"
REPORT = "report.html"


class RunSettings(Settings):
    model: str
    base_url: str | None = None
    concurrency: int = 4

    def model_post_init(self, context: Any) -> None:
        if self.concurrency <= 0:
            raise SettingsError(f"concurrency must be a positive number, got {self.concurrency}")


class SummarizeSettings(Settings):
    pass


class ReportSettings(Settings):
    title: str = "ToyBench report"


@dataclass
class RunOutcome:
    run: runs.RunDir
    asked: int
    errors: list[str] = field(default_factory=list)

    def exit_code(self) -> int:
        return 1 if self.errors else 0


@dataclass
class ReportOutcome:
    html: Path
    notebook: Path | None = None
    warnings: list[str] = field(default_factory=list)


def locate(data_dir: str | os.PathLike[str] | None = None) -> Path:
    """The data directory its commands read: ``data_dir``, else ``$TOYBENCH_DATA_DIR``."""
    return Path(data_dir or os.environ.get(DATA_ENV) or "data/toybench")


def read_questions(data_dir: str | os.PathLike[str] | None) -> list[dict]:
    path = locate(data_dir) / QUESTIONS
    if not path.exists():
        raise runs.RunError(f"{path}: no ToyBench questions (set --data-dir or ${DATA_ENV})")
    return artifacts.read_jsonl(path).records


def run(run_dir: str | os.PathLike[str] | runs.RunDir, settings: RunSettings, *,
        data_dir: str | os.PathLike[str] | None = None, progress: bool = False) -> RunOutcome:
    """Ask every question not answered yet (through the mock server in the tests); one record
    per answer in ``answers.jsonl``, with whether it is correct."""
    run_dir = runs.RunDir.resolve(run_dir)
    questions = read_questions(data_dir)
    faults.check_writable(run_dir.path, "run directory")
    run_dir.path.mkdir(parents=True, exist_ok=True)
    run_dir.update_manifest(benchmark=NAME, protocol_version=PROTOCOL_VERSION, model=settings.model)
    done = {r["id"] for r in artifacts.read_jsonl(run_dir.artifact(ANSWERS)).records if r["status"] == STATUS_OK}
    todo = [q for q in questions if q["id"] not in done]
    answer = {q["id"]: q["answer"] for q in todo}
    backend = make_backend("openai", settings.model, DecodingParams.resolve(max_tokens=32),
                           BackendOptions(base_url=settings.base_url, api_key_env="",
                                          concurrency=settings.concurrency))

    async def ask_all() -> list:
        import asyncio

        requests = [GenerationRequest(q["id"], "user", [{"role": "user", "content": q["question"]}]) for q in todo]
        return await asyncio.gather(*(backend.call(r) for r in requests))

    results = run_closing(backend, ask_all)
    with run_dir.artifact(ANSWERS).open("a", encoding="utf-8") as stream:
        for result in results:
            record = {"id": result.id, "status": result.status, "reply": result.model_output,
                      "correct": result.model_output == answer[result.id]}
            stream.write(json.dumps(record, ensure_ascii=False) + "\n")
    errors = [f"question {r.id}: {r.status}" for r in results if r.status != STATUS_OK]
    return RunOutcome(run_dir, len(todo), errors)


def summarize(run_dir: str | os.PathLike[str] | runs.RunDir, settings: SummarizeSettings) -> dict:
    """n, correct, failed and accuracy of the run's latest answers, into ``toy_summary.json``."""
    run_dir = runs.RunDir.resolve(run_dir).require_dir()
    answers = {r["id"]: r for r in artifacts.read_jsonl(run_dir.require(run_dir.artifact(ANSWERS), "run it first")).records}
    ok = [a for a in answers.values() if a["status"] == STATUS_OK]
    correct = sum(1 for a in ok if a["correct"])
    summary = {"n": len(ok), "failed": len(answers) - len(ok), "correct": correct,
               "accuracy": correct / len(ok) if ok else None}
    artifacts.write_json_atomic(run_dir.artifact(SUMMARY), summary)
    return summary


def report(run_dir: str | os.PathLike[str] | runs.RunDir, settings: ReportSettings, *,
           out: str | os.PathLike[str] | None = None) -> ReportOutcome:
    """``report.html``: the summary as the report kit shows a table, its warnings, who rendered it."""
    run_dir = runs.RunDir.resolve(run_dir).require_dir()
    summary = json.loads(artifacts.read_text(run_dir.require(run_dir.artifact(SUMMARY), "summarize it first")))
    warnings = [f"{summary['failed']} question(s) failed"] if summary["failed"] else []
    table = kit.show(pd.DataFrame([summary]))
    page = (f"<html><body><h1>{html.escape(settings.title)}</h1>"
            f"{kit.warnings_box(warnings, 'Warnings')}{table.to_html()}"
            f"<p>{html.escape(kit.rendered_by())}</p></body></html>")
    target = Path(out or run_dir.path) / REPORT
    target.parent.mkdir(parents=True, exist_ok=True)
    artifacts.write_text_atomic(target, page)
    return ReportOutcome(target, warnings=warnings)
