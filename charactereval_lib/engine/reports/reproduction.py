"""The reproduction document (``apps.reproduction``) as its report shows it: the tables and the
standard sections a benchmark's ``Reproduction.sections`` composes with its own.

A document is ``{"benchmark", "files": [...], "rows": [...], "tolerance", "bootstrap", ...}``;
each row has ``model``, ``source_file``, ``kind``, ``column``, ``paper`` (``paper_pm`` and
``paper_pm_printed``: its ± and the ± as printed), ``recorded``, ``recomputed``, ``interval``,
``delta``, ``within`` (and, where the verdict is not the interval rule, ``interval_within``) and
``reasons``; values are null where they do not exist.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from charactereval_lib.engine.registry import benchmarks
from charactereval_lib.engine.registry.benchmarks import Section


def files_table(document: dict[str, Any]) -> pd.DataFrame:
    """Per released file: what was recomputed and how much of it equals the recorded value (the
    columns after file and model are the document's benchmark's)."""
    declared = benchmarks.get(document["benchmark"]).reproduction
    columns = benchmarks.resolve(declared.file_columns, "reproduction files") if declared.file_columns else None
    records = [{"file": f["file"], "model": f["model"], **(columns(f, document) if columns else {})}
               for f in document["files"]]
    return pd.DataFrame.from_records(records)


def value_text(value: float | None, digits: int) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _selected(document: dict[str, Any], kinds: Sequence[str] | None) -> list[dict[str, Any]]:
    return [r for r in document["rows"] if kinds is None or r.get("kind") in kinds]


def reason_numbers(document: dict[str, Any], kinds: Sequence[str] | None = None) -> dict[str, int]:
    """Each distinct reason of the selected rows, numbered from 1 in order of first use: most rows
    share most of their reasons, so the table cites numbers and ``reasons_table`` spells them out."""
    numbers: dict[str, int] = {}
    for r in _selected(document, kinds):
        for reason in r["reasons"]:
            numbers.setdefault(reason, len(numbers) + 1)
    return numbers


def reasons_table(document: dict[str, Any], kinds: Sequence[str] | None = None) -> pd.DataFrame:
    """The numbered reasons that ``rows_table`` cites for the same selection."""
    return pd.DataFrame([{"#": n, "reason": reason} for reason, n in reason_numbers(document, kinds).items()])


def rows_table(document: dict[str, Any], kinds: Sequence[str] | None = None, digits: int = 2, *,
               files: bool = False) -> pd.DataFrame:
    """The rows of the document (of ``kinds`` when given) as a display table, led by the
    released file of each row when ``files``; the paper's ± as the paper prints it; the reasons
    column cites the numbers of ``reasons_table``."""
    numbers = reason_numbers(document, kinds)
    records = []
    for r in _selected(document, kinds):
        paper = value_text(r["paper"], digits) + (f" ± {r['paper_pm_printed']}" if r.get("paper_pm") is not None else "")
        interval = r.get("interval")
        records.append({
            **({"file": r["source_file"]} if files else {}), "model": r["model"], "column": r["column"],
            "paper": paper if r["paper"] is not None else "–",
            "recorded": value_text(r["recorded"], digits + 1), "recomputed": value_text(r["recomputed"], digits + 1),
            "our 95% interval": f"[{interval[0]:.{digits}f}, {interval[1]:.{digits}f}]" if interval else "–",
            "delta": "–" if r["delta"] is None else f"{r['delta']:+.{digits}f}",
            "within": {True: "yes", False: "NO", None: "–"}[r["within"]],
            **({"interval check": {True: "inside", False: "outside", None: "–"}[r["interval_within"]]}
               if "interval_within" in r else {}),
            "reasons": ", ".join(str(numbers[reason]) for reason in r["reasons"])})
    return pd.DataFrame.from_records(records)


REASONS_LEGEND = "**Reasons** (the numbers in the table's last column)"


def files_section(document: dict[str, Any], recomputed: str = "", *extra: Any) -> Section:
    """"What was recomputed": the table of released files (``files_table``), then ``extra``;
    ``recomputed`` says from what, for the benchmark."""
    what = f" ({recomputed})" if recomputed else ""
    return Section("## What was recomputed", "Per released file: how many of the numbers it records were "
                              f"recomputed exactly from the material it records{what}.",
                              (files_table(document), *extra))


def paper_section(document: dict[str, Any], rule: str = "", kinds: Sequence[str] | None = None,
                  digits: int = 2) -> Section:
    """"Against the paper": the rows (of ``kinds``) beside the paper's values, and the reasons
    they cite; ``rule`` says the benchmark's rule of "reproduces"."""
    cluster = (document.get("bootstrap") or {}).get("cluster")
    text = ("Per model and column: the paper's value and ±, the value the released file records, our recomputation "
            f"with its 95% interval{f' ({cluster} bootstrap)' if cluster else ''}, the delta (ours − paper), whether "
            f"it reproduces the paper by the rule the header states{f' ({rule})' if rule else ''}, and the numbers of "
            "the reasons for the known differences, listed below the table.")
    return Section("## Against the paper", text, (rows_table(document, kinds, digits), REASONS_LEGEND,
                                                             reasons_table(document, kinds)))
