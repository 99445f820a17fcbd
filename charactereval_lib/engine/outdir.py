"""Where ``--out`` may write: the one rule of every command with an output folder.

A command writes output of one of three kinds. The leaderboard's site and a reproduction are
folders written as a whole: built beside ``OUT`` and swapped in, replacing what was there.
Reports, comparisons, summaries, panels and official exports add their own named files to a
folder. Each kind leaves ``MARKER`` in the folder (with the version that wrote it), and
``check`` accepts as ``OUT`` only:

- a new folder, or an empty one;
- a folder whose marker says the tool wrote output of the same kind there;
- the command's default, a run directory or a folder in it (``RUN/official``, ``RUN/panel``).

``battle`` and ``metaeval`` write run directories of their own that they resume, and refuse one
that holds another battle's or other labels' records; they are not under this rule.

Everything else is refused in one line before any work, and nothing is touched: an existing
file, a non-empty folder without the marker, ``/``, the home directory, the current directory,
an input of the command or a folder above or inside one.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Iterable
from pathlib import Path

from charactereval_lib import PROGRAM, __version__
from charactereval_lib.engine import faults
from charactereval_lib.engine.storage import runs

MARKER = ".charactereval-output.json"
SITE = "leaderboard site"
REPRODUCTION = "reproduction"
REPORTS = "reports"


class OutputDirError(runs.RunError):
    """An output folder the command must not write (one line naming it and why)."""


def check(out: str | os.PathLike[str], kind: str, *, inputs: Iterable[str | os.PathLike[str]] = (),
          default: str | os.PathLike[str] | None = None) -> Path:
    """``out`` as a Path, if output of ``kind`` may go there (see the module's rule); else
    OutputDirError. ``inputs`` are the folders (or files) the command reads; ``default`` the
    folder it writes to without ``--out`` (a run directory), always accepted."""
    path = Path(out)
    if path.is_symlink() or path.exists():
        if not path.is_dir():
            raise OutputDirError(f"{out}: is an existing file, not a folder; give a new folder for the {kind}")
    where = path.resolve()
    if default is not None and where == Path(default).resolve():
        return path
    for refused, what in ((Path(where.anchor), "the root folder"), (Path.home().resolve(), "your home folder"),
                          (Path.cwd().resolve(), "the current folder")):
        if where == refused:
            raise OutputDirError(f"{out}: is {what}; give a new folder for the {kind}")
    for given in inputs:
        source = Path(given).resolve()
        if where == source:
            relation = "is an input of this command"
        elif where in source.parents:
            relation = f"holds the input {given}"
        elif source in where.parents:
            relation = f"lies inside the input {given}"
        else:
            continue
        raise OutputDirError(f"{out}: {relation}; give a folder outside the inputs for the {kind}")
    if where.is_dir():
        written = marked_kind(where)
        if written is None and any(where.iterdir()):
            raise OutputDirError(f"{out}: is not empty and holds no {MARKER} (charactereval did not write it); "
                                 f"give a new or empty folder for the {kind}")
        if written == "":
            raise OutputDirError(f"{out}: its {MARKER} cannot be read, so nothing says charactereval wrote it; "
                                 f"give another folder for the {kind}")
        if written is not None and written != kind:
            raise OutputDirError(f"{out}: holds charactereval's {written}, not its {kind}; give another folder")
    faults.check_writable(path, kind + " folder")
    return path


def marked_kind(folder: Path) -> str | None:
    """The kind of output the folder's marker names (None: no marker; "": a marker that cannot
    be read, which makes the folder no one's to replace)."""
    marker = Path(folder) / MARKER
    if not marker.is_file():
        return None
    try:
        kind = json.loads(marker.read_text(encoding="utf-8")).get("kind")
    except (OSError, ValueError, AttributeError):
        kind = None
    return kind if isinstance(kind, str) else ""


def mark(folder: str | os.PathLike[str], kind: str, *, default: str | os.PathLike[str] | None = None) -> None:
    """Leave the marker of ``kind`` in ``folder`` (kept if there: it names the first writer's
    version), unless ``folder`` is the command's ``default`` (a run directory, not ours to mark)."""
    marker = Path(folder) / MARKER
    if default is not None and Path(folder).resolve() == Path(default).resolve():
        return
    if not marker.is_file():
        marker.parent.mkdir(parents=True, exist_ok=True)
        marker.write_text(json.dumps({"written_by": PROGRAM, "version": __version__, "kind": kind}) + "\n",
                          encoding="utf-8")


def replace(staging: Path, out: Path) -> None:
    """Put the finished folder ``staging`` (beside ``out``, marked) in place of ``out``, which
    ``check`` accepted: the old folder is moved aside first and removed only once the new one is
    in place, so an interruption leaves the old folder or the new one, never half of either."""
    old = None
    if out.exists():
        old = out.with_name(f".{out.name}.old-{staging.name}")
        out.rename(old)
    staging.rename(out)
    if old is not None:
        with contextlib.suppress(OSError):
            shutil.rmtree(old)
