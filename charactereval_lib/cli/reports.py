"""Reports: ``report``, ``compare``, ``leaderboard`` and ``batch``."""

from __future__ import annotations

import argparse

from charactereval_lib import pipeline
from charactereval_lib.cli.options import (
    RUN_HELP,
    allow_mixed_option,
    bootstrap_options,
    data_dir_option,
    judge_choice_option,
    report_problems,
    settings_from_args,
    warn,
)
from charactereval_lib.engine.progress import add_quiet_option, bars_wanted


def _report_settings(args: argparse.Namespace) -> pipeline.ReportSettings:
    baselines = tuple(args.baselines) if args.baselines else pipeline.DEFAULT_BASELINES
    return settings_from_args(pipeline.ReportSettings, args, baselines=baselines)


def cmd_report(args: argparse.Namespace) -> int:
    outcome = pipeline.report(args.run, _report_settings(args), data_dir=args.data_dir, out=args.out)
    warn(outcome.warnings)
    print(f"wrote {outcome.notebook} and {outcome.html}")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    outcome = pipeline.compare(args.runs, args.out, _report_settings(args), data_dir=args.data_dir)
    warn(outcome.warnings)
    print(f"wrote {outcome.notebook} and {outcome.html}")
    return 0


def cmd_leaderboard(args: argparse.Namespace) -> int:
    outcome = pipeline.leaderboard(args.paths, args.out, data_dir=args.data_dir, redact=args.redact,
                                   cache=not args.no_cache, progress=bars_wanted(args.quiet))
    warn(outcome.warnings)
    boards = outcome.content["boards"]
    print(f"wrote {outcome.out / 'index.html'}: {len(boards)} board(s), {len(outcome.content['archived'])} archived, "
          f"{outcome.content['runs']} run(s)")
    print(f"{outcome.reused} runs reused, {outcome.rebuilt} rebuilt")
    return 0


def cmd_batch(args: argparse.Namespace) -> int:
    config = pipeline.batch_config(args.config, progress=bars_wanted(args.quiet))
    problems = pipeline.batch_preflight(config)
    if problems:
        return report_problems(problems, "")
    print(f"batch {config.path}: {len(config.models)} model(s) -> {config.output_dir}", flush=True)
    outcome = pipeline.batch(config)
    print("\n".join(pipeline.batch_summary_lines(outcome)))
    if outcome.interrupted:
        return 130
    # A model that finished with failed samples is reported and makes the batch exit 1 too.
    return 1 if outcome.failures or any(m.failed_samples for m in outcome.models) else 0


def _report_options(p: argparse.ArgumentParser) -> None:
    """What ``report`` and ``compare`` share."""
    p.add_argument("--baseline", dest="baselines", action="append", metavar="MODEL",
                   help="paper model to overlay (repeatable; default: GPT-4, Baichuan2-13B, ChatGLM3-6B)")
    bootstrap_options(p, pipeline.ReportSettings)
    p.add_argument("--show-code", action="store_true", help="keep the code cells in the HTML")
    p.add_argument("--scorer", choices=["reward-model", "judge"], default="reward-model",
                   help="whose scores the main sections show (default reward-model); a run scored by both "
                        "also gets them side by side with their agreement")
    judge_choice_option(p)
    allow_mixed_option(p)
    data_dir_option(p)


def _report_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", metavar="RUN", help=RUN_HELP)
    p.add_argument("--out", metavar="DIR", help="output directory (default: the run directory)")
    _report_options(p)
    p.set_defaults(func=cmd_report)


def _compare_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("runs", metavar="RUN", nargs="+", help="two or more runs; the first is the reference")
    p.add_argument("--out", required=True, metavar="DIR", help="output directory")
    _report_options(p)
    p.set_defaults(func=cmd_compare)


def _leaderboard_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", metavar="RUN_OR_DIR", nargs="+", help="runs, or folders searched for runs")
    p.add_argument("--out", required=True, metavar="DIR", help="the site's folder: new, empty, or an earlier site (which is "
                   "replaced as a whole); any other folder is refused")
    p.add_argument("--redact", action="store_true",
                   help="publish without test-set text: ranks, scores, intervals, per-sample ids, scores and flaw "
                        "severities; no context, profile, scene, dialogue, reply or critique, no rendered reports")
    p.add_argument("--no-cache", action="store_true",
                   help="read and render every run afresh, and keep no per-run cache (default: the hidden folder "
                        ".OUT.cache beside OUT keeps each run's data, reused while the run, its rules, the data and "
                        "this program's version are unchanged)")
    add_quiet_option(p)
    data_dir_option(p)
    p.set_defaults(func=cmd_leaderboard)


def _batch_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", metavar="CONFIG.yaml", help="the batch configuration: models, backends, steps")
    add_quiet_option(p)
    p.set_defaults(func=cmd_batch)


# The arguments of each command of this module (its help line is in ``cli.COMMANDS``).
PARSERS = {
    "report": _report_parser,
    "compare": _compare_parser,
    "leaderboard": _leaderboard_parser,
    "batch": _batch_parser,
}
