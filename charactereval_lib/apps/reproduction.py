"""Reproduction in one command: every number the released files allow, recomputed beside the paper.

``reproduce`` runs one benchmark's reproduction (its registry entry's ``Reproduction``) into a
staging directory beside ``OUT``, writes ``reproduction.json`` and renders
``reproduction.ipynb``/``reproduction.html`` with papermill, then swaps the whole directory into
place (``engine.outdir``): a failure leaves nothing behind. The notebook names no benchmark: it
shows the header, the benchmark's notes and its sections, built from the JSON document alone
with the tables here.

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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from charactereval_lib.engine import outdir
from charactereval_lib.engine.registry import benchmarks
from charactereval_lib.engine.reports import reproduction as kit
from charactereval_lib.engine.reports.kit import rendered_by
from charactereval_lib.engine.stats import DEFAULT_N_BOOT, DEFAULT_SEED
from charactereval_lib.engine.storage import artifacts

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
              n_boot: int = DEFAULT_N_BOOT, seed: int = DEFAULT_SEED, show_code: bool = False, progress: bool = False,
              **options: Any) -> ReproduceOutcome:
    """The reproduction of ``benchmark`` in ``out`` (new, empty or an earlier reproduction, which
    is replaced: ``engine.outdir``'s rule, the data directory an input), as its registry entry
    declares it (``engine.registry.benchmarks.Reproduction``); ``options`` are that benchmark's own
    (its declared options and keywords), refused for any other."""
    from charactereval_lib.engine.reports import notebook as notebooks

    declared = _declared(benchmark)
    for option in options:
        if not declared.accepts(option):
            flag = f"--{option.replace('_', '-')}"
            takers = [b.title for b in benchmarks.reproducible().values() if b.reproduction.accepts(option)]
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


def sections(document: dict[str, Any]) -> list[benchmarks.Section]:
    """The report's sections after its header and notes, as the document's benchmark declares
    them (by default its released files, then its rows against the paper)."""
    declared = _declared(document["benchmark"])
    if declared.sections is None:
        return [kit.files_section(document), kit.paper_section(document)]
    return list(benchmarks.resolve(declared.sections, "reproduction sections")(document))
