"""The shipped CharacterEval judge specs: one per metric, all loadable and usable."""

from __future__ import annotations

from charactereval_lib.charactereval.judge_specs import (
    BATTLE_FIELDS,
    JUDGE_FIELDS,
    SPEC_DIR,
    default_spec_path,
    load_battle_spec,
    load_best_spec,
    load_default_specs,
)
from charactereval_lib.engine.grading.battles import battle_requests, judge_battle
from charactereval_lib.engine.grading.choices import INVALID
from charactereval_lib.engine.grading.fill import prompt_fields
from charactereval_lib.engine.grading.judging import make_item
from charactereval_lib.engine.grading.multicomp import multicomp_fill, orders
from charactereval_lib.engine.grading.spec import build_judge_messages, grade_reply, spec_from_mapping

# The paper's 12 metrics (English name as in the protocol, Chinese name as in id2metric).
METRICS = {
    "Fluency": "对话流利度", "Coherence": "对话连贯性", "Consistency": "对话一致性",
    "Exposure": "知识曝光度", "Accuracy": "知识准确率", "Hallucination": "知识幻觉性",
    "Behavior": "行为一致性", "Utterance": "言语一致性", "Humanlikeness": "类人程度",
    "Communication_skills": "交流技巧", "Diversity": "表现多样性", "Empathy": "共情度",
}  # fmt: skip
SAMPLE = {"role": "R", "profile": "{'name': 'R'}", "context": "U：hello", "response": "R：hi"}


def test_one_valid_spec_per_metric():
    specs = load_default_specs()
    assert sorted(specs) == sorted(METRICS)
    for metric_en, metric_zh in METRICS.items():
        spec = specs[metric_en]
        assert (spec.metadata["metric_en"], spec.metadata["metric_zh"]) == (metric_en, metric_zh)
        assert (spec.eval_type, spec.parser, spec.answer_prompt) == ("cot_classify", "evals", True)
        assert spec.choices() == ["1", "2", "3", "4", "5"]
        assert dict(spec.input_outputs) == {"context": "response"}
        needed = set(prompt_fields(spec.prompt)) - set(spec.args) - {"n"}
        assert needed == set(JUDGE_FIELDS), metric_en
        assert default_spec_path(metric_en).parent == SPEC_DIR


def test_each_spec_fills_and_grades_a_reply():
    for name, spec in load_default_specs().items():
        messages = build_judge_messages(spec, SAMPLE)
        content = messages[0]["content"]
        assert "{" not in content.replace(SAMPLE["profile"], ""), name
        assert content.endswith("on a new line.\n\nReasoning:")
        assert grade_reply(spec, "The reply fits.\n4")["score"] == 4.0
        record = grade_reply(spec, "cannot grade")
        assert (record["choice"], record["score"], record["invalid"]) == (INVALID, None, True)


def test_the_battle_spec_judges_both_orders():
    spec = load_battle_spec()
    fields = {key: SAMPLE[key] for key in BATTLE_FIELDS}
    first, second = battle_requests(spec, fields, "R：A", "R：B", spec_args={"aspect": "empathy"})
    assert "[Reply 1]\nR：A\n\n[Reply 2]\nR：B" in first.messages[0]["content"]
    assert "[Reply 1]\nR：B\n\n[Reply 2]\nR：A" in second.messages[0]["content"]
    assert "on one aspect: empathy." in first.messages[0]["content"]
    record = judge_battle(spec, "Reply 1 is warmer.\n1", "Reply 2 is warmer.\n2")
    assert (record["outcome"], record["consistent"]) == ("win", True)


def test_invalid_score_is_decided_per_spec():
    # evals' rule (an invalid answer scores the map's minimum) stays the default of any spec...
    spec = spec_from_mapping({"prompt": "{a}", "choice_strings": "12345", "choice_scores": "from_strings",
                              "input_outputs": {"a": "b"}, "eval_type": "classify"})
    assert spec.invalid_score == "min" and grade_reply(spec, "?")["score"] == 1.0
    # ...the shipped 1-5 metric specs leave an invalid answer out of the means (it would score 1,
    # the worst grade, for the judge's own format failure); the pairwise and best-of-n specs
    # have no scores at all.
    assert {s.invalid_score for s in load_default_specs().values()} == {None}
    assert load_battle_spec().choice_scores is None and load_best_spec().choice_scores is None


def test_the_best_spec_numbers_n_replies():
    spec = load_best_spec()
    fields = {key: SAMPLE[key] for key in BATTLE_FIELDS}
    item = make_item({"id": 1}, spec, fields, **multicomp_fill(spec, ["R：A", "R：B", "R：C"], orders(3)[1]))
    content = item.messages[0]["content"]
    assert content.startswith("You are comparing 3 replies")
    assert "[Reply 1]\nR：B\n\n[Reply 2]\nR：C\n\n[Reply 3]\nR：A\n\n[Aspect:" in content
    assert '"1" or "2" or "3"' in content and content.endswith("Reasoning:")
    assert item.grade("Reply 2 is best.\n2")["choice"] == "2"
