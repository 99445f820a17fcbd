"""Panels of judges end to end: three deterministic judges of the local mock server score one
synthetic run into the same judge_scores.jsonl, `charactereval panel` combines them, and every
number is checked against a direct computation; plus a hand-computed Krippendorff's alpha and
the majority tie rule."""

from __future__ import annotations

import json
import math
from collections import Counter

import krippendorff
import numpy as np
import pandas as pd
import pytest

from charactereval_lib import pipeline
from charactereval_lib.charactereval import layout
from charactereval_lib.charactereval.data import load_official_data
from charactereval_lib.charactereval.judge import judge_items, load_specs
from charactereval_lib.cli import main
from charactereval_lib.engine.grading.panels import inter_judge_alpha, majority, panel_table
from charactereval_lib.engine.storage import artifacts
from charactereval_lib.testing.mockserver import MockServer, judge_grade, request_key
from charactereval_lib.testing.synthetic import write_synthetic_data, write_synthetic_run

JUDGES = ("judge-a", "judge-b", "judge-c")


def test_hand_computed_ordinal_alpha():
    # Two judges, three rows: (1, 1), (2, 3), (3, 3). Coincidences o11 = 2, o23 = o32 = 1, o33 = 2;
    # marginals n1 = 2, n2 = 1, n3 = 3, n = 6. Ordinal distances (sum of the marginals from c to k
    # minus half of n_c and n_k, squared): d12 = 1.5^2 = 2.25, d23 = 2^2 = 4, d13 = 3.5^2 = 12.25.
    # D_o = 2 * 4 = 8; D_e = 2 * (2*1*2.25 + 2*3*12.25 + 1*3*4) = 180; alpha = 1 - 5 * 8 / 180 = 7/9.
    frame = pd.DataFrame({"id": [1, 2, 3] * 2, "metric_en": ["Fluency"] * 6,
                          "judge_model": ["a"] * 3 + ["b"] * 3, "score": [1, 2, 3, 1, 3, 3]})
    estimate = inter_judge_alpha(frame, n_boot=50)
    assert estimate.value == pytest.approx(7 / 9) and estimate.n == 3 and estimate.n_clusters == 3
    # Nominal alpha of the same data differs (1 - 5 * 2 / 22): the level matters.
    assert inter_judge_alpha(frame, level="nominal", n_boot=10).value == pytest.approx(12 / 22)


def test_majority_tie_rule():
    assert majority(["4", "3"]) is None  # no rule: no verdict
    assert majority(["4", "3"], tie="lowest") == "3"
    assert majority([5.0, 2.0, 2.0, 5.0, 4.0], tie="lowest") == 2.0
    assert majority([5.0, 5.0, 1.0], tie="lowest") == 5.0  # a real majority needs no rule
    assert majority([math.nan, "__invalid__"], tie="lowest") is None
    with pytest.raises(ValueError, match="tie must be one of none, lowest"):
        majority(["1", "2"], tie="highest")
    frame = pd.DataFrame({"id": [1, 1, 2, 2], "metric_en": ["Fluency"] * 4, "judge_model": ["a", "b"] * 2,
                          "score": [4.0, 2.0, 3.0, 3.0]})
    table = panel_table(frame, method="majority", tie="lowest")
    assert table["panel"].tolist() == [2.0, 3.0] and table["tied"].tolist() == [True, False]


@pytest.fixture(scope="module")
def panel_run(tmp_path_factory):
    """A synthetic run judged by three deterministic judges: judge-a grades as the mock judge,
    judge-b one grade lower (and one invalid answer), judge-c always 3 (and one failed call)."""
    root = tmp_path_factory.mktemp("panel")
    data = load_official_data(write_synthetic_data(root / "data", 30, seed=5), verify=False)
    run = layout.CharacterEvalRun(write_synthetic_run(root / "run", data, seed=1, unscored=10**6))
    keys = [request_key(item.messages) for item in judge_items(run, data, load_specs())]
    invalid_b, failed_c = keys[1], keys[2]

    def plan(key, attempt, payload):
        model = payload["model"]
        if model == "judge-b":
            return "judge_invalid" if key == invalid_b else f"judge:{max(1, judge_grade(key) - 1)}"
        if model == "judge-c":
            return "500" if key == failed_c else "judge:3"
        return "judge"

    with MockServer(plan=plan) as server:
        for model in JUDGES:
            settings = pipeline.JudgeSettings(judge_model=model, base_url=server.base_url, api_key_env="",
                                              concurrency=8, max_attempts=1, timeout=10.0)
            pipeline.judge_score(run, settings, data=data)
    expected = {}
    for item, key in zip(judge_items(run, data, load_specs()), keys):
        grade = judge_grade(key)
        expected[item.key["id"], item.key["metric_en"]] = {
            "judge-a": float(grade), "judge-b": None if key == invalid_b else float(max(1, grade - 1)),
            "judge-c": None if key == failed_c else 3.0}
    return run, expected


