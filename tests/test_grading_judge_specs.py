"""The shipped CharacterEval judge specs: one per metric, all loadable and usable."""

from __future__ import annotations

import tomllib
from pathlib import Path

from charactereval_lib.charactereval.judge_specs import (
    JUDGE_FIELDS,
    SPEC_DIR,
    default_spec_path,
    load_default_specs,
)
from charactereval_lib.engine.grading.choices import INVALID
from charactereval_lib.engine.grading.fill import prompt_fields
from charactereval_lib.engine.grading.spec import build_judge_messages, grade_reply
from charactereval_lib.protocol import METRICS

ROOT = Path(__file__).resolve().parent.parent
SAMPLE = {"role": "R", "profile": "{'name': 'R'}", "context": "U：hello", "response": "R：hi"}


def test_one_valid_spec_per_metric():
    specs = load_default_specs()
    assert sorted(specs) == sorted(m.metric_en for m in METRICS)
    for metric in METRICS:
        spec = specs[metric.metric_en]
        assert spec.metadata["metric_en"] == metric.metric_en
        assert spec.metadata["metric_zh"] == metric.metric_zh
        assert (spec.eval_type, spec.parser, spec.answer_prompt) == ("cot_classify", "evals", True)
        assert spec.choices() == ["1", "2", "3", "4", "5"]
        assert dict(spec.input_outputs) == {"context": "response"}
        needed = set(prompt_fields(spec.prompt)) - set(spec.args) - {"n"}
        assert needed == set(JUDGE_FIELDS), metric.metric_en
        assert default_spec_path(metric.metric_en).parent == SPEC_DIR


def test_each_spec_fills_and_grades_a_reply():
    for name, spec in load_default_specs().items():
        messages = build_judge_messages(spec, SAMPLE)
        content = messages[0]["content"]
        assert "{" not in content.replace(SAMPLE["profile"], ""), name
        assert content.endswith("on a new line.\n\nReasoning:")
        assert grade_reply(spec, "The reply fits.\n4")["score"] == 4.0
        record = grade_reply(spec, "cannot grade")
        assert (record["choice"], record["score"], record["invalid"]) == (INVALID, None, True)


def test_the_specs_are_declared_package_data():
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "*.yaml" in setuptools["package-data"]["charactereval_lib.charactereval.judge_specs"]
