"""Progress output: one ``--quiet`` flag for every command, bars only on a terminal, and the
overall bar of a batch (models x steps) above each step's own bar.

Bars go to stderr and only when it is a terminal: a log file or a pipe never fills with
carriage-return frames. ``--no-progress`` (the old spelling of generate and coser run) still
works and says once that it is deprecated.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator, Sequence
from typing import Any

QUIET_HELP = "no progress bars (bars are drawn only when stderr is a terminal)"
DEPRECATED_NO_PROGRESS = "--no-progress is deprecated; use --quiet (the same for every command)"


class _DeprecatedQuiet(argparse.Action):
    """``--no-progress``: sets ``quiet`` and says that the flag is deprecated."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=argparse.SUPPRESS)

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        print(f"warning: {DEPRECATED_NO_PROGRESS}", file=sys.stderr)
        namespace.quiet = True


def add_quiet_option(parser: argparse.ArgumentParser, *, legacy_no_progress: bool = False) -> None:
    """``--quiet`` (and, where it existed, the deprecated ``--no-progress``)."""
    parser.add_argument("--quiet", action="store_true", help=QUIET_HELP)
    if legacy_no_progress:
        parser.add_argument("--no-progress", dest="quiet", action=_DeprecatedQuiet)


def bars_wanted(quiet: bool, stream: Any = None) -> bool:
    """Whether to draw bars: not ``--quiet`` and stderr (or ``stream``) is a terminal."""
    stream = sys.stderr if stream is None else stream
    return not quiet and bool(getattr(stream, "isatty", lambda: False)())


class OverallBar:
    """The batch's bar: one tick per step of a model (``steps`` per model), described by the
    model and the step in progress; a model that stops early is filled up to its share. Models
    of several benchmarks differ in their steps: ``total`` counts them all and ``start`` says
    the next model's."""

    def __init__(self, models: int, steps: Sequence[str], enabled: bool, total: int | None = None) -> None:
        from tqdm import tqdm

        self.steps = list(steps)
        self.bar = tqdm(total=models * len(self.steps) if total is None else total, disable=not enabled,
                        unit="step", desc="batch", position=0, dynamic_ncols=True)
        self.done_in_model = 0

    def start(self, steps: Sequence[str]) -> None:
        """The steps of the model that starts now."""
        self.steps = list(steps)

    def step(self, model: str, name: str) -> None:
        """``name`` starts for ``model``: the steps before it are done."""
        if name in self.steps:
            index = self.steps.index(name)
            self.bar.update(max(0, index - self.done_in_model))
            self.done_in_model = max(self.done_in_model, index)
        self.bar.set_description(f"batch: {model}: {name}")

    def model_done(self) -> None:
        """The model finished or stopped: the rest of its share is ticked off."""
        self.bar.update(len(self.steps) - self.done_in_model)
        self.done_in_model = 0

    def close(self) -> None:
        self.bar.close()


_current: OverallBar | None = None


@contextlib.contextmanager
def overall(models: int, steps: Sequence[str], enabled: bool, total: int | None = None) -> Iterator[OverallBar]:
    """The batch's overall bar for the duration of the block (``current()`` finds it)."""
    global _current
    bar = OverallBar(models, steps, enabled, total)
    _current = bar
    try:
        yield bar
    finally:
        _current = None
        bar.close()


def current() -> OverallBar | None:
    """The overall bar of the batch running in this process, if any."""
    return _current
