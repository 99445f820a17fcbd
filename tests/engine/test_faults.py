"""Every bad input and every fault a new user meets: one ``error:`` line, exit 2 (bad input) or 1
(failure), no traceback, no hang, nothing half-written; SIGTERM handled as Ctrl-C (130, what was
done saved); lock files gone after a clean finish."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from charactereval_lib.charactereval import layout
from charactereval_lib.charactereval.data import OfficialData
from charactereval_lib.cli import main
from charactereval_lib.engine.storage import artifacts, runs
from charactereval_lib.testing.synthetic import write_synthetic_run
from tests.generation_support import interruptible

ROOT = Path(__file__).resolve().parents[2]
# A command that takes longer than this on bad input counts as a hang.
DEADLINE_S = 30.0


def snapshot(root: Path) -> dict[str, str]:
    """Every file under ``root`` with the digest of its bytes (nothing written = no change)."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def run_cli(argv: list[str], capsys) -> tuple[int, str, str, float]:
    started = time.monotonic()
    try:
        status = main(argv)
    except SystemExit as exit_:
        status = exit_.code
    out, err = capsys.readouterr()
    return status, out, err, time.monotonic() - started


def assert_one_error_line(argv, status, out, err, seconds, code, message):
    lines = [line for line in err.splitlines() if line.strip()]
    assert status == code, (argv, status, err)
    assert "Traceback" not in out + err, (argv, err)
    assert [line for line in lines if line.startswith("error: ")] == lines[-1:] and len(lines) == 1, (argv, err)
    assert message in err, (argv, err)
    assert seconds < DEADLINE_S, (argv, seconds)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory, official_data):
    """A scored CharacterEval run (30 samples of the official data, synthetic replies and
    scores), a CoSER-looking run and a regular file to put output paths under."""
    root = tmp_path_factory.mktemp("faults")
    subset = OfficialData(official_data.data_dir, official_data.samples[:30], official_data.profiles,
                          official_data.id2metric)
    write_synthetic_run(root / "run", subset)
    (root / "coser-run").mkdir()
    artifacts.write_json_atomic(root / "coser-run" / runs.MANIFEST, {"benchmark": "coser", "protocol_version": "coser-paper"})
    (root / "coser-run" / "coser_judgements.jsonl").write_text("")
    (root / "a-file").write_text("not a directory\n")
    return root


class NotRay:
    """A local server that accepts connections and answers HTTP/2 with a 404, as a proxy in front
    of a wrong address may: a TCP check alone would take it for a cluster."""

    def __init__(self) -> None:
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen()
        self.port = self.listener.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            with conn:
                conn.recv(65536)
                settings = bytes([0, 0, 0, 4, 0, 0, 0, 0, 0])
                # HEADERS on stream 1, END_STREAM | END_HEADERS, ":status: 404" (static index 13).
                headers = bytes([0, 0, 1, 1, 0x5, 0, 0, 0, 1, 0x8D])
                conn.sendall(settings + headers)

    def close(self) -> None:
        self.listener.close()


