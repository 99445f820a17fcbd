"""Run directories: atomic writes, torn JSON Lines, manifest stamping."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from charactereval_lib.charactereval import layout
from charactereval_lib.charactereval.protocol import PROTOCOL_VERSION
from charactereval_lib.engine.storage import artifacts, runs
from charactereval_lib.engine.storage.manifest import MANIFEST_SCHEMA


def test_bare_name_goes_under_outputs_and_paths_stay_paths():
    assert runs.resolve_run_dir("m1") == Path.cwd() / "outputs" / "m1"
    assert runs.resolve_run_dir("./m1") == Path("./m1")
    assert runs.resolve_run_dir("/tmp/x/m1") == Path("/tmp/x/m1")


def test_appender_writes_one_flushed_line_per_record(tmp_path):
    path = tmp_path / "g.jsonl"
    with artifacts.JsonlAppender(path) as out:
        out.write({"id": 1, "model_output": "甲：好"})
        # Visible to another reader before close: one line per record, flushed.
        assert path.read_text(encoding="utf-8") == '{"id":1,"model_output":"甲：好"}\n'
        out.write({"id": 2})
    assert [r["id"] for r in artifacts.read_jsonl(path).records] == [1, 2]


def test_torn_last_line_is_reported_and_cut_before_appending(tmp_path):
    path = tmp_path / "g.jsonl"
    path.write_bytes(b'{"id":1}\n{"id":2}\n{"id":3,"model_out')
    read = artifacts.read_jsonl(path)
    assert [r["id"] for r in read.records] == [1, 2]
    assert read.torn_line == 3 and "torn last line" in read.warnings[0]
    with artifacts.JsonlAppender(path) as out:
        assert "removed a torn last line" in out.repair_message
        out.write({"id": 3})
    assert path.read_bytes() == b'{"id":1}\n{"id":2}\n{"id":3}\n'


def test_torn_utf8_sequence_is_a_torn_line(tmp_path):
    path = tmp_path / "g.jsonl"
    path.write_bytes(b'{"id":1}\n' + '{"x":"甲'.encode()[:-1])
    assert artifacts.read_jsonl(path).torn_line == 2


def test_complete_but_unterminated_last_line_is_kept_and_terminated(tmp_path):
    path = tmp_path / "g.jsonl"
    path.write_bytes(b'{"id":1}\n{"id":2}')
    assert [r["id"] for r in artifacts.read_jsonl(path).records] == [1, 2]
    with artifacts.JsonlAppender(path) as out:
        out.write({"id": 3})
    assert [r["id"] for r in artifacts.read_jsonl(path).records] == [1, 2, 3]


def test_corrupt_line_in_the_middle_is_an_error_naming_it(tmp_path):
    path = tmp_path / "g.jsonl"
    path.write_bytes(b'{"id":1}\nnot json\n{"id":3}\n')
    with pytest.raises(runs.RunError, match=r"g.jsonl:2: not a JSON record"):
        artifacts.read_jsonl(path)


def test_atomic_write_leaves_no_temp_file_and_keeps_old_content_on_failure(tmp_path):
    path = tmp_path / "s.json"
    artifacts.write_json_atomic(path, {"a": 1})

    class Boom:
        pass

    with pytest.raises(TypeError):
        artifacts.write_json_atomic(path, {"a": Boom()})
    assert json.loads(path.read_text()) == {"a": 1}
    assert os.listdir(tmp_path) == ["s.json"]


def test_manifest_is_stamped_and_merged(tmp_path):
    runs.update_manifest(tmp_path, protocol_version=PROTOCOL_VERSION, generation={"model": "m", "max_tokens": 1024})
    manifest = runs.update_manifest(tmp_path, generation={"concurrency": 8}, transform={"counts": {"rows": 3}})
    assert manifest["protocol_version"] == PROTOCOL_VERSION and manifest["manifest_schema"] == MANIFEST_SCHEMA
    assert manifest["generation"] == {"model": "m", "max_tokens": 1024, "concurrency": 8}
    assert manifest["created_at"] <= manifest["updated_at"]
    assert runs.load_manifest(tmp_path) == manifest


def test_latest_by_key_keeps_the_last_record():
    latest = artifacts.latest_by_key([{"id": 1, "v": 1}, {"id": 2, "v": 2}, {"id": 1, "v": 3}], "id")
    assert latest == {(1,): {"id": 1, "v": 3}, (2,): {"id": 2, "v": 2}}


def test_atomic_writes_get_ordinary_permissions(tmp_path):
    path = tmp_path / "report.html"
    artifacts.write_text_atomic(path, "<html></html>")
    umask = os.umask(0)
    os.umask(umask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~umask


def test_relative_names_mean_the_same_under_jupyter_and_the_command_line(tmp_path, monkeypatch):
    project = tmp_path / "project"
    (project / "notebooks").mkdir(parents=True)
    (project / "data").mkdir()
    monkeypatch.delenv(runs.WORKSPACE_ENV, raising=False)
    monkeypatch.chdir(project)
    from_cli = runs.resolve_run_dir("m1").resolve(), runs.resolve_run_dir("outputs/m1").resolve()
    # Jupyter starts a notebook's kernel in the notebook's folder.
    monkeypatch.chdir(project / "notebooks")
    from_jupyter = runs.resolve_run_dir("m1").resolve(), runs.resolve_run_dir("outputs/m1").resolve()
    assert from_jupyter == from_cli == (project.resolve() / "outputs" / "m1",) * 2
    monkeypatch.setenv(runs.WORKSPACE_ENV, str(tmp_path / "elsewhere"))
    assert runs.resolve_run_dir("m1") == tmp_path / "elsewhere" / "outputs" / "m1"


def test_run_dir_refuses_another_protocol_and_names_mixed_scorers(tmp_path):
    run = layout.CharacterEvalRun.resolve(tmp_path / "run")
    run.update_manifest(protocol_version="charactereval-0.9")
    with pytest.raises(runs.MixedRunError, match=r"made under protocol charactereval-0\.9"):
        run.check_protocol(PROTOCOL_VERSION)
    run.rows.write_text('{"id": 1, "metric_en": "Fluency"}\n{"id": 2, "metric_en": "Fluency"}\n')
    with artifacts.JsonlAppender(run.scores) as out:
        out.write({"id": 1, "metric_en": "Fluency", "score": 3.0, "mode": "faithful", "checkpoint_sha256": "a" * 64})
    assert run.check_consistent() == []
    with artifacts.JsonlAppender(run.scores) as out:
        out.write({"id": 2, "metric_en": "Fluency", "score": 3.0, "mode": "faithful", "checkpoint_sha256": "b" * 64})
    with pytest.raises(runs.MixedRunError, match=r"mix 2 scorer configurations .*aaaaaaaaaaaa.*bbbbbbbbbbbb"):
        run.check_consistent()
    assert "--allow-mixed" in str(pytest.raises(runs.MixedRunError, run.check_consistent).value)
    assert len(run.check_consistent(allow_mixed=True)) == 1


def test_compare_refuses_runs_scored_differently_and_names_them(tmp_path):
    from charactereval_lib import pipeline

    def scored_run(name: str, checkpoint: str, mode: str) -> layout.CharacterEvalRun:
        run = layout.CharacterEvalRun.resolve(tmp_path / name)
        run.update_manifest(protocol_version=PROTOCOL_VERSION)
        run.rows.write_text('{"id": 1, "metric_en": "Fluency"}\n')
        with artifacts.JsonlAppender(run.scores) as out:
            out.write({"id": 1, "metric_en": "Fluency", "score": 3.0, "mode": mode, "checkpoint_sha256": checkpoint})
        return run

    a = scored_run("a", "a" * 64, "faithful")
    assert pipeline.compare_problems([a, scored_run("same", "a" * 64, "faithful")]) == []
    problems = pipeline.compare_problems([a, scored_run("b", "b" * 64, "faithful"), scored_run("c", "a" * 64, "fast")])
    assert len(problems) == 1 and "different scorer configurations" in problems[0]
    assert "b: reward-model bbbbbbbbbbbb mode=faithful" in problems[0] and "c: reward-model aaaaaaaaaaaa mode=fast" in problems[0]
    with pytest.raises(runs.MixedRunError, match="cannot compare: the runs were scored with different scorer"):
        pipeline.compare([a, tmp_path / "b"], tmp_path / "cmp")
    assert not (tmp_path / "cmp").exists()


def test_a_background_appender_writes_the_same_bytes_in_the_same_order(tmp_path):
    records = [{"id": i, "text": "回答" * (i % 7), "nested": {"n": i}} for i in range(2000)]
    for name, background in (("direct.jsonl", False), ("background.jsonl", True)):
        with artifacts.JsonlAppender(tmp_path / name, background=background) as appender:
            for record in records:
                appender.write(record)
    assert (tmp_path / "background.jsonl").read_bytes() == (tmp_path / "direct.jsonl").read_bytes()


def test_a_background_appenders_write_error_is_raised_not_lost(tmp_path, monkeypatch):
    appender = artifacts.JsonlAppender(tmp_path / "out.jsonl", background=True)

    def disk_full(text):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(appender, "_append", disk_full)
    appender.write({"id": 1})
    with pytest.raises(OSError, match="No space left"):
        appender.close()
