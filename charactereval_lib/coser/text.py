"""CoSER text functions: the string rules every protocol step relies on.

Each function reproduces one upstream helper exactly, including its surprises (pinned by
``text_functions.jsonl`` of the golden vectors); where the two versions differ, the version
settings select the rule.
"""

from __future__ import annotations

import json
import re
from typing import Any

from charactereval_lib.coser.versions import ProtocolVersion

END_CHAT = "<END CHAT>"
# The speaker separators of a transcript line: upstream ``add_speaker_name`` writes ``Name: ``
# and takes a line that starts ``Name：`` (full width) as already prefixed too.
SPEAKER_SEPARATOR = ":"
FULL_WIDTH_SPEAKER_SEPARATOR = "\uff1a"

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
        if line.startswith(f"{speaker}{SPEAKER_SEPARATOR}") or line.startswith(f"{speaker}{FULL_WIDTH_SPEAKER_SEPARATOR}"):
            return dialogue
    return f"{speaker}{SPEAKER_SEPARATOR} {dialogue}"


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


# --- repetition fix -----------------------------------------------------------------------------
# Upstream applies `fix_repeation` to actor replies of models other than GPT and Claude. The
# rules below are reconstructed from the 14 golden vectors (upstream's source is not part of the
# pinned data): exact on those, unverified beyond them.
_LONG_LETTER_RUN = re.compile(r"[A-Za-z]{100,}")
_KEEP_LETTERS = 20
_MIN_UNIT, _MIN_CONSECUTIVE = 5, 5  # a unit of >= 5 tokens repeated >= 5 times back to back
_LONG_NGRAM = 15  # or a 15-token sequence that occurs again later (non-overlapping)


def _detokenize(tokens: list[str]) -> str:
    out = ""
    for i, token in enumerate(tokens):
        is_word = bool(re.fullmatch(r"\w+", token)) and not re.fullmatch(r"[\u4e00-\u9fff]", token)
        out += (" " + token) if (i and is_word) else token
    return out


def _repeat_cut(tokens: list[str]) -> int | None:
    """Index at which the first repetition starts (the text is cut there), or None."""
    n = len(tokens)
    for start in range(n):
        for size in range(_MIN_UNIT, (n - start) // _MIN_CONSECUTIVE + 1):
            unit = tokens[start : start + size]
            if all(tokens[start + k * size : start + (k + 1) * size] == unit for k in range(1, _MIN_CONSECUTIVE)):
                return start + size
        if start + 2 * _LONG_NGRAM <= n:
            gram = tokens[start : start + _LONG_NGRAM]
            for later in range(start + _LONG_NGRAM, n - _LONG_NGRAM + 1):
                if tokens[later : later + _LONG_NGRAM] == gram:
                    return later
    return None


def fix_repeation(response: str) -> str | bool:
    """Simulation step "repetition fix" (upstream ``fix_repeation``; its spelling kept).

    Returns the repaired reply, or ``False`` when nothing needed fixing: a run of >= 100 ASCII
    letters keeps its first 20; otherwise the reply is cut where a repetition starts (a unit of
    >= 5 tokens repeated >= 5 times in a row, or a 15-token sequence seen again), re-joined from
    tokens, with a final ``.`` when it does not end in punctuation."""
    if _LONG_LETTER_RUN.search(response):
        return _LONG_LETTER_RUN.sub(lambda m: m.group()[:_KEEP_LETTERS], response)
    tokens = tokenize_words(response)
    cut = _repeat_cut(tokens)
    if cut is None:
        return False
    kept = tokens[:cut]
    text = _detokenize(kept)
    if re.fullmatch(r"\w+", kept[-1]):
        text += "."
    return text


def nsp_fallback(speakers: list[str], current_speaker: str | None, rng) -> str:
    """Simulation step "NSP fallback" (invalid prediction, the current speaker, ``random``, or an
    early ``<END CHAT>``): one draw among the speakers other than the current one.

    Upstream draws from a set (paper ``random.sample``, HEAD ``random.choice(list(set))``), so
    its pick depends on the hash seed; the platform sorts the candidates first. It consumes the
    stream exactly as upstream (one draw over the same count), so later draws are unaffected."""
    candidates = sorted(set(speakers) - {current_speaker})
    return rng.choice(candidates)
