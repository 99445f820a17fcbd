"""Several replies in one judge prompt (evals' multicomp): the fill against the golden vectors of
evals' `best` and `diversity` specs, the orders, which reply a choice names, the rates."""

from __future__ import annotations

import pytest

from charactereval_lib.engine.grading.choices import INVALID
from charactereval_lib.engine.grading.errors import GradingError
from charactereval_lib.engine.grading.judging import make_item
from charactereval_lib.engine.grading.multicomp import chosen_reply, multicomp_fill, multicomp_summary, orders
from charactereval_lib.engine.grading.spec import ModelGradedSpec
from tests.engine.grading.test_grading_evals_golden import load, make_spec, registry_specs


def test_multicomp_fill_reproduces_the_golden_best_and_diversity_prompts():
    facts = registry_specs()
    rows = [row for row in load("fill.jsonl") if row["spec"] in ("best", "diversity") and row["policy_outputs"]]
    assert {row["case"] for row in rows} == {"best_multicomp_3_single_model", "best_multicomp_from_models",
                                             "diversity_multicomp_4"}
    for row in rows:
        spec = make_spec(row["spec"], facts[row["spec"]])
        # from_models: one reply per model; a number: that many replies of the one model.
        replies = [output for outputs in row["policy_outputs"] for output in outputs]
        item = make_item({"id": row["id"]}, spec, row["sample"], eval_type=row["eval_args"]["eval_type"],
                         **multicomp_fill(spec, replies, orders(len(replies), "given")[0]))
        assert item.messages == row["grader_prompt"], row["id"]
        assert item.grade(row["judge_output"])["choice"] == row["choice"] == row["recorded_metrics"]["choice"]


def test_rotations_put_every_reply_once_in_every_position():
    assert orders(3, "given") == [(0, 1, 2)]
    shown = orders(3)
    assert shown == [(0, 1, 2), (1, 2, 0), (2, 0, 1)]
    assert all(sorted(order[k] for order in shown) == [0, 1, 2] for k in range(3))
    with pytest.raises(ValueError, match="expected one of given, rotations"):
        orders(3, "shuffled")


def test_a_choice_names_the_reply_at_its_position():
    choices = ["1", "2", "3"]
    assert chosen_reply("1", (2, 0, 1), choices) == 2
    assert chosen_reply("3", (2, 0, 1), choices) == 1
    assert chosen_reply(INVALID, (0, 1, 2), choices) is None


def test_a_spec_without_one_output_field_or_template_cannot_show_several_replies():
    base = {"name": "t", "prompt": "{a} {b} {x}", "choice_strings": "from_n", "eval_type": "classify"}
    with pytest.raises(GradingError, match="exactly one output field, not 2"):
        multicomp_fill(ModelGradedSpec(**base, input_outputs={"a": "x", "b": "y"}, output_template="{output}"),
                       ["r", "s"], (0, 1))
    with pytest.raises(GradingError, match="output_template: needed"):
        multicomp_fill(ModelGradedSpec(**base, input_outputs={"a": "x"}), ["r", "s"], (0, 1))


def test_rates_separate_a_position_preference_from_a_reply_preference():
    shown = orders(3)
    samples = range(10)
    # A judge that always names position 1: each reply wins a third, position 1 always.
    first = [(order[0], 0, s) for s in samples for order in shown]
    result = multicomp_summary(*zip(*first, strict=True), 3, n_boot=50)
    assert [e.value for e in result["replies"]] == pytest.approx([1 / 3] * 3)
    assert [e.value for e in result["positions"]] == [1.0, 0.0, 0.0]
    # A judge that always names reply 0, wherever it stands; one answer invalid.
    loyal = [(0, order.index(0), s) for s in samples for order in shown][:-1] + [(None, None, 9)]
    result = multicomp_summary(*zip(*loyal, strict=True), 3, n_boot=50)
    assert result["counts"] == [29, 0, 0] and result["invalid"] == 1 and result["n"] == 30
    assert result["replies"][0].value == 1.0 and result["replies"][0].n_clusters == 10
    assert sum(result["position_counts"]) == 29 and max(result["position_counts"]) == 10
