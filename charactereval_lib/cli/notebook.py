"""``notebook``: a parameterised notebook copied into a run directory, to open in Jupyter Lab."""

from __future__ import annotations

import argparse
import os

from charactereval_lib.cli.options import RUN_HELP, data_dir_option


def cmd_notebook(args: argparse.Namespace) -> int:
    from charactereval_lib.pipeline.notebooks import notebook

    path = notebook(args.name, args.runs, out=args.out, data_dir=args.data_dir, force=args.force)
    shown = os.path.relpath(path) if not os.path.relpath(path).startswith("..") else str(path)
    print(f"wrote {shown}: its parameters are filled (the injected cell below the first one); open it with "
          f"`make lab` or `jupyter lab {shown}`: what it shows stays in this copy")
    return 0


def _notebook_parser(p: argparse.ArgumentParser) -> None:
    from charactereval_lib.pipeline.notebooks import available

    names = available()
    several = [name for name, benchmark in names.items() if benchmark.notebooks[name].several]
    p.add_argument("name", choices=list(names), metavar="NOTEBOOK", help=f"one of: {', '.join(names)}")
    p.add_argument("runs", nargs="+", metavar="RUN", help=RUN_HELP + f"; {' and '.join(several)} take several")
    p.add_argument("--out", metavar="DIR", help="write the notebook here (default: the first run's directory)")
    p.add_argument("--force", action="store_true", help="replace a notebook of that name already there")
    data_dir_option(p)
    p.set_defaults(func=cmd_notebook)


# The arguments of each command of this module (its help line is in ``cli.COMMANDS``).
PARSERS = {
    "notebook": _notebook_parser,
}
