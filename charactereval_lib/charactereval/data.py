"""Protocol step S1: locate, fetch, verify and load the official CharacterEval files.

The files come from a pinned upstream commit (``data/upstream.json``), are verified by SHA-256
where known and by git blob SHA-1 always, and are parsed as whole JSON documents: despite the
``.jsonl`` names they are one JSON array or object each, not JSON Lines.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from charactereval_lib.charactereval.protocol import METRIC_BY_EN
from charactereval_lib.engine.resources import resource_path
from charactereval_lib.engine.storage import pinned, workspace
from charactereval_lib.engine.storage.pinned import DataError, Upstream, digests

UPSTREAM_MANIFEST = "data/upstream.json"
# Under the workspace root, like the run directories under ./outputs.
DEFAULT_DATA_DIR = Path("data") / "official"
DATA_DIR_ENV = "CHARACTEREVAL_DATA_DIR"
# The key of this benchmark's directory in the workspace file (engine.storage.workspace).
BENCHMARK = "charactereval"

TEST_DATA = "test_data.jsonl"
PROFILES = "character_profiles.json"
ID2METRIC = "id2metric.jsonl"
REQUIRED_GROUP = "required"
# The reward model's training annotations (optional download: `data fetch --with-rm-train`).
RM_TRAIN = "rm_train_data.json"


@dataclass(frozen=True)
class Sample:
    id: int
    role: str
    novel_name: str
    context: str


@dataclass
class OfficialData:
    """The three protocol files, parsed and checked against each other."""

    data_dir: Path
    samples: list[Sample]
    profiles: dict[str, dict[str, Any]]
    # str(id) -> ((metric_en, metric_zh), ...) in file order, as the official transform reads it.
    id2metric: dict[str, tuple[tuple[str, str], ...]]
    sha256: dict[str, str] = field(default_factory=dict)

    def by_id(self) -> dict[int, Sample]:
        return {s.id: s for s in self.samples}


def load_upstream(path: Path | None = None) -> Upstream:
    """The pinned upstream manifest (commit, URLs, digests): the shipped one unless ``path``."""
    return pinned.load_upstream(Path(path or resource_path(UPSTREAM_MANIFEST)))


def locate_data_dir(explicit: str | os.PathLike[str] | None = None) -> Path:
    """The data directory: ``--dir``, else ``$CHARACTEREVAL_DATA_DIR``, else the workspace's
    (``charactereval data use DIR``), else ``data/official/``."""
    return workspace.data_dir(BENCHMARK, explicit, DATA_DIR_ENV, DEFAULT_DATA_DIR)


MISSING_HINT = f"run `charactereval data fetch`, pass --dir, set {DATA_DIR_ENV}, or run `charactereval data use DIR`"
OFFLINE_HINT = (
    f"Set {DATA_DIR_ENV} to a copy of the files, copy them into the data directory, or fetch from a "
    "mirror with --mirror URL (README: 'When data fetch cannot reach GitHub')"
)


def verify_files(data_dir: Path, groups: Iterable[str] = (REQUIRED_GROUP,), upstream: Upstream | None = None) -> list[str]:
    """Check every file of the given groups; returns one problem line per bad file (empty = OK)."""
    return pinned.verify_files(data_dir, groups, upstream or load_upstream(), missing_hint=MISSING_HINT)


def fetch(data_dir: Path, groups: Iterable[str], *, mirror: str | None = None, timeout: float = 60.0,
          progress: bool = True, upstream: Upstream | None = None) -> list[Path]:
    """Download the files of ``groups`` at the pinned commit (see ``engine.storage.pinned.fetch``)."""
    return pinned.fetch(data_dir, groups, upstream or load_upstream(), offline_hint=OFFLINE_HINT, mirror=mirror,
                        timeout=timeout, progress=progress)


# --- parse (S1) ------------------------------------------------------------------------------


def load_json_document(path: Path, data: bytes | None = None) -> Any:
    """Parse a whole file as ONE JSON document (S1); errors name the file, line and column."""
    return pinned.load_json_document(path, data, missing_hint=MISSING_HINT)


def parse_samples(obj: Any, path: Path) -> list[Sample]:
    if not isinstance(obj, list):
        raise DataError(f"{path}: wrong shape: expected a JSON array of samples, got {type(obj).__name__}")
    samples = []
    seen: set[int] = set()
    for index, item in enumerate(obj):
        where = f"{path}: sample #{index}"
        if not isinstance(item, dict):
            raise DataError(f"{where}: wrong shape: expected an object, got {type(item).__name__}")
        for key, kind in (("id", int), ("role", str), ("novel_name", str), ("context", str)):
            if key not in item:
                raise DataError(f"{where}: wrong shape: missing field {key!r}")
            value = item[key]
            if not isinstance(value, kind) or isinstance(value, bool):
                raise DataError(f"{where}: wrong shape: field {key!r} should be {kind.__name__}, got {type(value).__name__}")
        if item["id"] in seen:
            raise DataError(f"{where}: duplicate id {item['id']}")
        seen.add(item["id"])
        samples.append(Sample(item["id"], item["role"], item["novel_name"], item["context"]))
    return samples


def parse_profiles(obj: Any, path: Path) -> dict[str, dict[str, Any]]:
    if not isinstance(obj, dict):
        raise DataError(f"{path}: wrong shape: expected a JSON object keyed by role, got {type(obj).__name__}")
    for role, profile in obj.items():
        if not isinstance(profile, dict):
            raise DataError(f"{path}: wrong shape: profile of {role!r} should be an object, got {type(profile).__name__}")
    return obj


def parse_id2metric(obj: Any, path: Path) -> dict[str, tuple[tuple[str, str], ...]]:
    if not isinstance(obj, dict):
        raise DataError(f"{path}: wrong shape: expected a JSON object keyed by id, got {type(obj).__name__}")
    parsed = {}
    for key, pairs in obj.items():
        where = f"{path}: id {key}"
        if not isinstance(pairs, list):
            raise DataError(f"{where}: wrong shape: expected a list of [metric_en, metric_zh]")
        entries = []
        for pair in pairs:
            if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(x, str) for x in pair)):
                raise DataError(f"{where}: wrong shape: {pair!r} is not [metric_en, metric_zh]")
            metric = METRIC_BY_EN.get(pair[0])
            if metric is None:
                raise DataError(f"{where}: unknown metric {pair[0]!r}")
            if metric.metric_zh != pair[1]:
                raise DataError(f"{where}: metric {pair[0]!r} has Chinese name {pair[1]!r}, expected {metric.metric_zh!r}")
            entries.append((pair[0], pair[1]))
        parsed[key] = tuple(entries)
    return parsed


def load_official_data(data_dir: str | os.PathLike[str] | None = None, *, verify: bool = True) -> OfficialData:
    """S1: read test data, profiles and id2metric as whole JSON documents into typed records.

    With ``verify`` (the default) each file must match the pinned digests, so an altered file is
    refused before it can move a score. Every sample's role must have a profile.
    """
    data_dir = locate_data_dir(data_dir)
    upstream = load_upstream() if verify else None
    parsed: dict[str, Any] = {}
    sha: dict[str, str] = {}
    for name in (TEST_DATA, PROFILES, ID2METRIC):
        path = data_dir / name
        data = pinned.read_bytes(path, MISSING_HINT)
        if upstream is not None:
            pinned.check_digests(path, data, upstream.file(name))
        sha[name] = digests(data)[0]
        parsed[name] = load_json_document(path, data)
    samples = parse_samples(parsed[TEST_DATA], data_dir / TEST_DATA)
    profiles = parse_profiles(parsed[PROFILES], data_dir / PROFILES)
    id2metric = parse_id2metric(parsed[ID2METRIC], data_dir / ID2METRIC)
    for sample in samples:
        if sample.role not in profiles:
            raise DataError(
                f"{data_dir / TEST_DATA}: sample id {sample.id}: unknown role {sample.role!r} (no profile in {PROFILES})"
            )
    return OfficialData(data_dir, samples, profiles, id2metric, sha)


def load_rm_train(data_dir: str | os.PathLike[str] | None = None, path: str | os.PathLike[str] | None = None
                  ) -> tuple[Path, Any]:
    """The reward model's training annotations as ONE JSON document (like every upstream file):
    ``path`` read as it is, or ``DATA_DIR/rm_train_data.json`` checked against the pinned digests
    first. Their records are validated by whoever reads them (``metaeval.rm_train_labels``)."""
    if path is not None:
        source = Path(path)
        return source, load_json_document(source, pinned.read_bytes(source, "no such file"))
    source = locate_data_dir(data_dir) / RM_TRAIN
    data = pinned.read_bytes(source, f"run `charactereval data fetch --with-rm-train`, pass --dir, or set {DATA_DIR_ENV}")
    pinned.check_digests(source, data, load_upstream().file(RM_TRAIN))
    return source, load_json_document(source, data)
