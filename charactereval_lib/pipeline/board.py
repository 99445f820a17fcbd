"""The leaderboard site of every registered benchmark's runs."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from charactereval_lib.engine import outdir, runs
from charactereval_lib.pipeline.charactereval import _optional_data


@dataclass(frozen=True)
class LeaderboardOutcome:
    out: Path
    content: dict[str, Any]
    warnings: list[str]


def leaderboard(paths: Sequence[str | os.PathLike[str]], out_dir: str | os.PathLike[str], *,
                data_dir: str | os.PathLike[str] | None = None, redact: bool = False) -> LeaderboardOutcome:
    """The leaderboard site of the runs in ``paths`` (runs, or folders searched for runs of any
    registered benchmark) written into ``out_dir``: boards, run pages with the sample explorer,
    ``leaderboard.json`` and ``leaderboard.csv`` (``charactereval_lib.leaderboard``). The
    official CharacterEval data, when it loads, gives the explorer its contexts and the rules the
    row counts of failed samples. ``redact``: a site without test-set text (``leaderboard.write``)."""
    from charactereval_lib.charactereval.data import locate_data_dir
    from charactereval_lib.leaderboard import build

    # The data directory is an input too; ``out`` is checked before it is read.
    inputs = [locate_data_dir(data_dir)]
    outdir.check(out_dir, outdir.SITE, inputs=[*(runs.resolve_run_dir(p) for p in paths), *inputs])
    data, reason = _optional_data(data_dir)
    content, warnings = build(paths, out_dir, context={"charactereval": data}, inputs=inputs, redact=redact)
    return LeaderboardOutcome(Path(out_dir), content, ([reason] if reason else []) + warnings)
