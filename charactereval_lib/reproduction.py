"""Reproduction in one command: every number the released files allow, recomputed beside the paper.

``reproduce`` runs one benchmark's reproduction (its registry entry's ``Reproduction``, e.g.
``coser.reproduce`` or ``charactereval.reproduce``) into a staging directory beside ``OUT``, writes
``reproduction.json`` and renders ``reproduction.ipynb``/``reproduction.html`` with papermill,
then swaps the whole directory into place (``engine.outdir``): a failure leaves nothing behind.
The tables and notes the notebook shows are built here from the JSON document alone.

``reproduction.json``: ``{"benchmark", "files": [...], "rows": [{"model", "source_file",
"column", "paper", "paper_pm", "recorded", "recomputed", "delta", "within", "reason", ...}]}``;
``delta`` is recomputed minus paper, ``within`` the anchor decision (``engine.anchor``; the
document's ``verdict`` says its rule where it is not the interval rule, and ``interval_within``
then gives the interval check as information), values null where they do not exist; a row with a
``paper_pm`` also has ``paper_pm_printed``, the ± as the paper prints it.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from charactereval_lib.engine import artifacts, benchmarks, outdir
from charactereval_lib.engine.reportkit import rendered_by

DOCUMENT = "reproduction.json"
NOTEBOOK = "reproduce.ipynb"
REPORT_NOTEBOOK = "reproduction.ipynb"
REPORT_HTML = "reproduction.html"


class ReproduceError(artifacts.RunError):
    """A reproduction that cannot start as asked (one line)."""


@dataclass(frozen=True)
class ReproduceOutcome:
    out: Path
    document: dict[str, Any]

    @property
    def html(self) -> Path:
        return self.out / REPORT_HTML


def _declared(benchmark: str) -> benchmarks.Reproduction:
    known = benchmarks.reproducible()
    if benchmark not in known:
        raise ReproduceError(f"unknown benchmark {benchmark!r}; choose one of {', '.join(known)}")
    return known[benchmark].reproduction


def reproduce(benchmark: str, out: str | os.PathLike[str], *, data_dir: str | os.PathLike[str] | None = None,
              n_boot: int = 1000, seed: int = 0, show_code: bool = False, progress: bool = False,
              **options: Any) -> ReproduceOutcome:
    """The reproduction of ``benchmark`` in ``out`` (new, empty or an earlier reproduction, which
    is replaced: ``engine.outdir``'s rule, the data directory an input), as its registry entry
    declares it (``engine.benchmarks.Reproduction``); ``options`` are that benchmark's own (e.g.
    CharacterEval's ``rm`` and ``device``, CoSER's ``no_metrics``), refused for any other."""
    from charactereval_lib.engine import report as notebooks

    declared = _declared(benchmark)
    for option in options:
        if option not in declared.options:
            flag = f"--{option.replace('_', '-')}"
            takers = [b.title for b in benchmarks.reproducible().values() if option in b.reproduction.options]
            title = benchmarks.get(benchmark).title
            raise ReproduceError(f"{flag} is an option of the {' or '.join(takers)} reproduction, not of {title}'s"
                                 if takers else f"{flag} is not an option of the {title} reproduction")
    # The data directory the reproduction reads is its input (checked before anything is read).
    locate = benchmarks.get(benchmark).data.get("locate")
    data_dirs = ([benchmarks.resolve(locate, f"benchmark {benchmark!r}, data")(data_dir)] if locate
                 else [data_dir] if data_dir else [])
    out = outdir.check(out, outdir.REPRODUCTION, inputs=data_dirs)
    make = benchmarks.resolve(declared.prepare, f"benchmark {benchmark!r}, reproduction")(
        data_dir=data_dir, n_boot=n_boot, seed=seed, progress=progress, **options)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = out.parent / f".{out.name}.reproduce-{secrets.token_hex(4)}"
    staging.mkdir()
    try:
        document = make(staging)
        artifacts.write_text_atomic(staging / DOCUMENT, json.dumps(document, indent=1, ensure_ascii=False))
        notebooks.render(notebooks.shipped(NOTEBOOK), staging / REPORT_NOTEBOOK, staging / REPORT_HTML,
                         {"reproduction": str((staging / DOCUMENT).resolve())}, show_code=show_code,
                         title=f"{benchmark} reproduction")
        outdir.mark(staging, outdir.REPRODUCTION)
        outdir.replace(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return ReproduceOutcome(out, document)


# --- what the notebook shows ----------------------------------------------------------------------

def load(path: str | os.PathLike[str]) -> dict[str, Any]:
    return json.loads(Path(path).read_text(encoding="utf-8"))


_INTERVAL_VERDICT = ("within tolerance (the paper's value inside our 95% interval, widened by half a unit of its last "
                     "printed digit: {tolerance:g})")


def header_markdown(document: dict[str, Any]) -> str:
    benchmark = document["benchmark"]
    decided = [r for r in document["rows"] if r["within"] is not None]
    inside = sum(1 for r in decided if r["within"])
    return (f"# Reproduction: {_declared(benchmark).title}\n\n"
            f"Every number the released files allow, recomputed and set beside the paper: "
            f"{len(document['files'])} released file(s), {len(document['rows'])} cells, "
            f"{len(decided)} with a published value, a recomputed one and a verdict, of which **{inside}** reproduce "
            f"the paper: {document.get('verdict') or _INTERVAL_VERDICT.format(tolerance=document['tolerance'])}. "
            f"{rendered_by()}")


def notes(document: dict[str, Any]) -> list[str]:
    """What a reader must know first (the warning box), as the document's benchmark says."""
    declared = _declared(document["benchmark"])
    return list(benchmarks.resolve(declared.notes, "reproduction notes")(document)) if declared.notes else []


