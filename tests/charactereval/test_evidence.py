"""Warnings from evidence (issue 39): what a run's files show, said whatever its run.json says,
and "No warnings" only when every check ran and passed. The issue's case is reproduced with the
real command: a run of the offline backend scored by a tiny random reward model, its run.json
deleted."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from charactereval_lib.apps.leaderboard import build
from charactereval_lib.charactereval import analysis, evidence, layout
from charactereval_lib.charactereval.data import load_official_data
from charactereval_lib.engine.storage import artifacts, runs
from charactereval_lib.testing.synthetic import write_synthetic_data, write_synthetic_run

LIMIT = 12


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "charactereval_lib.cli", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=600)


@pytest.fixture(scope="module")
def offline_tiny_run(official_dir, tiny_rm, tmp_path_factory) -> Path:
    """A run made as the issue made it: offline backend, tiny random reward model, a subset."""
    root = tmp_path_factory.mktemp("evidence")
    run = root / "outputs" / "offline-tiny"
    for args in (("generate", str(run), "--backend", "offline", "--model", "demo", "--limit", str(LIMIT)),
                 ("transform", str(run)), ("score", str(run), "--rm", str(tiny_rm))):
        done = cli(*args, "--data-dir", str(official_dir), cwd=root)
        assert done.returncode == 0, done.stderr
    return run


def test_the_records_carry_what_made_them(offline_tiny_run):
    generations = artifacts.read_jsonl(offline_tiny_run / runs.GENERATIONS).records
    scores = artifacts.read_jsonl(offline_tiny_run / layout.SCORES).records
    assert {g.get("backend") for g in generations} == {"offline"}
    assert {s.get("checkpoint_label") for s in scores} == {"TINY RANDOM CHECKPOINT: its scores are meaningless "
                                                          "(demos and tests only)"}


def test_without_run_json_summarize_and_the_checks_say_what_the_files_show(offline_tiny_run, tmp_path):
    run = tmp_path / "no-manifest"
    shutil.copytree(offline_tiny_run, run)
    (run / runs.MANIFEST).unlink()
    done = cli("summarize", str(run), "--n-boot", "20", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    warnings = [line for line in done.stderr.splitlines() if line.startswith("warning: ")]
    assert warnings[0] == f"warning: {evidence.no_manifest_line(run)}"
    assert done.stderr.count("No run.json") == 1  # said first, once
    assert f"warning: {evidence.OFFLINE_CAVEAT}" in warnings
    assert f"warning: {evidence.TINY_RM_CAVEAT}" in warnings
    missing = 4564 - LIMIT  # the protocol's pinned sample count: no data was passed
    assert any(line.startswith(f"warning: {missing} test sample(s) have no reply") for line in warnings)
    assert "No warnings" not in done.stdout + done.stderr
    assert "generation failures unknown (no transform record in run.json)" in done.stdout

    found = evidence.run_evidence(run)
    assert found.checks == ["run.json", "replies", "reward-model", "samples", "failed-generations", "unscored-rows",
                            "served-model", "torn-lines"]
    failing = {f.check for f in found.findings if not f.passed}
    assert failing == {"run.json", "replies", "reward-model", "samples"}


def test_a_complete_real_looking_run_has_no_warnings_and_lists_its_checks(tmp_path):
    # 60 samples: every metric has the 4 samples an interval needs (a smaller run warns of n<4 cells).
    data = load_official_data(write_synthetic_data(tmp_path / "data", 60), verify=False)
    run = write_synthetic_run(tmp_path / "real", data, backend="openai", rm_label="")
    loaded = analysis.load_run(run, data=data, n_boot=20)
    assert loaded.evidence.all_clear, loaded.evidence.warnings
    assert loaded.warnings() == []
    box = analysis.warnings_html(loaded.warnings(), loaded.evidence)
    assert ("No warnings: all 8 checks of real's files ran and passed (run.json, replies, reward-model, samples, "
            "failed-generations, unscored-rows, served-model, torn-lines).") in box
    # The same run with one sample's reply gone from the records: the files say so, not run.json.
    records = artifacts.read_jsonl(run / runs.GENERATIONS).records
    artifacts.write_jsonl_atomic(run / runs.GENERATIONS, records[1:])
    assert evidence.run_evidence(run, data=data).warnings[0].startswith("1 test sample(s) have no reply")


def test_a_torn_score_line_is_named_and_a_malformed_one_is_an_error(tmp_path):
    data_dir = write_synthetic_data(tmp_path / "data", 30)
    run = write_synthetic_run(tmp_path / "torn", load_official_data(data_dir, verify=False), backend="openai")
    scores = run / layout.SCORES
    lines = scores.read_bytes().splitlines(keepends=True)
    scores.write_bytes(b"".join(lines[:-1]) + lines[-1][:25])  # cut mid-record, as a kill leaves it
    done = cli("summarize", str(run), "--n-boot", "20", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    said = (f"ignored a torn last line {len(lines)} of {scores} (an interrupted write); kept {len(lines) - 1} "
            "row(s)")
    assert done.stderr.count(said) == 1, done.stderr
    assert "Scoring is incomplete: 1 row(s) have no score yet" in done.stderr

    # The same damage in the middle of the file is no torn tail: one line, file:line, exit 2.
    scores.write_bytes(b"".join(lines[:3]) + lines[3][:25] + b"\n" + b"".join(lines[4:]))
    done = cli("summarize", str(run), "--n-boot", "20", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [done.stderr.strip()]
    assert done.stderr.startswith(f"error: {scores}:4: not a JSON record")


def test_every_reader_names_a_torn_line_the_same_way(tmp_path):
    """The one reader (``artifacts.read_jsonl``) words it, whatever the file."""
    for name in (runs.GENERATIONS, layout.SCORES, layout.JUDGE_SCORES, "coser_turns.jsonl", "labels.jsonl"):
        path = tmp_path / name
        path.write_text('{"id": 1}\n{"id": 2}\n{"id": 3, "mo', encoding="utf-8")
        read = artifacts.read_jsonl(path)
        assert [r["id"] for r in read.records] == [1, 2]
        assert read.warnings == [f"ignored a torn last line 3 of {path} (an interrupted write); kept 2 row(s)"]
        assert read.warnings[0] in artifacts.torn_notices()


def test_the_board_names_a_run_without_run_json_and_reads_the_rows_checkpoint_label(offline_tiny_run, official_data,
                                                                                    tmp_path):
    root = tmp_path / "runs"
    labelled = root / "labelled"
    shutil.copytree(offline_tiny_run, labelled)
    # run.json no longer names the test checkpoint: the score rows still do.
    manifest = json.loads((labelled / runs.MANIFEST).read_text(encoding="utf-8"))
    manifest["scoring"]["checkpoint"]["label"] = None
    (labelled / runs.MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")
    orphan = root / "orphan"
    shutil.copytree(offline_tiny_run, orphan)
    (orphan / runs.MANIFEST).unlink()
    content, warnings = build([root], tmp_path / "site", context={"charactereval": official_data})
    assert [w for w in warnings if str(orphan) in w] == [
        f"{orphan}: no run.json (its record files are there, not the record of how the run was made: model, backend "
        "and settings unknown); left out of every board"]
    rows = [row for board in content["boards"] for row in board["rows"]]
    (row,) = [row for row in rows if "labelled" in json.dumps(row)]
    assert any(reason.startswith("official-rm: scored by a test checkpoint (TINY RANDOM CHECKPOINT")
               for reason in row["reasons"]), row["reasons"]


@pytest.mark.slow
def test_without_run_json_the_report_says_so_first_and_shows_what_the_files_show(offline_tiny_run, official_dir,
                                                                                 tmp_path):
    run = tmp_path / "no-manifest"
    shutil.copytree(offline_tiny_run, run)
    (run / runs.MANIFEST).unlink()
    done = cli("report", str(run), "--n-boot", "20", "--data-dir", str(official_dir), cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    html = (run / "report.html").read_text(encoding="utf-8")
    title = html.index("CharacterEval report: no-manifest")
    assert title < html.index(f"No run.json in {run}") < html.index("<div class=\"ce-warnings\">")
    for said in ("The replies come from the offline backend", "The scores come from a tiny, randomly initialised",
                 f"{4564 - LIMIT} test sample(s) have no reply"):
        assert said in html, said
    assert "No warnings" not in html
