"""Judges beyond ``score --scorer judge``: ``battle``, ``best``, ``metaeval`` and ``panel``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from charactereval_lib import pipeline
from charactereval_lib.cli.options import (
    RUN_HELP,
    allow_mixed_option,
    bootstrap_options,
    data_dir_option,
    judge_options,
    metascore_threshold_option,
    settings_from_args,
    undefined,
    warn,
)
from charactereval_lib.engine.progress import add_quiet_option, bars_wanted
from charactereval_lib.engine.reports.texttable import fmt


def cmd_battle(args: argparse.Namespace) -> int:
    """battle RUN_A RUN_B: prints win / tie / loss and position consistency."""
    from charactereval_lib.charactereval.battle import SUMMARY, battle_lines

    settings = settings_from_args(pipeline.JudgeSettings, args, api_key_env="" if args.no_api_key else args.api_key_env)
    names = Path(args.run_a).name, Path(args.run_b).name
    return _comparison(lambda: pipeline.battle(args.run_a, args.run_b, args.out, settings, n_boot=args.n_boot,
                                               seed=args.seed, data_dir=args.data_dir,
                                               progress=bars_wanted(args.quiet)),
                       lambda summary: battle_lines(summary, *names), SUMMARY)


def cmd_best(args: argparse.Namespace) -> int:
    """best RUN RUN...: prints how often each run's reply and each position was chosen."""
    from charactereval_lib.charactereval.best import SUMMARY, best_lines

    settings = settings_from_args(pipeline.JudgeSettings, args, api_key_env="" if args.no_api_key else args.api_key_env)
    return _comparison(lambda: pipeline.best(args.runs, args.out, settings, orders=args.orders, n_boot=args.n_boot,
                                             seed=args.seed, data_dir=args.data_dir,
                                             progress=bars_wanted(args.quiet)),
                       best_lines, SUMMARY)


def _comparison(judged: Callable[[], Any], lines: Callable[[dict], list[str]], summary_file: str) -> int:
    """A battle's or a best-of-n's judge session (``judged``) and what it prints: the session
    line, the summary's ``lines``, its warnings and where it was written."""
    from charactereval_lib.engine.generation.base import RunAborted
    from charactereval_lib.engine.grading.judging import JudgeInterrupted

    try:
        outcome = judged()
    except JudgeInterrupted as exc:
        print(exc.summary.line())
        print("interrupted: every answer received is saved; re-run the same command to resume", file=sys.stderr)
        return 130
    except RunAborted as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(outcome.session.line())
    print("\n".join(lines(outcome.summary)))
    warn(outcome.summary["warnings"])
    print(f"wrote {outcome.out.artifact(summary_file)}")
    return 1 if outcome.session.errors else 0


def cmd_metaeval(args: argparse.Namespace) -> int:
    """metaeval LABELS: prints the agreement of the scorer with the labels per group, or with
    --eval-types each answer format's agreement side by side."""
    if args.scorer == "judge":
        if args.rm:
            raise pipeline.SettingsError("--rm belongs to --scorer reward-model")
        settings = settings_from_args(pipeline.JudgeSettings, args, api_key_env="" if args.no_api_key else args.api_key_env)
    else:
        if (args.judge_model or args.eval_type or args.eval_types
                or args.metascore_threshold != pipeline.JudgeSettings.default("metascore_threshold")):
            raise pipeline.SettingsError("--judge-model, --eval-type, --eval-types and --metascore-threshold need "
                                         "--scorer judge")
        if not args.rm:
            raise pipeline.SettingsError("--scorer reward-model needs --rm DIR")
        settings = settings_from_args(pipeline.ScoreSettings, args)
    if args.eval_types:
        return _metaeval_eval_types(args, settings)
    outcome = pipeline.metaeval(args.labels, args.out, settings, n_boot=args.n_boot, seed=args.seed,
                                data_dir=args.data_dir, progress=bars_wanted(args.quiet))
    scoring = outcome.scoring
    if args.scorer == "judge":
        print(scoring.summary.line())
    summary = outcome.summary
    print(f"{summary['n_labels']} label(s), {summary['unscored']} without a prediction; {summary['scorer']} "
          f"{summary['scorer_model']}")
    print(f"{'group':<22}{'n':>6}{'invalid':>9}{'metascore':>11}{'kappa':>10}{'alpha':>10}   (95% CI in "
          f"{outcome.out.artifact('metaeval_summary.json')})")
    for name, group in summary["groups"].items():
        print(f"{name:<22}{group['metascore']['n']:>6}{group['invalid']:>9}{fmt(group['metascore']['value'], missing='-'):>11}"
              f"{undefined(group['cohen_kappa']):>10}{undefined(group['krippendorff_alpha']):>10}")
    warn(summary["warnings"])
    return 1 if args.scorer == "judge" and scoring.summary.errors else 0


def _metaeval_eval_types(args: argparse.Namespace, settings: pipeline.JudgeSettings) -> int:
    """metaeval --eval-types: one line per answer format (its judge session line first)."""
    eval_types = pipeline.COMPARED_EVAL_TYPES if args.eval_types == "all" else tuple(
        t.strip() for t in args.eval_types.split(","))
    outcome = pipeline.metaeval_eval_types(args.labels, args.out, settings, eval_types, n_boot=args.n_boot,
                                           seed=args.seed, data_dir=args.data_dir, progress=bars_wanted(args.quiet))
    for eval_type, one in outcome.outcomes.items():
        print(f"{eval_type}: {one.scoring.summary.line()}")
    summary = outcome.summary
    print(f"judge {summary['judge_model']} on {summary['labels']}, each answer format side by side "
          f"(95% CI in {outcome.out / pipeline.EVAL_TYPES_SUMMARY}):")
    print(f"{'eval_type':<16}{'n':>6}{'invalid':>9}{'metascore':>11}{'kappa':>10}{'alpha':>10}")
    for row in summary["eval_types"]:
        print(f"{row['eval_type']:<16}{row['n']:>6}{row['invalid'] if row['invalid'] is not None else '-':>9}"
              f"{fmt((row['metascore'] or {}).get('value'), missing='-'):>11}"
              f"{undefined(row['cohen_kappa']) if row['cohen_kappa'] else '-':>10}"
              f"{undefined(row['krippendorff_alpha']) if row['krippendorff_alpha'] else '-':>10}")
    warn(summary["warnings"])
    return 1 if any(one.scoring.summary.errors for one in outcome.outcomes.values()) else 0


