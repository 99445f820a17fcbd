"""Options and output helpers the command modules share."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from charactereval_lib import pipeline
from charactereval_lib.engine.grading.choices import EVAL_TYPES

RUN_HELP = "run directory (a bare name means outputs/NAME)"


class RequestParamAction(argparse.Action):
    """``--request-param KEY=JSON`` (repeatable): one request-body key and its JSON value,
    collected into a dict; a value that is not JSON is one line naming the option."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, value: Any,
                 option_string: str | None = None) -> None:
        import json

        key, sep, text = str(value).partition("=")
        try:
            parsed = json.loads(text) if sep and key else None
        except json.JSONDecodeError as exc:
            parser.error(f"{option_string} {value!r}: the value after = is not JSON ({exc.msg}); quote strings, "
                         "e.g. reasoning_effort='\"high\"'")
        if not sep or not key:
            parser.error(f"{option_string} {value!r}: expected KEY=JSON, e.g. reasoning_effort='\"high\"'")
        collected = dict(getattr(namespace, self.dest, None) or {})
        if key in collected:
            parser.error(f"{option_string}: {key!r} is given twice")
        collected[key] = parsed
        setattr(namespace, self.dest, collected)


def request_param_option(parser: Any, flag: str, dest: str, what: str) -> None:
    parser.add_argument(flag, dest=dest, action=RequestParamAction, metavar="KEY=JSON",
                        help=f"a further request-body key of {what}, sent as given and recorded in run.json "
                             "(repeatable; e.g. reasoning_effort='\"high\"', "
                             "chat_template_kwargs='{\"enable_thinking\": false}', "
                             "provider='{\"only\": [\"openai\"], \"allow_fallbacks\": false}')")


def data_dir_option(parser: argparse.ArgumentParser) -> None:
    # Both spellings on every command: the hints and the README use either.
    parser.add_argument(
        "--data-dir",
        "--dir",
        dest="data_dir",
        metavar="DIR",
        help="official data directory (default: $CHARACTEREVAL_DATA_DIR, else the workspace's (`data use`), else data/official/)",
    )


def allow_mixed_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--allow-mixed", action="store_true",
                        help="analyse scores from several scorer configurations anyway (warned about at the top)")


def judge_choice_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--judge-model", metavar="M",
                        help="the judge whose scores are meant, when judge_scores.jsonl holds several judges")


def judge_options(parser: argparse.ArgumentParser, *, required: bool) -> None:
    """The judge's endpoint, spec and call settings (``score --scorer judge``, ``battle``, ``best``,
    ``metaeval``)."""
    g = parser.add_argument_group("judge")
    g.add_argument("--judge-model", required=required, help="the judge's model id")
    g.add_argument("--base-url", help="OpenAI-compatible endpoint of the judge")
    g.add_argument("--spec", metavar="FILE|DIR",
                   help="score: a judge spec for every metric, or a directory of <metric_en>.yaml; "
                        "battle: a pairwise spec; best: a multicomp spec (default: the shipped specs)")
    g.add_argument("--eval-type", choices=list(EVAL_TYPES),
                   help="the answer format of every spec, replacing its own eval_type (openai/evals' eval-level "
                        "eval_type: the answer instruction and the parse order follow it)")
    J = pipeline.JudgeSettings
    g.add_argument("--api-key-env", default=J.default("api_key_env"), metavar="NAME",
                   help="environment variable holding the API key (default %(default)s); the key is never stored")
    g.add_argument("--no-api-key", action="store_true", help="send no key (a local server that needs none)")
    g.add_argument("--concurrency", type=int, default=J.default("concurrency"),
                   help="most judge calls in flight (default %(default)s)")
    g.add_argument("--temperature", type=float, default=J.default("temperature"),
                   help="judge temperature (default %(default)g)")
    g.add_argument("--max-tokens", type=int, default=J.default("max_tokens"),
                   help="judge reply length limit (default %(default)s)")
    g.add_argument("--max-attempts", type=int, default=J.default("max_attempts"),
                   help="attempts per call, first one included (default %(default)s)")
    g.add_argument("--timeout", type=float, default=J.default("timeout"), metavar="S",
                   help="seconds per attempt (default %(default)g)")


def metascore_threshold_option(parser: Any) -> None:
    """``--metascore-threshold`` (``score --scorer judge``, ``metaeval``)."""
    parser.add_argument("--metascore-threshold", type=float,
                        default=pipeline.JudgeSettings.default("metascore_threshold"), metavar="X",
                        help="--scorer judge: the agreement with human labels (metascore) below which the judge's "
                             "scores are warned about (default %(default)g; openai/evals: close to 1.0)")


