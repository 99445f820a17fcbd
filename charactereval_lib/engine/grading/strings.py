"""String graders with openai/evals semantics: match, includes, fuzzy match (F1), JSON match.

Every grader takes the sampled text and the ideal answer(s); a single ideal string is the same
as a one-element list. Results are small frozen dataclasses whose fields are evals' outputs.
"""

from __future__ import annotations

import json
import re
import string
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from charactereval_lib.engine.grading.errors import EmptyIdealsError, InvalidIdealError

_DELETE_ASCII_PUNCTUATION = str.maketrans("", "", string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def _ideal_list(ideal: str | Sequence[str]) -> list[str]:
    return [ideal] if isinstance(ideal, str) else list(ideal)


@dataclass(frozen=True)
class MatchResult:
    """evals `Match` outcome: whether it matched and the first ideal that did."""

    correct: bool
    picked: str | None


@dataclass(frozen=True)
class IncludesResult:
    """evals `Includes` outcome: whether any ideal occurs and, per ideal, where."""

    correct: bool
    per_ideal_get_answer: list[str | None]


@dataclass(frozen=True)
class FuzzyMatchResult:
    """evals `FuzzyMatch` outcome: match flags and token F1, overall and per ideal."""

    correct: bool
    accuracy: float
    f1_score: float | int
    per_ideal_fuzzy_match: list[bool]
    per_ideal_f1: list[float | int]


@dataclass(frozen=True)
class JsonMatchResult:
    """evals `JsonMatch` outcome."""

    correct: bool
    accuracy: float


Separator = Callable[[str], bool] | str


def match(sampled: str, ideal: str | Sequence[str], separator: Separator | None = None) -> MatchResult:
    """evals `Match`: correct when the raw sample *starts with* an ideal; ideals are tried in
    list order and the first hit is `picked`. No trimming, case-sensitive; '' always matches.

    ``separator`` is evals' option that none of its templates passes (so there the ideal `4`
    matches the sample `42`): when given, an ideal counts only if the sample ends right after it
    or the character after it is a separator. It is a predicate on that one character (evals'
    form, e.g. ``str.isspace``) or a string of the separator characters (e.g. ``" .,\n"``)."""
    if isinstance(separator, str):
        separator = separator.__contains__
    for candidate in _ideal_list(ideal):
        if not sampled.startswith(candidate):
            continue
        if separator is not None and len(sampled) > len(candidate) and not separator(sampled[len(candidate)]):
            continue
        return MatchResult(True, candidate)
    return MatchResult(False, None)


def includes(sampled: str, ideal: str | Sequence[str], ignore_case: bool = False) -> IncludesResult:
    """evals `Includes`: correct when any ideal is a substring of the sample. With
    `ignore_case` both sides go through Python `lower()` (not casefold). Per ideal, the part
    of the sample at its *last* occurrence (the sample's own spelling there), else None."""
    haystack = sampled.lower() if ignore_case else sampled
    found = []
    for needle in _ideal_list(ideal):
        needle = needle.lower() if ignore_case else needle
        start = haystack.rfind(needle)
        found.append(None if start < 0 else sampled[start : start + len(needle)])
    return IncludesResult(any(answer is not None for answer in found), found)


def normalize(text: str) -> str:
    """evals fuzzy-match normalisation: lowercase, delete ASCII punctuation (so `state-of-the-art`
    becomes one word and `。` stays), replace the words a/an/the by spaces, collapse whitespace."""
    text = text.lower().translate(_DELETE_ASCII_PUNCTUATION)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def _fuzzy_equal(sampled: str, ideal: str) -> bool:
    left, right = normalize(sampled), normalize(ideal)
    if not left or not right:
        return left == right
    return left in right or right in left


def f1_score(sampled: str, ideal: str) -> float | int:
    """evals token F1 on normalised text (bag of tokens). No overlapping token, including the
    empty case, gives the *integer* 0, as evals does."""
    predicted = normalize(sampled).split()
    gold = normalize(ideal).split()
    overlap = sum((Counter(predicted) & Counter(gold)).values())
    if overlap == 0:
        return 0
    precision = overlap / len(predicted)
    recall = overlap / len(gold)
    return (2 * precision * recall) / (precision + recall)


def fuzzy_match(sampled: str, ideal: str | Sequence[str]) -> FuzzyMatchResult:
    """evals `FuzzyMatch`: an ideal matches when, after `normalize`, either side contains the
    other (an empty side matches only an empty side); `f1_score` is the best F1 over ideals.
    No ideal at all raises `EmptyIdealsError`."""
    ideals = _ideal_list(ideal)
    if not ideals:
        raise EmptyIdealsError("fuzzy match needs at least one ideal answer")
    per_match = [_fuzzy_equal(sampled, candidate) for candidate in ideals]
    per_f1 = [f1_score(sampled, candidate) for candidate in ideals]
    correct = any(per_match)
    return FuzzyMatchResult(correct, float(correct), max(per_f1), per_match, per_f1)


def _json_equal(left: Any, right: Any) -> bool:
    if left is None or right is None:
        return False
    if isinstance(left, dict) and isinstance(right, dict):
        # A key on one side only compares against None, which never matches.
        return all(_json_equal(left.get(key), right.get(key)) for key in left.keys() | right.keys())
    if isinstance(left, list) and isinstance(right, list):
        return len(left) == len(right) and all(map(_json_equal, left, right))
    return left == right


def json_match(sampled: str, ideal: str | Sequence[str]) -> JsonMatchResult:
    """evals `JsonMatch`: the sample is parsed as JSON (unparseable never matches) and compared
    with each ideal: a null on either side never matches, objects compare over the union of
    their keys, lists by length and order, scalars with Python `==` (1 == 1.0 == true, NaN
    never equal). An ideal that is not JSON raises `InvalidIdealError`. A sample Python cannot
    parse for any reason, an integer over its 4,300-digit conversion limit included, never
    matches (evals catches every ValueError there)."""
    parsed_ideals = []
    for candidate in _ideal_list(ideal):
        try:
            parsed_ideals.append(json.loads(candidate))
        except ValueError as error:
            raise InvalidIdealError(f"ideal {candidate[:80]!r} is not JSON: {error}") from None
    try:
        parsed = json.loads(sampled)
    except ValueError:
        return JsonMatchResult(False, 0.0)
    correct = any(_json_equal(parsed, candidate) for candidate in parsed_ideals)
    return JsonMatchResult(correct, float(correct))
