"""Notebooks an analyst opens by hand (Jupyter Lab, ``make lab``): a benchmark's notebook copied
into a run directory with its parameters filled, so that its outputs land in that copy and the
shipped notebooks stay output-free. Every registered benchmark declares its own
(``Benchmark.notebooks``), so a package outside the library ships its notebooks too."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from charactereval_lib.engine.registry import benchmarks
from charactereval_lib.engine.registry.settings import SettingsError
from charactereval_lib.engine.storage import runs


def available() -> dict[str, benchmarks.Benchmark]:
    """Every registered benchmark's notebooks: name -> the benchmark that declares it (a name
    declared twice is an error: the command would not know which one is meant)."""
    found: dict[str, benchmarks.Benchmark] = {}
    for benchmark in benchmarks.registry().values():
        for name in benchmark.notebooks:
            if name in found:
                raise benchmarks.BenchmarkError(f"notebook {name!r} is declared by both {found[name].name!r} and "
                                                f"{benchmark.name!r}")
            found[name] = benchmark
    return found


def notebook(name: str, run_list: Sequence[str | os.PathLike[str]], *, out: str | os.PathLike[str] | None = None,
             data_dir: str | os.PathLike[str] | None = None, force: bool = False) -> Path:
    """Copy notebook ``name`` into ``out`` (default: the first run's directory) with the runs and
    the data directory filled in as absolute paths (a kernel starts in the notebook's folder, not
    in the workspace); returns the copy. Nothing is executed."""
    from charactereval_lib.engine.reports import notebook as report

    known = available()
    if name not in known:
        raise SettingsError(f"{name!r}: no such notebook (one of {', '.join(known)})")
    benchmark = known[name]
    spec = benchmark.notebooks[name]
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
        parameters["data_dir"] = str(benchmark.locate(data_dir).absolute())
    target = Path(out).absolute() if out else folders[0]
    return report.parameterised_copy(benchmark.notebook_path(name), target / spec.file, parameters, force=force)
