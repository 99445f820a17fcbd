"""openai/evals' rare paths (issue 19, items 6-10), each pinned by a case of our own.

The golden vectors cover the common paths; these are the rules of the official code (4bfc1f5)
for what they do not reach: fields evals ignores, typed template values, chat values with
names, samples evals refuses, the last occurrence under `ignore_case`, and integers over
Python's conversion limit.
"""

from __future__ import annotations

import json

import pytest

from charactereval_lib.charactereval import layout
from charactereval_lib.engine.grading import strings as sm
from charactereval_lib.engine.grading.errors import SampleRefusedError
from charactereval_lib.engine.grading.fill import chat_to_text
from charactereval_lib.engine.grading.judging import make_item, refused_record
from charactereval_lib.engine.grading.spec import ModelGradedSpec, build_judge_messages, load_spec

SPEC = """\
prompt: "Rate {completion} for {input}."
choice_strings: "YN"
choice_scores: {Y: 1, N: 0}
input_outputs: {input: completion}
eval_type: classify
format_type: out_message
"""


def spec_of(prompt, input_outputs=None):
    return ModelGradedSpec(name="t", prompt=prompt, choice_strings="YN",
                           input_outputs=input_outputs or {"input": "completion"}, answer_prompt=False)


def text(spec, sample):
    return build_judge_messages(spec, sample)[-1]["content"]


def test_a_field_evals_ignores_loads_and_is_named(tmp_path):
    # humor_out_message carries format_type: out_message; evals' spec class drops such fields.
    path = tmp_path / "humor_out_message.yaml"
    path.write_text(SPEC + "colour: red\n", encoding="utf-8")
    spec = load_spec(path)
    assert spec.ignored_fields == ("colour", "format_type")
    assert text(spec, {"input": "a joke", "completion": "ha"}).startswith("Rate ha for a joke.")


@pytest.mark.parametrize(("template", "sample", "expected"), [
    ("{score:.2f}", {"score": 3.14159}, "3.14"),
    ("{n:03d}", {}, "001"),
    ("{x!r}", {"x": 1}, "1"),
    ("{x!r}", {"x": "1"}, "'1'"),
    ("{x}", {"x": ["a", "b"]}, "['a', 'b']"),
    ("{x[0]}", {"x": ["a", "b"]}, None),  # evals needs a key named 'x[0]': missing
])
def test_values_keep_their_types_until_formatting(template, sample, expected):
    spec = spec_of("{input} " + template)
    if expected is None:
        with pytest.raises(AssertionError):
            text(spec, {"input": "i", "completion": "c", **sample})
        return
    assert text(spec, {"input": "i", "completion": "c", **sample}) == "i " + expected


def test_a_value_its_format_spec_cannot_take_is_refused():
    with pytest.raises(SampleRefusedError, match="'score'"):
        text(spec_of("{input} {score:.2f}"), {"input": "i", "completion": "c", "score": "high"})


def test_chat_values_render_as_evals_renders_them():
    named = [{"role": "system", "content": "  be kind", "name": "alice"},
             {"role": "user", "content": "hi", "name": "system"},
             {"role": "assistant", "content": "yo", "name": "example_user"},
             {"role": "tool", "content": "42"}]
    assert chat_to_text(named) == "Alice:   be kind\nhi\nUser: yo\nTool: 42\n"
    # The leading whitespace of a rendering of several messages goes; of a single one it stays.
    system_first = [{"role": "system", "content": "  rules"}, {"role": "user", "content": "q"}]
    assert chat_to_text(system_first) == "rules\nUser: q\n"
    assert chat_to_text([{"role": "user", "content": "  q"}]) == "  q"
    assert chat_to_text([]) == ""
    assert text(spec_of("[{input}][{history}]"), {"input": "i", "completion": "c", "history": []}) == "[i][]"


@pytest.mark.parametrize(("sample", "field"), [
    ({"input": 7}, "'input' is a int"),
    ({"input": {"k": "v"}}, "'input' is a dict"),
    ({"input": ["a", "b"]}, "'input' is a list"),
    ({"input": None}, "'input' is a NoneType"),
    ({}, "'input' is missing"),
    ({"input": [{"role": "user"}, {"role": "user", "content": "x"}]}, "chat message 0 has no 'content'"),
    ({"input": "i", "history": [{"role": "user", "name": "a"}]}, "'history': chat message 0"),
    ({"input": "i", "prompt": "p"}, "'prompt' has the name of a parameter"),
    ({"input": "i", "template": "t"}, "'template'"),
    ({"input": "i", "allow_missing": True}, "'allow_missing'"),
])
def test_samples_evals_refuses_are_refused_naming_the_field(sample, field):
    spec = spec_of("{input} {completion}")
    with pytest.raises(SampleRefusedError, match=field.replace("[", r"\[")):
        build_judge_messages(spec, {"completion": "c", **sample})


