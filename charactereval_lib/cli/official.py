"""The official JSON formats: ``import-official`` and ``export-official``."""

from __future__ import annotations

import argparse

from charactereval_lib import pipeline
from charactereval_lib.cli.options import RUN_HELP, data_dir_option, warn


def cmd_import_official(args: argparse.Namespace) -> int:
    outcome = pipeline.import_official(args.file, args.run, data_dir=args.data_dir)
    run_dir, kind, result = outcome.run, outcome.kind, outcome.result
    c, ic = result.counts(), result.import_counts()
    line = (f"{run_dir}: imported an official {kind} file: {c['rows']} rows from {ic['records']} records, "
            f"{c['failed']} failed generation(s)")
    if kind == "evaluation":
        line += f", {ic['scores_used']} of {ic['scores_imported']} imported scores used"
    print(line)
    warn(result.warnings)
    return 0


def cmd_export_official(args: argparse.Namespace) -> int:
    for path in pipeline.export_official(args.run, out=args.out, data_dir=args.data_dir):
        print(path)
    return 0


def _import_official_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE", help="an official generation, generation_trans or evaluation JSON file")
    p.add_argument("run", metavar="RUN", help=RUN_HELP)
    data_dir_option(p)
    p.set_defaults(func=cmd_import_official)


def _export_official_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", metavar="RUN", help=RUN_HELP)
    p.add_argument("--out", metavar="DIR", help="output directory (default RUN/official)")
    data_dir_option(p)
    p.set_defaults(func=cmd_export_official)


# The arguments of each command of this module (its help line is in ``cli.COMMANDS``).
PARSERS = {
    "import-official": _import_official_parser,
    "export-official": _export_official_parser,
}