def files_table(document: dict[str, Any]) -> pd.DataFrame:
    """Per released file: what was recomputed and how much of it equals the recorded value (the
    columns after file and model are the document's benchmark's)."""
    declared = _declared(document["benchmark"])
    columns = benchmarks.resolve(declared.file_columns, "reproduction files") if declared.file_columns else None
    records = [{"file": f["file"], "model": f["model"], **(columns(f, document) if columns else {})}
               for f in document["files"]]
    return pd.DataFrame.from_records(records)


def metric_mismatches(document: dict[str, Any]) -> pd.DataFrame:
    """Recorded per-scene BLEU/ROUGE-L values not equal bit for bit, with the difference."""
    records = [{"file": f["file"], "scene": m["scene"], "metric": m["what"], "recorded": repr(m["recorded"]),
                "recomputed": repr(m["recomputed"]),
                "difference": "–" if m["recomputed"] is None else f"{m['recomputed'] - m['recorded']:.3g}"}
               for f in document["files"] for m in f.get("metric_mismatches", [])]
    return pd.DataFrame.from_records(records, columns=["file", "scene", "metric", "recorded", "recomputed",
                                                       "difference"])


def _value(value: float | None, digits: int) -> str:
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
        paper = _value(r["paper"], digits) + (f" ± {r['paper_pm_printed']}" if r.get("paper_pm") is not None else "")
        interval = r.get("interval")
        records.append({
            **({"file": r["source_file"]} if files else {}), "model": r["model"], "column": r["column"],
            "paper": paper if r["paper"] is not None else "–",
            "recorded": _value(r["recorded"], digits + 1), "recomputed": _value(r["recomputed"], digits + 1),
            "our 95% interval": f"[{interval[0]:.{digits}f}, {interval[1]:.{digits}f}]" if interval else "–",
            "delta": "–" if r["delta"] is None else f"{r['delta']:+.{digits}f}",
            "within": {True: "yes", False: "NO", None: "–"}[r["within"]],
            **({"interval check": {True: "inside", False: "outside", None: "–"}[r["interval_within"]]}
               if "interval_within" in r else {}),
            "reasons": ", ".join(str(numbers[reason]) for reason in r["reasons"])})
    return pd.DataFrame.from_records(records)


def ablation_table(document: dict[str, Any]) -> pd.DataFrame:
    """CoSER: each ablation file's recomputed scores beside the same model's length-penalty file."""
    by = {(r["model"], r["kind"], r["column"]): r for r in document["rows"]}
    records = []
    for f in document["files"]:
        if f["kind"] != "ablation":
            continue
        main_formula = next(g["formula_text"] for g in document["files"] if g["kind"] == "main")
        for column in ("Storyline Consistency", "Anthropomorphism", "Character Fidelity", "Storyline Quality",
                       "Average"):
            with_penalty, without = by.get((f["model"], "main", column)), by[(f["model"], "ablation", column)]
            with_value = with_penalty["recomputed"] if with_penalty else None
            records.append({"model": f["model"], "column": column,
                            f"with length penalty: {main_formula}": _value(with_value, 3),
                            f"without: {f['formula_text']}": _value(without["recomputed"], 3),
                            "difference": "–" if not with_penalty else
                            f"{without['recomputed'] - with_penalty['recomputed']:+.3f}"})
    return pd.DataFrame.from_records(records)
