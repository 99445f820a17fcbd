"""The official checkpoint's side files, pinned by content (seed 000 §0, item 04).

The weights are 26.5 GB and their digests are not known here; what makes the model score
like the official one besides them is small: the config, the tokenizer files and the weights'
index. A checkpoint that says it is BaichuanCharRM (its ``config.json`` has the official
architecture: 40 layers of 5,120, 40 heads, vocabulary 125,696) must carry exactly the side
files of ``morecry/BaichuanCharRM`` at the pinned revision; a test or other checkpoint (any
other shape, e.g. the tiny ones) is not held to them, and its content digest, recorded on every
score, keeps it off the official board anyway.

Pins are the digests seed 000 printed, which are abbreviated (the first and last hex digits,
``25ae0bd0…a0a489``): a file matches when its SHA-256 starts and ends with them (44 to 56 bits,
enough to catch a wrong, altered or other-revision file, not a forgery). A file the seed gives
no digest for (``tokenizer.model``, the weights' index: the review never downloaded them) has
no pin yet (``None``); ``unpinned`` names them so that ``rm check`` says so. Add a full digest
here once one is known from a download of the pinned revision.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from charactereval_lib.charactereval.reward.errors import CheckpointError

REVISION = "morecry/BaichuanCharRM@e953da5"
# The architecture of the official checkpoint (its config.json, shared/REWARD_MODEL.md).
OFFICIAL_SHAPE = {"hidden_size": 5120, "num_hidden_layers": 40, "num_attention_heads": 40,
                  "intermediate_size": 13696, "vocab_size": 125696}
SIDE_FILE_PINS: dict[str, str | None] = {
    "config.json": "25ae0bd0…a0a489",
    "tokenizer_config.json": "3d136a6d…5fb",
    "special_tokens_map.json": "2f5a9116…cb26",
    "tokenizer.model": None,
    "pytorch_model.bin.index.json": None,
}


def claims_official(model_dir: str | Path) -> bool:
    """Whether the directory's config has the official architecture (unreadable: no claim;
    ``load_config`` says what is wrong with it)."""
    try:
        raw = json.loads((Path(model_dir) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(raw, dict) and all(raw.get(k) == v for k, v in OFFICIAL_SHAPE.items())


def matches(digest: str, pin: str) -> bool:
    """A full pin is compared whole; an abbreviated one (``head…tail``) by its two ends."""
    head, sep, tail = pin.partition("…")
    return digest.startswith(head) and digest.endswith(tail) if sep else digest == pin


def problems(model_dir: str | Path, digests: Mapping[str, str]) -> list[str]:
    """One line per pinned side file that is missing or does not match, for a directory that
    claims to be the official checkpoint (``digests``: file name -> SHA-256 of its content)."""
    if not claims_official(model_dir):
        return []
    found = []
    for name, pin in SIDE_FILE_PINS.items():
        path = Path(model_dir) / name
        if pin is None:
            continue
        if name not in digests:
            found.append(f"{path}: missing; the official checkpoint ({REVISION}) has it")
        elif not matches(digests[name], pin):
            found.append(f"{path}: SHA-256 {digests[name]} is not the pinned {pin} of {REVISION} (altered, or "
                         "another revision's file); fetch it again with `charactereval rm download`")
    return found


def unpinned() -> list[str]:
    """The side files that have no pinned digest yet."""
    return [name for name, pin in SIDE_FILE_PINS.items() if pin is None]


def verify(model_dir: str | Path, digests: Mapping[str, str]) -> None:
    """Raise ``CheckpointError`` with the first mismatch (one line naming the file)."""
    found = problems(model_dir, digests)
    if found:
        more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
        raise CheckpointError(found[0] + more)
