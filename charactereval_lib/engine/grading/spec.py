"""Model-graded specs: a YAML file per judge task, its validation, judge messages and records.

A spec file holds (only `prompt`, `choice_strings` and `input_outputs` are required):

```yaml
prompt: "... {context} ... {response} ..."   # or a list of {role, content} messages
choice_strings: "12345"          # a list, a string of one-character choices, from_n[_abc|_ABC]
choice_scores: from_strings      # a mapping choice -> number, from_strings, or null
eval_type: cot_classify          # classify | classify_cot | cot_classify | cot_classify_jp
input_outputs: {context: response}   # input field -> the output field being judged
output_template: "{i}. {output}\\n"  # numbering of several completions (optional)
args: {}                         # extra template values (evals: modelgraded_spec_args)
match_fn: starts_or_endswith     # exact | endswith | include
parser: evals                    # or strict (ours, word boundaries)
answer_prompt: true              # append the eval type's answer suffix to the prompt
invalid_score: min               # evals: an invalid reply scores the map's minimum; or null
name: ..., description: ..., metadata: {...}   # free documentation
```

A field the list above does not know is ignored, as evals ignores it (its spec class drops
unknown fields: the registry's `humor_out_message` carries `format_type: out_message`); the spec
names such fields in `ignored_fields`, so a typo is still visible.

Semantics follow openai/evals: the answer suffix comes from the *eval-level* eval type (by
default the spec's own when `answer_prompt` is true), while parsing uses the spec's eval type
and falls back to the eval-level one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from charactereval_lib.engine.grading.choices import (
    EVAL_TYPES,
    EVALS,
    INVALID,
    MATCH_FNS,
    PARSERS,
    append_answer_prompt,
    get_choice,
    resolve_choice_scores,
    resolve_choice_strings,
    score_choice,
)
from charactereval_lib.engine.grading.errors import GradingError, SpecError
from charactereval_lib.engine.grading.fill import (
    Messages,
    fill_prompt,
    format_kwargs,
    join_completions,
    prompt_fields,
    scrub_sample,
)

SPEC_EVAL_TYPE = object()
"""Default of `eval_type` arguments: the spec's own eval type when its `answer_prompt` is on."""

INVALID_SCORES = ("min", None)

_FIELDS = {
    "name", "description", "prompt", "choice_strings", "choice_scores", "eval_type",
    "input_outputs", "output_template", "args", "match_fn", "parser", "answer_prompt",
    "invalid_score", "metadata",
}  # fmt: skip
_REQUIRED = ("prompt", "choice_strings", "input_outputs")


@dataclass(frozen=True)
class ModelGradedSpec:
    """One judge task. Field meanings are in the module docstring."""

    name: str
    prompt: str | tuple[Mapping[str, str], ...]
    choice_strings: str | tuple[str, ...]
    input_outputs: Mapping[str, str]
    choice_scores: Mapping[str, float] | str | None = None
    eval_type: str | None = None
    output_template: str | None = None
    args: Mapping[str, Any] = field(default_factory=dict)
    match_fn: str = "starts_or_endswith"
    parser: str = EVALS
    answer_prompt: bool = True
    invalid_score: str | None = "min"
    description: str = ""
    metadata: Mapping[str, Any] = field(default_factory=dict)
    source: str = "<spec>"
    ignored_fields: tuple[str, ...] = ()

    def choices(self, n: int | None = None) -> list[str]:
        """The resolved choice strings (`n` is needed only for the from_n family)."""
        return resolve_choice_strings(self.choice_strings, n)


def _fail(source: str, name: str, problem: str) -> SpecError:
    return SpecError(f"{source}: {name}: {problem}")


