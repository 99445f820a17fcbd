"""The applications (``charactereval_lib.apps``) as pipeline calls: ``batch`` and ``reproduce``
(the leaderboard is ``board``'s). Each imports its application when called: the command line
imports this package to build its parser, and ``--help`` must not pay for pandas or Ray."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from charactereval_lib.engine.stats import DEFAULT_N_BOOT, DEFAULT_SEED

if TYPE_CHECKING:
    from charactereval_lib.apps.batch import BatchConfig, BatchResult
    from charactereval_lib.apps.reproduction import ReproduceOutcome


def batch_config(path: str | os.PathLike[str], *, progress: bool = False) -> BatchConfig:
    """The batch config at ``path``, every entry checked by its benchmark's plan (``BatchError``
    naming the file and the entry). ``progress``: bars on stderr, for a batch whose models run
    here; Ray tasks run elsewhere, where their bars would only fill the workers' logs."""
    from charactereval_lib.apps.batch import load_config

    config = load_config(Path(path))
    return dataclasses.replace(config, progress=progress and config.engine == "local")


def batch_preflight(config: BatchConfig) -> list[str]:
    """What can be checked before any model runs, one line per problem (``apps.batch.preflight``)."""
    from charactereval_lib.apps.batch import preflight

    return preflight(config)


def batch(config: BatchConfig) -> BatchResult:
    """Every model of the config, then the comparisons; the summary written (``apps.batch.run_batch``)."""
    from charactereval_lib.apps.batch import run_batch

    return run_batch(config)


def batch_summary_lines(outcome: BatchResult) -> list[str]:
    """The closing summary of a batch, as the command line prints it."""
    from charactereval_lib.apps.batch import summary_lines

    return summary_lines(outcome)


def reproduce(benchmark: str, out: str | os.PathLike[str], *, data_dir: str | os.PathLike[str] | None = None,
              n_boot: int = DEFAULT_N_BOOT, seed: int = DEFAULT_SEED, show_code: bool = False, progress: bool = False,
              **options: Any) -> ReproduceOutcome:
    """The reproduction of ``benchmark`` in ``out``, as its registry entry declares it
    (``apps.reproduction.reproduce``); ``options`` are that benchmark's own."""
    from charactereval_lib.apps.reproduction import reproduce as run

    return run(benchmark, out, data_dir=data_dir, n_boot=n_boot, seed=seed, show_code=show_code, progress=progress,
               **options)