def lowest_majority(grades):
    counts = Counter(g for g in grades if g is not None).most_common()
    top = counts[0][1]
    return min(g for g, c in counts if c == top)


def test_panel_end_to_end(panel_run, tmp_path, capsys):
    run, expected = panel_run
    assert run.judge_models() == list(JUDGES)
    out = tmp_path / "panel"
    argv = ["panel", str(run.path), *[a for m in JUDGES for a in ("--judge-model", m)], "--n-boot", "200",
            "--out", str(out)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "Krippendorff's alpha (ordinal)" in printed
    assert "judge-b: 1 invalid, 0 not judged; judge-c: 0 invalid, 1 not judged" in printed

    verdicts = {(r["id"], r["metric_en"]): r for r in artifacts.read_jsonl(out / "panel_verdicts.jsonl").records}
    assert set(verdicts) == set(expected)
    for key, grades in expected.items():
        assert verdicts[key]["grades"] == grades
        assert verdicts[key]["verdict"] == lowest_majority(grades.values())
        assert verdicts[key]["n_valid"] == sum(g is not None for g in grades.values())

    summary = json.loads((out / "panel_summary.json").read_text(encoding="utf-8"))
    assert summary["judges"] == list(JUDGES) and summary["verdict"] == "majority" and summary["tie_rule"] == "lowest"
    ties = sum(1 for g in expected.values() if len({v for v in g.values() if v is not None}) ==
               len([v for v in g.values() if v is not None]) > 1)
    assert summary["counts"] == {"rows": len(expected), "with_verdict": len(expected), "without_verdict": 0,
                                 "ties_settled": ties}
    assert summary["per_judge"]["judge-b"]["invalid"] == 1 and summary["per_judge"]["judge-c"]["not_judged"] == 1
    assert summary["per_judge"]["judge-a"]["graded"] == len(expected)
    # Panel means are the S9 means of the verdicts; each interval holds its mean.
    frame = pd.DataFrame([{"metric_en": k[1], "verdict": v["verdict"]} for k, v in verdicts.items()])
    means = frame.groupby("metric_en")["verdict"].mean()
    for metric in summary["metrics"]:
        if metric["n"]:
            assert metric["mean"] == pytest.approx(means[metric["metric_en"]])
            if metric["n"] >= 4:
                assert metric["ci_low"] <= metric["mean"] <= metric["ci_high"]
            else:  # below 4 rows no interval keeps its promise
                assert metric["ci_low"] is None
    # Alpha as the krippendorff package computes it on the judges x rows matrix (missing: NaN).
    matrix = np.array([[math.nan if g[m] is None else g[m] for g in expected.values()] for m in JUDGES])
    alpha = summary["krippendorff_alpha"]
    assert alpha["value"] == pytest.approx(krippendorff.alpha(reliability_data=matrix, level_of_measurement="ordinal"))
    assert alpha["low"] <= alpha["value"] <= alpha["high"] and alpha["n"] == len(expected)

    # The mean verdict, into the default folder of the run.
    outcome = pipeline.panel(run, pipeline.PanelSettings(judge_models=JUDGES[:2], verdict="mean", n_boot=50))
    assert outcome.out == run.path / "panel"
    mean_verdicts = artifacts.read_jsonl(outcome.out / "panel_verdicts.jsonl").records
    for record in mean_verdicts:
        grades = [g for m, g in expected[record["id"], record["metric_en"]].items() if m != "judge-c" and g is not None]
        assert record["verdict"] == pytest.approx(sum(grades) / len(grades))


def test_panel_errors_are_one_line(panel_run, capsys):
    run, _ = panel_run
    assert main(["panel", str(run.path), "--judge-model", "judge-a"]) == 2
    assert "a panel needs two or more different judge models" in capsys.readouterr().err
    assert main(["panel", str(run.path), "--judge-model", "judge-a", "--judge-model", "judge-z"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no records of judge model 'judge-z' (judges here: judge-a, judge-b, judge-c)" in err