def spec_from_mapping(data: Any, source: str = "<spec>", name: str | None = None) -> ModelGradedSpec:
    """Validate a parsed spec document and build the spec.

    Any problem raises `SpecError` with one line `SOURCE: FIELD: problem`. Checks: required
    fields and the types of known ones (unknown fields are kept in `ignored_fields`, as evals
    ignores them); choices resolvable and free of ASCII punctuation (evals
    rule); a score map that scores every choice (stricter than evals, which fails only when the
    unscored choice is parsed); known eval type, match function, parser; a template whose
    braces parse.
    """
    if not isinstance(data, Mapping):
        raise _fail(source, "(document)", f"expected a mapping of fields, got {type(data).__name__}")
    unknown = tuple(sorted(str(key) for key in set(data) - _FIELDS))
    for required in _REQUIRED:
        if data.get(required) is None:
            raise _fail(source, required, "missing (required)")

    prompt = _check_prompt(data["prompt"], source)
    choice_strings = data["choice_strings"]
    if isinstance(choice_strings, list):
        if not all(isinstance(c, str) and c for c in choice_strings):
            raise _fail(source, "choice_strings", "every choice must be a non-empty string")
        choice_strings = tuple(choice_strings)
    elif not isinstance(choice_strings, str) or not choice_strings:
        raise _fail(source, "choice_strings", "expected a list of strings or a non-empty string")

    input_outputs = data["input_outputs"]
    if (
        not isinstance(input_outputs, Mapping)
        or not input_outputs
        or not all(isinstance(k, str) and isinstance(v, str) for k, v in input_outputs.items())
    ):
        raise _fail(source, "input_outputs", "expected a non-empty mapping input field -> output field")

    choice_scores = data.get("choice_scores")
    if not (choice_scores is None or choice_scores == "from_strings" or isinstance(choice_scores, Mapping)):
        raise _fail(source, "choice_scores", "expected a mapping choice -> number, from_strings or null")

    eval_type = data.get("eval_type")
    if eval_type is not None and eval_type not in EVAL_TYPES:
        raise _fail(source, "eval_type", f"{eval_type!r} is not one of {', '.join(EVAL_TYPES)}")
    match_fn = data.get("match_fn", "starts_or_endswith")
    if match_fn not in MATCH_FNS:
        raise _fail(source, "match_fn", f"{match_fn!r} is not one of {', '.join(MATCH_FNS)}")
    parser = data.get("parser", EVALS)
    if parser not in PARSERS:
        raise _fail(source, "parser", f"{parser!r} is not one of {', '.join(PARSERS)}")
    answer_prompt = data.get("answer_prompt", True)
    if not isinstance(answer_prompt, bool):
        raise _fail(source, "answer_prompt", "expected true or false")
    if answer_prompt and eval_type is None:
        raise _fail(source, "eval_type", "required when answer_prompt is true")
    invalid_score = data.get("invalid_score", "min")
    if invalid_score not in INVALID_SCORES:
        raise _fail(source, "invalid_score", "expected 'min' (evals) or null")
    args = data.get("args") or {}
    if not isinstance(args, Mapping):
        raise _fail(source, "args", "expected a mapping")
    metadata = data.get("metadata") or {}
    if not isinstance(metadata, Mapping):
        raise _fail(source, "metadata", "expected a mapping")
    output_template = data.get("output_template")
    if output_template is not None and not isinstance(output_template, str):
        raise _fail(source, "output_template", "expected a string")
    description = data.get("description") or ""
    if not isinstance(description, str):
        raise _fail(source, "description", "expected a string")

    spec = ModelGradedSpec(
        name=str(data.get("name") or name or Path(source).stem),
        prompt=prompt,
        choice_strings=choice_strings,
        input_outputs=dict(input_outputs),
        choice_scores=choice_scores,
        eval_type=eval_type,
        output_template=output_template,
        args=dict(args),
        match_fn=match_fn,
        parser=parser,
        answer_prompt=answer_prompt,
        invalid_score=invalid_score,
        description=description,
        metadata=dict(metadata),
        source=source,
        ignored_fields=unknown,
    )
    _check_choices_and_scores(spec, source)
    return spec


def _check_prompt(prompt: Any, source: str) -> str | tuple[Mapping[str, str], ...]:
    if isinstance(prompt, str):
        checked: str | tuple[Mapping[str, str], ...] = prompt
    elif (
        isinstance(prompt, list)
        and prompt
        and all(
            isinstance(m, Mapping) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
            for m in prompt
        )
    ):
        checked = tuple(dict(m) for m in prompt)
    else:
        raise _fail(source, "prompt", "expected a string or a non-empty list of {role, content} messages")
    try:
        prompt_fields(checked)
    except ValueError as error:
        raise _fail(
            source, "prompt", f"bad template braces ({error}); write a literal brace as {{{{ or }}}}"
        ) from None
    return checked


def _check_choices_and_scores(spec: ModelGradedSpec, source: str) -> None:
    if isinstance(spec.choice_strings, str) and spec.choice_strings.startswith("from_n"):
        # These depend on the number of completions, known only at run time.
        return
    try:
        choices = spec.choices()
    except GradingError as error:
        raise _fail(source, "choice_strings", str(error)) from None
    try:
        scores = resolve_choice_scores(spec.choice_scores, choices)
    except GradingError as error:
        raise _fail(source, "choice_scores", str(error)) from None
    if scores is None:
        return
    missing = [choice for choice in choices if choice not in scores]
    if missing:
        raise _fail(source, "choice_scores", f"no score for choice(s) {', '.join(missing)}")
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in scores.values()):
        raise _fail(source, "choice_scores", "every score must be a number")


