"""Validation by pydantic models: one-line errors naming file, key and what was expected; the
typed, versioned run.json (older layouts upgraded in memory, never rewritten on read) and the
typed summaries of both benchmarks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import pytest

from charactereval_lib.charactereval import layout
from charactereval_lib.charactereval.data import load_official_data
from charactereval_lib.charactereval.documents import CharacterEvalManifest, Summary, load_summary
from charactereval_lib.charactereval.summary import summarize_run
from charactereval_lib.cli import main
from charactereval_lib.coser import documents as coser_documents
from charactereval_lib.coser.benchmark import SUMMARY as COSER_SUMMARY
from charactereval_lib.coser.statistics import summarize as coser_summarize
from charactereval_lib.engine.grading.errors import SpecError
from charactereval_lib.engine.grading.spec import spec_from_mapping
from charactereval_lib.engine.storage import runs
from charactereval_lib.engine.storage.manifest import MANIFEST_SCHEMA, Manifest, upgrade
from charactereval_lib.engine.validation import Document, expect, is_int, validate
from charactereval_lib.testing.leaderboard_runs import coser_run
from charactereval_lib.testing.synthetic import write_synthetic_data, write_synthetic_run


class Entry(Document):
    unknown_key_hint = " (see the docs)"

    name: str
    max_tokens: Annotated[int, expect("a positive integer", lambda v: is_int(v) and v > 0)] = 1


class Config(Document):
    models: list[Entry]
    title: str = ""


def error_of(data: Any, **how: Any) -> str:
    with pytest.raises(ValueError) as caught:
        validate(Config, data, "batch.yaml", ValueError, **how)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_an_error_is_one_line_naming_the_file_the_dotted_key_and_what_was_expected():
    models = [{"name": "a"}, {"name": "b"}, {"name": "c", "max_tokens": "many"}]
    assert error_of({"models": models}) == \
        "batch.yaml: models[2].max_tokens: expected a positive integer, got 'many'"
    assert error_of({"models": [{"name": "a", "max_tokens": True}]}) == \
        "batch.yaml: models[0].max_tokens: expected a positive integer, got True"
    assert error_of({"models": [{"name": 3}], "title": 4}) == \
        "batch.yaml: models[0].name: expected a string, got 3 (and 1 more problem(s))"
    assert error_of({"models": "x"}) == "batch.yaml: models: expected a list, got 'x'"
    assert error_of([1], root="(document)") == "batch.yaml: (document): expected a mapping, got [1]"


def test_unknown_keys_are_refused_with_the_accepted_ones_and_missing_keys_say_what_they_expect():
    assert error_of({"models": [], "titel": ""}) == \
        "batch.yaml: unknown key(s) ['titel']; expected some of ['models', 'title']"
    assert error_of({"models": [{"name": "a", "max_token": 3}]}) == \
        "batch.yaml: models[0]: unknown key(s) ['max_token']; expected some of ['max_tokens', 'name'] (see the docs)"
    assert error_of({"models": [{}]}) == "batch.yaml: models[0].name: missing (required: a string)"
    assert error_of({"models": [{"max_tokens": 2}]}) == "batch.yaml: models[0].name: missing (required: a string)"

    class Limits(Document):
        max_tokens: Annotated[int, expect("a positive integer", lambda v: is_int(v) and v > 0)]

    with pytest.raises(ValueError, match=r"^l.yaml: max_tokens: missing \(required: a positive integer\)$"):
        validate(Limits, {}, "l.yaml", ValueError)


def test_a_caller_names_an_entry_by_its_name():
    data = {"models": [{"name": "a"}, {"name": "b", "max_tokens": 0}]}

    def label(loc):
        if loc[:1] == ("models",) and len(loc) > 1:
            return f"model {data['models'][loc[1]]['name']!r}", loc[2:]
        return "", loc

    assert error_of(data, label=label) == "batch.yaml: model 'b': max_tokens: expected a positive integer, got 0"


def test_batch_entries_are_named_by_model_name_or_position(tmp_path):
    from charactereval_lib.apps import batch

    path = tmp_path / "batch.yaml"
    path.write_text("models:\n  - {name: a, backend: offline, model: m, rm: r}\n  - {backend: offline, model: m}\n",
                    encoding="utf-8")
    with pytest.raises(batch.BatchError, match=r"batch.yaml: models\[1\]\.name: missing \(required: letters"):
        batch.load_config(path)
    path.write_text("- {name: a, backend: offline, model: m, rm: r, ray: {}}\n", encoding="utf-8")
    with pytest.raises(batch.BatchError, match=r"model 'a': unknown key\(s\) \['ray'\]; .*go under generate: or"):
        batch.load_config(path)


def test_judge_specs_keep_evals_semantics_for_unknown_fields():
    spec = spec_from_mapping({"prompt": "Rate {completion}", "choice_strings": ["Y", "N"], "eval_type": "classify",
                              "input_outputs": {"input": "completion"}, "format_type": "out_message"}, "s.yaml")
    assert spec.ignored_fields == ("format_type",) and spec.choice_strings == ("Y", "N") and spec.name == "s"
    with pytest.raises(SpecError, match=r"^s.yaml: answer_prompt: expected true or false, got 'yes'$"):
        spec_from_mapping({"prompt": "p", "choice_strings": "YN", "eval_type": "classify", "answer_prompt": "yes",
                           "input_outputs": {"input": "completion"}}, "s.yaml")


# --- run.json ---------------------------------------------------------------------------------------

# A run.json of layout 1 (before manifest_schema): the protocol stamped at the top on every write.
LAYOUT_1 = {"created_at": "2026-11-30T03:00:00+00:00", "updated_at": "2026-11-30T03:10:00+00:00",
            "protocol_version": "charactereval-1.0", "package_version": "0.1.0", "git_commit": None,
            "python": "3.11.9", "generation": {"backend": "offline", "model": "demo", "concurrency": 32},
            "transform": {"counts": {"rows": 3, "failed": 0, "no_metric": 0, "missing": 0}, "failed_ids": [],
                          "no_metric_ids": []},
            "scoring": {"mode": "faithful", "device": "cpu"}}


def test_an_older_manifest_is_upgraded_in_memory_and_never_rewritten_on_read(tmp_path):
    text = json.dumps(LAYOUT_1, indent=2)
    (tmp_path / runs.MANIFEST).write_text(text, encoding="utf-8")
    loaded = runs.load_manifest(tmp_path)
    assert loaded["manifest_schema"] == MANIFEST_SCHEMA
    assert loaded["generation"]["protocol_version"] == loaded["scoring"]["protocol_version"] == "charactereval-1.0"
    typed = runs.RunDir(tmp_path).manifest_model(CharacterEvalManifest)
    assert typed.benchmark == "charactereval" and typed.generation.model == "demo"
    assert typed.transform.counts["rows"] == 3 and typed.scoring.mode == "faithful"
    # Keys no model types are kept as written.
    assert typed.generation.concurrency == 32 and typed.model_dump()["generation"]["concurrency"] == 32
    assert (tmp_path / runs.MANIFEST).read_text(encoding="utf-8") == text
    assert upgrade(LAYOUT_1) is not LAYOUT_1 and "manifest_schema" not in LAYOUT_1
    # The next stage that writes the run writes the current layout.
    runs.update_manifest(tmp_path, transform={"warnings": []})
    assert json.loads((tmp_path / runs.MANIFEST).read_text(encoding="utf-8"))["manifest_schema"] == MANIFEST_SCHEMA


def test_a_current_manifest_is_read_as_written(tmp_path):
    written = runs.update_manifest(tmp_path, protocol_version="coser-paper", benchmark="coser",
                                   coser={"preset": "sample", "repeats": 1, "scenes": ["s-1"], "models": {"actor": "a"}})
    assert runs.load_manifest(tmp_path) == written
    typed = runs.RunDir(tmp_path).manifest_model(coser_documents.CoserManifest)
    assert typed.coser.scenes == ["s-1"] and typed.coser.models == {"actor": "a"} and typed.benchmark == "coser"
    assert isinstance(runs.RunDir(tmp_path / "none").manifest_model(), Manifest)


@pytest.mark.parametrize(("content", "where"), [
    ({"generation": {"sessions": 3}}, "generation.sessions: expected a list, got 3"),
    ({"manifest_schema": 2, "protocol_version": 1}, "protocol_version: expected a string or null, got 1"),
    ({"manifest_schema": "2"}, "manifest_schema: expected an integer, got '2'"),
    ({"manifest_schema": 9}, "manifest_schema: layout 9 is newer than this workbench reads (2)"),
    (["not", "a", "manifest"], "(document): expected a mapping, got ['not', 'a', 'manifest']"),
])
def test_a_damaged_manifest_is_one_line_naming_the_file_and_the_key(tmp_path, content, where):
    (tmp_path / runs.MANIFEST).write_text(json.dumps(content), encoding="utf-8")
    with pytest.raises(runs.RunError) as caught:
        runs.load_manifest(tmp_path)
    assert str(caught.value).startswith(f"{tmp_path / runs.MANIFEST}: {where}")


def test_a_damaged_benchmark_section_is_named(tmp_path):
    runs.update_manifest(tmp_path, transform={"failed_ids": ["7"]})
    with pytest.raises(runs.RunError, match=r"run.json: transform.failed_ids\[0\]: expected an integer, got '7'$"):
        runs.RunDir(tmp_path).manifest_model(CharacterEvalManifest)


def test_the_command_line_says_a_damaged_manifest_in_one_line(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / runs.MANIFEST).write_text('{"generation": {"model": ["m"]}}', encoding="utf-8")
    assert main(["summarize", str(run)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: {run / runs.MANIFEST}: generation.model: expected a string or null, got ['m']"]


# --- summaries ---------------------------------------------------------------------------------------


def test_a_charactereval_summary_is_read_typed_and_a_damaged_one_named(tmp_path):
    data = load_official_data(write_synthetic_data(tmp_path / "data", 40), verify=False)
    run = layout.CharacterEvalRun(write_synthetic_run(tmp_path / "run", data, failed_ids=(data.samples[0].id,)))
    written = summarize_run(run, id2metric=data.id2metric, n_boot=20)
    summary = load_summary(run.summary)
    assert isinstance(summary, Summary) and summary.run == "run" and summary.counts.generation_failures == 1
    assert [m.metric_en for m in summary.metrics] == [m["metric_en"] for m in written["metrics"]]
    assert summary.metrics[0].n == written["metrics"][0]["n"] and summary.bootstrap.n_boot == 20
    assert summary.model_dump()["metrics"][0]["abbr"] == written["metrics"][0]["abbr"]
    document = json.loads(run.summary.read_text(encoding="utf-8"))
    document["metrics"][3]["n"] = "many"
    run.summary.write_text(json.dumps(document), encoding="utf-8")
    with pytest.raises(runs.RunError) as caught:
        load_summary(run.summary)
    assert str(caught.value) == f"{run.summary}: metrics[3].n: expected an integer, got 'many'"
    with pytest.raises(runs.RunError, match=r"summary.json: no such file"):
        load_summary(tmp_path / "summary.json")


def test_a_coser_summary_is_read_typed_and_a_damaged_one_named(tmp_path):
    run = runs.RunDir(coser_run(tmp_path / "coser", actor="actor-a", scenes=4, repeats=2, failed_sessions=1))
    written = coser_summarize(run, n_boot=20)
    summary = coser_documents.load_summary(run.artifact(COSER_SUMMARY))
    assert summary.counts.sessions_expected == written["counts"]["sessions_expected"] == 8
    assert summary.overall["average"].mean == written["overall"]["average"]["mean"]
    # Repeat numbers come back as numbers from the file's string keys.
    assert sorted(summary.by_repeat) == [0, 1] and summary.judge_failures == written["judge_failures"] == 1
    assert coser_documents.computed_summary(run, n_boot=20).model_dump() == summary.model_dump()
    path = Path(run.artifact(COSER_SUMMARY))
    document = json.loads(path.read_text(encoding="utf-8"))
    del document["ended_by"]["failed"]
    path.write_text(json.dumps(document), encoding="utf-8")
    with pytest.raises(runs.RunError) as caught:
        coser_documents.load_summary(path)
    assert str(caught.value) == f"{path}: ended_by.failed: missing (required: an integer)"


def test_settings_errors_are_worded_as_every_document_error():
    """The pipeline's settings go through the same formatter as documents: where (when loaded
    from a mapping), the key, what was expected and what was got."""
    from charactereval_lib import pipeline

    def error_of_settings(make) -> str:
        with pytest.raises(pipeline.SettingsError) as caught:
            make()
        return str(caught.value)

    generate = pipeline.GenerateSettings
    assert error_of_settings(lambda: generate(backend="offline", model="m", concurrency="4")) == \
        "concurrency: expected an integer, got '4'"
    assert error_of_settings(lambda: generate(model="m")) == "backend: missing (required: a string)"
    assert error_of_settings(lambda: generate.from_mapping({"backend": "offline", "model": "m", "temperature": "hot"},
                                                           "b.yaml: model 'x': generate")) == \
        "b.yaml: model 'x': generate: temperature: expected a number or null, got 'hot'"
    assert error_of_settings(lambda: pipeline.PanelSettings.from_mapping({"judge_models": "ab"}, "p.yaml")) == \
        "p.yaml: judge_models: expected a list of strings, got 'ab'"
    unknown = error_of_settings(lambda: pipeline.SummarizeSettings.from_mapping({"nboot": 3}, "s.yaml"))
    assert unknown.startswith("s.yaml: unknown key(s) ['nboot']; expected some of [") and "'n_boot'" in unknown
    # A check of model_post_init is shown in its own words, after where it was found.
    assert error_of_settings(lambda: generate.from_mapping({"backend": "offline", "model": "m", "limit": 0}, "g")) == \
        "g: limit must be a positive number, got 0"


def test_a_required_setting_left_out_on_the_command_line_is_missing(tmp_path, capsys):
    assert main(["coser", "run", str(tmp_path / "run"), "--quiet"]) == 2
    assert capsys.readouterr().err == "error: actor_model: missing (required: a string)\n"
