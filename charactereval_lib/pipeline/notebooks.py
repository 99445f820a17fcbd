"""Notebooks an analyst opens by hand (Jupyter Lab, ``make lab``): a shipped parameterised notebook
copied into a run directory with its parameters filled, so that its outputs land in that copy and
the shipped notebooks stay output-free."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from charactereval_lib.engine import runs
from charactereval_lib.engine.settings import SettingsError
from charactereval_lib.pipeline.charactereval import ANALYSE_NOTEBOOK, COMPARE_NOTEBOOK
from charactereval_lib.pipeline.coser import COSER_COMPARE_NOTEBOOK, COSER_REPORT_NOTEBOOK


@dataclass(frozen=True)
class HandNotebook:
    """A shipped notebook: its file, whether it takes several runs (``run_dirs``) or one
    (``run_dir``), whether it reads the official data (``data_dir``) and whether its run must exist
    already (generate makes it)."""

    file: str
    several: bool = False
    data: bool = True
    existing: bool = True


NOTEBOOKS = {
    "analyse": HandNotebook(ANALYSE_NOTEBOOK),
    "compare": HandNotebook(COMPARE_NOTEBOOK, several=True),
    "coser-report": HandNotebook(COSER_REPORT_NOTEBOOK, data=False),
    "coser-compare": HandNotebook(COSER_COMPARE_NOTEBOOK, several=True, data=False),
    "generate": HandNotebook("generate.ipynb", existing=False),
    "score": HandNotebook("score.ipynb"),
}


def notebook(name: str, run_list: Sequence[str | os.PathLike[str]], *, out: str | os.PathLike[str] | None = None,
             data_dir: str | os.PathLike[str] | None = None, force: bool = False) -> Path:
    """Copy notebook ``name`` into ``out`` (default: the first run's directory) with the runs and
    the data directory filled in as absolute paths (a kernel starts in the notebook's folder, not
    in the workspace); returns the copy. Nothing is executed."""
    from charactereval_lib.charactereval.data import locate_data_dir
    from charactereval_lib.engine import report

    spec = NOTEBOOKS.get(name)
    if spec is None:
        raise SettingsError(f"{name!r}: no such notebook (one of {', '.join(NOTEBOOKS)})")
    if not run_list or (len(run_list) > 1 and not spec.several):
        raise SettingsError(f"notebook {name} takes {'one or more runs' if spec.several else 'one run'}, "
                            f"got {len(run_list)}")
    folders = [runs.resolve_run_dir(r).absolute() for r in run_list]
    if spec.existing:
        for folder in folders:
            if not folder.is_dir():
                raise runs.RunError(f"{folder}: no such run directory")
    parameters: dict[str, object] = ({"run_dirs": [str(f) for f in folders]} if spec.several
                                     else {"run_dir": str(folders[0])})
    if spec.data:
        parameters["data_dir"] = str(locate_data_dir(data_dir).absolute())
    target = Path(out).absolute() if out else folders[0]
    return report.parameterised_copy(spec.file, target / spec.file, parameters, force=force)
