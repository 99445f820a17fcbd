"""The grading engine's `evals` mode against every golden vector of openai/evals.

The vectors live outside the repository (the directory in $EVALS_GOLDEN_DIR); without them
these tests skip with the reason.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from charactereval_lib.engine.grading import choices as ch
from charactereval_lib.engine.grading import errors
from charactereval_lib.engine.grading import strings as sm
from charactereval_lib.engine.grading.metaeval import aggregate_run, evals_execution_order, metascore
from charactereval_lib.engine.grading.spec import ModelGradedSpec, build_judge_messages, grade_reply, needed_outputs

GOLDEN_ENV = "EVALS_GOLDEN_DIR"


def golden_dir() -> Path | None:
    value = os.environ.get(GOLDEN_ENV)
    return Path(value) if value and Path(value).is_dir() else None


def load(name: str) -> list[dict[str, Any]]:
    path = golden_dir()
    if path is None:
        pytest.skip(
            f"evals golden vectors not found: set {GOLDEN_ENV} (CI always sets it)"
        )
    with open(path / name, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle]


# The evals exception each of our types stands for (our types also derive from it).
ERROR_TYPES = {
    ("AssertionError", "choice"): errors.ChoicePunctuationError,
    ("KeyError", "eval_type"): errors.UnknownEvalTypeError,
    ("AttributeError", "parse"): errors.MissingEvalTypeError,
    ("KeyError", "score"): errors.UnscoredChoiceError,
    ("ValueError", "score"): errors.ScoreMapError,
    ("AssertionError", "fill"): errors.MissingTemplateKeyError,
    ("AssertionError", "metaeval"): errors.MissingLabelError,
    ("JSONDecodeError", "json"): errors.InvalidIdealError,
    ("ValueError", "fuzzy"): errors.EmptyIdealsError,
}


def expected_error(row_error: dict[str, str], where: str) -> type[Exception]:
    return ERROR_TYPES[(row_error["type"], where)]


def test_vector_counts_are_the_documented_ones():
    counts = {name: len(load(name)) for name in (
        "answer_prompts.jsonl", "get_choice.jsonl", "scores.jsonl",
        "string_match.jsonl", "fill.jsonl", "meta_eval.jsonl",
    )}  # fmt: skip
    assert counts == {
        "answer_prompts.jsonl": 54, "get_choice.jsonl": 13161, "scores.jsonl": 122,
        "string_match.jsonl": 116, "fill.jsonl": 29, "meta_eval.jsonl": 7,
    }  # fmt: skip


def test_answer_prompts():
    mismatches = []
    for row in load("answer_prompts.jsonl"):
        try:
            resolved = ch.resolve_choice_strings(row["choice_strings_spec"], row["n"])
            got = {"resolved_choices": resolved, "choices_rendered": ch.render_choices(resolved)}
            got["appended_text"] = ch.answer_suffix(row["eval_type"], resolved)
            if "example_prompt_in" in row:
                got["example_prompt_out"] = ch.append_answer_prompt(
                    row["example_prompt_in"], row["eval_type"], resolved
                )
        except errors.GradingError as error:
            if row["error"] is None:
                mismatches.append((row["id"], repr(error)))
                continue
            where = "choice" if row["error"]["type"] == "AssertionError" else "eval_type"
            if not isinstance(error, expected_error(row["error"], where)):
                mismatches.append((row["id"], repr(error), row["error"]))
            elif row["resolved_choices"] is not None and got["resolved_choices"] != row["resolved_choices"]:
                mismatches.append((row["id"], "resolved before the error", got))
            continue
        if row["error"] is not None:
            mismatches.append((row["id"], "expected an error", row["error"]))
            continue
        want = {key: row[key] for key in got}
        if got != want:
            mismatches.append((row["id"], got, want))
    assert not mismatches, mismatches[:5]


def test_string_prompt_becomes_one_user_message():
    assert ch.append_answer_prompt("BASE", "classify", ["Y"])[0]["role"] == "user"


def test_get_choice_all_rows():
    mismatches = []
    rows = load("get_choice.jsonl")
    for row in rows:
        try:
            result = ch.get_choice(row["text"], row["eval_type"], row["choice_strings"], row["match_fn"])
        except errors.MissingEvalTypeError as error:
            if row["error"] is None or row["error"]["type"] != "AttributeError":
                mismatches.append((row["id"], repr(error)))
            continue
        if row["error"] is not None or result != row["result"] or (result == ch.INVALID) != row["is_invalid"]:
            mismatches.append((row["id"], row["text"], row["choice_strings"], result, row["result"]))
    assert not mismatches, f"{len(mismatches)} of {len(rows)} rows differ, first: {mismatches[:5]}"


def test_scores():
    mismatches = []
    for row in load("scores.jsonl"):
        resolved = ch.resolve_choice_strings(row["choice_strings_spec"], row["n"])
        assert resolved == row["resolved_choices"], row["id"]
        try:
            score = ch.score_choice(row["choice"], resolved, row["choice_scores_spec"])
        except errors.GradingError as error:
            if row["error"] is None or not isinstance(error, expected_error(row["error"], "score")):
                mismatches.append((row["id"], repr(error), row["error"]))
            continue
        if row["error"] is not None or score != row["score"] or type(score) is not type(row["score"]):
            mismatches.append((row["id"], score, row["score"], row["error"]))
    assert not mismatches, mismatches[:5]


def test_string_matchers():
    mismatches = []
    graders = {
        "match": lambda s, i: asdict(sm.match(s, i)),
        "includes": lambda s, i: asdict(sm.includes(s, i)),
        "includes_ignore_case": lambda s, i: asdict(sm.includes(s, i, ignore_case=True)),
        "fuzzy_match": fuzzy_as_vector,
        "json_match": lambda s, i: asdict(sm.json_match(s, i)),
        "normalize": lambda s, i: {
            "sampled": sm.normalize(s),
            "ideal": [sm.normalize(x) for x in ideal_list(i)],
        },
    }
    where = {"fuzzy_match": "fuzzy", "json_match": "json"}
    for row in load("string_match.jsonl"):
        for name, grade in graders.items():
            want = row[name]
            try:
                got = grade(row["sampled"], row["ideal"])
            except errors.GradingError as error:
                if "error" not in want or not isinstance(error, expected_error(want["error"], where[name])):
                    mismatches.append((row["id"], name, repr(error), want))
                elif want["error"]["type"] == "JSONDecodeError" and want["error"]["message"] not in str(
                    error
                ):
                    mismatches.append((row["id"], name, str(error), want))
                continue
            if got != want or _types(got) != _types(want):
                mismatches.append((row["id"], name, row["sampled"], row["ideal"], got, want))
    assert not mismatches, f"{len(mismatches)} differ, first: {mismatches[:5]}"


def ideal_list(ideal):
    return [ideal] if isinstance(ideal, str) else ideal


def fuzzy_as_vector(sampled, ideal):
    result = asdict(sm.fuzzy_match(sampled, ideal))
    result["f1_score_type"] = type(result["f1_score"]).__name__
    return result


def _types(value):
    # F1 is the integer 0 when nothing overlaps: int vs float must match too.
    if isinstance(value, dict):
        return {key: _types(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_types(item) for item in value]
    return type(value).__name__


# Registry facts the fill and meta-eval vectors rely on: choices and scores from scores.jsonl,
# the spec-level eval type from fill.jsonl.
def registry_specs() -> dict[str, dict[str, Any]]:
    facts: dict[str, dict[str, Any]] = {}
    for row in load("scores.jsonl"):
        if row["source"] == "registry":
            facts.setdefault(row["spec"], {
                "choice_strings": row["choice_strings_spec"], "choice_scores": row["choice_scores_spec"],
            })  # fmt: skip
    for row in load("fill.jsonl"):
        facts[row["spec"]].update(
            prompt=row["spec_prompt_template"],
            eval_type=row["spec_eval_type"],
            input_outputs=row["spec_input_outputs"],
            output_template=row["spec_output_template"],
        )
    return facts


def make_spec(name: str, facts: dict[str, Any]) -> ModelGradedSpec:
    return ModelGradedSpec(
        name=name,
        prompt=facts["prompt"],
        choice_strings=facts["choice_strings"],
        input_outputs=facts["input_outputs"],
        choice_scores=facts["choice_scores"],
        eval_type=facts["eval_type"],
        output_template=facts["output_template"],
    )


def policy_completions(spec, sample, policy_outputs, multicomp_n, n_models):
    """What the scripted policy models return, in the order evals calls them."""
    queues = [list(outputs) for outputs in (policy_outputs or [])]
    completions, prompts = {}, [[] for _ in queues]
    for input_key, output_key in needed_outputs(spec, sample):
        callers = range(n_models) if multicomp_n == "from_models" else [0] * multicomp_n
        completions[output_key] = [queues[model].pop(0) for model in callers]
        for model in callers:
            prompts[model].append(sample[input_key])
    assert all(not queue for queue in queues), "every scripted output is used"
    return completions, [p for p in prompts if p]


def test_fill():
    facts = registry_specs()
    mismatches = []
    for row in load("fill.jsonl"):
        args = row["eval_args"]
        spec = make_spec(row["spec"], facts[row["spec"]])
        n = (
            row["eval_args"]["n_policy_models"]
            if args["multicomp_n"] == "from_models"
            else args["multicomp_n"]
        )
        completions, policy_prompts = policy_completions(
            spec, row["sample"], row["policy_outputs"], args["multicomp_n"], args["n_policy_models"]
        )
        # The policy sees the original text: doubled braces are formatted back exactly once.
        if policy_prompts != row["policy_prompts"]:
            mismatches.append((row["id"], "policy prompts", policy_prompts))
        try:
            messages = build_judge_messages(
                spec, row["sample"], completions, eval_type=args["eval_type"],
                multicomp_n=n, spec_args=args["modelgraded_spec_args"],
            )  # fmt: skip
        except errors.MissingTemplateKeyError as error:
            if row["error"] is None or str(error) != row["error"]["message"]:
                mismatches.append((row["id"], repr(error), row["error"]))
            continue
        if messages != row["grader_prompt"] or messages[-1]["content"] != row["grader_prompt_text"]:
            mismatches.append((row["id"], messages, row["grader_prompt"]))
            continue
        try:
            record = grade_reply(spec, row["judge_output"], eval_type=args["eval_type"],
                                 multicomp_n=n, match_fn=args["match_fn"])  # fmt: skip
        except errors.MissingEvalTypeError as error:
            if row["error"] is None or row["error"]["type"] != "AttributeError":
                mismatches.append((row["id"], repr(error)))
            continue
        got = {"choice": record["choice"], "score": record["score"]}
        if row["error"] is not None or got != row["recorded_metrics"] or record["choice"] != row["choice"]:
            mismatches.append((row["id"], got, row["recorded_metrics"], row["error"]))
    assert not mismatches, mismatches[:3]


def test_meta_eval():
    facts = registry_specs()
    mismatches = []
    for row in load("meta_eval.jsonl"):
        spec_facts = dict(facts[row["spec"]], choice_scores=row["spec_choice_scores"])
        spec_facts.setdefault("eval_type", None)
        spec_facts.setdefault("output_template", None)
        spec_facts.setdefault("prompt", "")
        spec_facts.setdefault("input_outputs", {"input": "completion"})
        spec = make_spec(row["spec"], spec_facts)
        eval_type = row["eval_args"]["eval_type"]
        records = []
        for sample in row["samples"]:
            record = grade_reply(spec, sample["judge_output"], eval_type=eval_type)
            records.append(record)
            if sample["label"] is None:
                continue
            got = (record["choice"], record["score"], metascore(record["choice"], sample["label"]))
            if got != (sample["choice"], sample["score"], sample["metascore"]):
                mismatches.append((row["id"], sample["index"], got))
        labels = [sample["sample"].get("choice") for sample in row["samples"]]
        order = evals_execution_order(len(records))
        try:
            result = aggregate_run([records[i] for i in order], [labels[i] for i in order])
        except errors.MissingLabelError:
            if row["error"] is None or row["error"]["type"] != "AssertionError":
                mismatches.append((row["id"], "unexpected MissingLabelError"))
            continue
        if order != row["execution_order"] or row["error"] is not None:
            mismatches.append((row["id"], order, row["execution_order"], row["error"]))
        if result != row["run_result"]:
            mismatches.append((row["id"], result, row["run_result"]))
    assert not mismatches, mismatches[:3]


def test_float_sums_follow_the_execution_order():
    rows = {row["id"]: row for row in load("meta_eval.jsonl")}
    row = rows["meta-05"]
    in_file_order = aggregate_run([{"choice": s["choice"], "score": s["score"]} for s in row["samples"]])
    assert in_file_order["score"] == row["score_if_summed_in_file_order"] != row["run_result"]["score"]
