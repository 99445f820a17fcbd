"""Every batch entry, whatever its benchmark, is read through one pydantic model of the common keys
(``engine.registry.batching.BatchEntry``) and its benchmark's plan: one wording for a bad run name, the
plan's own keys and settings checked before anything runs, models kept in config order."""

from __future__ import annotations

from pathlib import Path

import pytest

from charactereval_lib.apps import batch
from charactereval_lib.engine import progress
from charactereval_lib.engine.registry import batching
from charactereval_lib.pipeline.charactereval_batch import BAR_STEPS, CharacterEvalPlan, ModelSpec

CE = "{name: NAME, backend: offline, model: m, rm: r}"
COSER = "{name: NAME, benchmark: coser, run: {actor_model: m}}"


def load(tmp_path: Path, text: str) -> batch.BatchConfig:
    path = tmp_path / "batch.yaml"
    path.write_text(text, encoding="utf-8")
    return batch.load_config(path)


@pytest.mark.parametrize("entry", [CE, COSER], ids=["charactereval", "coser"])
@pytest.mark.parametrize(("name", "message"), [
    ("../x", "model '../x': name: expected letters, digits, '.', '_' or '-' (the name of the run directory), "
             "got '../x'"),
    ("''", "model '': name: expected letters, digits"),
])
def test_a_bad_run_name_is_one_wording_for_every_benchmark(tmp_path, entry, name, message):
    with pytest.raises(batch.BatchError) as caught:
        load(tmp_path, f"- {entry.replace('NAME', name)}\n")
    assert str(caught.value).startswith(f"{tmp_path / 'batch.yaml'}: {message}")


@pytest.mark.parametrize(("text", "message"), [
    ("- {benchmark: coser, run: {actor_model: m}}\n",
     r"batch.yaml: models\[0\]\.name: missing \(required: letters"),
    ("- {name: c, benchmark: coser, colour: red}\n",
     r"model 'c': unknown key\(s\) \['colour'\]; expected some of \['benchmark', 'data_dir', 'name', 'report', "
     r"'run', 'summarize'\]"),
    ("- {name: c, benchmark: coser, run: [1]}\n", r"model 'c': run: expected a mapping of settings, got \[1\]"),
    ("- {name: c, benchmark: coser, run: {actor_model: m, colour: red}}\n", r"model 'c': run: unknown key\(s\)"),
    ("- {name: c, benchmark: nope}\n", r"model 'c': unknown benchmark 'nope'"),
    ("- {name: c, benchmark: [coser]}\n", r"model 'c': benchmark: expected a string or null, got \['coser'\]"),
    (f"- {CE.replace('NAME', 'x')}\n- {COSER.replace('NAME', 'x')}\n", r"duplicate model name\(s\) \['x'\]"),
])
def test_entries_of_another_benchmark_are_checked_before_anything_runs(tmp_path, text, message):
    with pytest.raises(batch.BatchError, match=message) as caught:
        load(tmp_path, text)
    assert str(tmp_path / "batch.yaml") in str(caught.value) and "\n" not in str(caught.value)
    assert not (tmp_path / "outputs").exists()


def test_models_of_several_benchmarks_keep_config_order_and_defaults_stay_with_their_benchmark(tmp_path):
    config = load(tmp_path, f"""defaults: {{backend: offline, rm: r, subset: 5}}
data_dir: somewhere
models:
  - {COSER.replace('NAME', 'c')}
  - {{name: a, model: m}}
  - {{name: b, model: m, data_dir: elsewhere}}
""")
    c, a, b = config.models
    assert [(m.name, m.benchmark) for m in config.models] == [("c", "coser"), ("a", "charactereval"),
                                                               ("b", "charactereval")]
    assert isinstance(a, ModelSpec) and (a.subset, a.score.rm, a.data_dir, b.data_dir) == (5, "r", "somewhere",
                                                                                         "elsewhere")
    assert c.settings["run"].actor_model == "m" and c.data_dir is None
    # The parts' requests are each plan's: CoSER's ask for no GPU, CharacterEval's scoring for its own.
    ray = batch.RayBatch(score_gpus=1)
    assert [ray.gpus(m, batching.SCORING) for m in config.models] == [0.0, 1, 1]
    assert isinstance(batching.plan_of("charactereval"), CharacterEvalPlan)
    assert batching.plan_of("coser").bar_steps() == ("coser run", "coser summarize", "coser report")


