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

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import BeforeValidator, ConfigDict, field_validator, model_validator

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
from charactereval_lib.engine.validation import Document, expect, is_number, problem, validate

SPEC_EVAL_TYPE = object()
"""Default of `eval_type` arguments: the spec's own eval type when its `answer_prompt` is on."""

INVALID_SCORES = ("min", None)


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


def _one_of(names: Sequence[str], optional: bool = False) -> BeforeValidator:
    def check(value: Any) -> Any:
        if not (optional and value is None) and value not in names:
            raise problem(f"{value!r} is not one of {', '.join(names)}")
        return value

    return BeforeValidator(check)


def _required(what: str, check: Callable[[Any], bool]) -> BeforeValidator:
    """``expect``, with a field given as null missing: evals reads null as absent."""
    checked = expect(what, check).func

    def validate(value: Any) -> Any:
        if value is None:
            raise problem("missing (required)")
        return checked(value)

    validate.expected = what  # type: ignore[attr-defined]
    return BeforeValidator(validate)


def _is_prompt(prompt: Any) -> bool:
    if isinstance(prompt, str):
        return True
    return isinstance(prompt, list) and bool(prompt) and all(
        isinstance(m, Mapping) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
        for m in prompt)


_Mapping = Annotated[Any, expect("a mapping", lambda v: v is None or isinstance(v, Mapping))]


class SpecDocument(Document):
    """A spec file as written. Fields it does not know are ignored, as evals ignores them
    (``spec_from_mapping`` names them in ``ignored_fields``)."""

    model_config = ConfigDict(extra="ignore")

    prompt: Annotated[Any, _required("a string or a non-empty list of {role, content} messages", _is_prompt)]
    choice_strings: Annotated[Any, _required(
        "a list of non-empty strings or a non-empty string",
        lambda v: (isinstance(v, str) and bool(v)) or (isinstance(v, list) and all(isinstance(c, str) and c for c in v)))]
    input_outputs: Annotated[Any, _required(
        "a non-empty mapping input field -> output field",
        lambda v: isinstance(v, Mapping) and bool(v) and all(isinstance(k, str) and isinstance(o, str)
                                                             for k, o in v.items()))]
    name: Any = None
    description: str | None = None
    choice_scores: Annotated[Any, expect("a mapping choice -> number, from_strings or null",
                                         lambda v: v is None or v == "from_strings" or isinstance(v, Mapping))] = None
    eval_type: Annotated[str | None, _one_of(EVAL_TYPES, optional=True)] = None
    output_template: str | None = None
    args: _Mapping = None
    match_fn: Annotated[str, _one_of(MATCH_FNS)] = "starts_or_endswith"
    parser: Annotated[str, _one_of(PARSERS)] = EVALS
    answer_prompt: bool = True
    invalid_score: Annotated[str | None, expect("'min' (evals) or null", lambda v: v in INVALID_SCORES)] = "min"
    metadata: _Mapping = None

    @field_validator("prompt")
    @classmethod
    def _braces_parse(cls, prompt: Any) -> Any:
        try:
            prompt_fields(tuple(prompt) if isinstance(prompt, list) else prompt)
        except ValueError as error:
            raise problem(f"bad template braces ({error}); write a literal brace as {{{{ or }}}}") from None
        return prompt

    @model_validator(mode="after")
    def _consistent(self) -> SpecDocument:
        if self.answer_prompt and self.eval_type is None:
            raise problem("required when answer_prompt is true", at="eval_type")
        if isinstance(self.choice_strings, str) and self.choice_strings.startswith("from_n"):
            # These depend on the number of completions, known only at run time.
            return self
        strings = tuple(self.choice_strings) if isinstance(self.choice_strings, list) else self.choice_strings
        try:
            choices = resolve_choice_strings(strings)
        except GradingError as error:
            raise problem(str(error), at="choice_strings") from None
        try:
            scores = resolve_choice_scores(self.choice_scores, choices)
        except GradingError as error:
            raise problem(str(error), at="choice_scores") from None
        if scores is None:
            return self
        missing = [choice for choice in choices if choice not in scores]
        if missing:
            raise problem(f"no score for choice(s) {', '.join(missing)}", at="choice_scores")
        if not all(is_number(v) for v in scores.values()):
            raise problem("every score must be a number", at="choice_scores")
        return self


def spec_from_mapping(data: Any, source: str = "<spec>", name: str | None = None) -> ModelGradedSpec:
    """Validate a parsed spec document (``SpecDocument``) and build the spec.

    Any problem raises `SpecError` with one line `SOURCE: FIELD: problem`. Checks: required
    fields and the types of known ones (unknown fields are kept in `ignored_fields`, as evals
    ignores them); choices resolvable and free of ASCII punctuation (evals
    rule); a score map that scores every choice (stricter than evals, which fails only when the
    unscored choice is parsed); known eval type, match function, parser; a template whose
    braces parse.
    """
    document = validate(SpecDocument, data, source, SpecError, root="(document)")
    prompt = document.prompt if isinstance(document.prompt, str) else tuple(dict(m) for m in document.prompt)
    choice_strings = document.choice_strings
    spec = ModelGradedSpec(
        name=str(document.name or name or Path(source).stem),
        prompt=prompt,
        choice_strings=tuple(choice_strings) if isinstance(choice_strings, list) else choice_strings,
        input_outputs=dict(document.input_outputs),
        choice_scores=document.choice_scores,
        eval_type=document.eval_type,
        output_template=document.output_template,
        args=dict(document.args or {}),
        match_fn=document.match_fn,
        parser=document.parser,
        answer_prompt=document.answer_prompt,
        invalid_score=document.invalid_score,
        description=document.description or "",
        metadata=dict(document.metadata or {}),
        source=source,
        ignored_fields=tuple(sorted(str(key) for key in set(data) - set(SpecDocument.accepted_keys()))),
    )
    return spec


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
