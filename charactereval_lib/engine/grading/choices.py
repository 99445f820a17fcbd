"""Answer formats: choice strings, the answer-prompt suffix, parsing a judge reply, scores.

Two parser modes exist. `evals` (the default, and the only mode an evals spec may use)
reproduces openai/evals exactly, surprising rules included. `strict` is our own stricter
reading with word boundaries; a spec must ask for it by name.
"""

from __future__ import annotations

import string
import unicodedata
from collections.abc import Mapping, Sequence
from typing import Literal

from charactereval_lib.engine.grading.errors import (
    ChoicePunctuationError,
    MissingEvalTypeError,
    ScoreMapError,
    UnknownEvalTypeError,
    UnscoredChoiceError,
)

INVALID = "__invalid__"
"""The choice recorded when no line of a judge reply matches (evals' invalid marker)."""

EVALS = "evals"
STRICT = "strict"
PARSERS = (EVALS, STRICT)
Parser = Literal["evals", "strict"]

MATCH_FNS = ("starts_or_endswith", "exact", "endswith", "include")
DEFAULT_MATCH_FN = "starts_or_endswith"

# The protocol's own suffix texts (they are outputs in the golden vectors). `{choices}` is
# filled by plain replacement, never str.format, so a choice can hold any non-ASCII text.
ANSWER_PROMPTS: dict[str, str] = {
    "classify": (
        "Answer the question by printing only a single choice from {choices} (without quotes "
        "or punctuation) corresponding to the correct answer with no other text."
    ),
    "classify_cot": (
        "First, answer by printing a single choice from {choices} (without quotes or "
        "punctuation) corresponding to the correct answer. Then, from the next line, explain "
        "your reasonings step by step."
    ),
    "cot_classify": (
        "First, write out in a step by step manner your reasoning to be sure that your "
        "conclusion is correct. Avoid simply stating the correct answer at the outset. Then "
        "print only a single choice from {choices} (without quotes or punctuation) on its own "
        "line corresponding to the correct answer. At the end, repeat just the answer by itself "
        "on a new line.\n\nReasoning:"
    ),
    "cot_classify_jp": (
        "まず、一歩一歩あなたの推論を書き出してください。単に正しい答えを最初に述べることを避けてください。"
        "次に、{choices}（引用符や句読点なし）から正しい答えに対応する1つの選択肢を単独の行に書きだしてください。"
        "最後に、答えだけを新しい行に繰り返してください。\n\n推論："
    ),
}
EVAL_TYPES = tuple(ANSWER_PROMPTS)

_ASCII_PUNCTUATION = frozenset(string.punctuation)
_DELETE_ASCII_PUNCTUATION = str.maketrans("", "", string.punctuation)


def resolve_choice_strings(spec: str | Sequence[str], n: int | None = None) -> list[str]:
    """Turn a `choice_strings` value into the list of choices.

    evals rule: a list is used as given; the strings `from_n`, `from_n_abc` and `from_n_ABC`
    give "1".."n", or letters that wrap around after 26; any other string is split into its
    characters ("YN" -> Y, N). A choice holding ASCII punctuation is rejected
    (`ChoicePunctuationError`), because the parser deletes that punctuation from replies.
    """
    if isinstance(spec, str):
        if spec == "from_n":
            choices = [str(i + 1) for i in range(_need_n(n))]
        elif spec == "from_n_abc":
            choices = [string.ascii_lowercase[i % 26] for i in range(_need_n(n))]
        elif spec == "from_n_ABC":
            choices = [string.ascii_uppercase[i % 26] for i in range(_need_n(n))]
        else:
            choices = list(spec)
    else:
        choices = list(spec)
    for choice in choices:
        if any(ch in _ASCII_PUNCTUATION for ch in choice):
            raise ChoicePunctuationError(f"{choice} contains punctuation")
    return choices


def _need_n(n: int | None) -> int:
    if n is None:
        raise ValueError("choice strings of the from_n family need the number of completions n")
    return n


