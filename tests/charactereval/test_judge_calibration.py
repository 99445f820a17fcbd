"""A judge's answer formats side by side on one label set (metaeval --eval-types) and its
calibration (score --calibration): recorded in run.json and warned about, before the judge's
scores are shown or compared, when missing, made with other specs, or below the threshold."""

from __future__ import annotations

import json

import pytest

from charactereval_lib import pipeline
from charactereval_lib.charactereval import analysis, calibration, judge_report, layout
from charactereval_lib.cli import main
from charactereval_lib.engine.storage import runs
from charactereval_lib.testing.mockserver import MockServer
from tests.charactereval.test_judge import judge_settings as shared_settings
from tests.charactereval.test_judge import make_run
from tests.charactereval.test_judge_metaeval import write_labels

LABELS = 6


def by_answer_format(payload) -> str:
    """A judge right under classify, wrong under classify_cot, never readable under cot_classify
    (every label is 4)."""
    content = payload["messages"][-1]["content"]
    if content.endswith("Reasoning:"):
        return "The reply is fine, but I will not give a grade."
    if "from the next line, explain" in content:
        return "3\nIt reads well."
    return "4"


@pytest.fixture(scope="module")
def calibrated(official_data, official_dir, tmp_path_factory):
    """The same labels judged by judge-x under the three answer formats (through the CLI)."""
    root = tmp_path_factory.mktemp("calibration")
    rows = [(s.id, m) for s in official_data.samples for m, _ in official_data.id2metric.get(str(s.id), ())][:LABELS]
    labels = write_labels(root / "labels.jsonl", [{"id": i, "metric_en": m, "reply": f"甲：reply {n}", "human_score": 4}
                                                  for n, (i, m) in enumerate(rows)])
    with MockServer(reply=by_answer_format) as server:
        code = main(["metaeval", labels, "--out", str(root / "meta"), "--scorer", "judge", "--judge-model", "judge-x",
                     "--base-url", server.base_url, "--no-api-key", "--n-boot", "100", "--eval-types", "all",
                     "--data-dir", str(official_dir)])
    assert code == 0
    return root


def test_one_label_set_under_three_answer_formats_side_by_side(calibrated, capsys):
    summary = json.loads((calibrated / "meta" / pipeline.EVAL_TYPES_SUMMARY).read_text())
    rows = {row["eval_type"]: row for row in summary["eval_types"]}
    assert list(rows) == ["classify", "classify_cot", "cot_classify"]
    assert [rows[t]["metascore"]["value"] for t in rows] == [1.0, 0.0, 0.0]
    assert [rows[t]["invalid"] for t in rows] == [0, 0, LABELS] and all(rows[t]["n"] == LABELS for t in rows)
    # Each format is a meta-evaluation of its own, resumable, its specs recorded with their format.
    for eval_type in rows:
        manifest = runs.load_manifest(calibrated / "meta" / eval_type)
        specs = manifest["judge_scoring"]["judges"]["judge-x"]["specs"]
        assert {spec["eval_type"] for spec in specs.values()} == {eval_type}
    # The two formats below the threshold are warned about.
    assert [w.split(":")[0] for w in summary["warnings"]] == ["classify_cot", "cot_classify"]


def test_calibration_is_recorded_and_warned_about_before_the_judge_s_scores(calibrated, official_data, official_dir,
                                                                          tmp_path, capsys):
    run = make_run(tmp_path / "run", official_data, 2)
    meta = calibrated / "meta"
    with MockServer(default_action="judge:4") as server:
        def judge_settings(server, **overrides):
            return shared_settings(server, api_key_env="", **overrides)

        # Never calibrated: every place the judge's scores are shown says so.
        pipeline.judge_score(run, judge_settings(server), data=official_data)
        assert any("has no recorded agreement with human labels" in w
                   for w in analysis.run_warnings(run.path, layout.JUDGE, "judge-x"))
        # Calibrated under classify, judged under classify: metascore 1.0 passes the threshold.
        outcome = pipeline.judge_score(run, judge_settings(server, eval_type="classify",
                                                           calibration=str(meta / "classify")), data=official_data)
        assert outcome.calibration is None
        recorded = run.manifest()["judge_scoring"]["judges"]["judge-x"]["calibration"]
        assert recorded["metascore"]["value"] == 1.0 and recorded["threshold"] == 0.9 and recorded["n_labels"] == LABELS
        assert not [w for w in analysis.run_warnings(run.path, layout.JUDGE, "judge-x") if "human labels" in w]
        # The same calibration for scores made under another answer format vouches for nothing.
        assert "other judge specs or answer formats" in pipeline.judge_score(
            run, judge_settings(server), data=official_data).calibration
        # Below the threshold: said by score, by the judge's report and beside the reward model, and
        # in a comparison of runs.
        assert main(["score", str(run.path), "--scorer", "judge", "--judge-model", "judge-x", "--base-url",
                     server.base_url, "--no-api-key", "--calibration", str(meta / "cot_classify"),
                     "--data-dir", str(official_dir)]) == 0
    err = capsys.readouterr().err
    assert "agrees with human labels below the threshold: metascore 0.000" in err and "against 0.9" in err
    caveat = calibration.calibration_caveat(run.manifest(), "judge-x")
    assert caveat in analysis.run_warnings(run.path, layout.JUDGE, "judge-x")
    assert judge_report.side_caveats(run, layout.REWARD_MODEL, ["judge-x"]) == [
        f"Judge judge-x (shown beside the reward model): {caveat}"]
    assert judge_report.comparison_caveats([run, run], layout.REWARD_MODEL, "judge-x") == [
        f"run: Judge judge-x (shown beside the reward model): {caveat}"] * 2
    assert judge_report.comparison_caveats([run], layout.JUDGE, "judge-x") == []


def test_a_calibration_of_another_scorer_is_refused_in_one_line(calibrated, official_data, official_dir, tmp_path,
                                                                capsys):
    run = make_run(tmp_path / "run", official_data, 1)
    code = main(["score", str(run.path), "--scorer", "judge", "--judge-model", "judge-y", "--no-api-key",
                 "--calibration", str(calibrated / "meta" / "classify"), "--data-dir", str(official_dir)])
    err = capsys.readouterr().err
    assert code == 2 and "a meta-evaluation of judge judge-x, not of the judge judge-y" in err
    assert len(err.strip().splitlines()) == 1
    assert main(["score", str(run.path), "--calibration", str(calibrated), "--data-dir", str(official_dir)]) == 2
    assert "need --scorer judge" in capsys.readouterr().err
