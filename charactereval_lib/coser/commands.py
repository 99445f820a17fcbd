"""The ``charactereval coser`` command wiring: ``data fetch|verify``, ``run``, ``summarize``.

Thin: parse flags, build the typed settings, call the CoSER modules. The top-level CLI adds
these subcommands with one call to ``add_coser_parser``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from charactereval_lib.engine.generation.engine import run_closing
from charactereval_lib.engine.runs import RunDir
from charactereval_lib.coser.prompts import ModelRules
from charactereval_lib.coser.simulation import RoleClients, RoleSettings, SimulationSettings
from charactereval_lib.coser.versions import DEFAULT_VERSION, VERSIONS, get_version

ROLE_DEFAULTS = {"env": "gpt-4o", "nsp": "gpt-4o-mini", "judge": "gpt-4o"}


def _rules(args: argparse.Namespace, role: str, model: str) -> ModelRules | None:
    """Explicit per-role model-name rules; unset flags keep upstream's rule for the model."""
    from charactereval_lib.coser.prompts import default_rules

    flags = {name: getattr(args, f"{role}_{name}", None) for name in ("system_role", "name_suffix", "output_example",
                                                                       "fix_repetition")}
    if all(v is None for v in flags.values()):
        return None
    base = default_rules(model, get_version(args.protocol))
    return ModelRules(**{name: (value if value is not None else getattr(base, name)) for name, value in flags.items()})


def settings_from_args(args: argparse.Namespace) -> SimulationSettings:
    roles = {}
    for role in ("actor", "env", "nsp", "judge"):
        model = getattr(args, f"{role}_model") or ROLE_DEFAULTS.get(role)
        if model is None:
            raise SystemExit("error: --actor-model is required")
        key_env = getattr(args, f"{role}_api_key_env")
        key_env = args.api_key_env if key_env is None else key_env
        roles[role] = RoleSettings(model=model, base_url=getattr(args, f"{role}_base_url") or args.base_url,
                                   api_key_env="" if args.no_api_key else key_env, backend=args.backend,
                                   rules=_rules(args, role, model))
    repair = None
    if args.repair_model:
        repair = RoleSettings(args.repair_model, roles["judge"].base_url, roles["judge"].api_key_env, args.backend)
    return SimulationSettings(version=get_version(args.protocol), repair=repair, continue_from=args.continue_from,
                              thoughtless=args.wo_thought, **roles)


def _prices(values: list[str] | None) -> dict[str, tuple[float, float]]:
    prices = {}
    for value in values or []:
        role, _, pair = value.partition("=")
        price_in, _, price_out = pair.partition(":")
        prices[role] = (float(price_in), float(price_out))
    return prices


def cmd_run(args: argparse.Namespace) -> int:
    from charactereval_lib.coser.data import load_test_set, locate_data_dir
    from charactereval_lib.coser.run import PRESETS, dry_run, run_coser, select_scenes, start_run
    from charactereval_lib.coser.upstream import load_critic_prompts

    settings = settings_from_args(args)
    preset = PRESETS[args.preset]
    data_dir = locate_data_dir(args.data_dir)
    scenes = select_scenes(load_test_set(data_dir), preset)
    if args.limit:
        scenes = scenes[: args.limit]
    critic = load_critic_prompts(data_dir)
    if args.dry_run:
        print("\n".join(dry_run(scenes, settings, preset, critic, _prices(args.price))))
        return 0
    run_dir = RunDir.resolve(args.run)
    run_dir.path.mkdir(parents=True, exist_ok=True)
    with run_dir.writer_lock(".coser.lock", "CoSER run"):
        start_run(run_dir, settings, preset, scenes, str(data_dir))
        from charactereval_lib.engine.generation.retry import RetryPolicy

        policy = RetryPolicy(base_delay_s=args.retry_base_delay, timeout_s=args.timeout)

        clients = RoleClients(settings, concurrency=args.concurrency, policy=policy)
        outcome = run_closing(clients, lambda: run_coser(run_dir, scenes, settings, preset, critic, clients,
                                                         scene_concurrency=args.scene_concurrency))
    for line in outcome["warnings"]:
        print(f"warning: {line}", file=sys.stderr)
    for line in outcome["errors"]:
        print(f"error: {line}", file=sys.stderr)
    calls = ", ".join(f"{k} {v}" for k, v in outcome["calls"].items())
    print(f"{run_dir}: {outcome['scenes'] - len(outcome['errors'])}/{outcome['scenes']} scene runs complete "
          f"(calls this session: {calls})")
    if outcome["errors"]:
        print("rerun the same command to continue the unfinished scenes", file=sys.stderr)
        return 1
    return 0


def cmd_summarize(args: argparse.Namespace) -> int:
    import json

    from charactereval_lib.coser.run import summarize

    summary = summarize(RunDir.resolve(args.run).require_dir(), n_boot=args.n_boot, seed=args.seed)
    print(json.dumps(summary, indent=2, ensure_ascii=False))
    return 0