def render_choices(choices: Sequence[str]) -> str:
    """evals rule: choices are shown quoted and joined by ` or ` (`"A" or "B"`); none gives ''."""
    return " or ".join(f'"{choice}"' for choice in choices)


def answer_suffix(eval_type: str, choices: Sequence[str]) -> str:
    """The text evals appends to the last prompt message for `eval_type`, blank line included.

    evals rule: the suffix depends only on the eval-level eval type and the rendered choices;
    an unknown eval type raises `UnknownEvalTypeError`.
    """
    try:
        template = ANSWER_PROMPTS[eval_type]
    except KeyError:
        raise UnknownEvalTypeError(
            f"unknown eval_type {eval_type!r}; known: {', '.join(EVAL_TYPES)}"
        ) from None
    return "\n\n" + template.replace("{choices}", render_choices(choices))


def append_answer_prompt(
    prompt: str | Sequence[Mapping[str, str]], eval_type: str, choices: Sequence[str]
) -> list[dict[str, str]]:
    """Return chat messages with the answer suffix appended to the last message's content.

    evals rule: a string prompt first becomes a single user message; the input is not changed.
    """
    messages = _as_messages(prompt)
    messages[-1]["content"] = messages[-1]["content"] + answer_suffix(eval_type, choices)
    return messages


def _as_messages(prompt: str | Sequence[Mapping[str, str]]) -> list[dict[str, str]]:
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    return [dict(message) for message in prompt]


def _matches(line: str, choice: str, match_fn: str) -> bool:
    if match_fn == "starts_or_endswith":
        return line.startswith(choice) or line.endswith(choice)
    if match_fn == "exact":
        return line == choice
    if match_fn == "endswith":
        return line.endswith(choice)
    if match_fn == "include":
        # evals tests whether the *line* occurs inside the choice, not the other way round.
        return line in choice
    raise ValueError(f"unknown match_fn {match_fn!r}; known: {', '.join(MATCH_FNS)}")


def _scan_order(text: str, eval_type: str | None) -> list[str]:
    if eval_type is None:
        raise MissingEvalTypeError(
            "no eval_type: neither the spec nor the eval sets one, so the reply cannot be parsed"
        )
    if eval_type not in ANSWER_PROMPTS:
        raise UnknownEvalTypeError(f"unknown eval_type {eval_type!r}; known: {', '.join(EVAL_TYPES)}")
    lines = text.strip().split("\n")
    # Reasoning-first types put the answer at the end, so they are read bottom-up.
    return lines[::-1] if eval_type.startswith("cot_classify") else lines


def get_choice(
    text: str,
    eval_type: str | None,
    choices: Sequence[str],
    match_fn: str = DEFAULT_MATCH_FN,
    parser: Parser = EVALS,
) -> str:
    """Parse a judge reply into one of `choices`, or `INVALID`.

    evals rule (parser `evals`): trim the text, split on '\\n' only, scan bottom-up for
    `cot_classify*` and top-down otherwise; in each line trim Unicode whitespace, then delete
    ASCII punctuation anywhere (no second trim), skip empty lines, and return the first choice
    *in list order* that matches under `match_fn` (default: the line starts or ends with it,
    case-sensitive, no word boundaries). No match anywhere gives `INVALID`. A missing eval
    type raises `MissingEvalTypeError`.

    Parser `strict` (ours, never the evals default): same scan order and line split, but each
    line loses surrounding whitespace, punctuation and symbols of any script ("**B**", "（B）",
    "B。"), a choice counts only when the whole line equals it or it stands at the line's start
    or end on a word boundary (`Answer: B` gives B, `No` is not `N`, `12` is not `1`), and a
    line naming two different choices is skipped. `exact` and `endswith` keep their meaning
    on the cleaned line; `include` reads as starts-or-ends-with.
    """
    lines = _scan_order(text, eval_type)
    if parser == STRICT:
        return _get_choice_strict(lines, choices, match_fn)
    if parser != EVALS:
        raise ValueError(f"unknown parser {parser!r}; known: {', '.join(PARSERS)}")
    for raw in lines:
        line = raw.strip().translate(_DELETE_ASCII_PUNCTUATION)
        if not line:
            continue
        for choice in choices:
            if _matches(line, choice, match_fn):
                return choice
    return INVALID