def engine_options(group: Any, settings: Any, local_and_ray: str, loads: str) -> None:
    """``--engine`` and its Ray options (``generate`` of the hf backend, ``score``)."""
    group.add_argument("--engine", choices=list(pipeline.ENGINES), default=settings.default("engine"),
                       help=f"local (default): {local_and_ray}")
    group.add_argument("--address", metavar="ADDR",
                       help="an existing Ray cluster (e.g. auto, HOST:6379); default: start a local one")
    group.add_argument("--workers", type=int, default=settings.default("workers"), metavar="N",
                       help=f"Ray workers, each loading {loads} once (default %(default)s)")
    group.add_argument("--gpus-per-worker", type=float, default=settings.default("gpus_per_worker"), metavar="G",
                       help="GPUs per Ray worker (default %(default)g: CPU)")
    group.add_argument("--lost-node-wait", type=float, default=settings.default("lost_node_wait"), metavar="S",
                       help="once every Ray worker is lost (their nodes gone): seconds to wait for a replacement "
                            "to start before stopping, all results so far saved (default %(default)g)")


class _DeprecatedAlias(argparse.Action):
    """An option's old spelling: it still sets the option and says on stderr which spelling to use."""

    def __init__(self, option_strings: Sequence[str], dest: str, *, new: str, **kwargs: Any) -> None:
        super().__init__(option_strings, dest, default=argparse.SUPPRESS, help=argparse.SUPPRESS, **kwargs)
        self.new = new

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        print(f"warning: {option_string} is deprecated here; use {self.new}", file=sys.stderr)
        setattr(namespace, self.dest, values)


def deprecated_alias(parser: Any, old: str, new: str, **kwargs: Any) -> None:
    """``old`` keeps working as a hidden spelling of ``new``, with a one-line notice."""
    parser.add_argument(old, action=_DeprecatedAlias, new=new, **kwargs)


def bootstrap_options(parser: argparse.ArgumentParser, settings: Any, resamples: str = "bootstrap resamples") -> None:
    """``--n-boot`` and ``--bootstrap-seed`` (the old ``--seed`` too), their defaults read from ``settings``."""
    parser.add_argument("--n-boot", type=int, default=settings.default("n_boot"),
                        help=f"{resamples} (default %(default)s)")
    parser.add_argument("--bootstrap-seed", dest="seed", type=int, default=settings.default("seed"),
                        help="bootstrap seed (default %(default)s)")
    deprecated_alias(parser, "--seed", "--bootstrap-seed", dest="seed", type=int)


def report_problems(problems: list[str], ok_message: str) -> int:
    """One ``error:`` line per problem on stderr and exit 1, or the OK line and exit 0."""
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    if not problems:
        print(ok_message)
    return 1 if problems else 0


def report_data_use(use: Any, what: str, command: str) -> int:
    """``data use``'s lines: what the workspace now remembers, and on stderr what the directory
    lacks and which variable set in this shell overrides it."""
    print(f"{use.config}: the {what} data directory is {use.data_dir} for every command and notebook in "
          f"{use.config.parent}")
    if use.problems:
        print(f"warning: {use.data_dir}: recorded with --force although it fails verification: "
              f"{len(use.problems)} problem(s) (`{command} verify` lists them; `{command} fetch --dir DIR` "
              "fills it)", file=sys.stderr)
    if use.overridden_by:
        print(f"note: ${use.overridden_by} is set in this shell and wins over the remembered directory", file=sys.stderr)
    return 0


def settings_from_args(cls, args: argparse.Namespace, **overrides):
    """Typed pipeline settings from the parsed flags (flag dests are the settings' field names).
    A required setting whose option was not given (None) is left out: it is missing."""
    values = {key: getattr(args, key) for key in cls.keys()
              if hasattr(args, key) and (getattr(args, key) is not None or not cls.model_fields[key].is_required())}
    return cls(**{**values, **overrides})


def force_option(parser: argparse.ArgumentParser, what: str) -> None:
    """``data use``'s ``--force``: record a folder that fails verification anyway."""
    parser.add_argument("--force", action="store_true",
                        help=f"record DIR even when it fails verification (missing or altered {what} files; "
                             "a folder `fetch` fills later): said as a warning. Without it such a folder is "
                             "refused (exit 2) and the previous setting stays")


# The warnings the running command has said (``cli.main`` empties it before each command): a
# torn-line notice that a command passed on is not said again by ``warn_torn_lines``.
SAID: set[str] = set()


def warn(warnings: Sequence[str]) -> None:
    for warning in warnings:
        if warning not in SAID:
            SAID.add(warning)
            print(f"warning: {warning}", file=sys.stderr)


def warn_torn_lines(since: int) -> None:
    """Every torn last line that the command read (``artifacts.torn_notices(since)``) and has not said."""
    from charactereval_lib.engine.storage.artifacts import torn_notices

    warn(torn_notices(since))


def undefined(estimate: dict) -> str:
    """A statistic's value, or why it has none: ``n<2`` (too few rows), ``undefined`` (no variation)."""
    if estimate["value"] is not None and estimate["value"] == estimate["value"]:
        return f"{estimate['value']:.3f}"
    return "n<2" if estimate["n"] < 2 else "undefined"
