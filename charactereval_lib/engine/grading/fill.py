"""Filling a model-graded prompt template exactly as openai/evals does.

The order of operations matters and is the oracle's: the sample's *input* fields get their
braces doubled first (and the grader sees the doubled text, because inserted values are never
formatted again); completions, ideals and spec arguments go in verbatim; several completions
are numbered with the spec's output template and joined.
"""

from __future__ import annotations

import string
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from charactereval_lib.engine.grading.errors import MissingTemplateKeyError

Messages = list[dict[str, str]]

_ROLE_PREFIX_BY_NAME = {"example_user": "User: ", "example_assistant": "Assistant: "}


def double_braces(text: str) -> str:
    """evals rule: an input field's `{` and `}` are doubled before anything else happens."""
    return text.replace("{", "{{").replace("}", "}}")


def is_chat_prompt(value: Any) -> bool:
    """A list of messages, each a mapping with `role` and `content`."""
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(m, Mapping) and "role" in m and "content" in m for m in value)
    )


def scrub_sample(sample: Mapping[str, Any], input_keys: Iterable[str]) -> dict[str, Any]:
    """Return a copy of `sample` whose input fields have doubled braces.

    evals rule: every input key of `input_outputs` is scrubbed; for a chat prompt each
    message's content is. Other fields are left alone.
    """
    scrubbed = dict(sample)
    for key in input_keys:
        value = scrubbed.get(key)
        if isinstance(value, str):
            scrubbed[key] = double_braces(value)
        elif is_chat_prompt(value):
            scrubbed[key] = [{**m, "content": double_braces(m["content"])} for m in value]
    return scrubbed


def chat_to_text(messages: Sequence[Mapping[str, str]]) -> str:
    """evals rule: a single message gives its content; several give one line each, `prefix +
    content + "\\n"` (trailing newline kept). System messages have no prefix unless their name
    is example_user/example_assistant (`User: `/`Assistant: `); other roles get `Role: `."""
    if len(messages) == 1:
        return messages[0]["content"]
    lines = []
    for message in messages:
        prefix = _ROLE_PREFIX_BY_NAME.get(message.get("name", ""))
        if prefix is None:
            role = message["role"]
            prefix = "" if role == "system" else f"{role.capitalize()}: "
        lines.append(prefix + message["content"] + "\n")
    return "".join(lines)


def format_value(value: Any) -> str:
    """evals rule: strings as they are, chat prompts as `chat_to_text`, anything else `str()`
    (a list ideal becomes `['a', 'b']`, a dict `{'k': 'v'}`)."""
    if isinstance(value, str):
        return value
    if is_chat_prompt(value):
        return chat_to_text(value)
    return str(value)


def join_completions(outputs: Sequence[str], output_template: str, n: int) -> str:
    """evals rule for several completions: each is formatted with `output_template` (fields
    `i` from 1, `i_abc`, `i_ABC`, `output`, `n`), the pieces are concatenated and only the
    whole result is trimmed."""
    pieces = [
        output_template.format(
            i=index + 1,
            i_abc=string.ascii_lowercase[index % 26],
            i_ABC=string.ascii_uppercase[index % 26],
            output=output,
            n=n,
        )
        for index, output in enumerate(outputs)
    ]
    return "".join(pieces).strip()


def template_fields(template: str) -> list[str]:
    """The fields a format template needs, in order of first appearance."""
    fields: list[str] = []
    for _, name, _, _ in string.Formatter().parse(template):
        if name is not None and name not in fields:
            fields.append(name)
    return fields


def prompt_fields(prompt: str | Sequence[Mapping[str, str]]) -> list[str]:
    """Fields needed by a string prompt or by all messages of a chat prompt."""
    contents = [prompt] if isinstance(prompt, str) else [m["content"] for m in prompt]
    fields: list[str] = []
    for content in contents:
        fields.extend(name for name in template_fields(content) if name not in fields)
    return fields


def format_kwargs(
    scrubbed_sample: Mapping[str, Any],
    completions: Mapping[str, str],
    spec_args: Mapping[str, Any] | None,
    n: int,
) -> dict[str, str]:
    """The values a template is filled with.

    evals rule: completions, then sample fields, then spec arguments, a later source winning a
    name clash; `n` is always the number of completions. Values become text by `format_value`.
    """
    merged: dict[str, Any] = {**completions, **scrubbed_sample, **(spec_args or {})}
    merged["n"] = n
    return {key: format_value(value) for key, value in merged.items()}


def fill_prompt(prompt: str | Sequence[Mapping[str, str]], values: Mapping[str, str]) -> Messages:
    """Format the template once with `values` and return chat messages.

    evals rule: a field the template needs but `values` lacks raises
    `MissingTemplateKeyError` ("Required: [...], got: [...]."); unused values are ignored;
    inserted values are never formatted again. A string prompt becomes one user message.
    """
    required = prompt_fields(prompt)
    if any(name not in values for name in required):
        raise MissingTemplateKeyError(f"Required: {required}, got: {sorted(values)}.")
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt.format(**values)}]
    return [{**message, "content": message["content"].format(**values)} for message in prompt]
