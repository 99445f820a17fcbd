"""Import of the official CoSER result files (paper-era ``exp/evaluation/*.json``).

The released files are not in the repository or the data. The golden vectors hold, for 7 models
x 100 id scenes, everything the scoring reads: the recorded critiques with their scores, ``n``, the
recorded judge user message (``simulation_text``) and each model's recorded ``scores`` block. The
golden test rebuilds one file per model from them at test time, under tmp_path. Its
``simulation`` lists are reconstructed only as far as the vectors allow: the paragraphs of the
recorded simulation text, the right number of them (``n``) as lines of a placeholder actor and the
rest as Environment lines, so that the list has the recorded ``n`` and gives back the recorded
text; speakers, inner thoughts and NSP turns of the real files are not in the vectors.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from charactereval_lib.coser import official
from charactereval_lib.coser.benchmark import JUDGEMENTS, SCENES
from charactereval_lib.coser.data import load_test_set
from charactereval_lib.coser.judge import ENVIRONMENT, dimension_score
from charactereval_lib.coser.statistics import summarize
from charactereval_lib.coser.text import remove_inner_thoughts
from charactereval_lib.coser.upstream import DIMENSIONS
from charactereval_lib.coser.versions import COSER_PAPER
from charactereval_lib.engine.storage.artifacts import read_jsonl
from charactereval_lib.engine.storage.pinned import DataError
from charactereval_lib.engine.storage.runs import RunDir
from tests.coser_golden import data_dir, golden

ACTOR = "Actor"  # placeholder speaker of the reconstructed actor lines


def exact(a, b) -> bool:
    return type(a) is type(b) and repr(a) == repr(b)


def reconstructed_simulation(text: str, n: int) -> list[dict[str, str]]:
    """Messages with ``n`` non-Environment lines whose simulation text is ``text`` (see the module
    docstring): a paragraph becomes an actor line only if thought removal leaves it unchanged."""
    messages = []
    for paragraph in text.split("\n\n"):
        actors = sum(m["role"] == ACTOR for m in messages)
        stable = paragraph.strip("\n") == paragraph and remove_inner_thoughts(paragraph, COSER_PAPER) == paragraph
        messages.append({"role": ACTOR if actors < n and stable else ENVIRONMENT, "content": paragraph})
    assert sum(m["role"] == ACTOR for m in messages) == n, "the vectors allow this reconstruction for all 700"
    return messages


def official_files(directory: Path) -> dict[str, Path]:
    """One evaluation file per model, in the official layout; every other model uses the paper-era
    key spellings (``avg_scores``, ``results_by_case``)."""
    texts = {(r["model"], r["scene_key"]): r["user_message"] for r in golden("judge_inputs.jsonl")}
    files = {}
    for i, block in enumerate(golden("score_averages.jsonl")):
        model = block["model"]
        records = sorted((r for r in golden("scores.jsonl") if r["model"] == model), key=lambda r: r["index_in_id_set"])
        cases = {}
        for r in records:
            text = texts[(model, r["scene_key"])]
            cases[r["scene_key"]] = {"simulation": reconstructed_simulation(text, r["n_actor_rounds"]),
                                     "simulation_text": text, "score": r["overall"]["recorded"],
                                     "critique": r["recorded_critique"]}
        scores_key, cases_key = official.SCORES_KEYS[i % 2], official.CASES_KEYS[i % 2]
        path = directory / f"id_set_{model}.json"
        path.write_text(json.dumps({scores_key: block["recorded_scores_block"], cases_key: {model: cases}},
                                   ensure_ascii=False), encoding="utf-8")
        files[model] = path
    return files


@pytest.mark.slow
def test_the_7_official_files_import_with_every_recorded_score_reproduced(tmp_path):
    files = official_files(tmp_path)
    assert len(files) == 7
    recorded = {(r["model"], r["scene_key"]): r for r in golden("scores.jsonl")}
    blocks = {b["model"]: b["recorded_scores_block"] for b in golden("score_averages.jsonl")}
    dims = scenes = blocks_ok = 0
    for model, path in files.items():
        run = tmp_path / "runs" / model
        report = official.import_evaluation(run, path, data_dir=data_dir(), metrics=model == "gpt-4o", progress=False)
        assert report.mismatches == [] and report.cases == 100 and report.actor_model == model
        assert report.simulation_texts_reproduced == 100
        dims += report.dimension_scores_reproduced
        scenes += report.scene_scores_reproduced
        # The 4 dimensions and avg recomputed the official way (file order, 3 decimals), value and type.
        recomputed = report.scores_block["recomputed"]
        assert set(recomputed) == {*DIMENSIONS, "avg"} and report.scores_block["not_recomputed"] == ["ttr_single",
                                                                                                    "ttr_all"]
        blocks_ok += report.scores_block["reproduced"] and all(exact(v, blocks[model][k]) for k, v in recomputed.items())
        # The run itself holds the re-scored dimensions, equal to the recorded ones.
        judged = [r for r in read_jsonl(run / JUDGEMENTS).records if r.get("kind") == "dimension"]
        assert len(judged) == 400 and all(r["status"] == "ok" for r in judged)
        for r in judged:
            gold = recorded[(model, r["scene"])]["dimensions"][r["dimension"]]["recorded_score"]
            assert exact(r["scores"]["score"], gold), (model, r["scene"], r["dimension"])
        manifest = json.loads((run / "run.json").read_text())
        assert manifest["protocol_version"] == "coser-paper" and manifest["coser"]["preset"] == "imported"
        assert manifest["coser"]["models"]["actor"] == model
        assert manifest["import_official"]["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()
        assert manifest["import_official"]["report"]["dimension_scores_reproduced"] == 400
    assert (dims, scenes, blocks_ok) == (2800, 700, 7)

    # coser summarize works on an imported run, and its means are the recorded block's.
    summary = summarize(RunDir(tmp_path / "runs" / "gpt-4o"), n_boot=200)
    assert summary["scenes_simulated"] == 100 and summary["judge_failures"] == 0
    for dim in DIMENSIONS:
        assert abs(summary["overall"][dim]["mean"] - blocks["gpt-4o"][dim]) < 5e-4
    assert summary["rouge_l_mean"] is not None
    assert sum(summary["ended_by"].values()) == 100


# --- bad input and reports on synthetic files (they need only the test set's scene keys) ---------


def synthetic_file(path: Path, **change) -> Path:
    """A one-scene evaluation file with invented content, scored as the paper formula does."""
    key = load_test_set(data_dir())[0].key
    simulation = [{"role": "A", "content": "A: hello"}, {"role": ENVIRONMENT, "content": "Environment: rain"}]
    critique = {dim: {"flaws": [{"instance": "x", "type": "t", "severity": 2}], "score": dimension_score(2, 1)}
                for dim in DIMENSIONS}
    critique["score"] = dimension_score(2, 1)
    case = {"simulation": simulation, "simulation_text": "A: hello\n\nEnvironment: rain", "score": critique["score"],
            "critique": critique}
    document = {"scores": {**{d: 91.5 for d in DIMENSIONS}, "avg": 91.5}, "cases": {"m": {key: case}}}
    for where, value in change.items():
        target = document
        *parents, last = where.split("/")
        for part in parents:
            target = target[key if part == "KEY" else part]
        last = key if last == "KEY" else last
        if value is None:
            del target[last]
        else:
            target[last] = value
    path.write_text(json.dumps(document) if "raw" not in change else change["raw"], encoding="utf-8")
    return path


def test_a_synthetic_file_imports_and_a_score_of_another_type_is_reported_not_reproduced(tmp_path):
    report = official.import_evaluation(tmp_path / "run", synthetic_file(tmp_path / "f.json"), data_dir=data_dir(),
                                        metrics=False, progress=False)
    assert (report.dimension_scores_reproduced, report.scene_scores_reproduced) == (4, 1)
    assert report.scores_block["reproduced"] and "4/4 dimension scores" in report.summary_line()
    scene = read_jsonl(tmp_path / "run" / SCENES).records[0]
    assert (scene["rounds"], scene["ended_by"], scene["status"]) == (2, "end_chat", "done")

    # 91 where the formula gives 91.5, and the float 0.0 where max(0, ...) gives the int 0.
    path = synthetic_file(tmp_path / "g.json", **{
        "cases/m/KEY/critique/Anthropomorphism/score": 91,
        "cases/m/KEY/critique/Character Fidelity/flaws": [{"instance": "x", "type": "t", "severity": 40}],
        "cases/m/KEY/critique/Character Fidelity/score": 0.0})
    report = official.import_evaluation(tmp_path / "run2", path, data_dir=data_dir(), metrics=False, progress=False)
    assert report.dimension_scores_reproduced == 2
    dims = [(m["what"], m["recorded"], m["recomputed"]) for m in report.mismatches if m["what"] in DIMENSIONS]
    assert dims == [("Anthropomorphism", 91, 91.5), ("Character Fidelity", 0.0, 0)]
    assert exact(dims[1][1], 0.0) and exact(dims[1][2], 0)


@pytest.mark.parametrize("change, message", [
    ({"raw": '{"scores": {'}, "malformed JSON at line 1"),
    ({"cases/m/Not A Book-1-0": {}}, "case m/'Not A Book-1-0': unknown scene key"),
    ({"cases/m/KEY/critique/Anthropomorphism": None}, "critique has no 'Anthropomorphism' dimension"),
    ({"cases/m/KEY/score": "91.5"}, "field 'score' should be a number, got str"),
    ({"cases/m/KEY/simulation": None}, "missing field 'simulation'"),
    ({"cases/m/KEY/critique/Storyline Quality/flaws": [{"instance": "x"}]}, "flaws[0] should be an object with a 'severity'"),
    ({"scores": None}, "missing 'scores' (paper-era spelling 'avg_scores')"),
    ({"avg_scores": {}}, "has both 'scores' and 'avg_scores'"),
    ({"cases/other": {}}, "one actor model section besides 'groundtruth'"),
])
def test_bad_input_is_one_line_naming_file_and_case_and_leaves_no_run_directory(tmp_path, change, message):
    path = synthetic_file(tmp_path / "bad.json", **change)
    runs_dir = tmp_path / "runs"
    runs_dir.mkdir()
    with pytest.raises(DataError) as caught:  # OfficialFormatError, or the JSON reader's DataError
        official.import_evaluation(runs_dir / "run", path, data_dir=data_dir(), metrics=False, progress=False)
    text = str(caught.value)
    assert message in text and str(path) in text and "\n" not in text
    assert list(runs_dir.iterdir()) == []


def test_a_failure_while_writing_leaves_nothing_and_a_used_directory_is_refused(tmp_path, monkeypatch):
    path = synthetic_file(tmp_path / "f.json")
    runs_dir = tmp_path / "runs"

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(official.runs, "update_manifest", broken)
    with pytest.raises(OSError):
        official.import_evaluation(runs_dir / "run", path, data_dir=data_dir(), metrics=False, progress=False)
    assert list(runs_dir.iterdir()) == []
    monkeypatch.undo()

    (runs_dir / "used").mkdir()
    (runs_dir / "used" / "x").write_text("")
    with pytest.raises(official.OfficialFormatError, match="already exists and is not empty"):
        official.import_evaluation(runs_dir / "used", path, data_dir=data_dir(), metrics=False, progress=False)
    # An empty directory made beforehand is used.
    (runs_dir / "empty").mkdir()
    official.import_evaluation(runs_dir / "empty", path, data_dir=data_dir(), metrics=False, progress=False)
    assert (runs_dir / "empty" / SCENES).exists() and len(list(runs_dir.iterdir())) == 2


@pytest.mark.slow
def test_cli_import_then_summarize_and_report_an_imported_run(tmp_path, capsys):
    """``coser import`` wires the import; an imported run (no turn records, profiles unknown)
    summarizes and renders its report, which names the import and its source file."""
    from charactereval_lib import cli

    path = synthetic_file(tmp_path / "f.json")
    run = tmp_path / "imported"
    assert cli.main(["coser", "import", str(path), str(run), "--data-dir", str(data_dir()), "--no-metrics",
                     "--quiet"]) == 0
    assert "4/4 dimension scores and 1/1 scene scores reproduced exactly" in capsys.readouterr().out
    assert cli.main(["coser", "import", str(path), str(run), "--data-dir", str(data_dir()), "--quiet"]) == 2
    assert "already exists and is not empty" in capsys.readouterr().err
    assert cli.main(["coser", "report", str(run), "--n-boot", "50"]) == 0
    page = (run / "report.html").read_text(encoding="utf-8")
    assert "imported" in page and path.name in page


# --- the rebuttal branch's released files (read from the data directory at test time) ----------

RELEASED = Path("upstream") / "rebuttal-d77a6d2" / "exp" / "evaluation"
ABLATION_MODELS = ("abab7-preview-chat", "claude35sonnet", "gpt-4o", "gpt3.5")


def released(name: str) -> Path:
    path = data_dir() / RELEASED / name
    if not path.exists():
        pytest.skip(f"{path}: released evaluation files not in the data directory (coser data fetch --with-results)")
    return path


@pytest.mark.parametrize("model", ABLATION_MODELS)
def test_the_no_length_penalty_files_import_and_the_ablation_formula_reproduces_every_recorded_score(tmp_path, model):
    path = released(f"id_set_{model}-no_length_penalty.json")
    report = official.import_evaluation(tmp_path / "run", path, actor_model=model, data_dir=data_dir(), metrics=False,
                                        progress=False)
    assert (report.layout, report.score_formula, report.protocol_version) == ("flat", "no_length_penalty", "coser-head")
    assert (report.dimension_scores_reproduced, report.scene_scores_reproduced,
            report.simulation_texts_reproduced) == (400, 100, 100)
    assert report.mismatches == [] and report.scores_block["reproduced"]
    assert report.scores_block["not_recomputed"] == ["bleu", "rouge_l"]  # metrics off here
    # The length-penalty formula reproduces none of them: the file name's formula is the one.
    other = official.import_evaluation(tmp_path / "other", path, actor_model=model, data_dir=data_dir(),
                                       score_formula="length_penalty", metrics=False, progress=False)
    assert other.dimension_scores_reproduced < 20 and not other.scores_block["reproduced"]


def test_a_flat_file_needs_the_actor_model_and_an_unknown_layout_names_the_known_ones(tmp_path):
    path = released("id_set_gpt-4o-no_length_penalty.json")
    with pytest.raises(official.OfficialFormatError, match="no model section .*--actor-model"):
        official.import_evaluation(tmp_path / "run", path, data_dir=data_dir(), metrics=False, progress=False)
    odd = synthetic_file(tmp_path / "odd.json", **{"cases/m": [1, 2]})
    with pytest.raises(official.OfficialFormatError) as caught:
        official.import_evaluation(tmp_path / "run", odd, data_dir=data_dir(), metrics=False, progress=False)
    text = str(caught.value)
    assert "cannot recognise the layout of 'cases'" in text and "sections:" in text and "flat:" in text
    assert "\n" not in text and not (tmp_path / "run").exists()


def test_cli_imports_a_flat_file_with_the_actor_model_named(tmp_path, capsys):
    from charactereval_lib.cli import main

    path = released("id_set_gpt3.5-no_length_penalty.json")
    assert main(["coser", "import", str(path), str(tmp_path / "run"), "--actor-model", "gpt3.5", "--no-metrics",
                 "--quiet"]) == 0
    assert "400/400 dimension scores and 100/100 scene scores" in capsys.readouterr().out
    manifest = json.loads((tmp_path / "run" / "run.json").read_text(encoding="utf-8"))
    assert manifest["import_official"]["score_formula"] == "no_length_penalty"
    assert manifest["import_official"]["layout"] == "flat" and manifest["protocol_version"] == "coser-head"
    assert main(["coser", "import", str(path), str(tmp_path / "run2"), "--no-metrics", "--quiet"]) == 2
    assert "--actor-model" in capsys.readouterr().err
