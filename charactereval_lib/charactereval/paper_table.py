"""Where the paper's Table 4 ships, its error type and its model names, without pandas.

Report settings check their baselines against the model names when they are made, which every
command does at start-up (a default ``ReportSettings()``); ``reference`` reads the whole table.
"""

from __future__ import annotations

import csv
from pathlib import Path

from charactereval_lib.charactereval.data import DataError
from charactereval_lib.engine.resources import resource_path

PAPER_TABLE4 = "data/reference/paper_table4.csv"
# The table's source in the paper (seed 000 §0, seed 001 §0): the LaTeX of arXiv 2401.01275v2,
# whose results table prints the numbers of the leaderboard image the CSV was read from. Not
# shipped (the e-print is not redistributed); `charactereval doctor --paper-latex FILE` checks a copy.
PAPER_LATEX = {"arxiv": "2401.01275v2", "file": "acl_latex.tex", "lines": 785,
               "sha256": "f98299737e75bfb7002e47a76a67161246fbf1286c7be43f8ccd5800b50d6c17"}


class ReferenceError(DataError):
    """A reference table that is missing or not shaped like the paper's Table 4."""


def table_path(path: Path | None = None) -> Path:
    """The shipped Table 4 unless ``path``; a ReferenceError when the file is missing."""
    path = Path(path) if path else resource_path(PAPER_TABLE4)
    if not path.exists():
        raise ReferenceError(f"{path}: missing (the paper's Table 4 ships in data/reference/)")
    return path


def paper_models(path: Path | None = None) -> list[str]:
    """The models of Table 4, in file order."""
    with open(table_path(path), encoding="utf-8", newline="") as f:
        return [row["model"] for row in csv.DictReader(f)]