def cmd_panel(args: argparse.Namespace) -> int:
    """panel RUN: prints the panel's metric means, the judges' alpha and their invalid answers."""
    from charactereval_lib.charactereval.summary import summary_table_lines

    settings = settings_from_args(pipeline.PanelSettings, args, judge_models=tuple(args.judge_models))
    outcome = pipeline.panel(args.run, settings, args.out)
    summary = outcome.summary
    print("\n".join(summary_table_lines(summary)))
    alpha, counts = summary["krippendorff_alpha"], summary["counts"]
    print(f"Krippendorff's alpha ({alpha['level']}) {undefined(alpha)} [{fmt(alpha['low'], missing='-')}, {fmt(alpha['high'], missing='-')}] "
          f"over {alpha['n']} rows of {alpha['n_clusters']} samples")
    tie = f", {counts['ties_settled']} tie(s) settled to the lowest grade" if summary["verdict"] == "majority" else ""
    print(f"verdict {summary['verdict']}: {counts['with_verdict']}/{counts['rows']} rows{tie}; "
          + "; ".join(f"{model}: {j['invalid']} invalid, {j['not_judged']} not judged"
                      for model, j in summary["per_judge"].items()))
    warn(outcome.warnings)
    print(f"wrote {outcome.out / 'panel_summary.json'} and {outcome.out / 'panel_verdicts.jsonl'}")
    return 0


def _battle_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_a", metavar="RUN_A", help="run A (a bare name means outputs/NAME); the win / tie / loss rates are A's")
    p.add_argument("run_b", metavar="RUN_B", help="run B, judged against A")
    p.add_argument("--out", required=True, metavar="DIR", help="battle directory (judgements, summary, run.json)")
    judge_options(p, required=True)
    bootstrap_options(p, pipeline.SummarizeSettings)
    add_quiet_option(p)
    data_dir_option(p)
    p.set_defaults(func=cmd_battle)


def _best_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("runs", nargs="+", metavar="RUN", help="two or more runs (bare names mean outputs/NAME), "
                                                          "in the order shown to the judge first")
    p.add_argument("--out", required=True, metavar="DIR", help="best-of-n directory (judgements, summary, run.json)")
    p.add_argument("--orders", choices=["rotations", "given"], default="rotations",
                   help="rotations (default): each sample judged once per cyclic order, every run once in every "
                        "position; given: once, in the order named (openai/evals' own)")
    judge_options(p, required=True)
    bootstrap_options(p, pipeline.SummarizeSettings)
    add_quiet_option(p)
    data_dir_option(p)
    p.set_defaults(func=cmd_best)


def _metaeval_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("labels", metavar="LABELS", help="JSON Lines: id, metric_en, reply, human_score or human_choice")
    p.add_argument("--out", required=True, metavar="DIR", help="directory for the rows, scores and summary")
    p.add_argument("--scorer", choices=["judge", "reward-model"], required=True,
                   help="whose predictions meet the labels: judge (an LLM through an OpenAI-compatible API: "
                        "--judge-model, --base-url) or reward-model (--rm DIR)")
    judge_options(p, required=False)
    p.add_argument("--eval-types", metavar="T,T...|all",
                   help="--scorer judge: the same labels under several answer formats side by side (all: "
                        f"{', '.join(pipeline.COMPARED_EVAL_TYPES)}), each in DIR/<eval_type>/")
    metascore_threshold_option(p)
    g = p.add_argument_group("--scorer reward-model")
    g.add_argument("--rm", metavar="DIR", help="reward-model checkpoint directory")
    g.add_argument("--device", help="cpu, cuda or cuda:N (default: cuda when available, else cpu)")
    g.add_argument("--mode", choices=["faithful", "fast"], default=pipeline.ScoreSettings.default("mode"),
                   help="faithful (default): batch 1, the official arithmetic; fast: batched")
    bootstrap_options(p, pipeline.SummarizeSettings)
    add_quiet_option(p)
    data_dir_option(p)
    p.set_defaults(func=cmd_metaeval)


def _panel_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", metavar="RUN", help=RUN_HELP)
    p.add_argument("--judge-model", dest="judge_models", action="append", required=True, metavar="M",
                   help="a judge of the panel (repeat: two or more, each already scored RUN with --scorer judge)")
    p.add_argument("--verdict", choices=["majority", "mean"], default=pipeline.PanelSettings.default("verdict"),
                   help="majority (default; a tie goes to the lowest tied grade) or mean of the judges' grades")
    p.add_argument("--out", metavar="DIR", help="where panel_summary.json and panel_verdicts.jsonl go (default RUN/panel)")
    bootstrap_options(p, pipeline.SummarizeSettings)
    allow_mixed_option(p)
    p.set_defaults(func=cmd_panel)


# The arguments of each command of this module (its help line is in ``cli.COMMANDS``).
PARSERS = {
    "battle": _battle_parser,
    "best": _best_parser,
    "metaeval": _metaeval_parser,
    "panel": _panel_parser,
}
