"""CoSER data step: locate, fetch, verify and load the pinned test set and upstream prompt file.

Both files come from one pinned upstream commit (``manifest.json`` beside this module), are
checked by SHA-256 and git blob SHA-1, and are never redistributed (the upstream repository
has no licence). Lookup order of the data directory, as for CharacterEval: an explicit
directory, then ``$COSER_DATA_DIR``, then the workspace's (``coser data use DIR``), then ``data/coser/``.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from charactereval_lib.engine.storage import workspace
from charactereval_lib.engine.storage.pinned import (
    DataError,
    Upstream,
    check_digests,
    fetch,
    load_json_document,
    load_upstream,
)

MANIFEST = Path(__file__).resolve().parent / "manifest.json"
# Under the workspace root, like CharacterEval's data/official/.
DEFAULT_DATA_DIR = Path("data") / "coser"
DATA_DIR_ENV = "COSER_DATA_DIR"
# The key of this benchmark's directory in the workspace file (engine.storage.workspace).
BENCHMARK = "coser"

TEST_SET = "test_set.json"
UPSTREAM_PROMPTS = "upstream/prompts.py"
# Each protocol version's upstream utils.py (prompt skeletons read with ast), by version name.
UPSTREAM_UTILS = {"coser-paper": "upstream/paper-93c1474/gca_evaluation/utils.py",
                  "coser-head": "upstream/head-624efc5/gca_evaluation/utils.py"}
# Each protocol version's upstream agent.py (what ``Agent`` adds to a system prompt, read with ast).
UPSTREAM_AGENT = {"coser-paper": "upstream/paper-93c1474/gca_evaluation/agent.py",
                  "coser-head": "upstream/head-624efc5/gca_evaluation/agent.py"}
# The released evaluation files of branch `rebuttal` (group RESULTS_GROUP, fetched on request).
RELEASED_EVALUATION_DIR = "upstream/rebuttal-d77a6d2/exp/evaluation"
GROUP = "required"
RESULTS_GROUP = "results"

# Scene fields the protocol reads; a scene lacking one is malformed.
_SCENE_FIELDS = {
    "book": str,
    "plot": dict,
    "scenario": str,
    "character_profiles": dict,
    "key_characters": list,
    "speaking_characters_w_env": list,
    "major_characters": list,
    "dialogues": list,
    "i_p": int,
    "i_c": int,
    "tag": str,
}


@dataclass(frozen=True)
class Scene:
    """One test-set entry, with its position in the file and the upstream scene key."""

    index: int
    key: str
    tag: str
    raw: dict[str, Any]
    # The data directory the scene was read from: its upstream files build the scene's prompts.
    data_dir: Path | None = dataclasses.field(default=None, compare=False)


def manifest() -> Upstream:
    """The pinned upstream commit and file digests shipped with the package."""
    return load_upstream(MANIFEST)


def locate_data_dir(explicit: str | os.PathLike[str] | None = None) -> Path:
    """The data directory: ``explicit``, else ``$COSER_DATA_DIR``, else the workspace's
    (``charactereval coser data use DIR``), else ``data/coser/``."""
    return workspace.data_dir(BENCHMARK, explicit, DATA_DIR_ENV, DEFAULT_DATA_DIR)


def read_verified(data_dir: Path, name: str) -> bytes:
    """The bytes of one pinned file, after its digests are checked (one-line DataError if not)."""
    path = Path(data_dir) / name
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise DataError(
            f"{path}: missing (run `coser data fetch`, pass a directory, or set {DATA_DIR_ENV})"
        ) from None
    check_digests(path, data, manifest().file(name))
    return data


def _groups(with_results: bool) -> tuple[str, ...]:
    """The manifest groups a fetch or verify covers: the released results only when asked."""
    return (GROUP, RESULTS_GROUP) if with_results else (GROUP,)


def verify(data_dir: str | os.PathLike[str] | None = None, *, with_results: bool = False) -> list[str]:
    """Check every pinned file (the released results too when asked); one problem line per bad
    file (empty list = all good)."""
    root = locate_data_dir(data_dir)
    if not root.is_dir():
        return [f"{root}: no such CoSER data directory (run `charactereval coser data fetch` or set {DATA_DIR_ENV})"]
    groups = _groups(with_results)
    problems = []
    for spec in manifest().files:
        if spec.group not in groups:
            continue
        try:
            read_verified(root, spec.name)
        except DataError as exc:
            problems.append(str(exc))
    return problems


def fetch_data(
    data_dir: str | os.PathLike[str] | None = None, *, mirror: str | None = None, progress: bool = True,
    with_results: bool = False,
) -> list[Path]:
    """Download the pinned files that are missing or altered, verify them, write them atomically
    (``with_results``: also the released evaluation files)."""
    return fetch(locate_data_dir(data_dir), _groups(with_results), manifest(), mirror=mirror, progress=progress,
                 offline_hint=f"Set {DATA_DIR_ENV} to a copy of the files or fetch from a mirror with --mirror URL")


def scene_key(entry: dict[str, Any]) -> str:
    """Upstream's scene key ``{book}-{i_p}-{i_c}`` (it names scenes in the result files)."""
    return f"{entry['book']}-{entry['i_p']}-{entry['i_c']}"


def parse_test_set(obj: Any, path: Path) -> list[Scene]:
    """Check the test set's shape (a list of scene objects with the fields the protocol reads)."""
    if not isinstance(obj, list):
        raise DataError(f"{path}: wrong shape: expected a JSON array of scenes, got {type(obj).__name__}")
    scenes = []
    for i, entry in enumerate(obj):
        where = f"{path}: scene {i}"
        if not isinstance(entry, dict):
            raise DataError(f"{where}: wrong shape: expected an object, got {type(entry).__name__}")
        for field, kind in _SCENE_FIELDS.items():
            if field not in entry:
                raise DataError(f"{where}: wrong shape: missing field {field!r}")
            if not isinstance(entry[field], kind):
                raise DataError(
                    f"{where}: wrong shape: field {field!r} should be {kind.__name__}, got {type(entry[field]).__name__}"
                )
        scenes.append(Scene(index=i, key=scene_key(entry), tag=entry["tag"], raw=entry, data_dir=Path(path).parent))
    return scenes


def load_test_set(data_dir: str | os.PathLike[str] | None = None, *, verify_digests: bool = True) -> list[Scene]:
    """The 200 scenes in file order (0-99 in-distribution ``id``, 100-199 ``ood``)."""
    root = locate_data_dir(data_dir)
    path = root / TEST_SET
    if verify_digests:
        data = read_verified(root, TEST_SET)
    else:
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            raise DataError(f"{path}: missing (run `coser data fetch`, or set {DATA_DIR_ENV})") from None
    return parse_test_set(load_json_document(path, data), path)