def sweep_cases(ws: Path, data: str, not_ray: int) -> list[tuple[list[str], int, str]]:
    run, coser_run, a_file = str(ws / "run"), str(ws / "coser-run"), ws / "a-file"
    flags = ["--data-dir", data]
    empty_ids, labels, config = ws / "empty-ids.txt", ws / "labels.jsonl", ws / "batch.yaml"
    damaged = ws / "damaged"
    return [
        # Output locations that cannot be written.
        (["summarize", run, "--out", f"{a_file}/sub", "--n-boot", "10"], 2, "is not a directory"),
        (["report", run, "--out", f"{a_file}/sub", "--n-boot", "10"], 2, "is not a directory"),
        (["transform", f"{a_file}/run", *flags], 2, "is not a directory"),
        (["generate", f"{a_file}/run", "--backend", "offline", "--model", "m", "--limit", "1", *flags], 2,
         "is not a directory"),
        (["battle", run, str(ws / "other"), "--out", f"{a_file}/b", "--judge-model", "j"], 2, "is not a directory"),
        # Damaged artifacts and files that are not UTF-8: the file, the line, the field.
        (["summarize", str(damaged / "string-score"), "--n-boot", "10"], 2,
         "scores.jsonl:2: field 'score' must be a number or null, got 'high'"),
        (["summarize", str(damaged / "not-an-object"), "--n-boot", "10"], 2, "scores.jsonl:1: not a JSON object"),
        (["metaeval", str(labels), "--out", str(ws / "meta"), "--scorer", "judge", "--judge-model", "j", *flags], 2,
         "labels.jsonl:1: not UTF-8 text (byte 0xff at offset 0 of the line)"),
        (["batch", str(config)], 2, "batch.yaml: not UTF-8 text (byte 0xff at offset 6)"),
        # Values out of range, refused where they are parsed.
        (["score", run, "--rm", run, "--device", "banana"], 2, "--device 'banana': expected cpu, cuda or cuda:N"),
        (["generate", run, "--backend", "offline", "--model", "m", "--temperature", "-1"], 2,
         "temperature must be from 0 to 2, got -1.0"),
        (["generate", run, "--backend", "offline", "--model", "m", "--top-p", "0"], 2, "top_p must be above 0"),
        (["generate", run, "--backend", "offline", "--model", "m", "--dry-run", "--price-in", "-1"], 2,
         "price_in must not be negative, got -1.0"),
        (["score", run, "--scorer", "judge", "--judge-model", "j", "--temperature", "5"], 2,
         "temperature must be from 0 to 2, got 5.0"),
        (["coser", "run", str(ws / "c"), "--actor-model", "a", "--dry-run", "--price", "actor=-1:-2"], 2,
         "two prices (at least 0)"),
        (["battle", run, str(ws / "other"), "--out", str(ws / "b"), "--judge-model", "j", "--n-boot", "0"], 2,
         "n_boot must be a positive number, got 0"),
        (["battle", run, run, "--out", str(ws / "b"), "--judge-model", "j"], 2, "a battle needs two different runs"),
        (["generate", str(ws / "g"), "--backend", "offline", "--model", "m", "--ids", str(empty_ids), *flags], 2,
         "empty-ids.txt: no sample ids"),
        (["rm", "make-tiny", str(ws / "tiny"), "--layers", "0"], 2, "--layers must be at least 1, got 0"),
        (["rm", "make-tiny", str(ws / "tiny"), "--hidden", "30", "--heads", "8"], 2, "must be a multiple of --heads"),
        # Flags of the reward model given to the judge are refused, not ignored.
        *[(["score", run, "--scorer", "judge", "--judge-model", "j", *extra], 2, "belong to the reward model")
          for extra in (["--engine", "ray"], ["--device", "cpu"], ["--mode", "fast"])],
        # Both spellings of the data directory everywhere; a missing one is one line.
        (["doctor", "--dir", str(ws / "nodata")], 1, "nodata/test_data.jsonl: missing"),
        (["data", "verify", "--data-dir", str(ws / "nodata")], 1, "nodata: no such data directory"),
        (["coser", "data", "verify", "--dir", str(ws / "nodata")], 1, "nodata: no such CoSER data directory"),
        (["generate", str(ws / "g"), "--backend", "offline", "--model", "m", "--dir", str(ws / "nodata")], 2,
         "nodata/test_data.jsonl: missing"),
        # A run of the other benchmark: which commands read it.
        (["summarize", coser_run], 2, "a CoSER run, not a CharacterEval one; `charactereval coser summarize`"),
        (["report", coser_run], 2, "a CoSER run, not a CharacterEval one"),
        (["battle", coser_run, run, "--out", str(ws / "b"), "--judge-model", "j"], 2, "a CoSER run"),
        (["coser", "summarize", run], 2, "a CharacterEval run, not a CoSER one; `charactereval summarize`"),
        # Services that do not answer, and a scene shorter than the lines to give.
        (["coser", "run", str(ws / "c"), "--actor-model", "a", "--base-url", "http://127.0.0.1:9/v1", "--no-api-key"],
         1, "http://127.0.0.1:9/v1: connection refused"),
        (["generate", str(ws / "g"), "--backend", "openai", "--model", "m", "--base-url", "http://127.0.0.1:9/v1",
          "--no-api-key", "--limit", "1", *flags], 1, "generate: http://127.0.0.1:9/v1: connection refused"),
        (["score", run, "--scorer", "judge", "--judge-model", "j", "--base-url", "http://127.0.0.1:9/v1", *flags], 1,
         "judge: http://127.0.0.1:9/v1: connection refused"),
        (["coser", "run", str(ws / "c"), "--actor-model", "a", "--backend", "offline", "--continue-from", "999"], 2,
         "continue_from 999 (--continue-from): scene"),
        # Ray addresses: checked before Ray gets them, within seconds.
        (["score", run, "--rm", run, "--engine", "ray", "--address", "garbage!!"], 2,
         "--address garbage!!: expected auto, HOST:PORT or ray://HOST:PORT"),
        (["score", run, "--rm", run, "--engine", "ray", "--address", "notahost.invalid:6379"], 1,
         "the host name 'notahost.invalid' does not resolve"),
        (["score", run, "--rm", run, "--engine", "ray", "--address", "127.0.0.1:9"], 1, "connection refused"),
        (["score", run, "--rm", run, "--engine", "ray", "--address", f"127.0.0.1:{not_ray}"], 1,
         "it is not a Ray cluster"),
        (["score", run, "--rm", run, "--engine", "ray", "--address", "auto"], 1, "no Ray cluster was started"),
        (["score", run, "--rm", run, "--engine", "ray", "--lost-node-wait", "0"], 2,
         "lost_node_wait must be a positive number, got 0"),
        (["score", run, "--rm", run, "--lost-node-wait", "60"], 2, "need engine ray"),
    ]


