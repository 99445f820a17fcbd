"""The leaderboard's per-run cache: a rebuild reads and renders only the runs that changed.

What a run costs a build is reading it (``BoardSpec.read``: its views, with their bootstrap
intervals) and its explorer data (``site.run_data``). Both are kept, per run, under a key made of
the digests of everything they depend on: every file of the run directory (content, not time),
the run's resolved path (its page's name), the benchmark's rules (names and texts), the shared
inputs its benchmark reads (``board_inputs``, e.g. the official data), the build's own version
(``BUILD_VERSION``, bumped when a reader or an encoding changes, and the package version) and,
for the explorer data, ``--redact``. A change to any of them gives a new key, so exactly the runs
it affects are rebuilt; an unchanged run's files are linked (or copied) from the cache, byte for
byte what a fresh build writes.

The cache is a folder beside the site (``.SITE.cache``), not in it: it is the builder's working
data (the runs' views, pickled), never meant for publishing, and is trusted as the user's own
files like the runs it is made from (a pickle runs code when loaded: never point a build at a
cache from elsewhere). Entries are written whole (a temporary folder renamed into place); entries
no build used are removed at the end of the next one, so the cache holds what the site holds.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from charactereval_lib import __version__
from charactereval_lib.engine.leaderboard.board import RunView
from charactereval_lib.engine.leaderboard.site import RunData, shared_buckets

# The version of what the cache holds: bump it when a board reader, an explorer or the site's
# data encoding changes, so that no entry of the old form is reused.
BUILD_VERSION = "site-data-4"
_VIEWS = "views.pickle"
_ENTRY = "entry.json"


def default_folder(out: str | os.PathLike[str]) -> Path:
    """The cache of the site ``out``: the hidden folder ``.NAME.cache`` beside it."""
    out = Path(out).resolve()
    return out.parent / f".{out.name}.cache"


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()


def _files_digest(folder: Path) -> list[tuple[str, str]]:
    out = []
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        with path.open("rb") as handle:
            out.append((path.relative_to(folder).as_posix(), hashlib.file_digest(handle, "sha256").hexdigest()))
    return out


def inputs_digest(value: Any) -> str:
    """The digest of a benchmark's shared inputs (``board_inputs``' value; None when missing)."""
    return hashlib.sha256(pickle.dumps(value, protocol=5)).hexdigest()


class RunCache:
    """The per-run cache in ``folder`` (None: nothing is cached, every run is built)."""

    def __init__(self, folder: Path | None, *, rules: Mapping[str, Sequence[Any]], inputs: Mapping[str, str]) -> None:
        self.folder = None if folder is None else Path(folder)
        self.rules = {name: _digest([[r.name, r.text] for r in items]) for name, items in rules.items()}
        self.inputs = dict(inputs)
        self.used: set[str] = set()
        self.rebuilt: set[Path] = set()  # the runs read or rendered afresh by this build
        self._keys: dict[Path, str] = {}
        self._shared: dict[str, str] | None = None
        self._new_shared: dict[str, str] = {}
        self._made: dict[tuple[str, str, bool], RunData] = {}  # this build's explorer data, by run, page and redact

    # --- keys ------------------------------------------------------------------------------------

    def key(self, path: Path, benchmark: str) -> str:
        """The key of a run's views: its files, path, benchmark, rules, shared inputs, version."""
        path = Path(path).resolve()
        if path not in self._keys:
            self._keys[path] = _digest([BUILD_VERSION, __version__, benchmark, str(path), self.rules.get(benchmark),
                                        self.inputs.get(benchmark), _files_digest(path)])
        return self._keys[path]

    def _data_key(self, view: RunView, page: str, redact: bool) -> str:
        return _digest([self.key(view.path, view.benchmark), page, redact])

    # --- views -----------------------------------------------------------------------------------

    def views(self, path: Path, benchmark: str) -> list[RunView] | None:
        """The run's cached views (None: not cached)."""
        if self.folder is None:
            return None
        key = self.key(path, benchmark)
        entry = self.folder / "views" / key / _VIEWS
        if not entry.is_file():
            return None
        self.used.add(f"views/{key}")
        with entry.open("rb") as handle:
            return pickle.load(handle)

    def put_views(self, path: Path, benchmark: str, views: Sequence[RunView]) -> None:
        self.rebuilt.add(Path(path).resolve())
        if self.folder is None:
            return
        key = self.key(path, benchmark)
        self.used.add(f"views/{key}")
        self._write(f"views/{key}", {_VIEWS: pickle.dumps([replace(v, parsed={}) for v in views], protocol=5)})

    # --- explorer data ---------------------------------------------------------------------------

    def data(self, view: RunView, page: str, redact: bool) -> RunData | None:
        """A view's cached explorer data: its files (linked into the site), its shared texts."""
        made = self._made.get((str(view.path), page, redact))
        if made is not None or self.folder is None:
            return made
        name = f"runs/{self._data_key(view, page, redact)}"
        folder = self.folder / name
        if not (folder / _ENTRY).is_file():
            self.rebuilt.add(Path(view.path).resolve())
            return None
        entry = json.loads((folder / _ENTRY).read_text(encoding="utf-8"))
        store = self._store()
        if any(d not in store for d in entry["shared"]):
            self.rebuilt.add(Path(view.path).resolve())
            return None
        self.used.add(name)
        data = RunData({f: folder / f for f in entry["files"]}, {d: store[d] for d in entry["shared"]}, entry["note"],
                       entry["shows"])
        self._made[str(view.path), page, redact] = data
        return data

    def put_data(self, view: RunView, page: str, redact: bool, data: RunData) -> RunData:
        """Keep a view's explorer data; returns it as cached files (what the site links)."""
        self.rebuilt.add(Path(view.path).resolve())
        if self.folder is None:
            self._made[str(view.path), page, redact] = data
            return data
        name = f"runs/{self._data_key(view, page, redact)}"
        self.used.add(name)
        entry = {"files": sorted(data.files), "shared": sorted(data.shared), "note": data.note, "shows": data.shows}
        texts = {f: t.encode("utf-8") for f, t in data.files.items() if isinstance(t, str)}
        self._write(name, {**texts, _ENTRY: json.dumps(entry).encode()})
        self._store().update(data.shared)
        self._new_shared.update(data.shared)
        cached = RunData({f: self.folder / name / f for f in data.files}, data.shared, data.note, data.shows)
        self._made[str(view.path), page, redact] = cached
        return cached

    def _store(self) -> dict[str, str]:
        """Every shared text the cache holds (read once per build)."""
        if self._shared is None:
            self._shared = {}
            folder = self.folder / "shared" if self.folder else None
            for path in sorted(folder.glob("*.json")) if folder and folder.is_dir() else ():
                self._shared.update(json.loads(path.read_text(encoding="utf-8")))
        return self._shared

    def counts(self, views: Iterable[RunView]) -> tuple[int, int]:
        """(runs reused whole from the cache, runs read or rendered afresh) among ``views``' runs."""
        paths = {Path(v.path).resolve() for v in views}
        return len(paths - self.rebuilt), len(paths & self.rebuilt)

    # --- writing ---------------------------------------------------------------------------------

    def _write(self, name: str, files: Mapping[str, bytes]) -> None:
        assert self.folder is not None
        target = self.folder / name
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".tmp-", dir=target.parent))
        try:
            for file, content in files.items():
                (staging / file).write_bytes(content)
            if target.exists():
                shutil.rmtree(target)
            staging.rename(target)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise

    def finish(self, shared_used: Iterable[str]) -> None:
        """After a build: the new shared texts written (one file per digest prefix, the texts this
        build used), every entry it did not use removed."""
        if self.folder is None or not self.folder.is_dir():
            return
        used_texts = set(shared_used)
        if self._shared is not None and (self._new_shared or set(self._shared) - used_texts):
            kept = {digest: self._shared[digest] for digest in used_texts & set(self._shared)}
            folder = self.folder / "shared"
            staging = Path(tempfile.mkdtemp(prefix=".tmp-shared-", dir=self.folder))
            for prefix, bucket in shared_buckets(kept).items():
                (staging / f"{prefix}.json").write_text(json.dumps(bucket, ensure_ascii=False), encoding="utf-8")
            old = self.folder / f".old-shared-{staging.name}"
            if folder.exists():
                folder.rename(old)
            staging.rename(folder)
            shutil.rmtree(old, ignore_errors=True)
        for kind in ("views", "runs"):
            for entry in (self.folder / kind).iterdir() if (self.folder / kind).is_dir() else ():
                if f"{kind}/{entry.name}" not in self.used:
                    shutil.rmtree(entry, ignore_errors=True)
