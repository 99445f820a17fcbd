"""``reproduce``: every published number the released files allow, beside the paper."""

from __future__ import annotations

import argparse

from charactereval_lib import pipeline
from charactereval_lib.cli.options import bootstrap_options, settings_from_args, warn
from charactereval_lib.engine.benchmarks import reproducible
from charactereval_lib.engine.progress import add_quiet_option, bars_wanted


def cmd_reproduce(args: argparse.Namespace) -> int:
    from charactereval_lib.reproduction import reproduce

    # The bootstrap settings are checked as summarize checks them (one line, before any work).
    bootstrap = settings_from_args(pipeline.SummarizeSettings, args)
    # Only the options given: each belongs to one benchmark's reproduction, which refuses the others'.
    given = {"rm": args.rm, "device": args.device, "no_metrics": args.no_metrics or None}
    outcome = reproduce(args.benchmark, args.out, data_dir=args.data_dir, n_boot=bootstrap.n_boot, seed=bootstrap.seed,
                        show_code=args.show_code, progress=bars_wanted(args.quiet),
                        **{option: value for option, value in given.items() if value is not None})
    decided = [r for r in outcome.document["rows"] if r["within"] is not None]
    print(f"wrote {outcome.out / 'reproduction.json'} and {outcome.html}: {len(outcome.document['rows'])} cells, "
          f"{sum(1 for r in decided if r['within'])}/{len(decided)} reproduce the paper (the rule is in the report's header)")
    warn([w for w in (outcome.document.get("missing"), outcome.document.get("meaningless")) if w])
    return 0


def _reproduce_parser(p: argparse.ArgumentParser) -> None:
    # The benchmarks that declare a reproduction in the registry (read when this parser is built,
    # i.e. only for ``reproduce``).
    p.add_argument("--benchmark", required=True, choices=list(reproducible()))
    p.add_argument("--out", required=True, metavar="DIR", help="a new or empty folder, or an earlier reproduction (replaced)")
    p.add_argument("--data-dir", "--dir", dest="data_dir", metavar="DIR",
                   help="data directory (default: $COSER_DATA_DIR or $CHARACTEREVAL_DATA_DIR, else the workspace's, as the other commands)")
    p.add_argument("--rm", metavar="DIR", help="charactereval: the reward-model checkpoint that scores the replies")
    p.add_argument("--device", help="charactereval: torch device for the reward model (e.g. cuda)")
    p.add_argument("--no-metrics", action="store_true", help="coser: skip BLEU/ROUGE-L (the slow part)")
    bootstrap_options(p, pipeline.SummarizeSettings)
    p.add_argument("--show-code", action="store_true", help="keep the code cells in the HTML")
    add_quiet_option(p)
    p.set_defaults(func=cmd_reproduce)


# The arguments of each command of this module (its help line is in ``cli.COMMANDS``).
PARSERS = {
    "reproduce": _reproduce_parser,
}