def test_a_sweep_of_bad_inputs_gives_one_line_each(workspace, official_dir, tmp_path, monkeypatch, capsys):
    pytest.importorskip("ray")
    ws = tmp_path / "ws"
    shutil.copytree(workspace, ws)
    (ws / "empty-ids.txt").write_text("# nothing here\n\n")
    (ws / "labels.jsonl").write_bytes(b"\xff\xfe{}\n")
    (ws / "batch.yaml").write_bytes(b"models\xff: []\n")
    for name, line in (("string-score", None), ("not-an-object", b"[1, 2]\n")):
        run = ws / "damaged" / name
        shutil.copytree(ws / "run", run)
        lines = (run / layout.SCORES).read_bytes().splitlines(keepends=True)
        if line is None:
            record = json.loads(lines[1])
            lines[1] = (json.dumps({**record, "score": "high"}) + "\n").encode()
        else:
            lines[0] = line
        (run / layout.SCORES).write_bytes(b"".join(lines))
    # "auto" finds no cluster: none started here, and no RAY_ADDRESS.
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "no-ray"))
    not_ray = NotRay()
    try:
        for argv, code, message in sweep_cases(ws, str(official_dir), not_ray.port):
            before = snapshot(ws)
            status, out, err, seconds = run_cli(argv, capsys)
            assert_one_error_line(argv, status, out, err, seconds, code, message)
            assert snapshot(ws) == before, argv  # nothing written, nothing half-written
    finally:
        not_ray.close()


def write_judge_records(run: Path) -> list[dict]:
    """Judge ``good`` graded every row; every call of judge ``failed`` failed. Returns the rows."""
    rows = artifacts.read_jsonl(run / layout.ROWS).records
    records = [{"id": r["id"], "metric_en": r["metric_en"], "scorer": "judge", "judge_model": "good",
                "parser": "evals", "status": "ok", "score": 1 + k % 5, "invalid": False} for k, r in enumerate(rows)]
    records += [{"id": r["id"], "metric_en": r["metric_en"], "scorer": "judge", "judge_model": "failed",
                 "parser": "evals", "status": "error", "score": None} for r in rows]
    artifacts.write_jsonl_atomic(run / layout.JUDGE_SCORES, records)
    return rows


