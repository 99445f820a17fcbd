"""``coser``: CoSER given-circumstance acting (data, run, import, summarize, report, compare)."""

from __future__ import annotations

import argparse
import sys

from charactereval_lib import pipeline
from charactereval_lib.cli.options import (
    RUN_HELP,
    bootstrap_options,
    force_option,
    report_data_use,
    report_problems,
    request_param_option,
    settings_from_args,
    warn,
)
from charactereval_lib.coser.versions import DEFAULT_VERSION as COSER_DEFAULT_VERSION
from charactereval_lib.coser.versions import VERSIONS as COSER_VERSIONS
from charactereval_lib.engine.progress import add_quiet_option, bars_wanted


def _coser_price(value: str) -> tuple[str, tuple[float, float]]:
    """``ROLE=IN:OUT`` (USD per million input and output tokens) of ``coser run --price``."""
    role, _, pair = value.partition("=")
    price_in, _, price_out = pair.partition(":")
    try:
        prices = (float(price_in), float(price_out))
    except ValueError:
        prices = None
    # The judge's JSON repair calls have a price of their own where the repair model is not the judge's.
    roles = (*pipeline.COSER_ROLES, "repair")
    if role not in roles or prices is None or min(prices) < 0:
        raise argparse.ArgumentTypeError(
            f"{value!r}: expected ROLE=IN:OUT with ROLE one of {', '.join(roles)} "
            "and two prices (at least 0) in USD per million tokens")
    return role, prices


def cmd_coser_data(args: argparse.Namespace) -> int:
    if args.coser_data_command == "fetch":
        problems = pipeline.coser_data_fetch(args.data_dir, mirror=args.mirror, progress=bars_wanted(args.quiet),
                                             with_results=args.with_results)
    else:
        problems = pipeline.coser_data_verify(args.data_dir, with_results=args.with_results)
    status = report_problems(problems, f"{pipeline.coser_data_dir(args.data_dir)}: all CoSER files match the pinned "
                                       "digests")
    if status:
        return status
    facts, wrong = pipeline.coser_data_facts(args.data_dir)
    print("test-set facts (data/reference/coser_paper_facts.json):")
    print("\n".join(f"  {line}" for line in facts))
    return report_problems(wrong, "  all as recorded")


def cmd_coser_data_use(args: argparse.Namespace) -> int:
    return report_data_use(pipeline.coser_data_use(args.directory, force=args.force), "CoSER", "charactereval coser data")


def cmd_coser_run(args: argparse.Namespace) -> int:
    settings = settings_from_args(pipeline.CoserRunSettings, args)
    if args.dry_run:
        print("\n".join(pipeline.coser_dry_run(settings, data_dir=args.data_dir, prices=dict(args.price or []))))
        return 0
    progress = bars_wanted(args.quiet)
    outcome = pipeline.coser_run(args.run, settings, data_dir=args.data_dir, progress=progress)
    warn(outcome.warnings)
    for line in outcome.errors:
        print(f"error: {line}", file=sys.stderr)
    calls = ", ".join(f"{k} {v}" for k, v in outcome.calls.items())
    print(f"{outcome.run}: {outcome.scenes - len(outcome.errors)}/{outcome.scenes} scene runs complete "
          f"(calls this session: {calls})")
    if outcome.errors:
        print("rerun the same command to continue the unfinished scenes", file=sys.stderr)
    return outcome.exit_code()


def cmd_coser_summarize(args: argparse.Namespace) -> int:
    from charactereval_lib.coser.benchmark import SUMMARY
    from charactereval_lib.coser.report import summary_lines

    outcome = pipeline.coser_summarize(args.run, settings_from_args(pipeline.CoserSummarizeSettings, args))
    print("\n".join(summary_lines(outcome.summary, outcome.run.artifact(SUMMARY))))
    warn(outcome.warnings)
    return 0


def cmd_coser_import(args: argparse.Namespace) -> int:
    models = {f"{role}_model": getattr(args, f"{role}_model") for role in ("env", "nsp", "judge")
              if getattr(args, f"{role}_model")}
    report = pipeline.coser_import(args.file, args.run, protocol=args.protocol, actor_model=args.actor_model,
                                   score_formula=args.score_formula, models=models, data_dir=args.data_dir,
                                   metrics=not args.no_metrics, progress=bars_wanted(args.quiet))
    print(report.summary_line())
    for mismatch in report.mismatches[:10]:
        print(f"  not reproduced: {mismatch}", file=sys.stderr)
    if len(report.mismatches) > 10:
        print(f"  ... and {len(report.mismatches) - 10} more (run.json: import_official)", file=sys.stderr)
    return 0


