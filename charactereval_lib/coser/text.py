"""CoSER text functions: the string rules every protocol step relies on.

Each function reproduces one upstream helper exactly, including its surprises (pinned by
``text_functions.jsonl`` of the golden vectors); where the two versions differ, the version
settings select the rule.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .versions import ProtocolVersion

END_CHAT = "<END CHAT>"

# Thought brackets are removed line-locally and non-greedily: `.` does not cross a newline, so
# a multi-line `[...]` survives and `[a [b] c]` leaves ` c]` (upstream regex semantics).
_THOUGHT = re.compile(r"\[.*?\]")
# HEAD (958f962) also drops thinking blocks with the whitespace around them. Case-sensitive, and
# the third pattern needs `_` or whitespace after `<`, so plain `<think>` is NOT removed.
_THINKING_BLOCKS = (
    re.compile(r"\s*<system_thinking>.*?</system_thinking>\s*", re.DOTALL),
    re.compile(r"\s*<role[_ ]think(?:ing)?>.*?</role[_ ]think(?:ing)?>\s*", re.DOTALL),
    re.compile(r"\s*<[_\s]think>.*?</[_\s]think>\s*", re.DOTALL),
)


def remove_inner_thoughts(dialogue: str, version: ProtocolVersion) -> str:
    """Protocol step "remove inner thoughts" (upstream ``remove_inner_thoughts``).

    HEAD first removes thinking blocks; both versions then drop ``[...]`` and keep the
    non-blank lines, each stripped, joined by a single newline."""
    if version.strip_thinking_tags:
        for pattern in _THINKING_BLOCKS:
            dialogue = pattern.sub("", dialogue)
    dialogue = _THOUGHT.sub("", dialogue)
    return "\n".join(line.strip() for line in dialogue.split("\n") if line.strip())


def add_speaker_name(dialogue: str, speaker: str) -> str:
    """Protocol step "store the actor message" (paper ``add_speaker_name``).

    Prefix ``speaker: `` unless some line, once stripped, already starts with ``speaker:`` or
    with the full-width ``speaker：``."""
    for line in dialogue.split("\n"):
        line = line.strip()
        if line.startswith(f"{speaker}:") or line.startswith(f"{speaker}："):
            return dialogue
    return f"{speaker}: {dialogue}"


# HEAD's label regex (958f962). Reconstructed from the golden vectors: the separator class is
# greedy but may give characters back, so `**Next Speaker:** A` yields ":" and
# `Next Speaker: **A**` yields only a blank capture (None); the last label in the reply wins.
_NSP_LABEL = re.compile(r"next\s+speaker(?:\s+is\b)?[\s:\-]*([^\n*]+)", re.IGNORECASE)


def extract_nsp(response: str) -> str | None:
    """HEAD step "read the next-speaker label" (upstream ``extract_nsp``): the text after the
    last ``Next Speaker`` label, trailing ``.!?'"`` removed; None when there is none."""
    found = _NSP_LABEL.findall(response)
    if not found:
        return None
    name = found[-1].strip().rstrip(".!?'\"")
    return name or None


def parse_nsp_reply(response: str, version: ProtocolVersion) -> str:
    """Simulation step "parse the NSP reply" into the stored NSP turn / candidate speaker.

    paper: ``response.split(':')[0]`` (no strip: ``' Bob '`` stays invalid); HEAD: ``extract_nsp``,
    falling back to the same split when it finds nothing."""
    if version.nsp_parser == "extract_nsp":
        label = extract_nsp(response)
        if label:
            return label
    return response.split(":")[0]


def _escape_newlines_in_strings(text: str) -> str:
    """Raw newlines inside JSON strings become a literal backslash-n (two characters), as
    upstream does; escapes are honoured so ``\\"`` does not end the string."""
    out = []
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
            elif ch == "\n":
                out.append("\\\\n")
                continue
        elif ch == '"':
            in_string = True
        out.append(ch)
    return "".join(out)


def extract_json(text: str) -> Any:
    """Judge step "extract JSON" (upstream ``extract_json`` before its repair call).

    ``json.loads`` of the newline-escaped text; else scan left to right with ``raw_decode``
    (skipping past every decoded value) and keep the value with the longest ``json.dumps``,
    the first on ties. May return a bare string or number. None, or a falsy value, means
    upstream would now ask for a repair (``fix_json_prompt``)."""
    text = _escape_newlines_in_strings(text)
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    decoder = json.JSONDecoder()
    best, best_len = None, -1
    pos = 0
    while pos < len(text):
        try:
            value, end = decoder.raw_decode(text, pos)
        except json.JSONDecodeError:
            pos += 1
            continue
        size = len(json.dumps(value))
        if size > best_len:
            best, best_len = value, size
        pos = end
    return best


def fix_json_prompt(text: str) -> str:
    """Judge step "repair JSON": the one repair request upstream sends for an unparseable answer."""
    return (
        "I will provide you with a JSON string that contains errors, making it unparseable by `json.loads`. "
        "The most common issue is the presence of unescaped double quotes inside strings. "
        "Your task is to output the corrected JSON string. The JSON string to be corrected is:\n"
        f"{text}\n"
    )


def fix_json_model(version: ProtocolVersion, judge_model: str) -> str:
    """The model asked to repair JSON: paper a fixed Claude model, HEAD the judge itself."""
    return version.fix_json_model or judge_model


# Words for TTR: one CJK ideograph per token, else a run of word characters, else one
# punctuation character (pinned by the golden `tokenize_words` vectors).
_WORD = re.compile(r"[\u4e00-\u9fff]|\w+|[^\w\s]")


def tokenize_words(text: str) -> list[str]:
    """Paper step "tokenize for TTR" (upstream ``tokenize_words``)."""
    return _WORD.findall(text)


def ttr(text: str) -> float:
    """Paper step "type-token ratio": distinct tokens / tokens, case-sensitive. Raises
    ZeroDivisionError on text without tokens, as upstream does (callers decide)."""
    tokens = tokenize_words(text)
    return len(set(tokens)) / len(tokens)
