"""``rm``: the reward model's checkpoint (download, check, make-tiny)."""

from __future__ import annotations

import argparse

from charactereval_lib import pipeline
from charactereval_lib.cli.options import data_dir_option, report_problems


def cmd_rm_download(args: argparse.Namespace) -> int:
    path = pipeline.rm_download(args.dir, endpoint=args.endpoint)
    print(f"{path}: BaichuanCharRM ready")
    return 0


def cmd_rm_make_tiny(args: argparse.Namespace) -> int:
    # The label says what the checkpoint is; its module loads torch, which --help must not.
    from charactereval_lib.charactereval.reward.tiny import TINY_LABEL

    path = pipeline.rm_make_tiny(args.dir, from_data=args.from_data, data_dir=args.data_dir, layers=args.layers,
                                 hidden=args.hidden, heads=args.heads, vocab=args.vocab, seed=args.seed)
    print(f"{path}: {TINY_LABEL}")
    return 0


def cmd_rm_check(args: argparse.Namespace) -> int:
    from charactereval_lib.charactereval.reward import pins

    pinned = (f"; the side files match the pins of {pins.REVISION} ({', '.join(pins.unpinned())} not pinned yet: "
              "no digest known)" if pins.claims_official(args.dir) else "")
    return report_problems(pipeline.rm_check(args.dir),
                           f"{args.dir}: config, tokenizer and weight index are consistent{pinned}")


def _rm_parser(p: argparse.ArgumentParser) -> None:
    rm_sub = p.add_subparsers(dest="rm_command", required=True, metavar="ACTION")
    p = rm_sub.add_parser("download", help="fetch morecry/BaichuanCharRM at the pinned revision (resumable)")
    p.add_argument("--dir", default="models/BaichuanCharRM", help="target directory (default: models/BaichuanCharRM)")
    p.add_argument("--endpoint", help="Hugging Face endpoint or mirror URL (default: $HF_ENDPOINT or the Hub)")
    p.set_defaults(func=cmd_rm_download)
    p = rm_sub.add_parser("check", help="check a checkpoint directory's config, tokenizer and weight index")
    p.add_argument("dir", metavar="DIR", help="the checkpoint directory (e.g. models/BaichuanCharRM)")
    p.set_defaults(func=cmd_rm_check)
    p = rm_sub.add_parser("make-tiny", help="write a tiny random checkpoint (meaningless scores) for demos and tests")
    p.add_argument("dir", metavar="DIR", help="where to write the checkpoint")
    p.add_argument(
        "--from-data",
        action="store_true",
        help="train its tokenizer on the official data's text (implied by --data-dir; default: synthetic text)",
    )
    p.add_argument("--layers", type=int, default=2, help="transformer layers (default %(default)s)")
    p.add_argument("--hidden", type=int, default=64, help="hidden size (default %(default)s)")
    p.add_argument("--heads", type=int, default=8, help="attention heads (default %(default)s)")
    p.add_argument("--vocab", type=int, help="tokenizer pieces (default 8000 with --from-data, else 2000)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the random weights (and of the synthetic text) (default %(default)s)")
    data_dir_option(p)
    p.set_defaults(func=cmd_rm_make_tiny)


# The arguments of each command of this module (its help line is in ``cli.COMMANDS``).
PARSERS = {
    "rm": _rm_parser,
}
