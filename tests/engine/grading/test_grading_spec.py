"""Model-graded YAML specs, judge messages, reply records and the strict parser mode."""

from __future__ import annotations

import pytest

from charactereval_lib.engine.grading.choices import EVALS, INVALID, STRICT, get_choice
from charactereval_lib.engine.grading.errors import MissingTemplateKeyError, SpecError
from charactereval_lib.engine.grading.spec import build_judge_messages, grade_reply, load_spec, spec_from_mapping

SPEC = """\
prompt: |
  Context: {context}
  Reply: {response}
  Rate the reply for {aspect}.
choice_strings: "12345"
choice_scores: from_strings
eval_type: cot_classify
input_outputs: {context: response}
args: {aspect: fluency}
"""


def write(tmp_path, text, name="judge.yaml"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_a_spec_file_builds_judge_messages_as_evals_fills_them(tmp_path):
    spec = load_spec(write(tmp_path, SPEC))
    assert spec.name == "judge" and spec.parser == EVALS
    messages = build_judge_messages(spec, {"context": "A: hi {x}", "response": "B: {y}"})
    assert len(messages) == 1 and messages[0]["role"] == "user"
    content = messages[0]["content"]
    # Input fields get doubled braces, judged outputs do not (evals rule).
    assert content.startswith("Context: A: hi {{x}}\nReply: B: {y}\nRate the reply for fluency.\n")
    assert content.endswith(
        'Then print only a single choice from "1" or "2" or "3" or "4" or "5" (without quotes or '
        "punctuation) on its own line corresponding to the correct answer. At the end, repeat just "
        "the answer by itself on a new line.\n\nReasoning:"
    )


def test_spec_args_win_over_sample_fields_and_call_args_over_spec_args(tmp_path):
    spec = load_spec(write(tmp_path, SPEC))
    sample = {"context": "c", "response": "r", "aspect": "from sample"}
    assert "for fluency." in build_judge_messages(spec, sample)[0]["content"]
    messages = build_judge_messages(spec, sample, spec_args={"aspect": "empathy"})
    assert "for empathy." in messages[0]["content"]


def test_a_missing_field_names_what_the_template_needs(tmp_path):
    spec = load_spec(write(tmp_path, SPEC))
    with pytest.raises(MissingTemplateKeyError, match=r"Required: \['context', 'response', 'aspect'\]"):
        build_judge_messages(spec, {"context": "c"}, spec_args={})


def test_the_record_keeps_reply_choice_score_and_invalid_flag(tmp_path):
    spec = load_spec(write(tmp_path, SPEC))
    record = grade_reply(spec, "Reasoning: smooth.\n4")
    assert record == {
        "choice": "4", "score": 4.0, "invalid": False, "reply": "Reasoning: smooth.\n4",
        "spec": "judge", "eval_type": "cot_classify", "parser": "evals", "match_fn": "starts_or_endswith",
    }  # fmt: skip
    invalid = grade_reply(spec, "I refuse.")
    # evals rule: an invalid reply scores the minimum of the score map.
    assert (invalid["choice"], invalid["score"], invalid["invalid"]) == (INVALID, 1.0, True)


def test_invalid_score_null_keeps_invalid_replies_out_of_means(tmp_path):
    spec = load_spec(write(tmp_path, SPEC + "invalid_score: null\n"))
    record = grade_reply(spec, "no idea")
    assert (record["choice"], record["score"], record["invalid"]) == (INVALID, None, True)


def test_answer_prompt_false_sends_the_template_alone(tmp_path):
    spec = load_spec(write(tmp_path, SPEC + "answer_prompt: false\n"))
    content = build_judge_messages(spec, {"context": "c", "response": "r"})[0]["content"]
    assert content == "Context: c\nReply: r\nRate the reply for fluency.\n"


def test_a_chat_prompt_gets_the_suffix_on_its_last_message(tmp_path):
    text = SPEC.replace(
        "prompt: |\n  Context: {context}\n  Reply: {response}\n  Rate the reply for {aspect}.\n",
        "prompt:\n  - {role: system, content: 'Judge {aspect}.'}\n"
        "  - {role: user, content: '{context} / {response}'}\n",
    )
    spec = load_spec(write(tmp_path, text))
    messages = build_judge_messages(spec, {"context": "c", "response": "r"})
    assert messages[0] == {"role": "system", "content": "Judge fluency."}
    assert messages[1]["content"].startswith("c / r\n\nFirst, write out")


@pytest.mark.parametrize(
    ("edit", "field", "problem"),
    [
        (lambda s: s.replace("eval_type: cot_classify", "eval_type: judge"), "eval_type", "is not one of"),
        (lambda s: s.replace('"12345"', '["1", "2."]'), "choice_strings", "punctuation"),
        (lambda s: s.replace("from_strings", "{'1': 1, '2': 2}"), "choice_scores", "no score for choice"),
        (
            lambda s: s.replace("choice_scores: from_strings", "choice_scores: {a: 1}").replace(
                '"12345"', '"ab"'
            ),
            "choice_scores",
            "no score for choice(s) b",
        ),
        (lambda s: s.replace('"12345"', '"ABC"'), "choice_scores", "could not convert"),
        (lambda s: s.replace("from_strings", "[1, 2]"), "choice_scores", "expected a mapping"),
        (
            lambda s: s.replace("input_outputs: {context: response}", "input_outputs: [context]"),
            "input_outputs",
            "expected",
        ),
        (lambda s: s.replace("Reply: {response}", "Reply: {response"), "prompt", "braces"),
        (lambda s: s.replace("match_fn", "x") + "match_fn: fuzzy\n", "match_fn", "is not one of"),
        (lambda s: s + "parser: loose\n", "parser", "is not one of"),
        (lambda s: s + "invalid_score: 0\n", "invalid_score", "expected"),
        (lambda s: s.replace("eval_type: cot_classify\n", ""), "eval_type", "required when answer_prompt"),
        (lambda s: s.split("choice_strings")[0], "choice_strings", "missing"),
    ],
)
def test_spec_errors_are_one_line_naming_file_and_field(tmp_path, edit, field, problem):
    path = write(tmp_path, edit(SPEC))
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    message = str(caught.value)
    assert "\n" not in message
    assert message.startswith(f"{path}: {field}: ")
    assert problem in message


def test_broken_yaml_and_missing_files_are_spec_errors(tmp_path):
    with pytest.raises(SpecError, match=r"judge.yaml: \(yaml\): line \d+"):
        load_spec(write(tmp_path, "prompt: [unclosed\n"))
    with pytest.raises(SpecError, match=r"nope.yaml: \(file\): cannot read"):
        load_spec(tmp_path / "nope.yaml")
    with pytest.raises(SpecError, match=r"list.yaml: \(document\): expected a mapping"):
        load_spec(write(tmp_path, "- a\n", name="list.yaml"))


def test_from_n_specs_resolve_choices_per_run():
    spec = spec_from_mapping({
        "prompt": "Pick the best of {n}: {completion}", "choice_strings": "from_n",
        "input_outputs": {"input": "completion"}, "eval_type": "classify",
        "output_template": "{i}. {output}\n",
    })  # fmt: skip
    messages = build_judge_messages(spec, {"input": "q"}, {"completion": ["x", "y", "z"]}, multicomp_n=3)
    assert messages[0]["content"].startswith("Pick the best of 3: 1. x\n2. y\n3. z\n\nAnswer the question")
    assert grade_reply(spec, "3", multicomp_n=3)["choice"] == "3"


# The strict parser: a named mode of our own, never the default.
@pytest.mark.parametrize(
    ("text", "eval_type", "choices", "evals", "strict"),
    [
        ("Answer: B", "classify", list("ABCDE"), "A", "B"),
        ("No", "classify", ["Y", "N"], "N", INVALID),
        ("12", "classify", [str(i) for i in range(1, 13)], "1", "12"),
        ("（B）", "classify", list("ABCDE"), INVALID, "B"),
        ("“B”", "classify", list("ABCDE"), INVALID, "B"),
        ("** Yes **", "classify", ["Yes", "No"], INVALID, "Yes"),
        ("N Y", "classify", ["Y", "N"], "Y", INVALID),
        ("Reasoning first.\nScore: 4", "cot_classify", list("12345"), "4", "4"),
        ("评分：4", "cot_classify", list("12345"), "4", "4"),
        ("Final answer 3\nN Y", "cot_classify", list("123"), "3", "3"),
        ("b", "classify", list("ABCDE"), INVALID, INVALID),
        ("Yesterday", "classify", ["Yes", "No"], "Yes", INVALID),
    ],
)
def test_strict_parser_uses_word_boundaries(text, eval_type, choices, evals, strict):
    assert get_choice(text, eval_type, choices) == evals
    assert get_choice(text, eval_type, choices, parser=STRICT) == strict


def test_strict_parser_is_opt_in_per_spec(tmp_path):
    evals_spec = load_spec(
        write(tmp_path, SPEC.replace('"12345"', '"ABCDE"').replace("from_strings", "null"))
    )
    strict_spec = load_spec(write(tmp_path, SPEC.replace('"12345"', '"ABCDE"').replace("from_strings", "null")
                                  + "parser: strict\n", name="strict.yaml"))  # fmt: skip
    assert grade_reply(evals_spec, "Answer: B")["choice"] == "A"
    assert grade_reply(strict_spec, "Answer: B")["choice"] == "B"
