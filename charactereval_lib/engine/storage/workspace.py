"""What a workspace remembers: the data directory of each benchmark, in ``.charactereval.json``
at the workspace root (``runs.workspace_root``), written by ``charactereval data use DIR``.

Every lookup of a data directory goes through ``data_dir``: an explicit directory (a flag, a
notebook parameter), else the benchmark's environment variable, else the workspace's remembered
directory, else the default under the workspace. A notebook kernel started anywhere in the
workspace (``outputs/RUN/``) therefore finds the same data as the command line, with nothing
exported in the shell that started Jupyter.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from charactereval_lib.engine.storage.artifacts import write_json_atomic
from charactereval_lib.engine.storage.pinned import DataError
from charactereval_lib.engine.storage.runs import WORKSPACE_FILE, in_workspace, workspace_root

DATA_DIRS = "data_dirs"


def config_path() -> Path:
    return workspace_root() / WORKSPACE_FILE


def read_config() -> dict[str, Any]:
    """The workspace file's contents ({} when there is none); a malformed one is a one-line error."""
    path = config_path()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    try:
        config = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}: not a workspace file: line {exc.lineno} column {exc.colno}: {exc.msg} "
                        "(fix it or remove it and run `charactereval data use DIR` again)") from None
    dirs = config.get(DATA_DIRS, {}) if isinstance(config, dict) else None
    if not isinstance(dirs, dict) or not all(isinstance(v, str) for v in dirs.values()):
        raise DataError(f"{path}: not a workspace file: expected {{\"{DATA_DIRS}\": {{benchmark: directory}}}}")
    return config


def remembered_data_dir(benchmark: str) -> Path | None:
    value = read_config().get(DATA_DIRS, {}).get(benchmark)
    return Path(value) if value else None


def data_dir(benchmark: str, explicit: str | os.PathLike[str] | None, env_var: str, default: Path) -> Path:
    """The data directory of ``benchmark``: ``explicit``, else ``$env_var``, else the workspace's
    remembered directory, else ``default`` under the workspace."""
    if explicit:
        return Path(explicit)
    env = os.environ.get(env_var)
    if env:
        return Path(env)
    return remembered_data_dir(benchmark) or in_workspace(default)


def remember_data_dir(benchmark: str, directory: str | os.PathLike[str]) -> Path:
    """Record ``directory`` (made absolute: it was typed relative to the current directory) as the
    workspace's data directory of ``benchmark``; returns the workspace file written."""
    target = Path(directory).expanduser().absolute()
    if target.exists() and not target.is_dir():
        raise DataError(f"{target}: not a directory")
    config = read_config()
    config.setdefault(DATA_DIRS, {})[benchmark] = str(target)
    path = config_path()
    write_json_atomic(path, config)
    return path
