"""`charactereval reproduce`: the released files recomputed beside the paper, rendered once per
benchmark. CoSER reads the released evaluation files from the data directory at test time;
CharacterEval runs end to end on a synthetic data directory and the tiny random checkpoint."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from _reward_support import released_generations, tiny_checkpoint
from charactereval_lib.apps import reproduction
from charactereval_lib.charactereval.reproduce import MISSING_RM
from charactereval_lib.cli import main
from charactereval_lib.coser.data import RELEASED_EVALUATION_DIR
from charactereval_lib.coser.official import import_evaluation
from charactereval_lib.coser.reproduce import COLUMNS, released_files
from charactereval_lib.engine.reports import reproduction as reproduction_kit
from charactereval_lib.testing.leaderboard_runs import coser_run
from tests.coser_golden import data_dir

ROOT = Path(__file__).resolve().parents[2]
CSV_FIELDS = {"model", "source_file", "column", "paper", "paper_pm", "recorded", "recomputed", "delta", "within",
              "reason"}


@pytest.fixture(scope="module")
def coser_report(tmp_path_factory):
    root = data_dir()
    if not (root / RELEASED_EVALUATION_DIR).is_dir():
        pytest.skip("released CoSER evaluation files not in the data directory (coser data fetch --with-results)")
    out = tmp_path_factory.mktemp("coser") / "repro"
    # BLEU/ROUGE-L of all 11 files take minutes; test_recorded_bleu_and_rouge_l_... checks them.
    assert main(["reproduce", "--benchmark", "coser", "--out", str(out), "--no-metrics", "--n-boot", "200",
                 "--quiet"]) == 0
    return out, json.loads((out / "reproduction.json").read_text(encoding="utf-8"))


@pytest.mark.slow
def test_coser_every_recorded_score_of_the_11_files_is_reproduced_and_the_report_renders(coser_report):
    out, document = coser_report
    assert document["benchmark"] == "coser" and len(document["files"]) == 12
    for f in document["files"]:
        assert f["dimension_scores_reproduced"] == f["dimension_scores"] == 4 * f["cases"], f["file"]
        assert f["scene_scores_reproduced"] == f["cases"] and f["scores_block_reproduced"], f["file"]
        assert f["other_mismatches"] == []
    kinds = [f["kind"] for f in document["files"]]
    assert kinds.count("main") == 7 and kinds.count("ablation") == 4 and kinds.count("test_set") == 1
    assert {f["formula_text"] for f in document["files"] if f["kind"] == "ablation"} == {"max(0, 100 - S * 5)"}
    html = (out / "reproduction.html").read_text(encoding="utf-8")
    assert "Reproduction: CoSER" in html and "Length-penalty ablation" in html and "max(0, 100 - S * 5)" in html
    assert not list(out.parent.glob(".repro*"))  # the staging directory was renamed into place


def test_coser_rows_set_every_published_cell_beside_ours_with_its_reason(coser_report):
    _, document = coser_report
    rows = document["rows"]
    assert all(CSV_FIELDS <= set(r) and r["column"] in COLUMNS for r in rows)
    main_rows = [r for r in rows if r["kind"] == "main"]
    assert len(main_rows) == 7 * len(COLUMNS)
    gpt4o = {r["column"]: r for r in main_rows if r["model"] == "gpt-4o"}
    # Table 13's in-domain GPT-4o row and the released file's recorded block.
    assert (gpt4o["Storyline Consistency"]["paper"], gpt4o["Storyline Consistency"]["paper_pm"]) == (59.88, 1.4)
    assert gpt4o["Storyline Consistency"]["recorded"] == gpt4o["Storyline Consistency"]["recomputed"] == 59.43
    assert gpt4o["Storyline Consistency"]["delta"] == pytest.approx(59.43 - 59.88)
    assert gpt4o["BLEU"]["paper"] == 5.90 and gpt4o["BLEU"]["recomputed"] is None  # --no-metrics
    # Seed 004 L15: the margin decides (2.5 per dimension, 1.0 for the Average); the interval
    # check is kept beside it as information. Released gpt-4o against Table 13: Character
    # Fidelity +2.74 is outside its margin, the Average +0.76 inside.
    assert gpt4o["Character Fidelity"]["delta"] == pytest.approx(2.74, abs=0.005)
    assert gpt4o["Character Fidelity"]["within"] is False and gpt4o["Character Fidelity"]["interval_within"] is True
    assert gpt4o["Average"]["delta"] == pytest.approx(0.76, abs=0.005) and gpt4o["Average"]["within"] is True
    for r in main_rows:
        if r["column"] not in ("BLEU", "ROUGE-L"):
            low, high = r["interval"]
            assert r["interval_within"] == (low - 0.005 - 1e-9 <= r["paper"] <= high + 0.005 + 1e-9)
            margin = 1.0 if r["column"] == "Average" else 2.5
            assert r["within"] == (abs(r["delta"]) <= margin + 1e-9)
        else:
            assert r["within"] is None  # no margin for BLEU/ROUGE-L in seed 004
        assert "one released run" in r["reason"] and "in-domain" in r["reason"]
    for r in rows:
        if r["kind"] != "main":
            assert r["paper"] is None and r["within"] is None and r["reason"]


def test_the_table_cites_each_shared_reason_by_one_number_spelled_out_below(coser_report):
    _, document = coser_report
    for kinds in (["main"], ["ablation", "test_set"]):
        rows = [r for r in document["rows"] if r["kind"] in kinds]
        legend = reproduction_kit.reasons_table(document, kinds)
        assert list(legend["#"]) == list(range(1, len(legend) + 1))
        assert set(legend["reason"]) == {reason for r in rows for reason in r["reasons"]}
        spelled = dict(zip(legend["#"], legend["reason"]))
        cited = reproduction_kit.rows_table(document, kinds)["reasons"]
        for r, numbers in zip(rows, cited):
            assert [spelled[int(n)] for n in numbers.split(", ")] == r["reasons"]
            assert r["reason"] == "; ".join(r["reasons"])
    html = (coser_report[0] / "reproduction.html").read_text(encoding="utf-8")
    assert "Reasons" in html and "one released run against the paper" in html


@pytest.mark.parametrize("model", ["abab7-preview-chat"])  # the file with a last-bit BLEU difference
def test_recorded_bleu_and_rouge_l_of_the_ablation_files_are_reproduced(tmp_path, model):
    path = data_dir() / RELEASED_EVALUATION_DIR / f"id_set_{model}-no_length_penalty.json"
    if not path.exists():
        pytest.skip(f"{path}: not in the data directory")
    report = import_evaluation(tmp_path / "run", path, actor_model=model, progress=False)
    assert report.metrics_recorded == 100 and report.metrics_reproduced["rouge_l"] == 100
    assert report.scores_block["reproduced"]  # the block's bleu and rouge_l means included
    # Every BLEU equals the recorded one bit for bit, except where the platform's exp/log round the
    # last bit differently (abab7: one scene, 7e-18): the same n-gram counts.
    assert report.metrics_reproduced["bleu"] >= 99
    for m in report.mismatches:
        assert m["what"] == "bleu" and abs(m["recomputed"] - m["recorded"]) <= math.ulp(m["recorded"])


def test_released_files_are_the_twelve_pinned_ones():
    from charactereval_lib.coser.data import RESULTS_GROUP, manifest

    pinned = {spec.name.rsplit("/", 1)[1] for spec in manifest().files if spec.group == RESULTS_GROUP}
    assert pinned == {item.file for item in released_files()} and len(pinned) == 12


# --- CharacterEval: end to end on synthetic files and the tiny random checkpoint -------------------


@pytest.mark.slow
def test_charactereval_with_the_tiny_checkpoint_renders_every_cell_labelled_meaningless(tmp_path):
    data, files = released_generations(tmp_path)
    outcome = reproduction.reproduce("charactereval", tmp_path / "out", rm=str(tiny_checkpoint()), device="cpu",
                                     n_boot=50, data=data, files=files)
    document = outcome.document
    assert document["meaningless"] and document["missing"] is None
    assert len(document["rows"]) == 5 * 15 and all(f["scored"] for f in document["files"])
    scored = [r for r in document["rows"] if r["recomputed"] is not None]
    assert scored and all(r["delta"] == pytest.approx(r["recomputed"] - r["paper"]) for r in scored)
    assert all(r["reason"].startswith("MEANINGLESS") for r in document["rows"])
    chatglm = {r["column"]: r for r in document["rows"] if r["model"] == "ChatGLM3-6B"}
    assert chatglm["Fluency"]["paper"] == 3.269
    html = outcome.html.read_text(encoding="utf-8")
    assert "Reproduction: CharacterEval" in html and "MEANINGLESS SCORES" in html


def test_charactereval_without_a_checkpoint_says_what_is_missing_and_scores_nothing(tmp_path, capsys):
    data, files = released_generations(tmp_path)
    outcome = reproduction.reproduce("charactereval", tmp_path / "out", n_boot=50, data=data, files=files)
    assert outcome.document["missing"] == MISSING_RM
    assert all(r["recomputed"] is None and r["within"] is None for r in outcome.document["rows"])
    html = outcome.html.read_text(encoding="utf-8")
    assert "rm download" in html and "--rm models/BaichuanCharRM --device cuda" in html


def test_bad_requests_are_one_line_errors_and_leave_nothing(tmp_path, capsys, monkeypatch):
    used = tmp_path / "used"
    used.mkdir()
    (used / "x").write_text("")
    assert main(["reproduce", "--benchmark", "coser", "--out", str(used)]) == 2
    assert "is not empty and holds no .charactereval-output.json" in capsys.readouterr().err
    assert main(["reproduce", "--benchmark", "coser", "--out", str(tmp_path / "o"), "--rm", "x"]) == 2
    # The released CharacterEval generations are verified before anything is made.
    empty = tmp_path / "empty-data"
    empty.mkdir()
    assert main(["reproduce", "--benchmark", "charactereval", "--out", str(tmp_path / "c"), "--data-dir",
                 str(empty)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 2 and "data fetch --with-results" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty-data", "used"]


@pytest.mark.parametrize(("argv", "message"), [
    (["coser", "--rm", "x"], "--rm is an option of the CharacterEval reproduction, not of CoSER's"),
    (["coser", "--device", "cuda"], "--device is an option of the CharacterEval reproduction, not of CoSER's"),
    (["charactereval", "--no-metrics"], "--no-metrics is an option of the CoSER reproduction, not of CharacterEval's"),
])
def test_an_option_of_one_benchmark_is_refused_for_the_other_in_one_line(tmp_path, capsys, argv, message):
    assert main(["reproduce", "--benchmark", argv[0], "--out", str(tmp_path / "o"), *argv[1:]]) == 2
    assert capsys.readouterr().err == f"error: {message}\n"
    assert not list(tmp_path.iterdir())


def test_the_benchmarks_offered_are_those_that_declare_a_reproduction(capsys):
    with pytest.raises(SystemExit):
        main(["reproduce", "--help"])
    assert "{charactereval,coser}" in capsys.readouterr().out


@pytest.mark.parametrize("n_boot", ["0", "-3"])
def test_a_bootstrap_of_no_resamples_is_a_one_line_error(tmp_path, capsys, n_boot):
    assert main(["reproduce", "--benchmark", "coser", "--out", str(tmp_path / "o"), "--n-boot", n_boot]) == 2
    assert capsys.readouterr().err == f"error: n_boot must be a positive number, got {n_boot}\n"
    assert not list(tmp_path.iterdir())


LATE_CTRL_C = """
import os, signal, sys
from charactereval_lib.cli import main
from charactereval_lib.engine.reports import reproduction as reproduction_kit
status = main()
os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C just after the command said what it wrote
sys.exit(status)
"""


def test_ctrl_c_after_the_work_is_done_leaves_the_commands_exit_status(tmp_path):
    """Not -2 (killed by the signal): the command ran through, its status stands."""
    coser_run(tmp_path / "runs" / "r", actor="actor-a", scenes=20, repeats=1)
    done = subprocess.run([sys.executable, "-c", LATE_CTRL_C, "leaderboard", str(tmp_path / "runs"), "--out",
                           str(tmp_path / "site")], capture_output=True, text=True, cwd=tmp_path, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith(f"wrote {tmp_path / 'site' / 'index.html'}") and "Traceback" not in done.stderr


# --- the report's tables on a CoSER document made of the real rows, without the released files ----


def coser_document() -> dict:
    """One main, one ablation and the test-set file, their rows made by ``coser.reproduce`` from
    the shipped paper tables (the recorded values invented)."""
    from charactereval_lib.coser.judge import SCORE_FORMULAS
    from charactereval_lib.coser.reproduce import _rows, load_paper
    from charactereval_lib.coser.upstream import DIMENSIONS

    paper = load_paper()
    chosen = [item for item in released_files() if item.kind == "test_set"]
    ablation = next(item for item in released_files() if item.kind == "ablation")
    chosen += [ablation, next(item for item in released_files() if item.kind == "main" and item.model == ablation.model)]
    rows, files = [], []
    for k, item in enumerate(chosen):
        formula = "no_length_penalty" if item.kind == "ablation" else "length_penalty"
        block = {key: 50.0 + k + i for i, key in enumerate([*DIMENSIONS, "avg"])}
        rows += _rows(item, {"scores_block": {"recorded": block, "recomputed": block}, "score_formula": formula},
                      None, paper.get(item.model, {}))
        files.append({"file": item.file, "model": item.model, "kind": item.kind, "formula_text": SCORE_FORMULAS[formula],
                      "protocol_version": "coser-head", "cases": 2, "dimension_scores": 8,
                      "dimension_scores_reproduced": 8, "scene_scores_reproduced": 2, "metrics_recorded": 0,
                      "metrics_reproduced": {}, "metric_mismatches": [], "other_mismatches": [],
                      "scores_block_reproduced": True})
    return {"benchmark": "coser", "metrics": False, "tolerance": 0.005, "files": files, "rows": rows}


def test_the_papers_plus_minus_keeps_its_printed_digits():
    document = coser_document()
    main_rows = [r for r in document["rows"] if r["kind"] == "main" and r["paper_pm"] is not None]
    table = reproduction_kit.rows_table(document, ["main"])
    assert main_rows and list(table["paper"]) == [f"{r['paper']:.2f} ± {r['paper_pm_printed']}" for r in main_rows]
    # The shipped tables print the ± with one or two decimals, trailing zeros included.
    assert any(r["paper_pm_printed"].endswith("0") for r in main_rows)
    assert all(float(r["paper_pm_printed"]) == r["paper_pm"] for r in main_rows)


@pytest.mark.slow
def test_the_rebuttal_files_table_has_its_heading_and_a_file_column(tmp_path):
    from charactereval_lib.engine.reports import notebook as report

    document = coser_document()
    (tmp_path / reproduction.DOCUMENT).write_text(json.dumps(document), encoding="utf-8")
    _, page = report.render(report.shipped(reproduction.NOTEBOOK), tmp_path / "r.ipynb", tmp_path / "r.html",
                            {"reproduction": str(tmp_path / reproduction.DOCUMENT)})
    text = page.read_text(encoding="utf-8")
    heading = re.search(r"<h3[^>]*>The rebuttal branch's files, cell by cell", text).end()
    table = text[heading:text.index("</table>", heading)]
    assert ">file</th>" in table and "test_set_gpt-4o.json" in table and "-no_length_penalty.json" in table
    main_row = next(r for r in document["rows"] if r["kind"] == "main" and r["paper_pm_printed"].endswith("0"))
    assert f"{main_row['paper']:.2f} ± {main_row['paper_pm_printed']}" in text
