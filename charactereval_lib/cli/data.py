"""``data`` (fetch, verify, convert-rm-train, subset) and ``doctor``."""

from __future__ import annotations

import argparse
import sys

from charactereval_lib import __version__, pipeline
from charactereval_lib.charactereval.data import DataError
from charactereval_lib.charactereval.protocol import PROTOCOL_VERSION
from charactereval_lib.cli.options import data_dir_option, force_option, report_data_use, report_problems
from charactereval_lib.engine.progress import add_quiet_option, bars_wanted


def cmd_data_fetch(args: argparse.Namespace) -> int:
    check = pipeline.data_fetch(args.data_dir, with_results=args.with_results, with_rm_train=args.with_rm_train,
                                mirror=args.mirror, progress=bars_wanted(args.quiet))
    return report_problems(check.problems, f"{check.data_dir}: fetched {len(check.fetched)} file(s); all verified")


def cmd_data_verify(args: argparse.Namespace) -> int:
    check = pipeline.data_verify(args.data_dir, with_results=args.with_results, with_rm_train=args.with_rm_train)
    return report_problems(check.problems, f"{check.data_dir}: all files match the pinned digests")


def cmd_data_use(args: argparse.Namespace) -> int:
    return report_data_use(pipeline.data_use(args.directory, force=args.force), "CharacterEval", "charactereval data")


def cmd_data_convert_rm_train(args: argparse.Namespace) -> int:
    keys = {}
    for item in args.fields or ():
        name, sep, key = item.partition("=")
        if not sep or not key:
            raise pipeline.SettingsError(f"--field {item!r}: expected NAME=KEY (e.g. reply=model_output)")
        keys[name] = key
    outcome = pipeline.convert_rm_train(args.out, source=args.file, keys=keys, data_dir=args.data_dir)
    print(f"{outcome.labels}: {outcome.records} label(s) of {outcome.samples} sample(s) from {outcome.source} "
          f"({outcome.role_prefixed} replies start with their role's name)")
    print("note: the reward model was trained on these rows: its agreement with them is in-sample, not comparable "
          "with the paper's Table 2", file=sys.stderr)
    return 0


def cmd_data_subset(args: argparse.Namespace) -> int:
    ids = pipeline.data_subset(args.size, out=args.out, data_dir=args.data_dir)
    if args.out:
        print(f"{args.out}: {len(ids)} sample id(s)")
    else:
        print("\n".join(str(i) for i in ids))
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    try:
        outcome = pipeline.doctor(args.data_dir, paper_latex=args.paper_latex)
    except DataError as exc:
        # Missing or altered data fails the self-check (exit 1), as `data verify` reports it.
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"charactereval {__version__}, protocol {PROTOCOL_VERSION}, data {outcome.data.data_dir}")
    checks = outcome.checks
    for check in checks:
        mark = "ok  " if check.ok else "FAIL"
        detail = f"{check.actual}" if check.ok else f"expected {check.expected}, got {check.actual}"
        print(f"  {mark} {check.name}: {detail}")
    failed = [c for c in checks if not c.ok]
    print(f"{len(checks) - len(failed)}/{len(checks)} checks passed")
    return 1 if failed else 0


def _data_parser(p: argparse.ArgumentParser) -> None:
    data_sub = p.add_subparsers(dest="data_command", required=True, metavar="ACTION")
    for name, func, text in (
        ("fetch", cmd_data_fetch, "download the pinned upstream files and verify them"),
        ("verify", cmd_data_verify, "check the files against the pinned digests"),
    ):
        p = data_sub.add_parser(name, help=text)
        data_dir_option(p)
        p.add_argument("--with-results", action="store_true", help="also the five released generation_trans files")
        p.add_argument("--with-rm-train", action="store_true", help="also rm_train_data.json")
        if name == "fetch":
            p.add_argument("--mirror", metavar="URL", help="fetch from URL/<upstream path> instead of GitHub")
            add_quiet_option(p)
        p.set_defaults(func=func)

    p = data_sub.add_parser("use", help="verify DIR, then remember it as this workspace's data directory (a file in "
                                        "the current directory; $CHARACTEREVAL_DATA_DIR and --dir still win)")
    p.add_argument("directory", metavar="DIR", help="the official data directory (verified first: fill a new one "
                                                    "with `data fetch --dir DIR`, or pass --force)")
    force_option(p, "official")
    p.set_defaults(func=cmd_data_use)

    p = data_sub.add_parser("convert-rm-train", help="rm_train_data.json -> a metaeval LABELS file, after validating "
                                                     "every record")
    p.add_argument("--out", required=True, metavar="LABELS", help="the JSON Lines labels file to write")
    p.add_argument("--file", metavar="FILE",
                   help="the annotations file, read as it is (default: rm_train_data.json of the data directory, "
                        "checked against the pinned digests)")
    p.add_argument("--field", dest="fields", action="append", metavar="NAME=KEY",
                   help="the key of field NAME (id, metric, reply, label) in the records, when it is not the "
                        "default (id; metric_en or metric_zh; model_output; label); repeatable")
    data_dir_option(p)
    p.set_defaults(func=cmd_data_convert_rm_train)

    p = data_sub.add_parser("subset", help="a deterministic metric-stratified subset of sample ids")
    p.add_argument("size", type=int, metavar="N", help="number of samples")
    p.add_argument("--out", metavar="FILE", help="write the ids here (one per line) instead of printing them")
    data_dir_option(p)
    p.set_defaults(func=cmd_data_subset)


def _doctor_parser(p: argparse.ArgumentParser) -> None:
    data_dir_option(p)
    p.add_argument("--paper-latex", metavar="FILE",
                   help="also check a copy of the paper's acl_latex.tex (arXiv 2401.01275v2 e-print) against the "
                        "digest that Table 4's provenance records")
    p.set_defaults(func=cmd_doctor)


# The arguments of each command of this module (its help line is in ``cli.COMMANDS``).
PARSERS = {
    "data": _data_parser,
    "doctor": _doctor_parser,
}
