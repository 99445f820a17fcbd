"""The leaderboard site of every registered benchmark's runs."""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from charactereval_lib.engine import outdir
from charactereval_lib.engine.storage import runs


@dataclass(frozen=True)
class LeaderboardOutcome:
    out: Path
    content: dict[str, Any]
    warnings: list[str]
    reused: int = 0  # runs taken whole from the per-run cache (engine.leaderboard.sitecache)
    rebuilt: int = 0  # runs read or rendered afresh


def leaderboard(paths: Sequence[str | os.PathLike[str]], out_dir: str | os.PathLike[str], *,
                data_dir: str | os.PathLike[str] | None = None, redact: bool = False, cache: bool = True,
                progress: bool = False) -> LeaderboardOutcome:
    """The leaderboard site of the runs in ``paths`` (runs, or folders searched for runs of any
    registered benchmark) written into ``out_dir``: boards, run pages with the sample explorer,
    ``leaderboard.json`` and ``leaderboard.csv`` (``charactereval_lib.apps.leaderboard``). What a
    benchmark's boards and explorer share comes from its ``board_inputs`` hook, given
    ``data_dir`` (CharacterEval's: the official data, when it loads, gives the explorer its
    contexts and the rules the row counts of failed samples); when it is missing, the site is
    still built and the warnings say why. ``redact``: a site without test-set text
    (``leaderboard.write``). ``cache``: reuse what an earlier build made of unchanged runs (the
    per-run cache beside the site, ``engine.leaderboard.sitecache``); ``progress``: a bar on stderr. The
    site is built beside ``out_dir`` and swapped in whole: an interrupted build leaves the
    previous site."""
    from charactereval_lib.apps.leaderboard import boarded, progress_bar, read_runs, run_cache, write

    hooked = [b for b in boarded().values() if b.board_inputs is not None]
    # The data directories are inputs too; ``out`` is checked before they are read.
    inputs = [b.locate(data_dir) for b in hooked]
    outdir.check(out_dir, outdir.SITE, inputs=[*(runs.resolve_run_dir(p) for p in paths), *inputs])
    context: dict[str, Any] = {}
    missing: list[str] = []
    for declared in hooked:
        context[declared.name], reason = declared.hook("board_inputs")(data_dir)
        missing += [reason] if reason else []
    # ``build`` without its own check of ``out``: done above, before the data were read.
    store = run_cache(out_dir if cache else None, context)
    with progress_bar(progress) as bar:
        views, warnings = read_runs(paths, context, cache=store, bar=bar, redact=redact)
        content = write(views, warnings, out_dir, context=context, redact=redact, cache=store, bar=bar)
    reused, rebuilt = store.counts(views)
    return LeaderboardOutcome(Path(out_dir), content, missing + warnings, reused, rebuilt)