def test_the_overall_bar_counts_each_models_own_steps(capsys):
    coser = batching.plan_of("coser").bar_steps()
    with progress.overall(2, (), enabled=True, total=len(coser) + len(BAR_STEPS)) as bar:
        bar.start(coser)
        batching.step(batching.ModelResult("c", "outputs/c"), "coser summarize")
        assert bar.bar.n == 1
        bar.model_done()
        assert bar.bar.n == len(coser)
        bar.start(BAR_STEPS)
        batching.step(batching.ModelResult("a", "outputs/a"), "score")
        assert bar.bar.n == len(coser) + BAR_STEPS.index("score")
        bar.model_done()
        assert bar.bar.n == bar.bar.total
    assert "== c: coser summarize" in capsys.readouterr().out


def test_every_benchmarks_entries_get_their_pre_flight_before_the_first_model_starts(tmp_path, monkeypatch, capsys):
    """A CoSER entry whose endpoint is down, whose key variable is unset or whose data is missing
    stops the batch before the CharacterEval entry in front of it generates anything."""
    from charactereval_lib.cli import main
    from tests.coser_golden import data_dir

    monkeypatch.delenv("COSER_TEST_KEY", raising=False)
    down = "http://127.0.0.1:9/v1"  # the discard port: nothing listens there
    path = tmp_path / "batch.yaml"
    path.write_text(f"""output_dir: {tmp_path / 'out'}
models:
  - {CE.replace('NAME', 'ce')}
  - {{name: down, benchmark: coser, data_dir: {data_dir()}, run: {{actor_model: m, base_url: "{down}", no_api_key: true}}}}
  - {{name: keyless, benchmark: coser, data_dir: {data_dir()}, run: {{actor_model: m, base_url: "{down}",
      api_key_env: COSER_TEST_KEY}}}}
  - {{name: nodata, benchmark: coser, data_dir: {tmp_path / 'nowhere'}, run: {{actor_model: m}}}}
""", encoding="utf-8")
    problems = batch.preflight(batch.load_config(path))
    where = f"{path}: model"
    assert any(p.startswith(f"{where} 'down': {down}: ") for p in problems), problems
    assert [p for p in problems if "COSER_TEST_KEY" in p] == [
        f"{where} 'keyless': the actor, env, nsp, judge, repair role(s): the API key variable COSER_TEST_KEY is not "
        "set (set it, name another one with --api-key-env, or pass --api-key-env '' for a local server that needs "
        "no key)"]
    assert any(p.startswith(f"{where} 'nodata': ") and "nowhere" in p for p in problems), problems
    # The endpoint is tried once, named with the first entry that uses it.
    assert sum(down in p for p in problems) == 1
    assert main(["batch", str(path), "--quiet"]) == 1  # as the CharacterEval pre-flight exits
    assert f"model 'down': {down}" in capsys.readouterr().err and not (tmp_path / "out").exists()


def test_each_benchmark_gets_its_comparison_or_the_reason_why_not(tmp_path):
    """Two models finished, one of each benchmark: no comparison mixes them, and the summary says
    per benchmark why there is none (the message said '1 model(s) finished' for two)."""
    config = load(tmp_path, f"models:\n  - {CE.replace('NAME', 'a')}\n  - {COSER.replace('NAME', 'c')}\n")
    outcome = batch.BatchResult(models=[batch.ModelResult("a", "outputs/a", benchmark="charactereval"),
                                        batch.ModelResult("c", "outputs/c", benchmark="coser")])
    batch._compare(config, outcome)
    reason = "model(s) finished, a comparison needs two of one benchmark"
    assert outcome.comparisons == [
        {"benchmark": "charactereval", "report": None, "error": f"skipped: 1 charactereval {reason}"},
        {"benchmark": "coser", "report": None, "error": f"skipped: 1 coser {reason}"}]
    lines = batch.summary_lines(outcome)
    assert lines[-3:-1] == [f"comparison (charactereval): skipped: 1 charactereval {reason}",
                            f"comparison (coser): skipped: 1 coser {reason}"]


def test_a_finished_models_headline_is_its_boards_score_with_its_interval(tmp_path):
    from charactereval_lib.charactereval.data import load_official_data
    from charactereval_lib.testing.leaderboard_runs import CHECKPOINT, charactereval_run
    from charactereval_lib.testing.synthetic import write_synthetic_data

    data = load_official_data(write_synthetic_data(tmp_path / "data", 40), verify=False)
    run = charactereval_run(tmp_path / "out" / "a", data, model="m", seed=1)
    headline = batch._headline(batch.ModelResult("a", str(run), benchmark="charactereval"))
    assert headline["scorer"] == f"BaichuanCharRM sha256:{CHECKPOINT[:12]}" and headline["headline"].startswith("overall")
    assert headline["ci"][0] < headline["score"] < headline["ci"][1] and headline["n"] > 0
    unread = batch._headline(batch.ModelResult("x", str(tmp_path / "none"), benchmark="charactereval"))
    assert unread["error"].startswith("the score cannot be read: ")
