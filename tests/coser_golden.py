"""Where the CoSER tests find the golden vectors and the pinned data (skip when absent)."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Any

import pytest

GOLDEN_ENV = "COSER_GOLDEN_DIR"


def golden_dir() -> Path:
    value = os.environ.get(GOLDEN_ENV)
    if not value or not Path(value).is_dir():
        pytest.skip(f"CoSER golden vectors not found: set {GOLDEN_ENV} (CI always sets it)")
    return Path(value)


def data_dir() -> Path:
    """The CoSER data this test session resolved when it started, as the CLI finds it without a
    flag (``conftest.session_data_dir``: $COSER_DATA_DIR, else the workspace's `coser data use`,
    else data/coser/); skips the test when there is none."""
    from conftest import NO_COSER_DATA_REASON, session_data_dir

    path = session_data_dir("coser")
    if path is None:
        pytest.skip(NO_COSER_DATA_REASON)
    return path


@lru_cache(maxsize=None)
def _records(path: str) -> tuple[dict[str, Any], ...]:
    # The workbench's one JSON Lines reader (a damaged golden file is named as any other).
    from charactereval_lib.engine.storage.artifacts import read_jsonl

    return tuple(read_jsonl(Path(path)).records)


def golden(name: str) -> tuple[dict[str, Any], ...]:
    return _records(str(golden_dir() / name))