def cmd_data(args: argparse.Namespace) -> int:
    from charactereval_lib.coser.data import fetch_data, locate_data_dir, verify

    if args.coser_data_command == "fetch":
        fetch_data(args.data_dir, mirror=args.mirror, progress=not args.quiet)
    problems = verify(args.data_dir)
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    if not problems:
        print(f"{locate_data_dir(args.data_dir)}: all CoSER files match the pinned digests")
    return 1 if problems else 0


def _data_dir(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--data-dir", metavar="DIR", help="CoSER data directory (default: $COSER_DATA_DIR, else data/coser/)")


def add_coser_parser(subparsers: Any) -> None:
    """Add ``coser`` with its actions to the top-level command's subparsers."""
    coser = subparsers.add_parser("coser", help="CoSER given-circumstance acting: data, run, summarize")
    sub = coser.add_subparsers(dest="coser_command", required=True, metavar="ACTION")

    data = sub.add_parser("data", help="fetch or verify the pinned CoSER test set and upstream prompt file")
    data_sub = data.add_subparsers(dest="coser_data_command", required=True, metavar="ACTION")
    for name in ("fetch", "verify"):
        p = data_sub.add_parser(name)
        # --dir, as CharacterEval's `data fetch|verify` spell it.
        p.add_argument("--dir", "--data-dir", dest="data_dir", metavar="DIR",
                       help="CoSER data directory (default: $COSER_DATA_DIR, else data/coser/)")
        if name == "fetch":
            p.add_argument("--mirror", metavar="URL", help="fetch from URL/<upstream path> instead of GitHub")
            p.add_argument("--quiet", action="store_true")
        p.set_defaults(func=cmd_data)

    p = sub.add_parser("run", help="simulate and judge the preset's scenes (resumable: rerun to continue)")
    p.add_argument("run", metavar="RUN", help="run directory (a bare name means outputs/NAME)")
    p.add_argument("--preset", choices=["full", "sample", "smoke"], default="smoke",
                   help="full: 200 scenes x 3; sample: 10 id + 10 ood x 1; smoke: 1 id + 1 ood x 1 (default)")
    p.add_argument("--protocol", choices=sorted(VERSIONS), default=DEFAULT_VERSION, help=f"default {DEFAULT_VERSION}")
    p.add_argument("--backend", choices=["openai", "offline"], default="openai",
                   help="offline: meaningless replies, for trying the command")
    p.add_argument("--base-url", help="endpoint for every role unless --ROLE-base-url is given")
    p.add_argument("--api-key-env", default="OPENAI_API_KEY", metavar="NAME",
                   help="variable holding the key for every role unless --ROLE-api-key-env (never stored)")
    p.add_argument("--no-api-key", action="store_true", help="a local server that needs no key")
    for role in ("actor", "env", "nsp", "judge"):
        g = p.add_argument_group(f"{role} role")
        default = ROLE_DEFAULTS.get(role)
        g.add_argument(f"--{role}-model", help=f"model (default {default})" if default else "model under test (required)")
        g.add_argument(f"--{role}-base-url", metavar="URL")
        g.add_argument(f"--{role}-api-key-env", metavar="NAME")
        if role != "judge":
            g.add_argument(f"--{role}-system-role", choices=["system", "user"], help="default: upstream rule")
            for flag in ("name-suffix", "output-example", "fix-repetition"):
                g.add_argument(f"--{role}-{flag}", action=argparse.BooleanOptionalAction, default=None,
                               help="default: upstream rule for the model name")
    p.add_argument("--repair-model", help="JSON repair model at the judge endpoint (default: the version's)")
    p.add_argument("--continue-from", type=int, default=0, metavar="K", help="give the first K original lines")
    p.add_argument("--wo-thought", action="store_true", help="thoughtless output format (upstream --wo_thought)")
    p.add_argument("--limit", type=int, help="only the preset's first N scenes")
    p.add_argument("--concurrency", type=int, default=64, help="requests in flight per role (default 64)")
    p.add_argument("--scene-concurrency", type=int, default=256, help="scenes in flight (default 256)")
    p.add_argument("--timeout", type=float, default=300.0, help="seconds per attempt")
    p.add_argument("--retry-base-delay", type=float, default=1.0, help="first transport back-off in seconds")
    p.add_argument("--dry-run", action="store_true", help="print calls, tokens and cost per role; send nothing")
    p.add_argument("--price", action="append", metavar="ROLE=IN:OUT", help="--dry-run: USD per million tokens")
    _data_dir(p)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("summarize", help="RUN/coser_summary.json: means, bootstrap intervals, splits, spread")
    p.add_argument("run", metavar="RUN")
    p.add_argument("--n-boot", type=int, default=1000)
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=cmd_summarize)



