"""The pipeline steps as Python calls, for notebooks and batch runs.

Each step runs the ``charactereval`` command of the same name in-process, through the CLI's
own parser: the command line is the contract every backend and scorer honours (DESIGN §5), so
notebooks and batch runs get exactly what a user typing the command gets, resuming included.
A step that fails raises StepError with a one-line reason.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
from collections.abc import Sequence
from typing import Any

import pandas as pd

from charactereval_lib.engine import runs


class StepError(RuntimeError):
    """A pipeline step that did not finish; the message says which and why."""


def parse_command(argv: Sequence[str]) -> argparse.Namespace:
    """Parse one ``charactereval`` command line without running it; StepError if invalid."""
    from charactereval_lib.cli import build_parser

    argv = [str(a) for a in argv]
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            return build_parser().parse_args(argv)
    except SystemExit:
        lines = [line for line in stderr.getvalue().splitlines() if line.strip()]
        raise StepError(f"{_label(argv)}: {lines[-1] if lines else 'invalid arguments'}") from None


def run_command(argv: Sequence[str]) -> None:
    """Run one ``charactereval`` command in this process; raise StepError unless it succeeds."""
    from charactereval_lib.cli import USER_ERRORS

    args = parse_command(argv)
    try:
        code = int(args.func(args) or 0)
    except USER_ERRORS as exc:
        raise StepError(f"{_label(argv)}: {exc}") from exc
    if code != 0:
        raise StepError(f"{_label(argv)}: exited with status {code}")


def _label(argv: Sequence[str]) -> str:
    return f"charactereval {' '.join(str(a) for a in argv[:2])}"


def generate_argv(run: str | os.PathLike[str], *, backend: str, model: str, **options: Any) -> list[str]:
    return ["generate", os.fspath(run), "--backend", backend, "--model", model, *_flags(**options)]


def score_argv(run: str | os.PathLike[str], *, rm: str | os.PathLike[str], **options: Any) -> list[str]:
    return ["score", os.fspath(run), "--rm", os.fspath(rm), *_flags(**options)]


def _flags(**options: Any) -> list[str]:
    """``--name value`` for each option that is set (``True`` gives a bare ``--name``)."""
    argv: list[str] = []
    for name, value in options.items():
        if value is None or value is False:
            continue
        flag = "--" + name.replace("_", "-")
        argv += [flag] if value is True else [flag, str(value)]
    return argv


def generate(run: str | os.PathLike[str], *, backend: str, model: str, **options: Any) -> None:
    """``charactereval generate RUN --backend B --model M [options]``; options are the command's
    flags in snake case (base_url, concurrency, max_tokens, temperature, top_p, seed, limit,
    ids, dry_run, data_dir)."""
    run_command(generate_argv(run, backend=backend, model=model, **options))


def transform(run: str | os.PathLike[str], *, data_dir: str | None = None) -> None:
    run_command(["transform", os.fspath(run), *_flags(data_dir=data_dir)])


def score(run: str | os.PathLike[str], *, rm: str | os.PathLike[str], **options: Any) -> None:
    """``charactereval score RUN --rm DIR [--device D] [--mode M] [--shard I/N] [--dry-run]``."""
    run_command(score_argv(run, rm=rm, **options))


def summarize(run: str | os.PathLike[str], *, data_dir: str | None = None, n_boot: int | None = None,
              seed: int | None = None) -> None:
    run_command(["summarize", os.fspath(run), *_flags(data_dir=data_dir, n_boot=n_boot, seed=seed)])


def overview(run: str | os.PathLike[str]) -> pd.DataFrame:
    """What a run directory holds so far: one line per artifact with its record count."""
    run_dir = runs.resolve_run_dir(run)
    generations = runs.latest_by_key(runs.read_jsonl(run_dir / runs.GENERATIONS).records, "id")
    statuses = pd.Series([g.get("status", "ok") for g in generations.values()], dtype=object)
    scores = runs.latest_by_key(runs.read_jsonl(run_dir / runs.SCORES).records, "id", "metric_en")
    lines = [
        ("requests.jsonl (dry run payloads)", len(runs.read_jsonl(run_dir / runs.REQUESTS).records)),
        ("generations: samples with a reply", int((statuses == "ok").sum())),
        ("generations: samples that failed", int((statuses != "ok").sum())),
        ("rows.jsonl: (id, metric) rows", len(runs.read_jsonl(run_dir / runs.ROWS).records)),
        ("rm_inputs.jsonl (dry run payloads)", len(runs.read_jsonl(run_dir / "rm_inputs.jsonl").records)),
        ("scores: scored rows", len(scores)),
    ]
    return pd.DataFrame(lines, columns=["artifact", "count"]).assign(run=str(run_dir))


def generate_run(run: str | os.PathLike[str], *, backend: str, model: str, data_dir: str | None = None,
                 dry_run: bool = False, **options: Any) -> pd.DataFrame:
    """Generate (resuming) and, unless it is a dry run, apply S5; returns the run's overview."""
    generate(run, backend=backend, model=model, data_dir=data_dir, dry_run=dry_run, **options)
    if not dry_run:
        transform(run, data_dir=data_dir)
    return overview(run)


def score_run(run: str | os.PathLike[str], *, rm: str | os.PathLike[str], data_dir: str | None = None,
              dry_run: bool = False, **options: Any) -> pd.DataFrame:
    """Score (resuming) and, unless it is a dry run, summarise; returns the run's overview."""
    score(run, rm=rm, dry_run=dry_run, **options)
    if not dry_run:
        summarize(run, data_dir=data_dir)
    return overview(run)

