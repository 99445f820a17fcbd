"""Files pinned to an upstream commit: a manifest of digests, verification, atomic download,
and whole-document JSON parsing. Each benchmark ships its own manifest and says, in its hints,
how a user gets the files; the rules are the same for all.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from charactereval_lib.engine.storage.artifacts import write_bytes_atomic


class DataError(RuntimeError):
    """An official data file that is missing, altered, malformed or of the wrong shape."""


@dataclass(frozen=True)
class UpstreamFile:
    name: str
    path: str
    group: str
    sha256: str | None
    git_blob_sha1: str
    # A file pinned at another commit of the same repository (None: the manifest's commit).
    commit: str | None = None


@dataclass(frozen=True)
class Upstream:
    repository: str
    commit: str
    raw_url: str
    files: tuple[UpstreamFile, ...]

    def file(self, name: str) -> UpstreamFile:
        for f in self.files:
            if f.name == name:
                return f
        raise KeyError(name)

    def url(self, f: UpstreamFile, mirror: str | None = None) -> str:
        quoted = urllib.parse.quote(f.path)
        if mirror:
            return mirror.rstrip("/") + "/" + quoted
        return self.raw_url.format(repository=self.repository, commit=f.commit or self.commit, path=quoted)


def load_upstream(path: Path) -> Upstream:
    """A pinned upstream manifest (repository, commit, URL pattern, per-file digests)."""
    raw = json.loads(Path(path).read_text(encoding="utf-8"))
    files = tuple(UpstreamFile(**{k: f[k] for k in UpstreamFile.__dataclass_fields__ if k in f}) for f in raw["files"])
    return Upstream(raw["repository"], raw["commit"], raw["raw_url"], files)


def digests(data: bytes) -> tuple[str, str]:
    """(SHA-256, git blob SHA-1) of a file's bytes."""
    blob = hashlib.sha1(b"blob " + str(len(data)).encode() + b"\0" + data).hexdigest()
    return hashlib.sha256(data).hexdigest(), blob


def check_digests(path: Path, data: bytes, spec: UpstreamFile) -> None:
    sha256, blob = digests(data)
    if spec.sha256 and sha256 != spec.sha256:
        raise DataError(f"{path}: SHA-256 mismatch: expected {spec.sha256}, got {sha256} (altered or wrong file)")
    if blob != spec.git_blob_sha1:
        raise DataError(
            f"{path}: git blob SHA-1 mismatch: expected {spec.git_blob_sha1}, got {blob} (altered or wrong file)"
        )


def read_bytes(path: Path, missing_hint: str) -> bytes:
    """A file's bytes; a missing file is a one-line DataError that says how to get it."""
    try:
        return Path(path).read_bytes()
    except FileNotFoundError:
        raise DataError(f"{path}: missing ({missing_hint})") from None


def verify_files(data_dir: Path, groups: Iterable[str], upstream: Upstream, *, missing_hint: str) -> list[str]:
    """Check every file of the given groups; returns one problem line per bad file (empty = OK)."""
    wanted = set(groups)
    if not Path(data_dir).is_dir():
        # One line for the directory, not one per file it would hold.
        return [f"{data_dir}: no such data directory ({missing_hint})"]
    problems = []
    for spec in upstream.files:
        if spec.group not in wanted:
            continue
        path = Path(data_dir) / spec.name
        try:
            check_digests(path, read_bytes(path, missing_hint), spec)
        except DataError as exc:
            problems.append(str(exc))
    return problems


def fetch(
    data_dir: Path,
    groups: Iterable[str],
    upstream: Upstream,
    *,
    offline_hint: str,
    mirror: str | None = None,
    timeout: float = 60.0,
    progress: bool = True,
) -> list[Path]:
    """Download the files of ``groups`` at the pinned commit, verify them and move each into
    place atomically. Files already present and valid are kept. Returns the paths fetched."""
    data_dir = Path(data_dir)
    data_dir.mkdir(parents=True, exist_ok=True)
    wanted = set(groups)
    fetched = []
    for spec in upstream.files:
        if spec.group not in wanted:
            continue
        target = data_dir / spec.name
        if target.exists():
            with contextlib.suppress(DataError):
                check_digests(target, target.read_bytes(), spec)
                continue
        url = upstream.url(spec, mirror)
        data = _download(url, timeout=timeout, progress=progress, label=spec.name, offline_hint=offline_hint)
        check_digests(Path(url), data, spec)
        write_bytes_atomic(target, data)
        fetched.append(target)
    return fetched


def _download(url: str, *, timeout: float, progress: bool, label: str, offline_hint: str) -> bytes:
    from tqdm import tqdm

    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            total = int(response.headers.get("Content-Length") or 0) or None
            chunks = []
            with tqdm(total=total, unit="B", unit_scale=True, desc=label, disable=not progress, leave=False) as bar:
                while chunk := response.read(1 << 16):
                    chunks.append(chunk)
                    bar.update(len(chunk))
            return b"".join(chunks)
    except urllib.error.HTTPError as exc:
        raise DataError(f"{url}: download failed: HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise DataError(f"{url}: download failed ({reason}); are you offline? {offline_hint}") from None


def load_json_document(path: Path, data: bytes | None = None, *, missing_hint: str = "") -> Any:
    """Parse a whole file as ONE JSON document; errors name the file, line and column."""
    path = Path(path)
    if data is None:
        data = read_bytes(path, missing_hint)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(f"{path}: not UTF-8 (byte {exc.start})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}: malformed JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from None