def test_a_panel_whose_judge_failed_every_call_says_alpha_is_undefined(workspace, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(workspace / "run", run)
    rows = write_judge_records(run)
    status, out, err, _ = run_cli(["panel", str(run), "--judge-model", "good", "--judge-model", "failed",
                                   "--n-boot", "20"], capsys)
    assert status == 0 and "Traceback" not in err, err
    assert "warning: Krippendorff's alpha is undefined: no row was graded by two judges" in err
    assert "Krippendorff's alpha (ordinal) undefined [-, -]" in out
    summary = json.loads((run / "panel" / "panel_summary.json").read_text())
    assert summary["krippendorff_alpha"]["value"] is None
    # Its failed calls are counted: every row not judged, none graded.
    assert summary["per_judge"]["failed"]["not_judged"] == len(rows) and summary["per_judge"]["failed"]["graded"] == 0


def test_lock_files_are_gone_after_a_clean_finish_and_a_stale_one_is_taken_over(official_dir, tmp_path, capsys):
    from charactereval_lib.charactereval.reward import scorer
    from charactereval_lib.engine.generation.engine import LOCK_FILE

    run = tmp_path / "run"
    run.mkdir()
    # Left by a killed `generate`: a file nobody holds a lock on.
    (run / LOCK_FILE).write_text("")
    assert main(["generate", str(run), "--backend", "offline", "--model", "m", "--limit", "2",
                 "--data-dir", str(official_dir)]) == 0
    assert main(["transform", str(run), "--data-dir", str(official_dir)]) == 0
    rm = tmp_path / "rm"
    assert main(["rm", "make-tiny", str(rm), "--layers", "1", "--hidden", "16", "--heads", "2"]) == 0
    assert main(["score", str(run), "--rm", str(rm), "--data-dir", str(official_dir), "--quiet"]) == 0
    capsys.readouterr()
    assert len(artifacts.read_jsonl(run / layout.SCORES).records) > 0
    assert sorted(p.name for p in run.iterdir() if "lock" in p.name) == []
    # While one writer holds the lock, a second one stops at once; after it, no file is left.
    with scorer.scoring_job(run / layout.SCORES).locked():
        with pytest.raises(runs.RunError, match="another scorer is writing it"):
            with scorer.scoring_job(run / layout.SCORES).locked():
                pass
    assert not (run / "scores.jsonl.lock").exists()


def test_a_lock_removed_between_open_and_lock_is_not_shared(tmp_path, monkeypatch):
    """The holder removes the file as it leaves: a second process that opened the old file just
    before must not lock it while a third locks the new one."""
    path = tmp_path / "x.lock"
    real_open = open
    opened = []

    def open_then_holder_leaves(file, *args, **kwargs):
        handle = real_open(file, *args, **kwargs)
        if Path(file) == path and not opened:
            opened.append(file)
            os.unlink(path)  # the holder's exit, between this process's open and its lock
        return handle

    monkeypatch.setattr("builtins.open", open_then_holder_leaves)
    with runs.exclusive_lock(path, "busy"):
        monkeypatch.undo()
        # The lock held is on the file at the path now, not on the removed one: a third writer
        # opening the path finds it taken.
        with pytest.raises(runs.RunError, match="busy"):
            with runs.exclusive_lock(path, "busy"):
                pass
    assert opened and not path.exists()


def test_summarize_and_report_of_a_read_only_run_write_elsewhere(workspace, tmp_path, capsys):
    """An analyst's copy-free report on a colleague's shared run: --out for both."""
    out = tmp_path / "mine"
    before = snapshot(workspace / "run")
    status, stdout, err, _ = run_cli(["summarize", str(workspace / "run"), "--out", str(out), "--n-boot", "10"], capsys)
    assert status == 0, err
    assert f"wrote {out / 'summary.json'} and {out / 'metrics.csv'}" in stdout
    assert json.loads((out / "summary.json").read_text())["counts"]["scored_rows"] > 0
    assert snapshot(workspace / "run") == before


READ_ONLY_CHILD = """
import contextlib, io, json, os, subprocess, sys, time
root, cases = sys.argv[1], json.loads(sys.argv[2])
# A read-only view of the workspace, in this process's own mount namespace.
subprocess.run(["mount", "--bind", root, root], check=True)
subprocess.run(["mount", "-o", "remount,bind,ro", root, root], check=True)
from charactereval_lib.cli import main
results = []
for argv in cases:
    err = io.StringIO()
    started = time.monotonic()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            status = main(argv)
        except SystemExit as exit_:
            status = exit_.code
        except BaseException as exc:
            status, _ = repr(exc), err.write("Traceback " + repr(exc))
    results.append([argv, status, err.getvalue(), time.monotonic() - started])
print(json.dumps(results))
"""


def _read_only_runner() -> list[str] | None:
    """How to run a child with a private read-only mount: a user namespace (unshare), where the
    kernel allows one."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return None
    probe = subprocess.run([unshare, "-Urm", "true"], capture_output=True)
    return [unshare, "-Urm"] if probe.returncode == 0 else None


@pytest.mark.slow
def test_read_only_output_locations_are_one_line_each(workspace, official_dir, tmp_path):
    runner = _read_only_runner()
    if runner is None:
        pytest.skip("needs unshare -Urm (user namespaces) to make a read-only file system")
    ro = tmp_path / "ro"
    shutil.copytree(workspace, ro)
    shutil.copytree(ro / "run", ro / "judged")
    write_judge_records(ro / "judged")
    run, data = str(ro / "run"), ["--data-dir", str(official_dir)]
    cases = [
        ["summarize", run, "--n-boot", "10"],
        ["report", run, "--n-boot", "10"],
        ["transform", run, *data],
        ["generate", run, "--backend", "offline", "--model", "m", "--limit", "1", *data],
        ["score", run, "--rm", str(ro / "no-rm"), *data],
        ["score", run, "--scorer", "judge", "--judge-model", "j", "--base-url", "http://127.0.0.1:9/v1", *data],
        ["battle", run, run + "2", "--out", str(ro / "battle"), "--judge-model", "j"],
        ["coser", "run", str(ro / "coser"), "--actor-model", "a", "--backend", "offline"],
        ["coser", "report", str(ro / "coser-run"), "--out", str(ro / "coser-report")],
        ["coser", "summarize", str(ro / "coser-run")],
        ["panel", str(ro / "judged"), "--judge-model", "good", "--judge-model", "failed"],
        ["panel", str(ro / "judged"), "--judge-model", "good", "--judge-model", "failed", "--out", str(ro / "panel")],
        ["rm", "make-tiny", str(ro / "tiny")],
        ["data", "subset", "10", "--out", str(ro / "ids.txt"), *data],
        ["export-official", run, *data],
    ]
    # An analyst's report on a run they cannot write to: into a directory of their own.
    mine = tmp_path / "mine"
    readable = [["summarize", run, "--n-boot", "10", "--out", str(mine)],
                ["report", run, "--n-boot", "10", "--out", str(mine), *data]]
    before = snapshot(ro)
    child = subprocess.run([*runner, sys.executable, "-c", READ_ONLY_CHILD, str(ro), json.dumps(cases + readable)],
                           capture_output=True, text=True, cwd=tmp_path, timeout=600,
                           env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert child.returncode == 0, child.stderr[-3000:]
    results = json.loads(child.stdout.splitlines()[-1])
    for argv, status, err, _ in results[len(cases):]:
        assert status == 0 and "Traceback" not in err, (argv, err)
    assert {"summary.json", "metrics.csv", "report.ipynb", "report.html"} <= {p.name for p in mine.iterdir()}
    assert (mine / "figures").is_dir()
    for argv, status, err, seconds in results[:len(cases)]:
        lines = [line for line in err.splitlines() if line.strip()]
        assert status in (1, 2) and "Traceback" not in err, (argv, status, err)
        assert len(lines) == 1 and lines[0].startswith("error: "), (argv, err)
        assert "Read-only file system" in err or "read-only file system" in err, (argv, err)
        assert seconds < DEADLINE_S, (argv, seconds)
    assert snapshot(ro) == before


def _start(argv: list[str], cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "charactereval_lib.cli", *argv], cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=interruptible,
                            env={**os.environ, "TQDM_DISABLE": "1", "PYTHONPATH": str(ROOT)})


def _wait_for(condition, process: subprocess.Popen, what: str, timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if process.poll() is not None:
            pytest.fail(f"ended before {what}: {process.communicate()}")
        assert time.monotonic() < deadline, f"no {what} within {timeout:g} s"
        time.sleep(0.05)


@pytest.fixture(scope="module")
def long_run(tmp_path_factory, official_dir, tiny_rm):
    """A run with many rows to score (hundreds of samples, offline replies) and a tiny model."""
    root = tmp_path_factory.mktemp("sigterm")
    run, rm = root / "run", tiny_rm
    assert main(["generate", str(run), "--backend", "offline", "--model", "m", "--limit", "600",
                 "--data-dir", str(official_dir), "--no-progress"]) == 0
    assert main(["transform", str(run), "--data-dir", str(official_dir)]) == 0
    return run, rm


@pytest.mark.slow
def test_sigterm_stops_score_like_ctrl_c(long_run, official_dir, tmp_path):
    source, rm = long_run
    run = tmp_path / "run"
    shutil.copytree(source, run)
    process = _start(["score", str(run), "--rm", str(rm), "--data-dir", str(official_dir), "--quiet"], tmp_path)
    scores = run / layout.SCORES
    _wait_for(lambda: scores.exists() and scores.read_bytes().count(b"\n") >= 3, process, "the first scores")
    manifest = json.loads((run / runs.MANIFEST).read_text())
    process.send_signal(signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, (stdout, stderr)
    assert stderr.strip().splitlines()[-1] == "interrupted" and "Traceback" not in stderr
    read = artifacts.read_jsonl(scores)
    keys = [(r["id"], r["metric_en"]) for r in read.records]
    assert len(keys) >= 3 and len(keys) == len(set(keys)) and not read.warnings
    assert manifest["scoring"]["started_at"] and not (run / "scores.jsonl.lock").exists()


@pytest.mark.slow
def test_sigterm_stops_report_and_leaves_no_partial_files(workspace, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(workspace / "run", run)
    process = _start(["report", str(run), "--n-boot", "10"], tmp_path)
    # While the kernel runs the notebook: its first figure is saved (papermill writes the
    # partial notebook only once every cell has run).
    _wait_for(lambda: (run / "figures").exists(), process, "the kernel's first figure")
    process.send_signal(signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, (stdout, stderr)
    assert "interrupted" in stderr and "Traceback" not in stderr
    # Neither the report nor a partial notebook or page (the figures saved so far may stay).
    assert sorted(p.name for p in run.iterdir() if "report" in p.name) == []


@pytest.mark.slow
def test_sigterm_during_a_batch_scoring_stage_writes_the_batch_summary(long_run, official_dir, tmp_path):
    """The generation stage's event loop takes SIGTERM over while it runs; after it the batch's
    handler must be back, or the scoring stage dies by the signal (exit 143, no summary)."""
    _, rm = long_run
    out = tmp_path / "out"
    config = tmp_path / "batch.yaml"
    config.write_text(f"output_dir: {out}\ndata_dir: {official_dir}\n"
                      f"models:\n  - {{name: only, backend: offline, model: m, rm: {rm}, limit: 600, device: cpu}}\n")
    process = _start(["batch", str(config)], tmp_path)
    scores = out / "only" / layout.SCORES
    _wait_for(lambda: scores.exists() and scores.read_bytes().count(b"\n") >= 3, process, "the first scores")
    process.send_signal(signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, (stdout, stderr)
    summary = json.loads((out / "batch-summary.json").read_text())
    assert summary["interrupted"] and [m["status"] for m in summary["models"]] == ["interrupted"]