def test_a_refused_sample_is_one_line_and_a_failed_record_never_sent():
    spec = spec_of("{input} {completion}")
    item = make_item({"id": 9, "metric_en": "Fluency"}, spec, {"input": 7, "completion": "c"})
    assert item.messages == [] and item.refused == "sample (id 9, metric_en Fluency): input field 'input' is a int, " \
        "not text or a list of chat messages"
    record = refused_record(item, "judge")
    assert (record["status"], record["score"], record["error"]["class"], record["id"]) == \
        ("error", None, "refused_sample", 9)
    assert "\n" not in record["error"]["message"]
    ok = make_item({"id": 1}, spec, {"input": "i", "completion": "c"})
    assert ok.refused is None and ok.messages[0]["content"] == "i c"


def test_includes_ignore_case_answers_with_the_last_occurrence():
    result = sm.includes("Paris, then PARIS", "paris", ignore_case=True)
    assert result.correct and result.per_ideal_get_answer == ["PARIS"]
    assert sm.includes("ab AB", ["AB", "zz"], ignore_case=True).per_ideal_get_answer == ["AB", None]


def test_match_separator_option():
    # Without a separator (every evals template) the ideal 4 matches 42, as the seed says.
    assert sm.match("42", "4") == sm.MatchResult(True, "4")
    assert sm.match("42", "4", separator=str.isspace) == sm.MatchResult(False, None)
    assert sm.match("4 apples", "4", separator=str.isspace).picked == "4"
    assert sm.match("4", "4", separator=" ").correct  # nothing after the ideal: it counts
    assert sm.match("4.", ["4"], separator=" .,").correct and not sm.match("4;", ["4"], separator=" .,").correct
    # Ideals failing the separator are skipped, the next one in list order may still match.
    assert sm.match("42 is it", ["4", "42"], separator=" ") == sm.MatchResult(True, "42")


def test_json_match_on_an_integer_over_the_digit_limit_is_no_match():
    huge = "9" * 5000
    assert sm.json_match(huge, "1") == sm.JsonMatchResult(False, 0.0)
    assert sm.json_match(json.dumps({"a": 1}), '{"a": 1}').correct


def test_a_judge_run_never_sends_a_refused_sample_and_counts_it_as_not_graded(tmp_path):
    from charactereval_lib import pipeline
    from charactereval_lib.engine.generation.backends import make_backend
    from charactereval_lib.engine.grading.judging import run_judging
    from charactereval_lib.engine.storage import artifacts
    from charactereval_lib.testing.mockserver import MockServer

    spec = ModelGradedSpec(name="t", prompt="Rate {completion} for {input}.", choice_strings="12345",
                           choice_scores="from_strings", input_outputs={"input": "completion"},
                           eval_type="classify")
    items = [make_item({"id": 1}, spec, {"input": "i", "completion": "c"}),
             make_item({"id": 2}, spec, {"input": ["not", "a", "chat"], "completion": "c"})]
    run = layout.CharacterEvalRun(tmp_path / "run")
    run.path.mkdir()
    with MockServer(default_action="judge") as server:
        settings = pipeline.JudgeSettings(judge_model="j", base_url=server.base_url, api_key_env="",
                                          max_attempts=1, timeout=30.0)
        params = settings.decoding()
        backend = make_backend("openai", "j", params, settings.backend_options())
        summary = run_judging(run, run.judge_scores, items, backend, judge_model="j", params=params,
                              key_fields=("id",), manifest_section="judge_scoring", describe={})
        assert len(server.received) == 1
    records = {r["id"]: r for r in artifacts.read_jsonl(run.judge_scores).records}
    assert records[1]["status"] == "ok" and records[1]["score"] is not None
    assert records[2]["status"] == "error" and records[2]["score"] is None
    assert records[2]["error"] == {"class": "refused_sample",
                                   "message": "sample (id 2): input field 'input' is a list, not text or a list of "
                                              "chat messages"}
    assert (summary.graded, dict(summary.errors), summary.pending) == (1, {"refused_sample": 1}, 2)
    assert "1 sample(s) refused as openai/evals refuses them, not graded (first: sample (id 2)" in summary.line()
    assert "re-run the same command" not in summary.line()
