"""Run directories: the ``run.json`` manifest and the append-only JSON Lines artifacts.

A run lives in ``outputs/<name>/`` (DESIGN §4). Whole files are written atomically (temp file in
the same directory + rename) so a crash never leaves a half-written file; record streams are
JSON Lines appended one flushed line at a time, so a crash loses at most the line being written,
which the reader reports and the next writer cuts off before appending.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from charactereval_lib import __version__
from charactereval_lib.charactereval.protocol import PROTOCOL_VERSION

OUTPUTS_DIR = Path("outputs")
MANIFEST = "run.json"
GENERATIONS = "generations.jsonl"
REQUESTS = "requests.jsonl"
ROWS = "rows.jsonl"
SCORES = "scores.jsonl"
SUMMARY = "summary.json"
METRICS_CSV = "metrics.csv"


# Read once: os.umask can only be read by setting it.
_UMASK = os.umask(0)
os.umask(_UMASK)


class RunError(RuntimeError):
    """A run directory or artifact that cannot be used as it is."""


def resolve_run_dir(run: str | os.PathLike[str]) -> Path:
    """A bare name means ``outputs/<name>``; anything with a path separator is a path."""
    text = os.fspath(run)
    if os.sep in text or (os.altsep and os.altsep in text) or text.startswith("."):
        return Path(text)
    return OUTPUTS_DIR / text


def utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def dumps_record(record: Any) -> str:
    """One JSON Lines record: UTF-8 text, non-ASCII kept readable."""
    return json.dumps(record, ensure_ascii=False, separators=(",", ":"))


# --- whole files ---------------------------------------------------------------------------


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write a whole file so that readers see either the old or the new content, never a part."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        # mkstemp creates 0600; artifacts (reports above all) are meant to be shared.
        os.chmod(tmp, 0o666 & ~_UMASK)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def write_text_atomic(path: Path, text: str) -> None:
    write_bytes_atomic(path, text.encode("utf-8"))


def write_json_atomic(path: Path, obj: Any, *, indent: int | None = 2) -> None:
    write_text_atomic(path, json.dumps(obj, ensure_ascii=False, indent=indent) + "\n")


def write_jsonl_atomic(path: Path, records: Iterable[Any]) -> int:
    """Write a whole JSON Lines file at once (derived artifacts such as rows.jsonl)."""
    lines = [dumps_record(r) for r in records]
    write_text_atomic(path, "".join(line + "\n" for line in lines))
    return len(lines)


# --- JSON Lines streams --------------------------------------------------------------------


@dataclass
class JsonlRead:
    records: list[Any]
    # 1-based line number and text of a torn (unterminated, unparsable) last line, if any.
    torn_line: int | None = None
    torn_text: str = ""
    warnings: list[str] = field(default_factory=list)


def read_jsonl(path: Path) -> JsonlRead:
    """Read a JSON Lines artifact. A torn last line (a crash mid-write) is skipped and reported
    in ``warnings``; a bad line anywhere else is corruption and raises RunError naming it."""
    path = Path(path)
    if not path.exists():
        return JsonlRead([])
    data = path.read_bytes()
    lines = data.split(b"\n")
    # A complete file ends with "\n", leaving one empty tail element.
    tail = lines.pop()
    result = JsonlRead([])
    for number, raw in enumerate(lines, start=1):
        if not raw.strip():
            continue
        try:
            result.records.append(json.loads(raw.decode("utf-8")))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise RunError(f"{path}:{number}: not a JSON record ({exc})") from None
    if tail.strip():
        number = len(lines) + 1
        try:
            result.records.append(json.loads(tail.decode("utf-8")))
            # Parsable but unterminated: keep it; the appender adds the missing newline.
        except (UnicodeDecodeError, json.JSONDecodeError):
            result.torn_line = number
            result.torn_text = tail.decode("utf-8", errors="replace")
            result.warnings.append(
                f"{path}:{number}: ignored a torn last line ({len(tail)} bytes) left by an "
                "interrupted write"
            )
    return result


def repair_torn_tail(path: Path) -> str | None:
    """Cut an unterminated, unparsable last line off a JSON Lines file (or terminate a parsable
    one) so that appending continues on a clean line. Returns a message when it changed the file."""
    path = Path(path)
    if not path.exists():
        return None
    with open(path, "rb+") as f:
        size = f.seek(0, os.SEEK_END)
        if size == 0:
            return None
        f.seek(size - 1)
        if f.read(1) == b"\n":
            return None
        # Find the start of the last line without reading a large file whole.
        block = min(size, 1 << 20)
        f.seek(size - block)
        chunk = f.read(block)
        cut = chunk.rfind(b"\n")
        start = size - block + cut + 1 if cut >= 0 else 0
        if cut < 0 and block < size:
            raise RunError(f"{path}: last line longer than 1 MiB without a newline")
        tail = chunk[cut + 1 :]
        try:
            json.loads(tail.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            f.truncate(start)
            return f"{path}: removed a torn last line ({len(tail)} bytes) before appending"
        f.seek(0, os.SEEK_END)
        f.write(b"\n")
        return f"{path}: terminated an unterminated last line before appending"


class JsonlAppender:
    """Append records to a JSON Lines file, one flushed line per record (one writer per file)."""

    def __init__(self, path: Path, *, fsync: bool = False) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.repair_message = repair_torn_tail(self.path)
        self._fsync = fsync
        self._file: TextIO = open(self.path, "a", encoding="utf-8", newline="")

    def write(self, record: Any) -> None:
        self._file.write(dumps_record(record) + "\n")
        self._file.flush()
        if self._fsync:
            os.fsync(self._file.fileno())

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()

    def __enter__(self) -> JsonlAppender:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def latest_by_key(records: Iterable[dict[str, Any]], *keys: str) -> dict[tuple, dict[str, Any]]:
    """The last record for each key: in an append-only log the latest record is the state."""
    latest: dict[tuple, dict[str, Any]] = {}
    for record in records:
        latest[tuple(record[k] for k in keys)] = record
    return latest


# --- manifest -------------------------------------------------------------------------------


def git_commit() -> str | None:
    """The workbench's own git commit when it runs from a checkout, else None."""
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    commit = out.stdout.strip()
    return commit or None


def load_manifest(run_dir: Path) -> dict[str, Any]:
    path = Path(run_dir) / MANIFEST
    if not path.exists():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise RunError(f"{path}: malformed JSON at line {exc.lineno} column {exc.colno}") from None


def update_manifest(run_dir: Path, **sections: Any) -> dict[str, Any]:
    """Merge top-level sections into ``run.json`` (creating it) and stamp versions and times.

    Callers pass only parameters and counts; secrets never belong here (API keys are read from
    the environment by the backends and never passed in).
    """
    run_dir = Path(run_dir)
    manifest = load_manifest(run_dir)
    now = utc_now()
    manifest.setdefault("created_at", now)
    manifest["updated_at"] = now
    manifest["protocol_version"] = PROTOCOL_VERSION
    manifest["package_version"] = __version__
    manifest["git_commit"] = git_commit()
    manifest["python"] = sys.version.split()[0]
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(manifest.get(key), dict):
            manifest[key] = {**manifest[key], **value}
        else:
            manifest[key] = value
    write_json_atomic(run_dir / MANIFEST, manifest)
    return manifest
