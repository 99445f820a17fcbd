"""Read the upstream critic prompts from the pinned ``prompts.py`` with ``ast``.

The file is third-party text without a licence, so the project never restates it: the
template and the four dimension rubrics are read at run time from the verified file. It is
parsed, never imported or executed: only a literal assignment ``critic_prompts = {...}`` is
accepted, evaluated with ``ast.literal_eval``.
"""

from __future__ import annotations

import ast
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from ..charactereval.data import DataError
from .data import UPSTREAM_PROMPTS, locate_data_dir, read_verified

DIMENSIONS = ("Storyline Consistency", "Anthropomorphism", "Character Fidelity", "Storyline Quality")
_TEMPLATE_KEY = "self-play-deduct-template"
_DETAILS_KEY = "dimension_details"


@dataclass(frozen=True)
class CriticPrompts:
    """The critic template and, per dimension, its ``dimension_brief`` and ``dimension_criteria``."""

    template: str
    details: dict[str, dict[str, str]]


def parse_critic_prompts(source: bytes, path: Path) -> CriticPrompts:
    """Upstream step: the ``critic_prompts`` literal of prompts.py (ast only, never executed)."""
    try:
        tree = ast.parse(source.decode("utf-8"), filename=str(path))
    except (SyntaxError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: not parseable Python ({exc})") from None
    value = None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "critic_prompts" for t in node.targets):
            value = node.value
    if value is None:
        raise DataError(f"{path}: no `critic_prompts = ...` assignment")
    try:
        prompts = ast.literal_eval(value)
    except ValueError:
        raise DataError(f"{path}: `critic_prompts` is not a literal") from None
    if not isinstance(prompts, dict) or not isinstance(prompts.get(_TEMPLATE_KEY), str):
        raise DataError(f"{path}: `critic_prompts` lacks the string {_TEMPLATE_KEY!r}")
    details = prompts.get(_DETAILS_KEY)
    if not isinstance(details, dict) or set(details) != set(DIMENSIONS):
        raise DataError(f"{path}: `critic_prompts[{_DETAILS_KEY!r}]` must name exactly the 4 dimensions")
    for dim, entry in details.items():
        if not isinstance(entry, dict) or not all(isinstance(entry.get(k), str) for k in ("dimension_brief", "dimension_criteria")):
            raise DataError(f"{path}: dimension {dim!r} lacks dimension_brief/dimension_criteria strings")
    return CriticPrompts(template=prompts[_TEMPLATE_KEY], details={d: dict(details[d]) for d in DIMENSIONS})


@lru_cache(maxsize=4)
def _load(root: str) -> CriticPrompts:
    path = Path(root) / UPSTREAM_PROMPTS
    return parse_critic_prompts(read_verified(Path(root), UPSTREAM_PROMPTS), path)


def load_critic_prompts(data_dir: str | os.PathLike[str] | None = None) -> CriticPrompts:
    """The verified critic prompts of the data directory (cached per directory)."""
    return _load(str(locate_data_dir(data_dir).resolve()))
