"""Protocol steps S2 (parse a context), S3 (build the chat messages) and S7 (profile text).

The official generation script sends an OpenAI-style message list with no system message:
the profile and instruction go into the first *user* message, a fixed acknowledgement into the
first *assistant* message, then the dialogue history, ending with the last (non-role) line.
All text is kept byte for byte: no strip, no normalisation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from charactereval_lib.charactereval.protocol import ACK_HEAD, ACK_TAIL, COLON, INSTRUCTION_HEAD, INSTRUCTION_TAIL, ROLE_SPEAKS_FIRST

Message = dict[str, str]


class ProtocolError(ValueError):
    """A context that breaks the official script's assertions (it would crash there)."""


@dataclass(frozen=True)
class Turn:
    speaker: str
    value: str


@dataclass(frozen=True)
class BuiltMessages:
    messages: list[Message]
    # Non-role lines followed by another non-role line: the official code never sends them.
    dropped_lines: int


def profile_text(profile: Any) -> str:
    """S7: the profile as the official code renders it: Python's ``str()`` of the dict that
    ``json.load`` returned (key order kept, repr quoting rules, nested lists/dicts as repr)."""
    return str(profile)


def parse_context(context: str) -> list[Turn]:
    """S2: split a context on ``'\\n'`` only; the speaker is the text before the first full-width
    colon and the value everything after it (later colons kept). A line without a colon is all
    speaker with an empty value. Nothing is stripped; ``'\\r'`` stays in place."""
    turns = []
    for line in context.split("\n"):
        speaker, _, value = line.partition(COLON)
        turns.append(Turn(speaker, value))
    return turns


def system_text(role: str, profile: Any) -> str:
    """The first user message of S3: profile repr, then the fixed role-play instruction."""
    return profile_text(profile) + INSTRUCTION_HEAD + role + INSTRUCTION_TAIL


def _prefixed(turn: Turn) -> str:
    return turn.speaker + COLON + turn.value


def build_messages(sample_id: int | str, role: str, context: str, profile: Any) -> BuiltMessages:
    """S3: the message list sent to the model under test for one sample.

    ``[user(system_text), assistant(acknowledgement [+ first line]), (user, assistant)*, user]``:
    the acknowledgement carries the role's first utterance (without its name prefix) when the
    role speaks first; each later role line becomes an assistant message ``"role：value"`` preceded
    by the line just before it as a user message ``"speaker：value"``; the last line is the final
    user message. Raises ProtocolError, naming the sample, where the official asserts would fail:
    the role speaking twice in a row, or the role speaking the last line.
    """
    turns = parse_context(context)
    acknowledgement = ACK_HEAD + role + ACK_TAIL
    if turns[0].speaker == role:
        acknowledgement += ROLE_SPEAKS_FIRST + turns[0].value
    messages: list[Message] = [
        {"role": "user", "content": system_text(role, profile)},
        {"role": "assistant", "content": acknowledgement},
    ]
    for i in range(1, len(turns)):
        if turns[i].speaker != role:
            continue
        if turns[i - 1].speaker == role:
            raise ProtocolError(
                f"sample {sample_id}: role {role!r} speaks twice in a row "
                f"(context lines {i} and {i + 1}); the official script asserts against this"
            )
        messages.append({"role": "user", "content": _prefixed(turns[i - 1])})
        messages.append({"role": "assistant", "content": _prefixed(turns[i])})
    if turns[-1].speaker == role:
        raise ProtocolError(
            f"sample {sample_id}: the last context line (line {len(turns)}) is spoken by the role "
            f"{role!r}; the official script asserts that the model answers a non-role line"
        )
    messages.append({"role": "user", "content": _prefixed(turns[-1])})
    return BuiltMessages(messages, count_dropped_lines(turns, role))


def count_dropped_lines(turns: list[Turn], role: str) -> int:
    """Non-role lines immediately followed by another non-role line; S3 never uses them."""
    return sum(
        1
        for earlier, later in zip(turns, turns[1:])
        if earlier.speaker != role and later.speaker != role
    )