def load_spec(path: str | Path) -> ModelGradedSpec:
    """Read and validate one YAML spec file (`SpecError` naming file and field on a problem)."""
    path = Path(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise SpecError(f"{path}: (file): cannot read: {error.strerror or error}") from None
    except yaml.YAMLError as error:
        where = getattr(error, "problem_mark", None)
        line = f"line {where.line + 1}: " if where is not None else ""
        problem = getattr(error, "problem", None) or "invalid YAML"
        raise SpecError(f"{path}: (yaml): {line}{problem}") from None
    return spec_from_mapping(data, source=str(path), name=path.stem)


def _answer_eval_type(spec: ModelGradedSpec, eval_type: Any) -> str | None:
    if eval_type is SPEC_EVAL_TYPE:
        return spec.eval_type if spec.answer_prompt else None
    return eval_type


def needed_outputs(spec: ModelGradedSpec, sample: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(input field, output field) pairs whose output must still be generated.

    evals rule: an output field already present in the sample is used as it is.
    """
    return [(i, o) for i, o in spec.input_outputs.items() if o not in sample]


def build_judge_messages(
    spec: ModelGradedSpec,
    sample: Mapping[str, Any],
    completions: Mapping[str, Sequence[str]] | None = None,
    *,
    eval_type: Any = SPEC_EVAL_TYPE,
    multicomp_n: int = 1,
    spec_args: Mapping[str, Any] | None = None,
) -> Messages:
    """The messages sent to the judge for one sample, exactly as evals fills them.

    `sample` holds the fields (inputs, and outputs already known); `completions` maps each
    output field missing from the sample to its generated outputs (`multicomp_n` of them).
    `eval_type` is the eval-level type that selects the answer suffix (None: no suffix);
    `spec_args` override the spec's `args`.

    evals rules: input fields get doubled braces; one completion is inserted as it is, several
    are numbered with `output_template` and joined (`join_completions`); template values are
    completions < sample < spec arguments, plus `n`; the suffix goes after a blank line at the
    end of the last message.
    """
    scrubbed = scrub_sample(sample, spec.input_outputs)
    inserted: dict[str, str] = {}
    for output_key, outputs in (completions or {}).items():
        if output_key in sample:
            continue
        if multicomp_n > 1:
            if spec.output_template is None:
                raise GradingError(f"{spec.source}: output_template: needed for {multicomp_n} completions")
            inserted[output_key] = join_completions(outputs, spec.output_template, multicomp_n)
        else:
            inserted[output_key] = outputs[0]
    values = format_kwargs(scrubbed, inserted, {**spec.args, **(spec_args or {})}, multicomp_n)
    messages = fill_prompt(spec.prompt, values)
    answer_type = _answer_eval_type(spec, eval_type)
    if answer_type is None:
        return messages
    return append_answer_prompt(messages, answer_type, spec.choices(multicomp_n))


def grade_reply(
    spec: ModelGradedSpec,
    reply: str,
    *,
    eval_type: Any = SPEC_EVAL_TYPE,
    multicomp_n: int = 1,
    match_fn: str | None = None,
) -> dict[str, Any]:
    """Parse one judge reply into a record `{choice, score, invalid, reply, spec, eval_type,
    parser, match_fn}`.

    evals rules: the parse type is the spec's eval type, else the eval-level one (neither:
    `MissingEvalTypeError`); choices are parsed by `get_choice` with the spec's parser; the
    score comes from `score_choice` (an invalid reply scores the map's minimum). A spec with
    `invalid_score: null` records None for an invalid reply instead, so means exclude it while
    the `invalid` flag still counts it.
    """
    parse_type = spec.eval_type or _answer_eval_type_for_parse(eval_type)
    match_fn = match_fn or spec.match_fn
    choices = spec.choices(multicomp_n)
    choice = get_choice(reply, parse_type, choices, match_fn, spec.parser)
    invalid = choice == INVALID
    if invalid and spec.invalid_score is None:
        score = None
    else:
        score = score_choice(choice, choices, spec.choice_scores)
    return {
        "choice": choice,
        "score": score,
        "invalid": invalid,
        "reply": reply,
        "spec": spec.name,
        "eval_type": parse_type,
        "parser": spec.parser,
        "match_fn": match_fn,
    }


def _answer_eval_type_for_parse(eval_type: Any) -> str | None:
    # The sentinel means "the spec's type", which the caller already found missing.
    return None if eval_type is SPEC_EVAL_TYPE else eval_type
