"""The one resumable keyed-JSONL job (engine/storage/jobs.py) and the stages built on it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from charactereval_lib.charactereval import layout
from charactereval_lib.charactereval.reward import scorer
from charactereval_lib.coser import run as coser_run
from charactereval_lib.engine.generation.engine import GenerationInterrupted, SessionSummary, generation_job
from charactereval_lib.engine.grading.judging import JudgeInterrupted, JudgeSummary, judge_job
from charactereval_lib.engine.storage import artifacts, jobs, runs


def _write(path: Path, records: list[dict], tail: str = "") -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + tail, encoding="utf-8")


def test_plan_uses_the_latest_record_per_key_and_skips_a_torn_tail(tmp_path):
    out = tmp_path / "out.jsonl"
    _write(out, [{"k": 1, "status": "error"}, {"k": 1, "status": "ok"}, {"k": 2, "status": "ok"},
                 {"k": 2, "status": "error"}, {"k": 3, "status": "error"}, {"k": 9, "status": "ok"}],
           tail='{"k": 4, "sta')
    items = [1, 2, 3, 4, 5]
    plan = jobs.plan_keys(out, items, lambda k: (k,), ("k",))
    assert plan.pending == [2, 3, 4, 5] and plan.retried == 2 and plan.kept_failed == 0
    assert plan.done == 1 and plan.finished == [(1, {"k": 1, "status": "ok"})]
    assert len(plan.warnings) == 1 and "torn last line" in plan.warnings[0]
    kept = jobs.plan_keys(out, items, lambda k: (k,), ("k",), jobs.by_status(retry_failed=False))
    assert kept.pending == [4, 5] and kept.kept_failed == 2 and kept.retried == 0
    # select: records another writer made (here: k 1's ok record) are not this job's state.
    mine = jobs.plan_keys(out, items, lambda k: (k,), ("k",), select=lambda r: r["k"] != 1 or r["status"] != "ok")
    assert mine.pending[0] == 1 and mine.retried == 3


def test_records_made_only_on_success_mark_their_key_done(tmp_path):
    out = tmp_path / "scores.jsonl"
    _write(out, [{"id": 1, "mode": "fast"}])
    plan = jobs.plan_keys(out, [(1, "fast"), (1, "faithful")], lambda item: item, ("id", "mode"),
                          jobs.recorded_is_done)
    assert plan.pending == [(1, "faithful")] and plan.done == 1


def test_identity_check_names_every_differing_setting(tmp_path):
    recorded = {"model": "m", "parameters": {"temperature": None, "top_p": 1.0}}
    jobs.check_identity(tmp_path, recorded, dict(recorded))
    with pytest.raises(runs.MixedRunError) as error:
        jobs.check_identity(tmp_path, recorded, {"model": "n", "parameters": {"temperature": 0.5, "top_p": 1.0}})
    message = str(error.value)
    assert "\n" not in message and message.startswith(f"{tmp_path}: cannot resume with different settings")
    assert "model 'm' -> 'n'; parameters.temperature None -> 0.5" in message and "top_p" not in message


def test_the_lock_refuses_a_second_writer_takes_over_a_stale_one_and_goes_on_exit(tmp_path):
    job = jobs.Job(tmp_path, tmp_path / ".x.lock", "x run", hint="; wait for it")
    # A lock file left by a killed writer holds no lock: taken over.
    (tmp_path / ".x.lock").write_text("")
    with job.locked():
        with pytest.raises(runs.RunError, match=r"another x run is writing it \(lock \.x\.lock\); wait for it$"):
            with jobs.Job(tmp_path, tmp_path / ".x.lock", "x run", hint="; wait for it").locked():
                pass
    assert not (tmp_path / ".x.lock").exists()


def test_the_appender_repairs_a_torn_tail_and_says_so(tmp_path):
    out = tmp_path / "out.jsonl"
    _write(out, [{"k": 1}], tail='{"k": 2')
    job = jobs.Job(tmp_path, tmp_path / ".lock", "x")
    assert job.latest(out, ("k",)) == {(1,): {"k": 1}}
    with job.appender(out) as appender:
        appender.write({"k": 2})
    assert artifacts.read_jsonl(out).records == [{"k": 1}, {"k": 2}]
    assert "torn last line" in job.warnings[0] and "removed a torn last line" in job.warnings[1]


def test_every_stage_uses_the_job(tmp_path):
    run = layout.CharacterEvalRun(tmp_path)
    locks = {generation_job(run).lock.name, judge_job(run).lock.name, coser_run.coser_job(run).lock.name,
             scorer.scoring_job(run.scores).lock.name}
    assert locks == {".generate.lock", ".judge.lock", ".coser.lock", "scores.jsonl.lock"}
    # The scorer's refusal still says what to do instead.
    with scorer.scoring_job(run.scores).locked():
        with pytest.raises(runs.RunError, match="another scorer is writing it .*split the work with --shard"):
            with scorer.scoring_job(run.scores).locked():
                pass


def test_interrupted_errors_carry_their_partial_summary():
    session = SessionSummary(pending=10, ok=3, errors_kept=1)
    session.errors["timeout"] = 2
    error = GenerationInterrupted(session)
    assert isinstance(error, jobs.JobInterrupted) and error.summary is session
    assert str(error) == "generation interrupted: 5 done, 3 failed, 5 remaining"
    judging = JudgeSummary(pending=4, graded=1)
    judging.errors["timeout"] = 1
    error = JudgeInterrupted(judging)
    assert isinstance(error, jobs.JobInterrupted)
    assert str(error) == "judging interrupted: 2 done, 1 failed, 2 remaining"


def test_a_coser_resume_under_other_settings_names_them(tmp_path):
    class Settings:
        class version:
            name = "coser-v1"

        def __init__(self, max_tokens):
            self.max_tokens = max_tokens

        def identity(self):
            return {"max_tokens": self.max_tokens, "thoughtless": False}

    run = runs.RunDir(tmp_path)
    run.update_manifest(protocol_version="coser-v1", coser={"identity": Settings(512).identity(), "preset": "smoke"})
    coser_run.check_identity(run, Settings(512), coser_run.PRESETS["smoke"])
    with pytest.raises(runs.MixedRunError, match=r"identity\.max_tokens 512 -> 1024; preset 'smoke' -> 'sample'"):
        coser_run.check_identity(run, Settings(1024), coser_run.PRESETS["sample"])
