"""Run directories: the ``run.json`` manifest and the append-only JSON Lines artifacts.

A run lives in ``outputs/<name>/`` (``RunDir`` owns its layout). Whole files are written atomically (temp file in
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
import threading
from collections import Counter, deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO, TypeVar

from charactereval_lib import __version__

if TYPE_CHECKING:
    from charactereval_lib.engine.manifest import Manifest

M = TypeVar("M", bound="Manifest")

OUTPUTS_DIR = "outputs"
WORKSPACE_ENV = "CHARACTEREVAL_HOME"
MANIFEST = "run.json"
GENERATIONS = "generations.jsonl"
REQUESTS = "requests.jsonl"
ROWS = "rows.jsonl"
SCORES = "scores.jsonl"
SUMMARY = "summary.json"
METRICS_CSV = "metrics.csv"
JUDGE_SCORES = "judge_scores.jsonl"
# Scorers are a named dimension of a run: each keeps its own score file and summary, so a run
# can hold reward-model and judge scores of the same rows side by side.
REWARD_MODEL = "reward-model"
JUDGE = "judge"
SCORERS = (REWARD_MODEL, JUDGE)
_SCORER_FILES = {REWARD_MODEL: (SCORES, SUMMARY, METRICS_CSV),
                 JUDGE: (JUDGE_SCORES, "judge_summary.json", "judge_metrics.csv")}


# Read once: os.umask can only be read by setting it.
_UMASK = os.umask(0)
os.umask(_UMASK)


class RunError(RuntimeError):
    """A run directory or artifact that cannot be used as it is."""


def workspace_root() -> Path:
    """The directory relative names are resolved against (``outputs/``, ``data/official/``):
    ``$CHARACTEREVAL_HOME`` if set, else the current directory, except that a kernel Jupyter
    started in a project's ``notebooks/`` folder works in the project above it, so a relative
    path means the same under Jupyter, papermill and the command line."""
    env = os.environ.get(WORKSPACE_ENV)
    if env:
        return Path(env)
    cwd = Path.cwd()
    if cwd.name == "notebooks" and any((cwd.parent / marker).is_dir() for marker in ("outputs", "data")):
        return cwd.parent
    return cwd


def in_workspace(relative: Path) -> Path:
    """``relative`` under the workspace root (kept relative when that is the current directory)."""
    root = workspace_root()
    return relative if root == Path.cwd() else root / relative


def outputs_dir() -> Path:
    return workspace_root() / OUTPUTS_DIR


def resolve_run_dir(run: str | os.PathLike[str]) -> Path:
    """A bare name means ``outputs/<name>``; anything with a path separator is a path (relative
    paths are taken from the workspace root, see ``workspace_root``)."""
    text = os.fspath(run)
    if os.sep in text or (os.altsep and os.altsep in text) or text.startswith("."):
        path = Path(text)
        return path if path.is_absolute() or workspace_root() == Path.cwd() else workspace_root() / path
    return outputs_dir() / text


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
    # The 1-based line number of each record, for errors that name where a record is.
    lines: list[int] = field(default_factory=list)


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


def check_score_record(record: Any, where: str) -> None:
    """A score record that analysis can use: an object with an integer ``id``, a string
    ``metric_en`` and a numeric (or null: not scored) ``score``; else RunError naming ``where``
    and the field, since a damaged artifact must not reach the statistics."""
    if not isinstance(record, dict):
        raise RunError(f"{where}: not a JSON object")
    for name, kinds in (("id", int), ("metric_en", str), ("score", (int, float, type(None)))):
        value = record.get(name)
        if not isinstance(value, kinds) or isinstance(value, bool):
            raise RunError(f"{where}: field {name!r} must be {'a number or null' if name == 'score' else kinds.__name__}"
                           f", got {value!r}")


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
    """``run.json`` as a dict in the current layout ({} when there is none), checked against
    ``manifest.Manifest``: a damaged one is a RunError naming the file and the key. An older
    layout is upgraded in memory; the file is left as it is."""
    # Imported here: pydantic is not loaded by the CLI's start-up (``--help``).
    from charactereval_lib.engine.manifest import Manifest
    from charactereval_lib.engine.validation import validate

    path = Path(run_dir) / MANIFEST
    manifest = _manifest_document(path)
    validate(Manifest, manifest, str(path), RunError, root="(document)")
    return manifest


def read_manifest(run_dir: Path, model: type[M]) -> M:
    """``run.json`` as ``model`` (``manifest.Manifest`` or a benchmark's subclass of it)."""
    from charactereval_lib.engine.validation import validate

    path = Path(run_dir) / MANIFEST
    return validate(model, _manifest_document(path), str(path), RunError, root="(document)")


def _manifest_document(path: Path) -> Any:
    from charactereval_lib.engine.manifest import upgrade

    if not path.exists():
        return {}
    document = read_json(path)
    return upgrade(document) if isinstance(document, dict) else document


def update_manifest(run_dir: Path, *, protocol_version: str | None = None, **sections: Any) -> dict[str, Any]:
    """Merge top-level sections into ``run.json`` (creating it) and stamp versions and times.

    ``protocol_version`` is the benchmark protocol the writing stage follows; a run records the
    first one and a stage of another version is refused by ``RunDir.check_protocol``. Callers
    pass only parameters and counts; secrets never belong here (API keys are read from the
    environment by the backends and never passed in).
    """
    from charactereval_lib.engine.manifest import MANIFEST_SCHEMA

    run_dir = Path(run_dir)
    manifest = load_manifest(run_dir)
    now = utc_now()
    manifest.setdefault("created_at", now)
    manifest["updated_at"] = now
    manifest["manifest_schema"] = MANIFEST_SCHEMA
    if protocol_version is not None:
        manifest["protocol_version"] = protocol_version
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


def _scorer_files(scorer: str) -> tuple[str, str, str]:
    try:
        return _SCORER_FILES[scorer]
    except KeyError:
        raise RunError(f"unknown scorer {scorer!r}; expected one of {', '.join(SCORERS)}") from None


# --- the run directory ------------------------------------------------------------------------


@contextlib.contextmanager
def exclusive_lock(path: Path, busy: str) -> Iterator[None]:
    """Hold the lock file ``path`` (flock) while the block runs, or raise RunError(``busy``) at
    once when another process holds it. The file is removed when the holder leaves; one left by
    a killed holder is taken over, since the OS drops a lock when its process dies, even by
    SIGKILL. A process that opened the file just before the holder removed it finds the path
    gone or replaced after locking, and locks the path afresh."""
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    while True:
        handle = open(path, "a")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            raise RunError(busy) from None
        try:
            current = os.stat(path).st_ino == os.fstat(handle.fileno()).st_ino
        except FileNotFoundError:
            current = False
        if current:
            break
        handle.close()
    try:
        yield
    finally:
        # Removed while still locked, so that no one locks the file being removed.
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        handle.close()


class MixedRunError(RunError):
    """A run whose records come from more than one scorer configuration or protocol version."""


@dataclass(frozen=True)
class ScorerIdentity:
    """What makes two scores comparable: the scorer, its checkpoint (or judge) and its mode."""

    scorer: str
    checkpoint: str | None
    mode: str | None

    def label(self) -> str:
        checkpoint = self.checkpoint[:12] if self.checkpoint else "unknown checkpoint"
        return f"{self.scorer} {checkpoint} mode={self.mode or 'unknown'}"


def scorer_identity(record: dict[str, Any]) -> ScorerIdentity:
    """The scorer configuration a score record was made with. Imported official scores carry no
    checkpoint: their scorer is unknown and says so."""
    mode = record.get("mode")
    scorer = record.get("scorer") or ("imported" if mode == "imported" else REWARD_MODEL)
    if scorer == JUDGE:
        # A judge's compatibility mode is its parser (evals or strict); the model is its checkpoint.
        mode = record.get("parser")
    return ScorerIdentity(scorer, record.get("checkpoint_sha256") or record.get("judge_model"), mode)


@dataclass(frozen=True)
class RunDir:
    """A run directory: the one owner of its artifact paths, its manifest and the readers every
    stage needs, so that "the latest record per sample" and "which scorer made these scores"
    are answered in one place."""

    path: Path

    @classmethod
    def resolve(cls, run: str | os.PathLike[str] | RunDir) -> RunDir:
        """A bare name means ``outputs/<name>`` of the current directory; a path is a path."""
        return run if isinstance(run, RunDir) else cls(resolve_run_dir(run))

    def __fspath__(self) -> str:
        return os.fspath(self.path)

    def __str__(self) -> str:
        return str(self.path)

    @property
    def name(self) -> str:
        return self.path.name

    # Artifact paths: the only place their names are joined to a run directory.
    @property
    def manifest_path(self) -> Path:
        return self.path / MANIFEST

    @property
    def requests(self) -> Path:
        return self.path / REQUESTS

    @property
    def generations(self) -> Path:
        return self.path / GENERATIONS

    @property
    def rows(self) -> Path:
        return self.path / ROWS

    @property
    def scores(self) -> Path:
        return self.path / SCORES

    @property
    def summary(self) -> Path:
        return self.path / SUMMARY

    @property
    def metrics_csv(self) -> Path:
        return self.path / METRICS_CSV

    @property
    def judge_scores(self) -> Path:
        return self.path / JUDGE_SCORES

    def score_file(self, scorer: str = REWARD_MODEL) -> Path:
        """The score records of one scorer (``SCORERS``)."""
        return self.path / _scorer_files(scorer)[0]

    def summary_file(self, scorer: str = REWARD_MODEL) -> Path:
        """Where ``summarize`` writes one scorer's summary (the reward model's is ``summary.json``)."""
        return self.path / _scorer_files(scorer)[1]

    def metrics_csv_file(self, scorer: str = REWARD_MODEL) -> Path:
        return self.path / _scorer_files(scorer)[2]

    def artifact(self, name: str) -> Path:
        return self.path / name

    def require_dir(self) -> RunDir:
        if not self.path.is_dir():
            raise RunError(f"{self.path}: no such run directory")
        return self

    def require(self, path: Path, hint: str) -> Path:
        """``path`` if it exists, else a one-line error saying what to run first."""
        if not path.exists():
            raise RunError(f"{self.path}: no {path.name} ({hint})")
        return path

    # Manifest.
    def manifest(self) -> dict[str, Any]:
        return load_manifest(self.path)

    def manifest_model(self, model: type[M] | None = None) -> M:
        """The manifest typed: ``manifest.Manifest``, or the benchmark's subclass ``model``."""
        from charactereval_lib.engine.manifest import Manifest

        return read_manifest(self.path, model or Manifest)

    def update_manifest(self, *, protocol_version: str | None = None, **sections: Any) -> dict[str, Any]:
        return update_manifest(self.path, protocol_version=protocol_version, **sections)

    def check_protocol(self, protocol_version: str) -> None:
        """Refuse to add a stage of another protocol version to this run."""
        recorded = self.manifest().get("protocol_version")
        if recorded is not None and recorded != protocol_version:
            raise MixedRunError(
                f"{self.path}: made under protocol {recorded}, this workbench follows {protocol_version}; "
                "use a new run directory"
            )

    # Readers.
    def latest_generations(self, warnings: list[str] | None = None) -> dict[int, dict[str, Any]]:
        """The latest record per sample id of generations.jsonl (its state, in an append-only log)."""
        read = read_jsonl(self.generations)
        if warnings is not None:
            warnings.extend(read.warnings)
        return {key[0]: record for key, record in latest_by_key(read.records, "id").items()}

    def read_rows(self) -> list[dict[str, Any]]:
        return read_jsonl(self.rows).records

    def judge_models(self, path: Path | None = None) -> list[str]:
        """The judge models whose records are in ``judge_scores.jsonl`` (or ``path``), in the order
        they first appear: one file holds several judges, each with its own latest records."""
        records = read_jsonl(path or self.judge_scores).records
        return list(dict.fromkeys(r["judge_model"] for r in records if r.get("judge_model")))

    def select_judge(self, judge_model: str | None = None, path: Path | None = None) -> str | None:
        """The judge model whose scores are meant: ``judge_model`` when given (an error when the
        file has no records of it), else the only judge of the file (None when it has none); a
        file holding several judges needs a choice, and the error lists them."""
        models = self.judge_models(path)
        where = path or self.judge_scores
        if judge_model is not None:
            if judge_model not in models:
                raise RunError(f"{where}: no records of judge model {judge_model!r} "
                               f"(judges here: {', '.join(models) or 'none'})")
            return judge_model
        if len(models) > 1:
            raise RunError(f"{where}: holds {len(models)} judge models ({', '.join(models)}); "
                           "choose one with --judge-model (judge_model=...)")
        return models[0] if models else None

    def latest_scores(self, path: Path | None = None, *, scorer: str = REWARD_MODEL,
                      judge_model: str | None = None) -> dict[tuple, dict[str, Any]]:
        """The latest score record per (id, metric) of a scorer's score file (or another file).
        Judge records of failed calls (status error) hold no score and are left out; judge
        records are those of one judge model (``select_judge``)."""
        path = path or self.score_file(scorer)
        read = read_jsonl(path)
        for number, record in zip(read.lines, read.records):
            check_score_record(record, f"{path}:{number}")
        records = [r for r in read.records if r.get("status", "ok") == "ok"]
        if scorer == JUDGE:
            chosen = self.select_judge(judge_model, path)
            records = [r for r in records if r.get("judge_model") == chosen]
        return latest_by_key(records, "id", "metric_en")

    def scored_rows(self, scorer: str = REWARD_MODEL, judge_model: str | None = None
                    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """(all rows, the rows that have a score of ``scorer``, each joined with its latest score record)."""
        rows = self.read_rows()
        latest = self.latest_scores(scorer=scorer, judge_model=judge_model)
        scored = []
        for row in rows:
            score = latest.get((row["id"], row["metric_en"]))
            if score is not None:
                scored.append({**row, **score})
        return rows, scored

    def scorer_identities(self, scorer: str = REWARD_MODEL, judge_model: str | None = None) -> Counter:
        """How many of the latest score records each scorer configuration made."""
        return Counter(scorer_identity(record)
                       for record in self.latest_scores(scorer=scorer, judge_model=judge_model).values())

    def consistency_problems(self, scorer: str = REWARD_MODEL, judge_model: str | None = None) -> list[str]:
        """Why this run's numbers must not be published as one set: scores from several scorer
        configurations (checkpoint or judge model, mode; for the judge, one judge model's
        records made with several parsers). Empty when consistent."""
        identities = self.scorer_identities(scorer, judge_model)
        if len(identities) <= 1:
            return []
        parts = "; ".join(f"{identity.label()}: {count} rows" for identity, count in identities.most_common())
        return [f"{self.path}: the scores mix {len(identities)} scorer configurations ({parts})"]

    def check_consistent(self, *, allow_mixed: bool = False, scorer: str = REWARD_MODEL,
                         judge_model: str | None = None) -> list[str]:
        """Refuse a mixed run with one line naming what differs, or, with ``allow_mixed``,
        return the problems as warnings the caller must show loudly."""
        problems = self.consistency_problems(scorer, judge_model)
        if problems and not allow_mixed:
            raise MixedRunError(
                f"{problems[0]}; re-score with one configuration, or pass --allow-mixed to analyse it anyway"
            )
        return problems

