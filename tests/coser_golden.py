"""Where the CoSER tests find the golden vectors and the pinned data (skip when absent)."""

from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
GOLDEN_ENV = "COSER_GOLDEN_DIR"
DATA_ENV = "COSER_DATA_DIR"


def _dir(env: str, fallback: Path) -> Path | None:
    path = Path(os.environ[env]) if os.environ.get(env) else fallback
    return path if path.is_dir() else None


def golden_dir() -> Path:
    path = _dir(GOLDEN_ENV, ROOT.parent / "shared" / "golden" / "coser-official")
    if path is None:
        pytest.skip(f"CoSER golden vectors not found: set {GOLDEN_ENV} (CI has them in ../shared/golden/coser-official)")
    return path


def data_dir() -> Path:
    path = _dir(DATA_ENV, ROOT.parent / "shared" / "coser-data")
    if path is None or not (path / "test_set.json").exists():
        pytest.skip(f"CoSER data not found: set {DATA_ENV} (CI has it in ../shared/coser-data)")
    return path


@lru_cache(maxsize=None)
def _records(path: str) -> tuple[dict[str, Any], ...]:
    with open(path, encoding="utf-8") as f:
        return tuple(json.loads(line) for line in f)


def golden(name: str) -> tuple[dict[str, Any], ...]:
    return _records(str(golden_dir() / name))
