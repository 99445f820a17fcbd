"""The subcommand of a registered benchmark that brings no command-line code of its own: one
action per declared stage (``run``, ``summarize``, ``report``), its settings given as
``--set KEY=VALUE`` (each value read as YAML) or a YAML mapping in ``--settings FILE``."""

from __future__ import annotations

import argparse
import sys
from functools import partial
from pathlib import Path
from typing import Any

from charactereval_lib.cli.options import RUN_HELP, warn
from charactereval_lib.engine.progress import add_quiet_option, bars_wanted
from charactereval_lib.engine.registry import benchmarks
from charactereval_lib.engine.storage import artifacts, runs

STAGE_HELP = {
    "run": "produce the run's records (resumable: the same command continues a run)",
    "summarize": "the run's statistics",
    "report": "the run's report",
}


def _pair(text: str) -> tuple[str, Any]:
    import yaml

    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"{text!r}: expected KEY=VALUE")
    try:
        return key, yaml.safe_load(value)
    except yaml.YAMLError:
        raise argparse.ArgumentTypeError(f"{text!r}: the value is not YAML") from None


def _values(args: argparse.Namespace) -> dict[str, Any]:
    """The stage's settings: ``--settings FILE`` first, then each ``--set`` over it."""
    import yaml

    values: dict[str, Any] = {}
    if args.settings:
        path = Path(args.settings)
        try:
            loaded = yaml.safe_load(artifacts.read_text(path)) or {}
        except yaml.YAMLError as exc:
            raise benchmarks.BenchmarkError(f"{path}: malformed YAML: {getattr(exc, 'problem', exc)}") from None
        if not isinstance(loaded, dict):
            raise benchmarks.BenchmarkError(f"{path}: expected a mapping of settings, got {type(loaded).__name__}")
        values.update(loaded)
    values.update(dict(args.values or []))
    return values


def cmd_stage(name: str, stage: str, args: argparse.Namespace) -> int:
    benchmark = benchmarks.get(name)
    where = args.settings or f"{benchmark.command} {stage}"
    settings = benchmark.make_settings(stage, _values(args), where)
    outcome = benchmark.call(stage, args.run, settings, data_dir=getattr(args, "data_dir", None),
                             progress=bars_wanted(getattr(args, "quiet", True)), out=getattr(args, "out", None))
    warn(getattr(outcome, "warnings", None) or [])
    for line in getattr(outcome, "errors", None) or []:
        print(f"error: {line}", file=sys.stderr)
    if stage == "report":
        print(f"wrote {outcome.notebook} and {outcome.html}" if getattr(outcome, "notebook", None)
              else f"wrote {outcome.html}")
    else:
        print(f"{runs.RunDir.resolve(args.run)}: {benchmark.title} {stage} done")
    exit_code = getattr(outcome, "exit_code", None)
    return exit_code() if callable(exit_code) else 0


def add_stage_commands(parser: argparse.ArgumentParser, benchmark: benchmarks.Benchmark) -> None:
    """One action per stage the benchmark declares."""
    sub = parser.add_subparsers(dest="benchmark_command", required=True, metavar="ACTION")
    for stage in benchmarks.STAGES:
        if stage not in benchmark.stages:
            continue
        p = sub.add_parser(stage, help=STAGE_HELP[stage])
        p.add_argument("run", metavar="RUN", help=RUN_HELP)
        p.add_argument("--set", dest="values", action="append", type=_pair, metavar="KEY=VALUE",
                       help="one setting of this stage (the value read as YAML); repeatable, over --settings")
        p.add_argument("--settings", metavar="FILE", help="a YAML mapping of this stage's settings")
        if stage == "run":
            p.add_argument("--data-dir", "--dir", dest="data_dir", metavar="DIR",
                           help=f"{benchmark.title} data directory (default: the benchmark's own)")
            add_quiet_option(p)
        if stage == "report":
            p.add_argument("--out", metavar="DIR", help="output directory (default: the run directory)")
        p.set_defaults(func=partial(cmd_stage, benchmark.name, stage))


def add_benchmark_parser(parser: argparse.ArgumentParser, benchmark: benchmarks.Benchmark) -> None:
    """The benchmark's own commands (``add_commands``), else one action per stage."""
    if benchmark.add_commands is not None:
        benchmarks.resolve(benchmark.add_commands, f"benchmark {benchmark.name!r}, commands")(parser)
    else:
        add_stage_commands(parser, benchmark)
