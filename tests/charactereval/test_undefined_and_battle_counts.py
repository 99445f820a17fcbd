"""Undefined statistics stay undefined (issue 19, item 4) and battles show their denominators
and warn about an invalid-answer judge (item 5)."""

from __future__ import annotations

import itertools
import json
import math

import pandas as pd
from test_judge_battle import COUNT, write_runs

from charactereval_lib.charactereval import battle
from charactereval_lib.charactereval.metaeval import metaevaluate
from charactereval_lib.cli import main
from charactereval_lib.engine.grading.agreement import krippendorff_alpha, label_agreement, scorer_agreement
from charactereval_lib.engine.grading.panels import inter_judge_alpha
from charactereval_lib.testing.mockserver import MockServer


def label(sample_id, metric, choice):
    return {"id": sample_id, "metric_en": metric, "reply": "r", "label": choice}


def test_one_label_gives_no_kappa_alpha_or_interval_and_null_in_json():
    # Fluency has a single label, with a disagreeing prediction: kappa and alpha would read 0.000.
    labels = [label(1, "Fluency", "4"), *(label(i, "Empathy", str(1 + i % 5)) for i in range(2, 12))]
    predicted = ["3", *(str(1 + (i + 1) % 5) for i in range(2, 12))]
    summary = metaevaluate(labels, predicted, n_boot=50)
    fluency = summary["groups"]["Fluency"]
    assert fluency["cohen_kappa"]["value"] is None and fluency["krippendorff_alpha"]["value"] is None
    # A share of hits has an exact (Clopper-Pearson) interval at any n: 0 of 1 is [0, 0.975].
    assert fluency["metascore"]["value"] == 0.0 and fluency["metascore"]["low"] == 0.0
    assert abs(fluency["metascore"]["high"] - 0.975) < 1e-3
    assert json.loads(json.dumps(summary))["groups"]["Fluency"]["cohen_kappa"]["low"] is None
    assert summary["groups"]["Empathy"]["cohen_kappa"]["value"] is not None


def test_labels_without_variation_give_no_kappa():
    agreement = label_agreement(["3", "4", "3"], ["4", "4", "4"], [1, 2, 3], labels=list("12345"), n_boot=30)
    assert math.isnan(agreement.cohen_kappa.value) and math.isnan(agreement.cohen_kappa.low)
    # One sample (cluster) holding every row: a point, but no interval.
    same = label_agreement(["3", "4"], ["3", "5"], [7, 7], labels=list("12345"), n_boot=30)
    assert not math.isnan(same.cohen_kappa.value) and math.isnan(same.cohen_kappa.low)


def test_one_row_has_no_correlation_or_kappa_and_one_unit_no_alpha():
    estimates = scorer_agreement([3.2], [4.0], [1], n_boot=20)
    assert all(math.isnan(estimates[name].value) for name in ("pearson", "spearman", "kendall_tau_b",
                                                              "quadratic_kappa"))
    assert estimates["exact"].value == 0.0 and math.isnan(estimates["exact"].low)
    assert math.isnan(krippendorff_alpha([[3.0], [4.0]]))
    frame = pd.DataFrame({"id": [1, 1], "metric_en": ["Fluency"] * 2, "judge_model": ["a", "b"], "score": [3.0, 4.0]})
    assert math.isnan(inter_judge_alpha(frame, n_boot=20).value)


def test_the_metaeval_table_says_n_lt_2_and_undefined():
    from charactereval_lib.cli.options import undefined

    assert undefined({"value": None, "n": 1}) == "n<2"
    assert undefined({"value": None, "n": 9}) == "undefined"
    assert undefined({"value": 0.25, "n": 9}) == "0.250"


def test_battle_shows_counts_over_valid_battles_and_warns_of_invalid_answers(official_data, official_dir, tmp_path,
                                                                              capsys):
    run_a, run_b = write_runs(tmp_path, official_data)

    calls = itertools.count()

    def mostly_invalid(key, attempt, payload):
        # The first three answers are valid, the other 13 of 16 invalid (81%).
        return "judge:1" if next(calls) < 3 else "judge_invalid"

    with MockServer(plan=mostly_invalid) as server:
        assert main(["battle", str(run_a.path), str(run_b.path), "--out", str(tmp_path / "out"), "--judge-model",
                     "judge-x", "--base-url", server.base_url, "--no-api-key", "--n-boot", "50", "--data-dir",
                     str(official_dir)]) == 0
    captured = capsys.readouterr()
    summary = json.loads((tmp_path / "out" / battle.SUMMARY).read_text())
    n, invalid = summary["n"], summary["invalid"]
    assert n == COUNT and (summary["judge_answers"], summary["invalid_answers"]) == (2 * COUNT, 2 * COUNT - 3)
    assert sum(summary["counts"][o] for o in ("win", "tie", "loss")) == n - invalid
    assert f"{n - invalid} valid battle(s), {invalid} invalid ({invalid / n:.0%})" in captured.out
    assert f"/{n - invalid}" in captured.out.split("win", 1)[1].splitlines()[0]
    share = summary["invalid_answers"] / summary["judge_answers"]
    assert "are invalid (no choice could be read), above the 20%" in captured.err and f"({share:.0%})" in captured.err
    assert summary["warnings"] and captured.err.count("warning:") >= 1


def test_the_agreement_table_says_n_lt_2_and_undefined():
    from charactereval_lib.charactereval.judge_report import agreement_display
    from charactereval_lib.engine.grading.agreement import agreement_table

    paired = pd.DataFrame({"id": [1, 2, 3, 4], "metric_en": ["Fluency", "Empathy", "Empathy", "Empathy"],
                           "reward-model": [3.2, 2.0, 3.0, 4.0], "judge": [4.0, 3.0, 3.0, 3.0]})
    table = agreement_table(paired, "reward-model", "judge", n_boot=20).assign(invalid_left_out=0)
    shown = agreement_display(table).set_index("metric")
    assert shown.loc["Fluency", "Pearson"] == "n<2" and shown.loc["Fluency", "quadratic kappa"] == "n<2"
    # The judge never varies on Empathy: no correlation can be computed.
    assert shown.loc["Empathy", "Pearson"] == "undefined"