def cmd_coser_report(args: argparse.Namespace) -> int:
    outcome = pipeline.coser_report(args.run, settings_from_args(pipeline.CoserReportSettings, args), out=args.out)
    warn(outcome.warnings)
    print(f"wrote {outcome.notebook} and {outcome.html}")
    return 0


def cmd_coser_compare(args: argparse.Namespace) -> int:
    outcome = pipeline.coser_compare(args.runs, args.out, settings_from_args(pipeline.CoserReportSettings, args))
    warn(outcome.warnings)
    print(f"wrote {outcome.notebook} and {outcome.html}")
    return 0


def _coser_data_dir_option(parser: argparse.ArgumentParser, *flags: str) -> None:
    parser.add_argument(*(flags or ("--data-dir", "--dir")), dest="data_dir", metavar="DIR",
                        help="CoSER data directory (default: $COSER_DATA_DIR, else the workspace's, else data/coser/)")


def _coser_statistics_options(parser: argparse.ArgumentParser) -> None:
    bootstrap_options(parser, pipeline.CoserSummarizeSettings, "bootstrap resamples of whole scenes")


def _coser_parser(p: argparse.ArgumentParser) -> None:
    """``coser`` with its actions: data fetch|verify, run, import, summarize, report, compare."""
    sub = p.add_subparsers(dest="coser_command", required=True, metavar="ACTION")

    data = sub.add_parser("data", help="fetch or verify the pinned CoSER test set and upstream prompt file")
    data_sub = data.add_subparsers(dest="coser_data_command", required=True, metavar="ACTION")
    for name, text in (("fetch", "download the pinned test set and upstream prompt file, then verify them"),
                       ("verify", "check the CoSER data files against their pinned digests")):
        p = data_sub.add_parser(name, help=text)
        # --dir, as CharacterEval's `data fetch|verify` spell it.
        _coser_data_dir_option(p, "--dir", "--data-dir")
        p.add_argument("--with-results", action="store_true", help="also the 12 released evaluation files (rebuttal)")
        if name == "fetch":
            p.add_argument("--mirror", metavar="URL", help="fetch from URL/<upstream path> instead of GitHub")
            add_quiet_option(p)
        p.set_defaults(func=cmd_coser_data)
    p = data_sub.add_parser("use", help="verify DIR, then remember it as this workspace's CoSER data directory "
                                        "($COSER_DATA_DIR and --dir still win)")
    p.add_argument("directory", metavar="DIR", help="the CoSER data directory (verified first: fill a new one with "
                                                    "`coser data fetch --dir DIR`, or pass --force)")
    force_option(p, "CoSER")
    p.set_defaults(func=cmd_coser_data_use)

    p = sub.add_parser("run", help="simulate and judge the preset's scenes (resumable: rerun to continue)")
    p.add_argument("run", metavar="RUN", help=RUN_HELP)
    C = pipeline.CoserRunSettings
    p.add_argument("--preset", choices=["full", "sample", "smoke"], default=C.default("preset"),
                   help="full: 200 scenes x 3; sample: 10 id + 10 ood x 1; smoke: 1 id + 1 ood x 1 (default)")
    p.add_argument("--protocol", choices=sorted(COSER_VERSIONS), default=COSER_DEFAULT_VERSION,
                   help=f"default {COSER_DEFAULT_VERSION}")
    p.add_argument("--backend", choices=list(pipeline.COSER_BACKENDS), default=C.default("backend"),
                   help="offline: meaningless replies, for trying the command")
    p.add_argument("--base-url", help="endpoint for every role unless --ROLE-base-url is given")
    p.add_argument("--api-key-env", default=C.default("api_key_env"), metavar="NAME",
                   help="variable holding the key for every role unless --ROLE-api-key-env (never stored)")
    p.add_argument("--no-api-key", action="store_true", help="a local server that needs no key")
    for role in pipeline.COSER_ROLES:
        g = p.add_argument_group(f"{role} role")
        fixed = {name: COSER_VERSIONS[name].models.of(role) for name in sorted(COSER_VERSIONS)} \
            if role != "actor" else None
        g.add_argument(f"--{role}-model", help="model under test (required)" if fixed is None else
                       "model (default: the one the protocol version fixes, "
                       + ", ".join(f"{name} {model}" for name, model in fixed.items()) + ")")
        g.add_argument(f"--{role}-base-url", metavar="URL", help=f"the {role} role's endpoint (default: --base-url)")
        g.add_argument(f"--{role}-api-key-env", metavar="NAME",
                       help=f"variable holding the {role} role's key (default: --api-key-env; never stored)")
        request_param_option(g, f"--{role}-request-param", f"{role}_request_params",
                             f"the {role} role's calls; not a parameter the protocol fixes (temperature, max_tokens, "
                             "top_p, ...)")
        if role != "judge":
            g.add_argument(f"--{role}-system-role", choices=["system", "user"], help="default: upstream rule")
            for flag in ("name-suffix", "output-example", "fix-repetition"):
                g.add_argument(f"--{role}-{flag}", action=argparse.BooleanOptionalAction, default=None,
                               help="default: upstream rule for the model name")
    p.add_argument("--repair-model", help="JSON repair model at the judge endpoint (default: the version's)")
    request_param_option(p, "--repair-request-param", "repair_request_params",
                         "the JSON repair calls (default: the judge's when the repair model is the judge's)")
    p.add_argument("--continue-from", type=int, default=C.default("continue_from"), metavar="K", help="give the first K original lines")
    p.add_argument("--wo-thought", action="store_true", help="thoughtless output format (upstream --wo_thought)")
    p.add_argument("--keep-thinking", action="store_true",
                   help="keep a reply's leading <think>...</think> block in the dialogue, the judge's input and the "
                        "length term, as upstream does (default: removed; recorded in the run's identity)")
    p.add_argument("--limit", type=int, help="only the preset's first N scenes")
    p.add_argument("--concurrency", type=int, default=C.default("concurrency"),
                   help="requests in flight per role (default %(default)s)")
    p.add_argument("--scene-concurrency", type=int, default=C.default("scene_concurrency"),
                   help="scenes in flight (default %(default)s)")
    p.add_argument("--timeout", type=float, default=C.default("timeout"), help="seconds per call (default %(default)g, as seed 004 F17)")
    p.add_argument("--retry-base-delay", type=float, default=C.default("retry_base_delay"),
                   help="first transport back-off in seconds")
    add_quiet_option(p, legacy_no_progress=True)
    p.add_argument("--dry-run", action="store_true",
                   help="print calls, tokens, the estimated cost per role and its upper bound; send nothing")
    p.add_argument("--price", action="append", type=_coser_price, metavar="ROLE=IN:OUT",
                   help="--dry-run: USD per million input:output tokens of ROLE (repeatable)")
    _coser_data_dir_option(p)
    p.set_defaults(func=cmd_coser_run)

    p = sub.add_parser("summarize", help="RUN/coser_summary.json: means, bootstrap intervals, splits, books, spread")
    p.add_argument("run", metavar="RUN", help=RUN_HELP)
    _coser_statistics_options(p)
    p.set_defaults(func=cmd_coser_summarize)

    p = sub.add_parser("import", help="an official paper-era exp/evaluation/*.json as a new run, re-scored")
    p.add_argument("file", metavar="FILE", help="the official result file (e.g. exp/evaluation/id_set_gpt-4o.json)")
    p.add_argument("run", metavar="RUN", help="a new (or empty) run directory")
    p.add_argument("--protocol", choices=sorted(COSER_VERSIONS), default=None,
                   help=f"version whose score formula re-scores the critiques (default {COSER_DEFAULT_VERSION}; "
                        "coser-head for a file whose cases are keyed by scene)")
    p.add_argument("--actor-model", help="the file's section under cases (default: its only one); required when "
                                         "cases are keyed by scene (no model section)")
    p.add_argument("--score-formula", choices=["length_penalty", "no_length_penalty"], default=None,
                   help="per-dimension formula (default: no_length_penalty for *-no_length_penalty.json files)")
    for role, label in (("env", "environment"), ("nsp", "next-speaker"), ("judge", "judge")):
        p.add_argument(f"--{role}-model", help=f"the {label} model that produced the file (default: the name in "
                                                "the paper-era experiment; give a dated snapshot if you know it)")
    p.add_argument("--no-metrics", action="store_true", help="skip BLEU/ROUGE-L of the simulation texts")
    add_quiet_option(p)
    _coser_data_dir_option(p)
    p.set_defaults(func=cmd_coser_import)

    for name, func, text in (
        ("report", cmd_coser_report, "execute the CoSER report notebook -> RUN/report.ipynb + RUN/report.html"),
        ("compare", cmd_coser_compare, "execute the CoSER comparison notebook -> OUT/comparison.ipynb + .html"),
    ):
        p = sub.add_parser(name, help=text)
        if name == "report":
            p.add_argument("run", metavar="RUN", help=RUN_HELP)
            p.add_argument("--out", metavar="DIR", help="output directory (default: the run directory)")
        else:
            p.add_argument("runs", metavar="RUN", nargs="+", help="two or more runs; the first is the reference")
            p.add_argument("--out", required=True, metavar="DIR", help="output directory")
            p.add_argument("--allow-mixed", action="store_true",
                           help="compare runs whose protocol version or non-actor models differ (warned at the top)")
        _coser_statistics_options(p)
        p.add_argument("--show-code", action="store_true", help="keep the code cells in the HTML")
        p.set_defaults(func=func)


# The arguments of each command of this module (its help line is in ``cli.COMMANDS``).
PARSERS = {
    "coser": _coser_parser,
}
