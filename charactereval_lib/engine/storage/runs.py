"""Run directories: ``RunDir`` (the files every run has and their readers), the ``run.json``
manifest and the writer lock.

A run lives in ``outputs/<name>/``; its files are written and read by ``engine.storage.artifacts``
(atomic whole files, append-only JSON Lines). The generation engine's files (``requests.jsonl``,
``generations.jsonl``) are the engine's; a benchmark names its own in a subclass of ``RunDir``
(``charactereval.layout``).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import functools
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self, TypeVar

from charactereval_lib import __version__
from charactereval_lib.engine.storage import artifacts
from charactereval_lib.engine.storage.artifacts import RunError

if TYPE_CHECKING:
    from charactereval_lib.engine.storage.manifest import Manifest

M = TypeVar("M", bound="Manifest")

OUTPUTS_DIR = "outputs"
WORKSPACE_ENV = "CHARACTEREVAL_HOME"
# What a workspace remembers (its data directories: ``engine.storage.workspace``); the folder holding it
# is the workspace of every command and kernel started in it or below it.
WORKSPACE_FILE = ".charactereval.json"
MANIFEST = "run.json"
GENERATIONS = "generations.jsonl"
REQUESTS = "requests.jsonl"

def workspace_root() -> Path:
    """The directory relative names are resolved against (``outputs/``, ``data/official/``):
    ``$CHARACTEREVAL_HOME`` if set, else the nearest of the current directory and its parents that
    holds a workspace file (a kernel Jupyter starts in ``outputs/RUN/`` finds the workspace's
    data directory), else the current directory, except that a kernel Jupyter started in a
    project's ``notebooks/`` folder works in the project above it, so a relative path means the
    same under Jupyter, papermill and the command line."""
    env = os.environ.get(WORKSPACE_ENV)
    if env:
        return Path(env)
    cwd = Path.cwd()
    for folder in (cwd, *cwd.parents):
        if (folder / WORKSPACE_FILE).is_file():
            return folder
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


# --- manifest -------------------------------------------------------------------------------


@functools.cache
def git_commit() -> str | None:
    """The workbench's own git commit when it runs from a checkout, else None. Asked once per
    process: the code running is the code imported then, and a manifest is written at every
    step (a test session asked git 623 times)."""
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
    from charactereval_lib.engine.storage.manifest import Manifest
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
    from charactereval_lib.engine.storage.manifest import upgrade

    if not path.exists():
        return {}
    document = artifacts.read_json(path)
    return upgrade(document) if isinstance(document, dict) else document


def update_manifest(run_dir: Path, *, protocol_version: str | None = None, **sections: Any) -> dict[str, Any]:
    """Merge top-level sections into ``run.json`` (creating it) and stamp versions and times.

    ``protocol_version`` is the benchmark protocol the writing stage follows; a run records the
    first one and a stage of another version is refused by ``RunDir.check_protocol``. Callers
    pass only parameters and counts; secrets never belong here (API keys are read from the
    environment by the backends and never passed in).
    """
    from charactereval_lib.engine.storage.manifest import MANIFEST_SCHEMA

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
    artifacts.write_json_atomic(run_dir / MANIFEST, manifest)
    return manifest


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
class RunDir:
    """A run directory: the one owner of the engine's artifact paths, its manifest and the
    readers every benchmark needs, so that "the latest generation per sample" is answered in one
    place."""

    path: Path

    @classmethod
    def resolve(cls, run: str | os.PathLike[str] | RunDir) -> Self:
        """A bare name means ``outputs/<name>`` of the current directory; a path is a path. A
        ``RunDir`` of another class (the engine's, a benchmark's) is viewed as this class."""
        if isinstance(run, cls):
            return run
        return cls(run.path if isinstance(run, RunDir) else resolve_run_dir(run))

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
        from charactereval_lib.engine.storage.manifest import Manifest

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
        read = artifacts.read_jsonl(self.generations)
        if warnings is not None:
            warnings.extend(read.warnings)
        return {record["id"]: record for record in read.records}
