"""Thinking blocks: the reasoning a model writes before its answer, kept out of what is scored.

Seed 004 C17a (the earlier platform, F19): a reply that starts with a ``<think>...</think>``
block has the block and the whitespace around it removed before it enters the dialogue. The
official code does not (G08: CoSER HEAD's patterns need ``_`` or whitespace after ``<``, so a
plain ``<think>`` survives into the record and the judge's input; CharacterEval's S5 cut would
score the block's first line). The workbench removes it by default and records the rule in the
run's identity; ``--keep-thinking`` keeps the upstream behaviour.

Only a block at the very start counts (after leading whitespace), matched case-sensitively and
up to its first ``</think>``; a block left open (a reply cut by its token limit) is not a
block and stays, as does a ``<think>`` later in the reply. A reply without such a block is
returned unchanged, byte for byte (the golden vectors hold none).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

REMOVED = "leading <think> block removed"
KEPT = "kept (upstream)"
# The key in a run's identity (generation identity, CoSER identity).
KEY = "thinking"
_LEADING_BLOCK = re.compile(r"\A\s*<think>.*?</think>\s*", re.DOTALL)


def rule(keep_thinking: bool) -> str:
    """The rule a run records: ``KEPT`` with ``--keep-thinking``, else ``REMOVED``."""
    return KEPT if keep_thinking else REMOVED


def strip_leading_block(text: str) -> str:
    """``text`` without a leading thinking block and the whitespace around it (module docstring)."""
    return _LEADING_BLOCK.sub("", text, count=1)


def has_block(text: str) -> bool:
    """Whether ``text`` starts with a thinking block (module docstring)."""
    return _LEADING_BLOCK.match(text) is not None


def count_blocks(texts: Iterable[str]) -> int:
    """How many of ``texts`` start with a thinking block."""
    return sum(1 for text in texts if has_block(text))


def apply(text: str, recorded_rule: str) -> str:
    """The reply as it enters scoring under ``recorded_rule``."""
    return strip_leading_block(text) if recorded_rule == REMOVED else text


def recorded(identity: Mapping[str, Any] | None) -> str:
    """The rule an identity records; a run made before the rule existed (or imported from
    upstream files) followed upstream, so its absence means ``KEPT``."""
    return str((identity or {}).get(KEY, KEPT))
