"""The ``charactereval`` command. Thin: every command parses flags and calls the pipeline API.

Each command lives in a module of this package (``COMMANDS`` names it, with its help line); a
module is imported only for the command that runs (or whose ``--help`` is asked for), so that
``charactereval --help`` stays fast whatever the commands import; for the same reason a command
function imports the heavy modules it uses (torch, pandas, the HTTP clients) when it runs. A
registered benchmark (``engine.registry.benchmarks``) without a module here gets its own command too: its
declared hook, else one action per stage (``cli.stages``).
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
from collections.abc import Sequence
from typing import NoReturn

from charactereval_lib import PROGRAM, __version__
from charactereval_lib.charactereval.protocol import PROTOCOL_VERSION
from charactereval_lib.engine import faults
from charactereval_lib.engine.generation.base import ConfigError, RunAborted
from charactereval_lib.engine.grading.errors import GradingError
from charactereval_lib.engine.registry import benchmarks
from charactereval_lib.engine.storage import jobs, runs
from charactereval_lib.engine.storage.pinned import DataError

# Errors a user can cause with bad input: reported as one line, no traceback. Each benchmark
# adds its own (``Benchmark.errors``: ``user_errors``).
ENGINE_ERRORS: tuple[type[BaseException], ...] = (
    DataError,
    runs.RunError,
    FileNotFoundError,
    ConfigError,
    GradingError,
)


def user_errors() -> tuple[type[BaseException], ...]:
    return ENGINE_ERRORS + benchmarks.user_errors()

# command -> (its module in this package, its help line), in the order ``--help`` lists them.
COMMANDS: dict[str, tuple[str, str]] = {
    "data": ("data", "fetch or verify the official data files"),
    "doctor": ("data", "protocol self-check on the full official data"),
    "generate": ("run", "generate replies for the test samples (S3, S4)"),
    "transform": ("run", "generations.jsonl -> rows.jsonl (S5)"),
    "score": ("run", "score rows.jsonl with the reward model (S6, S8) -> scores.jsonl, "
                     "or with an LLM judge -> judge_scores.jsonl"),
    "rm": ("rm", "the reward model: download, check, or make a tiny meaningless one"),
    "summarize": ("run", "summary.json + metrics.csv (S9 + bootstrap intervals)"),
    "leaderboard": ("reports", "boards of every run found + per-run explorer -> a static site in OUT"),
    "report": ("reports", "execute the analysis notebook for RUN -> RUN/report.ipynb + RUN/report.html "
                          "(a judge's report: RUN/report-judge-MODEL.html)"),
    "compare": ("reports", "execute the comparison notebook -> OUT/comparison.ipynb + OUT/comparison.html"),
    "battle": ("judging", "judge two runs' replies pairwise in both orders: win/tie/loss, position consistency"),
    "best": ("judging", "the best of n runs' replies in one judge prompt (openai/evals' multicomp), in every "
                        "cyclic order: how often each run and each position is chosen"),
    "metaeval": ("judging", "a scorer against human labels: metascore, kappa, alpha, confusion matrix "
                            "(--eval-types: several answer formats side by side)"),
    "panel": ("judging", "several judges' scores of a run combined: verdicts, means, Krippendorff's alpha"),
    "notebook": ("notebook", "copy a parameterised notebook into RUN with its parameters filled, to open in "
                             "Jupyter Lab (its outputs stay in that copy)"),
    "batch": ("reports", "many models from a YAML config: one report each, then a comparison"),
    "import-official": ("official", "an official generation(_trans)/evaluation JSON file -> a run"),
    "export-official": ("official", "a run -> official JSON arrays in RUN/official/"),
    "coser": ("coser", "CoSER given-circumstance acting: data, run, import, summarize, report, compare"),
    "reproduce": ("reproduce", "every published number the released files allow, recomputed beside "
                               "the paper -> OUT/reproduction.json + reproduction.html"),
}


class _Parser(argparse.ArgumentParser):
    """No abbreviated flags: ``--batch`` must not silently mean ``--batch-tokens``. Subcommand
    parsers inherit the class, so the rule holds everywhere."""

    def __init__(self, *args, root: bool = False, **kwargs) -> None:
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)
        self.root = root

    def parse_known_args(self, args=None, namespace=None):
        namespace, extras = super().parse_known_args(args, namespace)
        # A subcommand's unknown argument is its own error, pointing at its own --help (argparse
        # would hand it up to the top-level parser, whose help does not list it).
        if extras and not self.root:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return namespace, extras

    def error(self, message: str) -> NoReturn:
        # One line, like every other error of the command; the usage is a --help away.
        self.exit(2, f"error: {self.prog}: {message} (see {self.prog} --help)\n")


def _requested(argv: Sequence[str]) -> str | None:
    """The command named on the command line (the top level has no option taking a value, so it
    is the first word that is not an option), or None."""
    return next((word for word in argv if not word.startswith("-")), None)


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The whole parser; given ``argv``, only the named command's module is loaded (the others
    are listed with their help line)."""
    parser = _Parser(
        prog=PROGRAM, description="Faithful, fast CharacterEval: generate, score, analyse.", root=True
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__} ({PROTOCOL_VERSION})")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    wanted = None if argv is None else _requested(argv)
    for name, (module, text) in COMMANDS.items():
        p = sub.add_parser(name, help=text)
        if argv is None or name == wanted:
            importlib.import_module(f"charactereval_lib.cli.{module}").PARSERS[name](p)
    # Every other registered benchmark (engine.registry.benchmarks) under its own command; looking for
    # installed ones costs a scan of every distribution's entry points, which a command of this
    # package's own does not need.
    if wanted in COMMANDS:
        return parser
    for benchmark in benchmarks.registry().values():
        if benchmark.command is None or benchmark.command in COMMANDS:
            continue
        p = sub.add_parser(benchmark.command, help=benchmark.command_help or
                           f"{benchmark.title}: {', '.join(benchmark.stages)}")
        if argv is None or benchmark.command == wanted:
            importlib.import_module("charactereval_lib.cli.stages").add_benchmark_parser(p, benchmark)
    return parser


