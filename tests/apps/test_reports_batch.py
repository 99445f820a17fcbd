"""Batch configs, pipeline steps through the CLI parser, and stratified subsets."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from charactereval_lib import pipeline
from charactereval_lib.apps import batch
from charactereval_lib.charactereval.data import DataError
from charactereval_lib.charactereval.protocol import METRICS
from charactereval_lib.charactereval.requests import read_ids_file
from charactereval_lib.charactereval.subsets import stratified_subset
from charactereval_lib.cli import main
from charactereval_lib.engine.storage import runs

ROOT = Path(__file__).resolve().parents[2]


def write_config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "batch.yaml"
    path.write_text(text, encoding="utf-8")
    return path


MINIMAL = """
output_dir: {out}
defaults: {{backend: offline, rm: models/tiny-rm}}
models:
  - {{name: a, model: m-a, subset: 20, seed: 3}}
  - {{name: b, model: m-b, limit: 5, generate: {{concurrency: 2}}, score: {{mode: fast}}}}
"""


def test_config_defaults_and_flags(tmp_path):
    config = batch.load_config(write_config(tmp_path, MINIMAL.format(out=tmp_path / "out")))
    a, b = config.models
    assert (a.name, a.generate.backend, a.generate.model, a.score.rm, a.subset) == ("a", "offline", "m-a", "models/tiny-rm", 20)
    assert a.generate.seed == 3 and (b.generate.limit, b.generate.concurrency) == (5, 2)
    assert b.score.mode == "fast" and a.score.mode == "faithful"
    assert config.comparison_dir == tmp_path / "out" / "comparison" and a.report.n_boot == 1000


def test_a_bare_list_of_models_is_a_config(tmp_path):
    config = batch.load_config(write_config(tmp_path, "- {name: x, backend: offline, model: m, rm: r}\n"))
    assert [m.name for m in config.models] == ["x"] and config.output_dir == Path.cwd() / "outputs"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("models: []\n", r"models: expected a non-empty list of model entries, got \[\]"),
        ("modles: []\n", r"unknown key\(s\) \['modles'\]"),
        ("- {name: x, backend: offline, model: m}\n", r"model 'x': rm: missing \(required: a non-empty string\)"),
        ("- {name: x, backend: offline, model: m, rm: r, temprature: 1}\n", r"model 'x': unknown key\(s\) \['temprature'\]"),
        ("- {name: x, backend: offline, model: m, rm: r}\n- {name: x, backend: offline, model: n, rm: r}\n",
         r"duplicate model name\(s\) \['x'\]"),
        ("- {name: ../x, backend: offline, model: m, rm: r}\n", r"model '\.\./x': name: expected letters, digits"),
        ("- {name: x, backend: offline, model: m, rm: r, subset: 10, limit: 3}\n", r"choose one of subset, ids, limit"),
        ("- {name: x, backend: offline, model: m, rm: r, subset: -1}\n", "model 'x': subset: expected a positive integer, got -1"),
        ("- {name: x, backend: offline, model: m, rm: r, generate: [1]}\n", r"model 'x': generate: expected a mapping of settings, got \[1\]"),
        ("models:\n  - {name: x\n", r"malformed YAML at line \d+ column \d+"),
        ("n_boot: 0\nmodels: [{name: x, backend: offline, model: m, rm: r}]\n", "n_boot must be a positive number"),
    ],
)
def test_config_errors_name_the_file_and_entry(tmp_path, text, message):
    path = write_config(tmp_path, text)
    with pytest.raises(batch.BatchError, match=message) as caught:
        batch.load_config(path)
    assert str(path) in str(caught.value)


def test_shipped_configs_load():
    demo = batch.load_config(ROOT / "configs" / "demo.yaml")
    assert [m.generate.backend for m in demo.models] == ["offline", "offline"]
    assert all(m.subset == 200 and m.score.rm == "models/tiny-rm" for m in demo.models)
    assert len({m.generate.model for m in demo.models}) == 2
    example = batch.load_config(ROOT / "configs" / "example.yaml")
    assert {m.generate.backend for m in example.models} == {"openai", "hf"}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("- {name: x, backend: offline, model: m, rm: r, generate: {concurency: 4}}\n",
         r"model 'x': generate: unknown key\(s\) \['concurency'\]"),
        # An abbreviation is not a setting: `batch` never becomes `batch_tokens`.
        ("- {name: x, backend: offline, model: m, rm: r, score: {batch: 100}}\n",
         r"model 'x': score: unknown key\(s\) \['batch'\]"),
        ("- {name: x, backend: offline, model: m, rm: r, score: {mode: quick}}\n", r"model 'x': score: mode 'quick'"),
        ("- {name: x, backend: offline, model: m, rm: r, limit: 0}\n", r"model 'x': generate: limit must be a positive"),
        ("- {name: x, backend: offline, model: m, rm: r, generate: {concurrency: '4'}}\n",
         "model 'x': generate: concurrency: expected an integer, got '4'"),
    ],
)
def test_setting_typos_are_caught_before_anything_runs(tmp_path, text, message):
    with pytest.raises(batch.BatchError, match=message):
        batch.load_config(write_config(tmp_path, text))
    assert not (tmp_path / "outputs").exists()


def test_pipeline_stages_fail_in_one_line(tmp_path):
    (tmp_path / "empty-run").mkdir()
    with pytest.raises(runs.RunError, match=r"empty-run/rows\.jsonl: no rows"):
        pipeline.summarize(tmp_path / "empty-run")
    with pytest.raises(pipeline.SettingsError, match=r"backend 'nope': expected one of openai, hf, offline"):
        pipeline.GenerateSettings(backend="nope", model="m")


def test_settings_load_from_mappings_and_name_unknown_keys():
    settings = pipeline.GenerateSettings.from_mapping({"backend": "openai", "model": "m", "temperature": 0})
    assert settings.decoding().sent() == {"max_tokens": 1024, "temperature": 0}
    with pytest.raises(pipeline.SettingsError, match=r"here: unknown key\(s\) \['temprature'\]"):
        pipeline.GenerateSettings.from_mapping({"backend": "openai", "model": "m", "temprature": 0}, "here")


def test_the_command_line_refuses_abbreviated_flags(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["score", "run", "--batch", "100"])
    assert exit_.value.code == 2 and "unrecognized arguments: --batch 100" in capsys.readouterr().err


def test_stratified_subset_covers_every_metric(official_data):
    ids = stratified_subset(official_data, 200)
    assert len(ids) == len(set(ids)) == 200
    rows = Counter(m for i in ids for m, _ in official_data.id2metric[str(i)])
    assert set(rows) == {m.metric_en for m in METRICS}
    assert min(rows.values()) >= 200 // 12
    # Deterministic, in test-file order, and another salt gives another subset.
    assert ids == stratified_subset(official_data, 200)
    order = {s.id: k for k, s in enumerate(official_data.samples)}
    assert ids == sorted(ids, key=order.__getitem__)
    assert ids != stratified_subset(official_data, 200, salt="other")
    with pytest.raises(DataError, match="between 1 and 4531"):
        stratified_subset(official_data, 5000)


def test_data_subset_command_writes_an_ids_file(official_dir, tmp_path, capsys):
    out = tmp_path / "ids.txt"
    assert main(["data", "subset", "24", "--out", str(out), "--dir", str(official_dir)]) == 0
    assert len(read_ids_file(out)) == 24
    assert "24 sample id(s)" in capsys.readouterr().out


def test_batch_summary_lines_name_failures():
    outcome = batch.BatchResult(
        models=[batch.ModelResult("a", "outputs/a", report="outputs/a/report.html", seconds=3.0),
                batch.ModelResult("b", "outputs/b", status="failed", failed_step="score", error="no checkpoint")],
        comparison_error="skipped: 1 model(s) finished, a comparison needs two",
    )
    lines = batch.summary_lines(outcome)
    assert lines[1] == "FAILED  b: at score: no checkpoint"
    assert lines[-1] == "1/2 model(s) finished; failed: b"
    assert lines[-2] == "comparison: skipped: 1 model(s) finished, a comparison needs two"
