"""The official JSON formats: ``import-official`` and ``export-official``."""

from __future__ import annotations

import argparse
from pathlib import Path

from charactereval_lib.charactereval.data import load_official_data
from charactereval_lib.cli.options import RUN_HELP, data_dir_option, warn
from charactereval_lib.engine import runs


def cmd_import_official(args: argparse.Namespace) -> int:
    from charactereval_lib.charactereval.official import import_official

    run_dir = runs.resolve_run_dir(args.run)
    kind, result = import_official(Path(args.file), run_dir, load_official_data(args.data_dir))
    c, ic = result.counts(), result.import_counts()
    line = (f"{run_dir}: imported an official {kind} file: {c['rows']} rows from {ic['records']} records, "
            f"{c['failed']} failed generation(s)")
    if kind == "evaluation":
        line += f", {ic['scores_used']} of {ic['scores_imported']} imported scores used"
    print(line)
    warn(result.warnings)
    return 0


def cmd_export_official(args: argparse.Namespace) -> int:
    from charactereval_lib.charactereval.official import export_official

    run_dir = runs.resolve_run_dir(args.run)
    for path in export_official(run_dir, load_official_data(args.data_dir), Path(args.out) if args.out else None):
        print(path)
    return 0


def _import_official_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", metavar="FILE")
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