def _error(message: object) -> None:
    # One line, whatever the message (a library's can span several).
    print("error: " + " ".join(line.strip() for line in str(message).splitlines() if line.strip()), file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    if argv is not None:
        return _main(list(argv))
    # The command itself (``charactereval``, ``python -m``): once its work is done and said, a
    # Ctrl-C is too late to stop anything, and Python would end the process by the signal (-2)
    # instead of the command's exit status; it is ignored while the interpreter shuts down.
    try:
        return _main(sys.argv[1:])
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def _main(argv: list[str]) -> int:
    try:
        parser = build_parser(argv)
    except benchmarks.BenchmarkError as exc:
        # A benchmark that is registered but cannot be loaded: said before any command runs.
        _error(exc)
        return 2
    args = parser.parse_args(argv)
    errors = user_errors()
    from charactereval_lib.cli.options import SAID, warn_torn_lines
    from charactereval_lib.engine.storage.artifacts import torn_notices

    SAID.clear()
    torn_before = len(torn_notices())
    try:
        with faults.sigterm_interrupts():
            return int(args.func(args) or 0)
    except errors as exc:
        _error(exc)
        return 2
    except (RunAborted, faults.Unreachable) as exc:
        _error(exc)
        return 1
    except jobs.JobInterrupted as exc:
        # A job that a command does not report itself (a CoSER run): its counts in one line.
        print(f"{exc}; every record received is saved: re-run the same command to resume", file=sys.stderr)
        return 130
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`... | head`): stop quietly, and keep Python's final flush of
        # stdout from raising again at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except OSError as exc:
        # An output location that cannot be written (read-only, not a directory) or a full disk.
        _error(faults.os_error_line(exc))
        return faults.os_error_status(exc)
    finally:
        # Whatever the command and its outcome: a torn line it read is named, never dropped.
        warn_torn_lines(torn_before)