def _is_edge_noise(ch: str) -> bool:
    return ch.isspace() or unicodedata.category(ch)[0] in "PS"


def _is_word_char(ch: str) -> bool:
    # CJK text runs straight into an answer ("评分4"), so only ASCII letters, any digits and
    # underscores glue to a choice; everything else is a boundary.
    return (ch.isascii() and ch.isalnum()) or ch.isdigit() or ch == "_"


def _strict_line_choices(line: str, choices: Sequence[str], match_fn: str) -> set[str]:
    found = set()
    for choice in choices:
        if line == choice:
            found.add(choice)
            continue
        at_start = line.startswith(choice) and not _is_word_char(line[len(choice)])
        at_end = line.endswith(choice) and not _is_word_char(line[-len(choice) - 1])
        if match_fn == "exact":
            continue
        if match_fn == "endswith" and at_end:
            found.add(choice)
        elif match_fn in ("starts_or_endswith", "include") and (at_start or at_end):
            found.add(choice)
    return found


def _get_choice_strict(lines: Sequence[str], choices: Sequence[str], match_fn: str) -> str:
    if match_fn not in MATCH_FNS:
        raise ValueError(f"unknown match_fn {match_fn!r}; known: {', '.join(MATCH_FNS)}")
    nonempty = [choice for choice in choices if choice]
    for raw in lines:
        line = raw
        # Markup and punctuation around an answer ("**B**", "（B）", "“B”", "B。") is noise.
        while line and _is_edge_noise(line[0]):
            line = line[1:]
        while line and _is_edge_noise(line[-1]):
            line = line[:-1]
        if not line:
            continue
        found = _strict_line_choices(line, nonempty, match_fn)
        if len(found) == 1:
            return found.pop()
        # A line naming two different choices ("N Y", "A or B") decides nothing.
    return INVALID


def resolve_choice_scores(
    choice_scores: Mapping[str, float] | str | None, choices: Sequence[str]
) -> dict[str, float] | None:
    """The score map of a spec.

    evals rule: `None` means no scores; `from_strings` maps each choice to `float(choice)`
    and fails (`ScoreMapError`) on a non-numeric choice even before any reply is scored; a
    mapping is used as given, values kept as written (an int stays an int).
    """
    if choice_scores is None:
        return None
    if isinstance(choice_scores, str):
        if choice_scores != "from_strings":
            raise ScoreMapError(
                f"choice_scores must be a mapping, null or 'from_strings', not {choice_scores!r}"
            )
        try:
            return {choice: float(choice) for choice in choices}
        except ValueError as error:
            raise ScoreMapError(f"choice_scores from_strings: {error}") from None
    return dict(choice_scores)


def score_choice(
    choice: str,
    choices: Sequence[str],
    choice_scores: Mapping[str, float] | str | None,
) -> float | None:
    """The score of a parsed choice.

    evals rule: no score map gives `None`; an invalid answer scores the *minimum of all values
    in the map* (even values of keys that are not choices; an empty map raises
    `ScoreMapError`); a valid choice missing from the map raises `UnscoredChoiceError`.
    """
    scores = resolve_choice_scores(choice_scores, choices)
    if scores is None:
        return None
    if choice == INVALID:
        if not scores:
            raise ScoreMapError("the score map is empty, so an invalid answer has no minimum score")
        return min(scores.values())
    try:
        return scores[choice]
    except KeyError:
        raise UnscoredChoiceError(f"choice {choice!r} has no score in the score map") from None
