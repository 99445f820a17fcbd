"""Artifact files: whole files written atomically and JSON Lines record streams.

Whole files are written atomically (temp file in the same directory + rename) so a crash never
leaves a half-written file; record streams are JSON Lines appended one flushed line at a time,
so a crash loses at most the line being written, which the reader reports and the next writer
cuts off before appending. ``runs.RunDir`` names the files of a run directory.
"""

from __future__ import annotations

import contextlib
import json
import operator
import os
import tempfile
import threading
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

# Read once: os.umask can only be read by setting it.
_UMASK = os.umask(0)
os.umask(_UMASK)


class RunError(RuntimeError):
    """A run directory or artifact that cannot be used as it is."""


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
    # The 1-based line number of each record, for errors that name where a record is.
    lines: list[int] = field(default_factory=list)


# Every torn last line read in this process, worded by ``torn_notice``, in the order met: the
# command line says those its command met on stderr whatever the command (``cli.main``), so that
# a torn score file is named as a torn generations file is, not only where a caller passes
# warnings on.
_TORN_NOTICES: list[str] = []


def torn_notice(path: Path, line: int, kept: int) -> str:
    """The one wording of a torn last line, for every JSON Lines file the workbench reads."""
    return f"ignored a torn last line {line} of {path} (an interrupted write); kept {kept} row(s)"


def torn_notices(since: int = 0) -> list[str]:
    """The torn-line notices of the ``read_jsonl`` calls of this process, from the ``since``-th
    on (``len(torn_notices())`` taken before some work: those of that work)."""
    return _TORN_NOTICES[since:]


def read_jsonl(path: Path) -> JsonlRead:
    """Read a JSON Lines artifact: the one reader of every JSON Lines file the workbench reads.
    A torn last line (no newline and not a record: a crash mid-write) is skipped, reported in
    ``warnings`` as ``torn_notice`` words it and kept in ``torn_notices``; a complete line that
    is not a record is corruption, a RunError naming the file and line."""
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
        except UnicodeDecodeError as exc:
            raise RunError(f"{path}:{number}: not UTF-8 text (byte {raw[exc.start]:#04x} at offset {exc.start} of "
                           "the line)") from None
        except json.JSONDecodeError as exc:
            raise RunError(f"{path}:{number}: not a JSON record ({exc})") from None
        result.lines.append(number)
    if tail.strip():
        number = len(lines) + 1
        try:
            result.records.append(json.loads(tail.decode("utf-8")))
            result.lines.append(number)
            # Parsable but unterminated: keep it; the appender adds the missing newline.
        except (UnicodeDecodeError, json.JSONDecodeError):
            result.torn_line = number
            result.torn_text = tail.decode("utf-8", errors="replace")
            notice = torn_notice(path, number, len(result.records))
            result.warnings.append(notice)
            _TORN_NOTICES.append(notice)
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
    """Append records to a JSON Lines file, one flushed line per record (one writer per file).

    With ``background``, ``write`` encodes the record and queues the line; a writer thread wakes
    every ``BACKGROUND_INTERVAL_S`` and appends and flushes what has queued up in one write. An
    event loop that records every reply then neither waits for the disk nor hands the GIL to a
    writer after each record (a wake-up per record cost as much as the flush it saved). Lines
    keep their order; ``close`` writes every queued line and raises the writer's error, if any (a
    later ``write`` raises it too). A kill loses the lines of the last interval, as it loses the
    requests in flight."""

    BACKGROUND_INTERVAL_S = 0.02

    def __init__(self, path: Path, *, fsync: bool = False, background: bool = False) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.repair_message = repair_torn_tail(self.path)
        self._fsync = fsync
        self._file: TextIO = open(self.path, "a", encoding="utf-8", newline="")
        self._pending: deque[str] | None = None
        self._error: BaseException | None = None
        if background:
            self._pending = deque()
            self._closing = threading.Event()
            self._thread = threading.Thread(target=self._drain, name=f"append {self.path.name}", daemon=True)
            self._thread.start()

    def write(self, record: Any) -> None:
        line = dumps_record(record) + "\n"
        if self._pending is None:
            self._append(line)
            return
        if self._error is not None:
            raise self._error
        self._pending.append(line)

    def _append(self, text: str) -> None:
        self._file.write(text)
        self._file.flush()
        if self._fsync:
            os.fsync(self._file.fileno())

    def _drain(self) -> None:
        assert self._pending is not None
        closing = False
        while not closing:
            closing = self._closing.wait(self.BACKGROUND_INTERVAL_S)
            lines = []
            while self._pending:
                lines.append(self._pending.popleft())
            if lines and self._error is None:
                try:
                    self._append("".join(lines))
                except BaseException as exc:  # reported by close() and the next write()
                    self._error = exc

    def close(self) -> None:
        if self._pending is not None and self._thread.is_alive():
            self._closing.set()
            self._thread.join()
        if not self._file.closed:
            self._file.close()
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def __enter__(self) -> JsonlAppender:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_text(path: Path) -> str:
    """A text file read as UTF-8, or RunError naming the file and the first byte that is not."""
    try:
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise RunError(f"{path}: not UTF-8 text (byte {exc.object[exc.start]:#04x} at offset {exc.start})") from None


def read_json(path: Path) -> Any:
    """A whole JSON file (a manifest, a summary), or RunError naming the file and what is wrong."""
    if not Path(path).is_file():
        raise RunError(f"{path}: no such file")
    try:
        return json.loads(read_text(path))
    except json.JSONDecodeError as exc:
        raise RunError(f"{path}: malformed JSON at line {exc.lineno} column {exc.colno}") from None


def latest_by_key(records: Iterable[dict[str, Any]], *keys: str) -> dict[tuple, dict[str, Any]]:
    """The last record for each key: in an append-only log the latest record is the state."""
    key = operator.itemgetter(*keys) if len(keys) > 1 else (lambda record: (record[keys[0]],))
    return {key(record): record for record in records}
