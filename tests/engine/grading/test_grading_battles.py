"""Battles in both presentation orders, position consistency, and judge panels."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from charactereval_lib.engine.grading.battles import battle_requests, battle_summary, combine_orders, judge_battle
from charactereval_lib.engine.grading.panels import inter_judge_alpha, majority, mean_verdict, panel_table
from charactereval_lib.engine.grading.spec import spec_from_mapping

PAIRWISE = spec_from_mapping({
    "prompt": "Dialogue:\n{context}\n\nReply 1: {response_1}\nReply 2: {response_2}\n"
              "Which reply plays {role} better? 1, 2, or 0 for a tie.",
    "choice_strings": ["1", "2", "0"],
    "choice_scores": None,
    "eval_type": "cot_classify",
    "input_outputs": {"context": "response_1"},
    "metadata": {"verdicts": {"1": "first", "2": "second", "0": "tie"}},
}, source="pairwise.yaml")  # fmt: skip

FIELDS = {"context": "U: hi", "role": "R"}


def shown_replies(messages):
    content = messages[0]["content"]
    return re.search(r"Reply 1: (.*)\n", content).group(1), re.search(r"Reply 2: (.*)\n", content).group(1)


def first_position_judge(messages):
    return "Reasoning.\n1"


def order_blind_judge(quality):
    # Prefers the better reply wherever it is shown.
    def judge(messages):
        first, second = shown_replies(messages)
        if quality[first] == quality[second]:
            return "Equal.\n0"
        return "Reasoning.\n1" if quality[first] > quality[second] else "Reasoning.\n2"

    return judge


def run_battles(judge, pairs):
    records = []
    for a, b in pairs:
        requests = battle_requests(PAIRWISE, FIELDS, a, b)
        assert [r.order for r in requests] == ["ab", "ba"]
        assert shown_replies(requests[0].messages) == (a, b) and shown_replies(requests[1].messages) == (b, a)
        records.append(judge_battle(PAIRWISE, judge(requests[0].messages), judge(requests[1].messages)))
    return records


PAIRS = [("good", "bad"), ("bad", "good"), ("good", "good"), ("fine", "bad"), ("bad", "fine")]
QUALITY = {"good": 3, "fine": 2, "bad": 1}


def test_a_judge_that_always_prefers_position_one_is_never_consistent():
    records = run_battles(first_position_judge, PAIRS)
    assert all(r["outcome"] == "tie" and r["consistent"] is False for r in records)
    summary = battle_summary(
        [r["outcome"] for r in records], None, [r["consistent"] for r in records], n_boot=50
    )
    assert summary["position_consistency"].value == 0.0
    assert summary["tie"].value == 1.0 and summary["win"].value == 0.0


def test_an_order_blind_judge_is_always_consistent():
    records = run_battles(order_blind_judge(QUALITY), PAIRS)
    assert [r["outcome"] for r in records] == ["win", "loss", "tie", "win", "loss"]
    assert all(r["consistent"] is True for r in records)
    summary = battle_summary(
        [r["outcome"] for r in records],
        [0, 1, 2, 3, 4],
        [r["consistent"] for r in records],
        n_boot=200,
        seed=2,
    )
    assert summary["position_consistency"].value == 1.0
    assert summary["win"].value == pytest.approx(0.4) and summary["loss"].value == pytest.approx(0.4)
    assert summary["win"].low <= 0.4 <= summary["win"].high
    assert (summary["n"], summary["invalid"]) == (5, 0)


def test_invalid_judge_replies_are_counted_not_dropped_silently():
    record = judge_battle(PAIRWISE, "No idea.", "Reasoning.\n2")
    assert (record["outcome"], record["consistent"], record["preferred_ab"]) == ("invalid", None, "invalid")
    summary = battle_summary(["invalid", "win", "win"], n_boot=20)
    assert (summary["invalid"], summary["n"], summary["win"].n) == (1, 3, 2)
    assert summary["win"].value == 1.0


def test_combine_orders():
    assert combine_orders("a", "a") == ("win", True)
    assert combine_orders("b", "b") == ("loss", True)
    assert combine_orders("tie", "tie") == ("tie", True)
    assert combine_orders("a", "tie") == ("tie", False)
    assert combine_orders("a", "invalid") == ("invalid", None)


def test_verdicts_must_cover_every_choice():
    with pytest.raises(ValueError, match="verdicts must map every choice"):
        judge_battle(PAIRWISE, "1", "1", verdicts={"1": "first", "2": "second"})


def test_majority_and_mean_verdicts():
    assert majority(["4", "4", "3"]) == "4"
    assert majority(["4", "3"]) is None
    assert majority(["__invalid__", "__invalid__", "2"]) == "2"
    assert mean_verdict([4.0, None, 2.0]) == 3.0
    assert mean_verdict(["win", "tie", "loss", "invalid"]) == 0.5
    assert mean_verdict([None]) is None


def test_panel_table_and_inter_judge_alpha():
    rng = np.random.default_rng(5)
    truth = rng.integers(1, 6, 30)
    rows = []
    for judge in ("j1", "j2", "j3"):
        for i, grade in enumerate(truth):
            rows.append({"id": i // 2, "metric_en": "Fluency" if i % 2 else "Empathy",
                         "judge_model": judge, "score": float(grade)})  # fmt: skip
    frame = pd.DataFrame(rows)
    frame.loc[0, "score"] = np.nan
    panel = panel_table(frame, method="mean")
    assert len(panel) == 30 and panel["n_judges"].eq(3).all()
    assert panel.loc[0, "n_valid"] == 2 and panel.loc[0, "panel"] == truth[0]
    agreeing = inter_judge_alpha(frame, n_boot=100)
    assert agreeing.value == pytest.approx(1.0) and agreeing.n == 30 and agreeing.n_clusters == 15
    frame.loc[frame["judge_model"] == "j3", "score"] = rng.integers(1, 6, 30).astype(float)
    assert inter_judge_alpha(frame, n_boot=100).value < 0.9
