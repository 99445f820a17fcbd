"""``reproduce``: every published number the released files allow, beside the paper. The options
beyond the common ones are those the registered reproductions declare
(``engine.registry.benchmarks.Reproduction.options``)."""

from __future__ import annotations

import argparse

from charactereval_lib import pipeline
from charactereval_lib.cli.options import bootstrap_options, settings_from_args, warn
from charactereval_lib.engine.progress import add_quiet_option, bars_wanted
from charactereval_lib.engine.registry.benchmarks import Option, reproducible


def cmd_reproduce(args: argparse.Namespace) -> int:
    # The bootstrap settings are checked as summarize checks them (one line, before any work).
    bootstrap = settings_from_args(pipeline.SummarizeSettings, args)
    # Only the options given: each belongs to one benchmark's reproduction, which refuses the others'.
    given = {name: getattr(args, name) for name in args.reproduction_options if getattr(args, name) is not None}
    outcome = pipeline.reproduce(args.benchmark, args.out, data_dir=args.data_dir, n_boot=bootstrap.n_boot,
                                 seed=bootstrap.seed, show_code=args.show_code, progress=bars_wanted(args.quiet),
                                 **given)
    decided = [r for r in outcome.document["rows"] if r["within"] is not None]
    print(f"wrote {outcome.out / 'reproduction.json'} and {outcome.html}: {len(outcome.document['rows'])} cells, "
          f"{sum(1 for r in decided if r['within'])}/{len(decided)} reproduce the paper (the rule is in the report's header)")
    warn([w for w in (outcome.document.get("missing"), outcome.document.get("meaningless")) if w])
    return 0


def _declared_options() -> dict[str, tuple[Option, list[str]]]:
    """Every option the reproductions declare, with the benchmarks that declare it (one flag for
    all of them; the first declaration's help)."""
    found: dict[str, tuple[Option, list[str]]] = {}
    for name, benchmark in reproducible().items():
        for option in benchmark.reproduction.options:
            found.setdefault(option.name, (option, []))[1].append(name)
    return found


def _reproduce_parser(p: argparse.ArgumentParser) -> None:
    # The benchmarks that declare a reproduction in the registry, and their options (read when
    # this parser is built, i.e. only for ``reproduce``).
    p.add_argument("--benchmark", required=True, choices=list(reproducible()),
                   help="the benchmark whose published results to reproduce")
    p.add_argument("--out", required=True, metavar="DIR", help="a new or empty folder, or an earlier reproduction (replaced)")
    p.add_argument("--data-dir", "--dir", dest="data_dir", metavar="DIR",
                   help="data directory (default: the benchmark's own, as its other commands find it)")
    options = _declared_options()
    for option, names in options.values():
        given = {"action": "store_true", "default": None} if option.flag else {"metavar": option.metavar}
        p.add_argument(option.flag_name, dest=option.name, help=f"{', '.join(names)}: {option.help}", **given)
    bootstrap_options(p, pipeline.SummarizeSettings)
    p.add_argument("--show-code", action="store_true", help="keep the code cells in the HTML")
    add_quiet_option(p)
    p.set_defaults(func=cmd_reproduce, reproduction_options=tuple(options))


# The arguments of each command of this module (its help line is in ``cli.COMMANDS``).
PARSERS = {
    "reproduce": _reproduce_parser,
}
