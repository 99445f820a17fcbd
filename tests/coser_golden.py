"""Where the CoSER tests find the golden vectors and the pinned data (skip when absent)."""

from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

import pytest

from charactereval_lib.coser.data import DATA_DIR_ENV as DATA_ENV
from charactereval_lib.coser.data import locate_data_dir

GOLDEN_ENV = "COSER_GOLDEN_DIR"


def golden_dir() -> Path:
    value = os.environ.get(GOLDEN_ENV)
    if not value or not Path(value).is_dir():
        pytest.skip(f"CoSER golden vectors not found: set {GOLDEN_ENV} (CI always sets it)")
    return Path(value)


def data_dir() -> Path:
    """Where the CLI finds the CoSER data without a flag: $COSER_DATA_DIR, else data/coser/."""
    path = locate_data_dir()
    if not (path / "test_set.json").exists():
        pytest.skip(f"CoSER data not found: set {DATA_ENV} or fetch it into data/coser/ (CI always sets it)")
    return path


@lru_cache(maxsize=None)
def _records(path: str) -> tuple[dict[str, Any], ...]:
    with open(path, encoding="utf-8") as f:
        return tuple(json.loads(line) for line in f)


def golden(name: str) -> tuple[dict[str, Any], ...]:
    return _records(str(golden_dir() / name))
