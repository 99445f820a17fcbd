"""Options and output helpers the command modules share."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

RUN_HELP = "run directory (a bare name means outputs/NAME)"


def data_dir_option(parser: argparse.ArgumentParser) -> None:
    # Both spellings on every command: the hints and the README use either.
    parser.add_argument(
        "--data-dir",
        "--dir",
        dest="data_dir",
        metavar="DIR",
        help="official data directory (default: $CHARACTEREVAL_DATA_DIR, else data/official/)",
    )


def allow_mixed_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--allow-mixed", action="store_true",
                        help="analyse scores from several scorer configurations anyway (warned about at the top)")


def judge_choice_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--judge-model", metavar="M",
                        help="the judge whose scores are meant, when judge_scores.jsonl holds several judges")


def judge_options(parser: argparse.ArgumentParser, *, required: bool) -> None:
    """The judge's endpoint, spec and call settings (``score --scorer judge``, ``battle``)."""
    g = parser.add_argument_group("judge")
    g.add_argument("--judge-model", required=required, help="the judge's model id")
    g.add_argument("--base-url", help="OpenAI-compatible endpoint of the judge")
    g.add_argument("--spec", metavar="FILE|DIR",
                   help="score: a judge spec for every metric, or a directory of <metric_en>.yaml; "
                        "battle: a pairwise spec (default: the shipped specs)")
    g.add_argument("--api-key-env", default="OPENAI_API_KEY", metavar="NAME",
                   help="environment variable holding the API key (default OPENAI_API_KEY); the key is never stored")
    g.add_argument("--no-api-key", action="store_true", help="send no key (a local server that needs none)")
    g.add_argument("--concurrency", type=int, default=32, help="most judge calls in flight (default 32)")
    g.add_argument("--temperature", type=float, default=0.0, help="judge temperature (default 0)")
    g.add_argument("--max-tokens", type=int, default=1024, help="judge reply length limit (default 1024)")
    g.add_argument("--max-attempts", type=int, default=8, help="attempts per call, first one included (default 8)")
    g.add_argument("--timeout", type=float, default=300.0, metavar="S", help="seconds per attempt (default 300)")


def report_problems(problems: list[str], ok_message: str) -> int:
    """One ``error:`` line per problem on stderr and exit 1, or the OK line and exit 0."""
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    if not problems:
        print(ok_message)
    return 1 if problems else 0


def settings_from_args(cls, args: argparse.Namespace, **overrides):
    """Typed pipeline settings from the parsed flags (flag dests are the settings' field names)."""
    values = {key: getattr(args, key) for key in cls.keys() if hasattr(args, key)}
    return cls(**{**values, **overrides})


def warn(warnings: Sequence[str]) -> None:
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)


def fmt(value: float | None) -> str:
    return "-" if value is None or value != value else f"{value:.3f}"


def undefined(estimate: dict) -> str:
    """A statistic's value, or why it has none: ``n<2`` (too few rows), ``undefined`` (no variation)."""
    if estimate["value"] is not None and estimate["value"] == estimate["value"]:
        return f"{estimate['value']:.3f}"
    return "n<2" if estimate["n"] < 2 else "undefined"
