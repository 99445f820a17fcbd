"""Filling a model-graded prompt template exactly as openai/evals does.

The order of operations matters and is the oracle's: the sample's *input* fields get their
braces doubled first (and the grader sees the doubled text, because inserted values are never
formatted again); completions, ideals and spec arguments go in verbatim; several completions
are numbered with the spec's output template and joined. Values keep their types until the
template formats them (`{score:.2f}`, `{x!r}`); only chat prompts become text first.

A sample evals would crash on is refused with `SampleRefusedError` naming the field, never
rendered into a prompt.
"""

from __future__ import annotations

import string
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from charactereval_lib.engine.grading.errors import MissingTemplateKeyError, SampleRefusedError

Messages = list[dict[str, str]]

# evals looks the prefix up by the message's name when it has one, else by its role.
_PREFIX_BY_SPEAKER = {"system": "", "example_user": "User: ", "example_assistant": "Assistant: "}

# evals passes the template values as keyword arguments to functions whose own parameters have
# these names (format_prompt(prompt, allow_missing, **kwargs), format_necessary(template, ...)):
# a value of the same name is a TypeError there.
RESERVED_KEYS = ("prompt", "template", "allow_missing")


def double_braces(text: str) -> str:
    """evals rule: an input field's `{` and `}` are doubled before anything else happens."""
    return text.replace("{", "{{").replace("}", "}}")


def is_chat_prompt(value: Any) -> bool:
    """evals rule: a list whose items are all mappings (an empty list too); whether they hold
    `role` and `content` is found out only when the list is rendered."""
    return isinstance(value, list) and all(isinstance(m, Mapping) for m in value)


def scrub_sample(sample: Mapping[str, Any], input_keys: Iterable[str]) -> dict[str, Any]:
    """Return a copy of `sample` whose input fields have doubled braces.

    evals rule: every input key of `input_outputs` is scrubbed; for a chat prompt the content
    of each message that has one. Other fields are left alone. An input field that is missing,
    or neither text nor a chat prompt, is refused (`SampleRefusedError`; evals crashes).
    """
    scrubbed = dict(sample)
    for key in input_keys:
        if key not in scrubbed:
            raise SampleRefusedError(f"input field {key!r} is missing")
        value = scrubbed[key]
        if isinstance(value, str):
            scrubbed[key] = double_braces(value)
        elif is_chat_prompt(value):
            if any("content" in m and not isinstance(m["content"], str) for m in value):
                raise SampleRefusedError(f"input field {key!r}: a message's content is not text")
            scrubbed[key] = [{**m, "content": double_braces(m["content"])} if "content" in m else m for m in value]
        else:
            raise SampleRefusedError(
                f"input field {key!r} is a {type(value).__name__}, not text or a list of chat messages"
            )
    return scrubbed


def chat_to_text(messages: Sequence[Mapping[str, Any]], field: str = "value") -> str:
    """evals rule: no message gives ''; a single message gives its content as it is; several
    give one line each, `prefix + content + "\\n"` (trailing newline kept), and the whole text
    loses its leading whitespace. The prefix is looked up by the message's `name` when present
    (any name), else its `role`: `system` has none, `example_user`/`example_assistant` are
    `User: `/`Assistant: `, anything else is capitalised with `: `. A message without content
    (or without both name and role, among several) is refused, naming `field`."""
    for index, message in enumerate(messages):
        if "content" not in message:
            raise SampleRefusedError(f"field {field!r}: chat message {index} has no 'content'")
    if len(messages) == 1:
        return messages[0]["content"]
    lines = []
    for index, message in enumerate(messages):
        speaker = message.get("name", message.get("role"))
        if not isinstance(speaker, str):
            raise SampleRefusedError(f"field {field!r}: chat message {index} has no text 'name' or 'role'")
        prefix = _PREFIX_BY_SPEAKER.get(speaker, f"{speaker.capitalize()}: ")
        lines.append(f"{prefix}{message['content']}\n")
    return "".join(lines).lstrip()


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
) -> dict[str, Any]:
    """The values a template is filled with.

    evals rules: completions, then sample fields, then spec arguments, a later source winning a
    name clash; `n` is always the number of completions (an int). Every chat-prompt value
    becomes text (`chat_to_text`), whether the template uses it or not; every other value keeps
    its type, so the template's format spec and conversion apply to it (a list ideal still
    prints as `['a', 'b']`). A value named like one of `RESERVED_KEYS` is refused.
    """
    merged: dict[str, Any] = {**completions, **scrubbed_sample, **(spec_args or {})}
    reserved = [key for key in RESERVED_KEYS if key in merged]
    if reserved:
        raise SampleRefusedError(
            f"field {reserved[0]!r} has the name of a parameter of evals' prompt formatting "
            f"({', '.join(RESERVED_KEYS)}); rename it"
        )
    merged["n"] = n
    return {key: chat_to_text(value, key) if is_chat_prompt(value) else value for key, value in merged.items()}


def fill_prompt(prompt: str | Sequence[Mapping[str, str]], values: Mapping[str, Any]) -> Messages:
    """Format the template once with `values` and return chat messages.

    evals rule: a field the template needs but `values` lacks raises
    `MissingTemplateKeyError` ("Required: [...], got: [...]."); unused values are ignored;
    inserted values are never formatted again. A string prompt becomes one user message. A
    value its field cannot format (`{x:.2f}` given text) is refused (`SampleRefusedError`).
    """
    required = prompt_fields(prompt)
    if any(name not in values for name in required):
        raise MissingTemplateKeyError(f"Required: {required}, got: {sorted(values)}.")
    if isinstance(prompt, str):
        return [{"role": "user", "content": _format(prompt, values)}]
    return [{**message, "content": _format(message["content"], values)} for message in prompt]


def _format(template: str, values: Mapping[str, Any]) -> str:
    try:
        return template.format(**values)
    except (ValueError, TypeError, IndexError, KeyError, AttributeError) as error:
        fields = ", ".join(repr(name) for name in template_fields(template))
        raise SampleRefusedError(f"template field(s) {fields}: cannot format a value ({error})") from None
