"""The ``charactereval`` command. Thin: every command parses flags and calls the package."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections.abc import Sequence
from typing import Any, NoReturn
from pathlib import Path

from charactereval_lib import __version__, pipeline
from charactereval_lib.engine import faults, runs
from charactereval_lib.engine.progress import add_quiet_option, bars_wanted
from charactereval_lib.coser.versions import DEFAULT_VERSION as COSER_DEFAULT_VERSION, VERSIONS as COSER_VERSIONS
from charactereval_lib.charactereval.data import DataError, locate_data_dir, load_official_data
from charactereval_lib.engine.generation.base import ConfigError, RunAborted
from charactereval_lib.engine.grading.errors import GradingError
from charactereval_lib.charactereval.prompts import ProtocolError
from charactereval_lib.charactereval.protocol import PROTOCOL_VERSION
from charactereval_lib.charactereval.reward.errors import REWARD_ERRORS

# Errors a user can cause with bad input: reported as one line, no traceback.
USER_ERRORS: tuple[type[BaseException], ...] = (
    DataError,
    runs.RunError,
    ProtocolError,
    FileNotFoundError,
    ConfigError,
    GradingError,
    *REWARD_ERRORS,
)


def _data_dir_option(parser: argparse.ArgumentParser) -> None:
    # Both spellings on every command: the hints and the README use either.
    parser.add_argument(
        "--data-dir",
        "--dir",
        dest="data_dir",
        metavar="DIR",
        help="official data directory (default: $CHARACTEREVAL_DATA_DIR, else data/official/)",
    )


def _allow_mixed_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--allow-mixed", action="store_true",
                        help="analyse scores from several scorer configurations anyway (warned about at the top)")


def _judge_choice_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--judge-model", metavar="M",
                        help="the judge whose scores are meant, when judge_scores.jsonl holds several judges")


# --- data ------------------------------------------------------------------------------------


def _report_problems(problems: list[str], ok_message: str) -> int:
    """One ``error:`` line per problem on stderr and exit 1, or the OK line and exit 0."""
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    if not problems:
        print(ok_message)
    return 1 if problems else 0


def _groups(args: argparse.Namespace) -> list[str]:
    groups = ["required", "guide"]
    if args.with_results:
        groups.append("results")
    if args.with_rm_train:
        groups.append("rm_train")
    return groups


def cmd_data_fetch(args: argparse.Namespace) -> int:
    from charactereval_lib.charactereval.data import fetch, verify_files

    data_dir = locate_data_dir(args.data_dir)
    fetched = fetch(data_dir, _groups(args), mirror=args.mirror, progress=bars_wanted(args.quiet))
    return _report_problems(verify_files(data_dir, _groups(args)), f"{data_dir}: fetched {len(fetched)} file(s); all verified")


def cmd_data_verify(args: argparse.Namespace) -> int:
    from charactereval_lib.charactereval.data import verify_files

    data_dir = locate_data_dir(args.data_dir)
    return _report_problems(verify_files(data_dir, _groups(args)), f"{data_dir}: all files match the pinned digests")


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
    from charactereval_lib.charactereval.subsets import stratified_subset, write_ids

    ids = stratified_subset(load_official_data(args.data_dir), args.size)
    if args.out:
        write_ids(Path(args.out), ids, comment=f"stratified subset of {args.size} samples")
        print(f"{args.out}: {len(ids)} sample id(s)")
    else:
        print("\n".join(str(i) for i in ids))
    return 0


# --- doctor ----------------------------------------------------------------------------------


def cmd_doctor(args: argparse.Namespace) -> int:
    from charactereval_lib.charactereval.doctor import run_checks

    try:
        data = load_official_data(args.data_dir)
    except DataError as exc:
        # Missing or altered data fails the self-check (exit 1), as `data verify` reports it.
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"charactereval {__version__}, protocol {PROTOCOL_VERSION}, data {data.data_dir}")
    checks = run_checks(data)
    for check in checks:
        mark = "ok  " if check.ok else "FAIL"
        detail = f"{check.actual}" if check.ok else f"expected {check.expected}, got {check.actual}"
        print(f"  {mark} {check.name}: {detail}")
    failed = [c for c in checks if not c.ok]
    print(f"{len(checks) - len(failed)}/{len(checks)} checks passed")
    return 1 if failed else 0


# --- generate --------------------------------------------------------------------------------


def _settings(cls, args: argparse.Namespace, **overrides):
    """Typed pipeline settings from the parsed flags (flag dests are the settings' field names)."""
    values = {key: getattr(args, key) for key in cls.keys() if hasattr(args, key)}
    return cls(**{**values, **overrides})


def cmd_generate(args: argparse.Namespace) -> int:
    from charactereval_lib.engine.generation.base import RunAborted
    from charactereval_lib.engine.generation.engine import GenerationInterrupted, exit_code

    settings = _settings(pipeline.GenerateSettings, args, api_key_env="" if args.no_api_key else args.api_key_env)
    progress = bars_wanted(args.quiet)
    try:
        result = pipeline.generate(args.run, settings, data_dir=args.data_dir, dry_run=args.dry_run, progress=progress)
    except GenerationInterrupted as exc:
        print(exc.summary.line())
        print(f"interrupted: everything received is saved in {runs.RunDir.resolve(args.run).generations}; "
              "re-run the same command to resume", file=sys.stderr)
        return exit_code(exc.summary)
    except RunAborted as exc:
        if exc.summary is not None:
            print(exc.summary.line())
        print(f"error: {exc}", file=sys.stderr)
        return exit_code(exc.summary) if exc.summary is not None else 1
    run = result.run
    if result.dry_run is not None:
        planned = result.dry_run
        print(f"{run.requests}: {planned.requests_written} request(s) written; nothing was sent")
        if planned.plan.already_ok or planned.plan.errors_kept:
            print(f"{planned.plan.already_ok} already ok and {planned.plan.errors_kept} earlier error(s) in this run "
                  "would be skipped")
        for line in planned.estimate.lines():
            print(line)
        return 0
    print(result.session.line())
    if result.backend == "offline":
        print("note: offline backend: replies are deterministic placeholders and mean nothing", file=sys.stderr)
    state = result.state
    print(f"{run.generations}: {state['ok']} ok, {state['error']} error, {state['missing']} test sample(s) not generated")
    # Any selected sample that ended in error makes the exit status 1: scripts and batch notice.
    return result.exit_code()


# --- transform / summarize -------------------------------------------------------------------


def _warn(warnings: Sequence[str]) -> None:
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)


def cmd_transform(args: argparse.Namespace) -> int:
    outcome = pipeline.transform(args.run, data_dir=args.data_dir)
    _warn(outcome.warnings)
    c = outcome.result.counts()
    print(
        f"{outcome.run.rows}: {c['rows']} rows; dropped {c['failed']} failed generation(s), "
        f"{c['no_metric']} sample(s) without metrics; {c['missing']} sample(s) not generated yet"
    )
    return 0


def _fmt(value: float | None) -> str:
    return "-" if value is None or value != value else f"{value:.3f}"


def _undefined(estimate: dict) -> str:
    """A statistic's value, or why it has none: ``n<2`` (too few rows), ``undefined`` (no variation)."""
    if estimate["value"] is not None and estimate["value"] == estimate["value"]:
        return f"{estimate['value']:.3f}"
    return "n<2" if estimate["n"] < 2 else "undefined"


def cmd_summarize(args: argparse.Namespace) -> int:
    from charactereval_lib.charactereval.summary import summary_table_lines

    outcome = pipeline.summarize(args.run, _settings(pipeline.SummarizeSettings, args), data_dir=args.data_dir,
                                 out=args.out)
    summary = outcome.summary
    counts = summary["counts"]
    judge = summary["scorer"] == "judge"
    print("\n".join(summary_table_lines(summary, columns=("n", "failed", "invalid") if judge else ("n", "failed"))))
    scorers = ", ".join(f"{label} ({n} rows)" for label, n in counts["scorers"].items()) or "none"
    print(
        f"scored rows {counts['scored_rows']}/{counts['rows']}; generation failures "
        f"{counts['generation_failures']}; scorers: {scorers}; MBTI: {summary['mbti']}"
    )
    if judge:
        print(f"judge {counts['judge_model']}: invalid answers {counts['invalid_answers']} ({counts['invalid_unscored']} left out of the means "
              "by their spec, the rest scored as the spec says)")
    _warn(outcome.warnings)
    scorer = summary["scorer"]
    out = Path(args.out) if args.out else outcome.run.path
    print(f"wrote {out / outcome.run.summary_file(scorer).name} and {out / outcome.run.metrics_csv_file(scorer).name}")
    return 0


# --- reports -----------------------------------------------------------------------------------


def _report_settings(args: argparse.Namespace) -> pipeline.ReportSettings:
    baselines = tuple(args.baselines) if args.baselines else pipeline.DEFAULT_BASELINES
    return _settings(pipeline.ReportSettings, args, baselines=baselines)


def cmd_report(args: argparse.Namespace) -> int:
    outcome = pipeline.report(args.run, _report_settings(args), data_dir=args.data_dir, out=args.out)
    _warn(outcome.warnings)
    print(f"wrote {outcome.notebook} and {outcome.html}")
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    outcome = pipeline.compare(args.runs, args.out, _report_settings(args), data_dir=args.data_dir)
    _warn(outcome.warnings)
    print(f"wrote {outcome.notebook} and {outcome.html}")
    return 0


def cmd_leaderboard(args: argparse.Namespace) -> int:
    outcome = pipeline.leaderboard(args.paths, args.out, data_dir=args.data_dir)
    _warn(outcome.warnings)
    boards = outcome.content["boards"]
    print(f"wrote {outcome.out / 'index.html'}: {len(boards)} board(s), {len(outcome.content['archived'])} archived, "
          f"{outcome.content['runs']} run(s)")
    return 0


def cmd_batch(args: argparse.Namespace) -> int:
    from charactereval_lib.batch import load_config, preflight, run_batch, summary_lines

    config = load_config(Path(args.config))
    # Ray tasks run elsewhere: their bars would only fill the workers' logs.
    config = dataclasses.replace(config, progress=bars_wanted(args.quiet) and config.engine == "local")
    problems = preflight(config)
    if problems:
        return _report_problems(problems, "")
    print(f"batch {config.path}: {len(config.models)} model(s) -> {config.output_dir}", flush=True)
    outcome = run_batch(config)
    print("\n".join(summary_lines(outcome)))
    if outcome.interrupted:
        return 130
    # A model that finished with failed samples is reported and makes the batch exit 1 too.
    return 1 if outcome.failures or any(m.failed_samples for m in outcome.models) else 0

# --- score / rm ------------------------------------------------------------------------------


def cmd_judge_score(args: argparse.Namespace) -> int:
    """score --scorer judge: prints the session line, or the dry run's estimate."""
    from charactereval_lib.engine.generation.base import RunAborted
    from charactereval_lib.engine.grading.judging import JudgeInterrupted

    if (args.rm or args.shard or args.verify or args.device or args.mode != "faithful" or args.engine != "local"
            or args.address or args.workers != 1 or args.gpus_per_worker):
        raise pipeline.SettingsError("--rm, --shard, --verify, --device, --mode and the --engine options belong to the "
                                     "reward model, not --scorer judge")
    settings = _settings(pipeline.JudgeSettings, args, api_key_env="" if args.no_api_key else args.api_key_env)
    try:
        outcome = pipeline.judge_score(args.run, settings, data_dir=args.data_dir, dry_run=args.dry_run,
                                       progress=bars_wanted(args.quiet))
    except JudgeInterrupted as exc:
        print(exc.summary.line())
        print("interrupted: every answer received is saved; re-run the same command to resume", file=sys.stderr)
        return 130
    except RunAborted as exc:
        if exc.summary is not None:
            print(exc.summary.line())
        print(f"error: {exc}", file=sys.stderr)
        return 1
    run = outcome.run
    if outcome.dry_run is not None:
        planned = outcome.dry_run
        print(f"{run.artifact('judge_requests.jsonl')}: {planned.requests_written} judge request(s) written "
              f"({planned.already_done} already judged would be skipped); nothing was sent")
        print(f"judge {outcome.judge_model}:")
        for line in planned.estimate.lines():
            print(f"  {line}")
        return 0
    summary = outcome.summary
    print(summary.line())
    print(f"{run.judge_scores}: judge {outcome.judge_model}")
    return 1 if summary.errors else 0


def cmd_battle(args: argparse.Namespace) -> int:
    """battle RUN_A RUN_B: prints win / tie / loss and position consistency."""
    from charactereval_lib.charactereval.battle import battle_lines
    from charactereval_lib.engine.generation.base import RunAborted
    from charactereval_lib.engine.grading.judging import JudgeInterrupted

    settings = _settings(pipeline.JudgeSettings, args, api_key_env="" if args.no_api_key else args.api_key_env)
    try:
        outcome = pipeline.battle(args.run_a, args.run_b, args.out, settings, n_boot=args.n_boot, seed=args.seed,
                                  data_dir=args.data_dir, progress=bars_wanted(args.quiet))
    except JudgeInterrupted as exc:
        print(exc.summary.line())
        print("interrupted: every answer received is saved; re-run the same command to resume", file=sys.stderr)
        return 130
    except RunAborted as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(outcome.session.line())
    summary = outcome.summary
    print("\n".join(battle_lines(summary, Path(args.run_a).name, Path(args.run_b).name)))
    _warn(summary["warnings"])
    print(f"wrote {outcome.out.artifact('battle_summary.json')}")
    return 1 if outcome.session.errors else 0


def cmd_metaeval(args: argparse.Namespace) -> int:
    """metaeval LABELS: prints the agreement of the scorer with the labels per group."""
    if args.scorer == "judge":
        if args.rm:
            raise pipeline.SettingsError("--rm belongs to --scorer reward-model")
        settings = _settings(pipeline.JudgeSettings, args, api_key_env="" if args.no_api_key else args.api_key_env)
    else:
        if args.judge_model:
            raise pipeline.SettingsError("--judge-model needs --scorer judge")
        if not args.rm:
            raise pipeline.SettingsError("--scorer reward-model needs --rm DIR")
        settings = _settings(pipeline.ScoreSettings, args)
    outcome = pipeline.metaeval(args.labels, args.out, settings, n_boot=args.n_boot, seed=args.seed,
                                data_dir=args.data_dir, progress=bars_wanted(args.quiet))
    scoring = outcome.scoring
    if args.scorer == "judge":
        print(scoring.summary.line())
    summary = outcome.summary
    print(f"{summary['n_labels']} label(s), {summary['unscored']} without a prediction; {summary['scorer']} "
          f"{summary['scorer_model']}")
    print(f"{'group':<22}{'n':>6}{'invalid':>9}{'metascore':>11}{'kappa':>10}{'alpha':>10}   (95% CI in "
          f"{outcome.out.artifact('metaeval_summary.json')})")
    for name, group in summary["groups"].items():
        print(f"{name:<22}{group['metascore']['n']:>6}{group['invalid']:>9}{_fmt(group['metascore']['value']):>11}"
              f"{_undefined(group['cohen_kappa']):>10}{_undefined(group['krippendorff_alpha']):>10}")
    return 1 if args.scorer == "judge" and scoring.summary.errors else 0


def cmd_panel(args: argparse.Namespace) -> int:
    """panel RUN: prints the panel's metric means, the judges' alpha and their invalid answers."""
    from charactereval_lib.charactereval.summary import summary_table_lines

    settings = _settings(pipeline.PanelSettings, args, judge_models=tuple(args.judge_models))
    outcome = pipeline.panel(args.run, settings, args.out)
    summary = outcome.summary
    print("\n".join(summary_table_lines(summary)))
    alpha, counts = summary["krippendorff_alpha"], summary["counts"]
    print(f"Krippendorff's alpha ({alpha['level']}) {_undefined(alpha)} [{_fmt(alpha['low'])}, {_fmt(alpha['high'])}] "
          f"over {alpha['n']} rows of {alpha['n_clusters']} samples")
    tie = f", {counts['ties_settled']} tie(s) settled to the lowest grade" if summary["verdict"] == "majority" else ""
    print(f"verdict {summary['verdict']}: {counts['with_verdict']}/{counts['rows']} rows{tie}; "
          + "; ".join(f"{model}: {j['invalid']} invalid, {j['not_judged']} not judged"
                      for model, j in summary["per_judge"].items()))
    _warn(outcome.warnings)
    print(f"wrote {outcome.out / 'panel_summary.json'} and {outcome.out / 'panel_verdicts.jsonl'}")
    return 0


def _judge_options(parser: argparse.ArgumentParser, *, required: bool) -> None:
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


def cmd_score(args: argparse.Namespace) -> int:
    if args.scorer == "judge":
        return cmd_judge_score(args)
    if args.judge_model or args.spec or args.base_url:
        raise pipeline.SettingsError("--judge-model, --spec and --base-url need --scorer judge")
    outcome = pipeline.score(args.run, _settings(pipeline.ScoreSettings, args), data_dir=args.data_dir,
                             dry_run=args.dry_run, progress=bars_wanted(args.quiet))
    run, settings = outcome.run, outcome.settings
    if outcome.dry_run_rows is not None:
        counted = "with token counts" if args.rm else "without token counts (no --rm given)"
        print(f"{run.artifact('rm_inputs.jsonl')}: {outcome.dry_run_rows} reward-model input(s) {counted}; "
              "no model was run")
        return 0
    _warn(outcome.warnings)
    if outcome.verify is not None:
        report = outcome.verify
        print(
            f"verify on {report['rows']} row(s), {settings.device}: fast == faithful for "
            f"{report['exact_equal']}/{report['rows']} ({100 * (report['exact_equal_fraction'] or 0):.2f}%), "
            f"max difference {report['max_diff_grid_steps']} bf16 step(s) "
            f"({report['max_abs_diff_score']:.6g} score); speed-up {report['speedup']:.2f}x; "
            f"wrote {run.artifact('rm_verify.json')}"
        )
        return 0
    report = outcome.report
    rate = f", {report.scored / report.seconds:.2f} rows/s" if report.seconds else ""
    merged = f"; merged {report.merged_from_shards} record(s) from shard files" if report.merged_from_shards else ""
    engine = f", ray x{args.workers}" if args.engine == "ray" else ""
    print(
        f"{report.output}: scored {report.scored} row(s) ({settings.mode}, {settings.device}{engine}{rate}); "
        f"{report.already_scored} already scored; {report.truncated} truncated to 4096 tokens{merged}"
    )
    return 0


def cmd_rm_download(args: argparse.Namespace) -> int:
    from charactereval_lib.charactereval.reward.download import download_rm

    path = download_rm(args.dir, endpoint=args.endpoint)
    print(f"{path}: BaichuanCharRM ready")
    return 0


def cmd_rm_make_tiny(args: argparse.Namespace) -> int:
    from charactereval_lib.charactereval.reward.tiny import TINY_LABEL, make_tiny

    # Train the tokenizer on the data's text when asked to, or when a data directory is named.
    data_dir = locate_data_dir(args.data_dir) if args.from_data or args.data_dir else None
    path = make_tiny(
        args.dir,
        data_dir=data_dir,
        layers=args.layers,
        hidden=args.hidden,
        heads=args.heads,
        # The data's text needs more than 3,890 pieces; 8,000 keeps the demo's inputs short.
        vocab_size=args.vocab or (8000 if data_dir else 2000),
        seed=args.seed,
    )
    print(f"{path}: {TINY_LABEL}")
    return 0


def cmd_rm_check(args: argparse.Namespace) -> int:
    from charactereval_lib.charactereval.reward.download import check_rm_dir
    from charactereval_lib.charactereval.reward.tokenizer import load_tokenizer

    problems = check_rm_dir(args.dir, required=("config.json", "tokenizer.model"))
    if not problems:
        load_tokenizer(args.dir)
    return _report_problems(problems, f"{args.dir}: config, tokenizer and weight index are consistent")


# --- official format -------------------------------------------------------------------------


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
    _warn(result.warnings)
    return 0


def cmd_export_official(args: argparse.Namespace) -> int:
    from charactereval_lib.charactereval.official import export_official

    run_dir = runs.resolve_run_dir(args.run)
    for path in export_official(run_dir, load_official_data(args.data_dir), Path(args.out) if args.out else None):
        print(path)
    return 0


# --- CoSER -----------------------------------------------------------------------------------


def _coser_price(value: str) -> tuple[str, tuple[float, float]]:
    """``ROLE=IN:OUT`` (USD per million input and output tokens) of ``coser run --price``."""
    role, _, pair = value.partition("=")
    price_in, _, price_out = pair.partition(":")
    try:
        prices = (float(price_in), float(price_out))
    except ValueError:
        prices = None
    if role not in pipeline.COSER_ROLES or prices is None or min(prices) < 0:
        raise argparse.ArgumentTypeError(
            f"{value!r}: expected ROLE=IN:OUT with ROLE one of {', '.join(pipeline.COSER_ROLES)} "
            "and two prices (at least 0) in USD per million tokens")
    return role, prices


def cmd_coser_data(args: argparse.Namespace) -> int:
    if args.coser_data_command == "fetch":
        problems = pipeline.coser_data_fetch(args.data_dir, mirror=args.mirror, progress=bars_wanted(args.quiet),
                                             with_results=args.with_results)
    else:
        problems = pipeline.coser_data_verify(args.data_dir, with_results=args.with_results)
    return _report_problems(problems, f"{pipeline.coser_data_dir(args.data_dir)}: all CoSER files match the pinned "
                                      "digests")


def cmd_coser_run(args: argparse.Namespace) -> int:
    settings = _settings(pipeline.CoserRunSettings, args)
    if args.dry_run:
        print("\n".join(pipeline.coser_dry_run(settings, data_dir=args.data_dir, prices=dict(args.price or []))))
        return 0
    progress = bars_wanted(args.quiet)
    outcome = pipeline.coser_run(args.run, settings, data_dir=args.data_dir, progress=progress)
    _warn(outcome.warnings)
    for line in outcome.errors:
        print(f"error: {line}", file=sys.stderr)
    calls = ", ".join(f"{k} {v}" for k, v in outcome.calls.items())
    print(f"{outcome.run}: {outcome.scenes - len(outcome.errors)}/{outcome.scenes} scene runs complete "
          f"(calls this session: {calls})")
    if outcome.errors:
        print("rerun the same command to continue the unfinished scenes", file=sys.stderr)
    return outcome.exit_code()


def cmd_coser_summarize(args: argparse.Namespace) -> int:
    from charactereval_lib.coser.report import summary_lines
    from charactereval_lib.coser.run import SUMMARY

    outcome = pipeline.coser_summarize(args.run, _settings(pipeline.CoserSummarizeSettings, args))
    print("\n".join(summary_lines(outcome.summary, outcome.run.artifact(SUMMARY))))
    _warn(outcome.warnings)
    return 0


def cmd_coser_import(args: argparse.Namespace) -> int:
    models = {f"{role}_model": getattr(args, f"{role}_model") for role in ("env", "nsp", "judge")
              if getattr(args, f"{role}_model")}
    report = pipeline.coser_import(args.file, args.run, protocol=args.protocol, actor_model=args.actor_model,
                                   score_formula=args.score_formula, models=models, data_dir=args.data_dir,
                                   metrics=not args.no_metrics, progress=bars_wanted(args.quiet))
    print(report.summary_line())
    for mismatch in report.mismatches[:10]:
        print(f"  not reproduced: {mismatch}", file=sys.stderr)
    if len(report.mismatches) > 10:
        print(f"  ... and {len(report.mismatches) - 10} more (run.json: import_official)", file=sys.stderr)
    return 0


def cmd_coser_report(args: argparse.Namespace) -> int:
    outcome = pipeline.coser_report(args.run, _settings(pipeline.CoserReportSettings, args), out=args.out)
    _warn(outcome.warnings)
    print(f"wrote {outcome.notebook} and {outcome.html}")
    return 0


def cmd_coser_compare(args: argparse.Namespace) -> int:
    outcome = pipeline.coser_compare(args.runs, args.out, _settings(pipeline.CoserReportSettings, args))
    _warn(outcome.warnings)
    print(f"wrote {outcome.notebook} and {outcome.html}")
    return 0


def _coser_data_dir_option(parser: argparse.ArgumentParser, *flags: str) -> None:
    parser.add_argument(*(flags or ("--data-dir", "--dir")), dest="data_dir", metavar="DIR",
                        help="CoSER data directory (default: $COSER_DATA_DIR, else data/coser/)")


def _coser_statistics_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--n-boot", type=int, default=1000, help="bootstrap resamples of whole scenes (default 1000)")
    parser.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")


def add_coser_parser(subparsers: Any) -> None:
    """``coser`` with its actions: data fetch|verify, run, import, summarize, report, compare."""
    coser = subparsers.add_parser("coser", help="CoSER given-circumstance acting: data, run, import, summarize, report, compare")
    sub = coser.add_subparsers(dest="coser_command", required=True, metavar="ACTION")

    data = sub.add_parser("data", help="fetch or verify the pinned CoSER test set and upstream prompt file")
    data_sub = data.add_subparsers(dest="coser_data_command", required=True, metavar="ACTION")
    for name in ("fetch", "verify"):
        p = data_sub.add_parser(name)
        # --dir, as CharacterEval's `data fetch|verify` spell it.
        _coser_data_dir_option(p, "--dir", "--data-dir")
        p.add_argument("--with-results", action="store_true", help="also the 12 released evaluation files (rebuttal)")
        if name == "fetch":
            p.add_argument("--mirror", metavar="URL", help="fetch from URL/<upstream path> instead of GitHub")
            add_quiet_option(p)
        p.set_defaults(func=cmd_coser_data)

    p = sub.add_parser("run", help="simulate and judge the preset's scenes (resumable: rerun to continue)")
    p.add_argument("run", metavar="RUN", help=RUN_HELP)
    p.add_argument("--preset", choices=["full", "sample", "smoke"], default="smoke",
                   help="full: 200 scenes x 3; sample: 10 id + 10 ood x 1; smoke: 1 id + 1 ood x 1 (default)")
    p.add_argument("--protocol", choices=sorted(COSER_VERSIONS), default=COSER_DEFAULT_VERSION,
                   help=f"default {COSER_DEFAULT_VERSION}")
    p.add_argument("--backend", choices=list(pipeline.COSER_BACKENDS), default="openai",
                   help="offline: meaningless replies, for trying the command")
    p.add_argument("--base-url", help="endpoint for every role unless --ROLE-base-url is given")
    p.add_argument("--api-key-env", default="OPENAI_API_KEY", metavar="NAME",
                   help="variable holding the key for every role unless --ROLE-api-key-env (never stored)")
    p.add_argument("--no-api-key", action="store_true", help="a local server that needs no key")
    for role in pipeline.COSER_ROLES:
        g = p.add_argument_group(f"{role} role")
        default = pipeline.COSER_ROLE_DEFAULTS.get(role)
        g.add_argument(f"--{role}-model", default=default,
                       help=f"model (default {default})" if default else "model under test (required)")
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
    add_quiet_option(p, legacy_no_progress=True)
    p.add_argument("--dry-run", action="store_true", help="print calls, tokens and cost per role; send nothing")
    p.add_argument("--price", action="append", type=_coser_price, metavar="ROLE=IN:OUT",
                   help="--dry-run: USD per million input:output tokens of ROLE (repeatable)")
    _coser_data_dir_option(p)
    p.set_defaults(func=cmd_coser_run)

    p = sub.add_parser("summarize", help="RUN/coser_summary.json: means, bootstrap intervals, splits, books, spread")
    p.add_argument("run", metavar="RUN", help=RUN_HELP)
    _coser_statistics_options(p)
    p.set_defaults(func=cmd_coser_summarize)

    p = sub.add_parser("import", help="an official paper-era exp/evaluation/*.json as a new run, re-scored")
    p.add_argument("file", metavar="FILE", help="the official result file (e.g. exp/evaluation/id_set_gpt-4o.json)")
    p.add_argument("run", metavar="RUN", help="a new (or empty) run directory")
    p.add_argument("--protocol", choices=sorted(COSER_VERSIONS), default=None,
                   help=f"version whose score formula re-scores the critiques (default {COSER_DEFAULT_VERSION}; "
                        "coser-head for a file whose cases are keyed by scene)")
    p.add_argument("--actor-model", help="the file's section under cases (default: its only one); required when "
                                         "cases are keyed by scene (no model section)")
    p.add_argument("--score-formula", choices=["length_penalty", "no_length_penalty"], default=None,
                   help="per-dimension formula (default: no_length_penalty for *-no_length_penalty.json files)")
    for role, label in (("env", "environment"), ("nsp", "next-speaker"), ("judge", "judge")):
        p.add_argument(f"--{role}-model", help=f"the {label} model that produced the file (default: the name in "
                                                "the paper-era experiment; give a dated snapshot if you know it)")
    p.add_argument("--no-metrics", action="store_true", help="skip BLEU/ROUGE-L of the simulation texts")
    add_quiet_option(p)
    _coser_data_dir_option(p)
    p.set_defaults(func=cmd_coser_import)

    for name, func, text in (
        ("report", cmd_coser_report, "execute the CoSER report notebook -> RUN/report.ipynb + RUN/report.html"),
        ("compare", cmd_coser_compare, "execute the CoSER comparison notebook -> OUT/comparison.ipynb + .html"),
    ):
        p = sub.add_parser(name, help=text)
        if name == "report":
            p.add_argument("run", metavar="RUN", help=RUN_HELP)
            p.add_argument("--out", metavar="DIR", help="output directory (default: the run directory)")
        else:
            p.add_argument("runs", metavar="RUN", nargs="+", help="two or more runs; the first is the reference")
            p.add_argument("--out", required=True, metavar="DIR", help="output directory")
            p.add_argument("--allow-mixed", action="store_true",
                           help="compare runs whose protocol version or non-actor models differ (warned at the top)")
        _coser_statistics_options(p)
        p.add_argument("--show-code", action="store_true", help="keep the code cells in the HTML")
        p.set_defaults(func=func)


# --- reproduce -------------------------------------------------------------------------------


def cmd_reproduce(args: argparse.Namespace) -> int:
    from charactereval_lib.reproduction import reproduce

    outcome = reproduce(args.benchmark, args.out, data_dir=args.data_dir, rm=args.rm, device=args.device,
                        metrics=not args.no_metrics, n_boot=args.n_boot, seed=args.seed, show_code=args.show_code,
                        progress=bars_wanted(args.quiet))
    decided = [r for r in outcome.document["rows"] if r["within"] is not None]
    print(f"wrote {outcome.out / 'reproduction.json'} and {outcome.html}: {len(outcome.document['rows'])} cells, "
          f"{sum(1 for r in decided if r['within'])}/{len(decided)} within the paper's tolerance")
    _warn([w for w in (outcome.document.get("missing"), outcome.document.get("meaningless")) if w])
    return 0


def add_reproduce_parser(subparsers: Any) -> None:
    p = subparsers.add_parser("reproduce", help="every published number the released files allow, recomputed beside "
                                                "the paper -> OUT/reproduction.json + reproduction.html")
    p.add_argument("--benchmark", required=True, choices=["coser", "charactereval"])
    p.add_argument("--out", required=True, metavar="DIR", help="a new (or empty) output directory")
    p.add_argument("--data-dir", "--dir", dest="data_dir", metavar="DIR",
                   help="data directory (default: $COSER_DATA_DIR or $CHARACTEREVAL_DATA_DIR, as the other commands)")
    p.add_argument("--rm", metavar="DIR", help="charactereval: the reward-model checkpoint that scores the replies")
    p.add_argument("--device", help="charactereval: torch device for the reward model (e.g. cuda)")
    p.add_argument("--no-metrics", action="store_true", help="coser: skip BLEU/ROUGE-L (the slow part)")
    p.add_argument("--n-boot", type=int, default=1000, help="bootstrap resamples (default 1000)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    p.add_argument("--show-code", action="store_true", help="keep the code cells in the HTML")
    add_quiet_option(p)
    p.set_defaults(func=cmd_reproduce)


# --- parser ----------------------------------------------------------------------------------


RUN_HELP = "run directory (a bare name means outputs/NAME)"


class _Parser(argparse.ArgumentParser):
    """No abbreviated flags: ``--batch`` must not silently mean ``--batch-tokens``. Subcommand
    parsers inherit the class, so the rule holds everywhere."""

    def __init__(self, *args, root: bool = False, **kwargs) -> None:
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)
        self.root = root

    def parse_known_args(self, args=None, namespace=None):  # noqa: ANN001, ANN201 - argparse's signature
        namespace, extras = super().parse_known_args(args, namespace)
        # A subcommand's unknown argument is its own error, pointing at its own --help (argparse
        # would hand it up to the top-level parser, whose help does not list it).
        if extras and not self.root:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return namespace, extras

    def error(self, message: str) -> NoReturn:
        # One line, like every other error of the command; the usage is a --help away.
        self.exit(2, f"error: {self.prog}: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="charactereval", description="Faithful, fast CharacterEval: generate, score, analyse.", root=True
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__} ({PROTOCOL_VERSION})")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    data = sub.add_parser("data", help="fetch or verify the official data files")
    data_sub = data.add_subparsers(dest="data_command", required=True, metavar="ACTION")
    for name, func, text in (
        ("fetch", cmd_data_fetch, "download the pinned upstream files and verify them"),
        ("verify", cmd_data_verify, "check the files against the pinned digests"),
    ):
        p = data_sub.add_parser(name, help=text)
        _data_dir_option(p)
        p.add_argument("--with-results", action="store_true", help="also the five released generation_trans files")
        p.add_argument("--with-rm-train", action="store_true", help="also rm_train_data.json")
        if name == "fetch":
            p.add_argument("--mirror", metavar="URL", help="fetch from URL/<upstream path> instead of GitHub")
            add_quiet_option(p)
        p.set_defaults(func=func)

    p = data_sub.add_parser("convert-rm-train", help="rm_train_data.json -> a metaeval LABELS file, after validating "
                                                     "every record")
    p.add_argument("--out", required=True, metavar="LABELS", help="the JSON Lines labels file to write")
    p.add_argument("--file", metavar="FILE",
                   help="the annotations file, read as it is (default: rm_train_data.json of the data directory, "
                        "checked against the pinned digests)")
    p.add_argument("--field", dest="fields", action="append", metavar="NAME=KEY",
                   help="the key of field NAME (id, metric, reply, label) in the records, when it is not the "
                        "default (id; metric_en or metric_zh; model_output; label); repeatable")
    _data_dir_option(p)
    p.set_defaults(func=cmd_data_convert_rm_train)

    p = data_sub.add_parser("subset", help="a deterministic metric-stratified subset of sample ids")
    p.add_argument("size", type=int, metavar="N", help="number of samples")
    p.add_argument("--out", metavar="FILE", help="write the ids here (one per line) instead of printing them")
    _data_dir_option(p)
    p.set_defaults(func=cmd_data_subset)

    p = sub.add_parser("doctor", help="protocol self-check on the full official data")
    _data_dir_option(p)
    p.set_defaults(func=cmd_doctor)

    p = sub.add_parser("generate", help="generate replies for the test samples (S3, S4)")
    p.add_argument("run", metavar="RUN", help=RUN_HELP)
    p.add_argument("--backend", choices=["openai", "hf", "offline"], required=True)
    p.add_argument("--model", required=True, help="model name (API model id or local path)")
    p.add_argument("--base-url", help="OpenAI-compatible endpoint")
    p.add_argument("--concurrency", type=int, default=32,
                   help="most requests in flight (openai/offline; lowered on 429s, default 32)")
    p.add_argument("--max-tokens", type=int, default=1024, help="reply length limit sent with every request (default 1024)")
    p.add_argument("--temperature", type=float, help="sent only when given (default: the provider's/model's)")
    p.add_argument("--top-p", type=float, help="sent only when given (default: the provider's/model's)")
    p.add_argument("--seed", type=int, help="sent only when given")
    p.add_argument("--limit", type=int, help="only the first N samples (test-file order)")
    p.add_argument("--ids", metavar="FILE", help="only the sample ids listed in FILE, one per line")
    p.add_argument("--dry-run", action="store_true",
                   help="write RUN/requests.jsonl, print a token/cost estimate and send nothing")
    p.add_argument("--preset", choices=["chatglm3"],
                   help="chatglm3: sample with temperature 0.8, top_p 0.8 (ChatGLM3 chat() defaults); flags win")
    p.add_argument("--retry-errors", action="store_true", help="also retry ids whose latest record is an error")
    add_quiet_option(p, legacy_no_progress=True)
    p.add_argument("--price-in", type=float, metavar="USD", help="--dry-run: USD per million input tokens")
    p.add_argument("--price-out", type=float, metavar="USD", help="--dry-run: USD per million output tokens")
    g = p.add_argument_group("openai backend (the retry settings also apply to offline)")
    g.add_argument("--api-key-env", default="OPENAI_API_KEY", metavar="NAME",
                   help="environment variable holding the API key (default OPENAI_API_KEY); the key is never stored")
    g.add_argument("--no-api-key", action="store_true",
                   help="send no key (a local server that needs none; a placeholder is sent)")
    g.add_argument("--max-context", type=int, metavar="N",
                   help="the served model's context in tokens: longer prompts are recorded as PromptTooLong, not sent "
                        "(hf: read from the model config unless given)")
    g.add_argument("--context-tokenizer", metavar="PATH",
                   help="tokenizer (local path or hub id) that counts prompt tokens for --max-context (default: --model)")
    g.add_argument("--same-answer-limit", type=int, default=3, metavar="N",
                   help="stop retrying a request after N identical failures in a row (default 3)")
    g.add_argument("--max-attempts", type=int, default=8, help="attempts per request, first one included (default 8)")
    g.add_argument("--retry-base-delay", type=float, default=1.0, metavar="S",
                   help="first back-off in seconds, doubled per attempt, with jitter (default 1)")
    g.add_argument("--retry-max-delay", type=float, default=60.0, metavar="S", help="longest back-off (default 60)")
    g.add_argument("--timeout", type=float, default=300.0, metavar="S", help="seconds per attempt (default 300)")
    g = p.add_argument_group("hf backend")
    g.add_argument("--device", help="torch device: cpu, cuda, cuda:N (default cpu; with --engine ray: cuda on a "
                                    "worker given a GPU, else cpu)")
    g.add_argument("--dtype", default="auto", choices=["auto", "float32", "float16", "bfloat16"],
                   help="weights' dtype (default auto: the checkpoint's own)")
    g.add_argument("--batch-size", type=int, default=8, help="prompts per generate() call, length-sorted (default 8)")
    g.add_argument("--trust-remote-code", action="store_true", help="run the model repository's own code")
    g = p.add_argument_group("hf backend, --engine ray (needs the ray extra: pip install 'charactereval-workbench[ray]')")
    g.add_argument("--engine", choices=list(pipeline.ENGINES), default="local",
                   help="local (default): generate in this process; ray: batches on the workers of a Ray cluster")
    g.add_argument("--address", metavar="ADDR", help="an existing Ray cluster (e.g. auto, HOST:6379); default: start a local one")
    g.add_argument("--workers", type=int, default=1, metavar="N", help="Ray workers, each loading the model once (default 1)")
    g.add_argument("--gpus-per-worker", type=float, default=0.0, metavar="G", help="GPUs per Ray worker (default 0: CPU)")
    g = p.add_argument_group("offline backend (replies mean nothing)")
    g.add_argument("--offline-latency", type=float, default=0.0, metavar="S", help="simulated seconds per request")
    g.add_argument("--offline-fault-rate", type=float, default=0.0, metavar="P",
                   help="simulated transient failure probability per attempt")
    _data_dir_option(p)
    p.set_defaults(func=cmd_generate)

    p = sub.add_parser("transform", help="generations.jsonl -> rows.jsonl (S5)")
    p.add_argument("run", metavar="RUN", help=RUN_HELP)
    _data_dir_option(p)
    p.set_defaults(func=cmd_transform)

    p = sub.add_parser("score", help="score rows.jsonl with the reward model (S6, S8) -> scores.jsonl, "
                                     "or with an LLM judge -> judge_scores.jsonl")
    p.add_argument("run", metavar="RUN", help=RUN_HELP)
    p.add_argument("--scorer", choices=["reward-model", "judge"], default="reward-model",
                   help="reward-model (default, the official scorer) or judge (an LLM through an OpenAI-compatible API)")
    p.add_argument("--rm", metavar="DIR", help="reward-model checkpoint directory (optional with --dry-run)")
    p.add_argument("--device", help="cpu, cuda or cuda:N (default: cuda when available, else cpu)")
    p.add_argument(
        "--mode",
        choices=["faithful", "fast"],
        default="faithful",
        help="faithful (default): batch 1, the official arithmetic; fast: batched, verified with --verify",
    )
    p.add_argument("--shard", metavar="I/N", help="score only shard I of N (1-based) into scores.shard-I-of-N.jsonl")
    p.add_argument("--dry-run", action="store_true", help="write RUN/rm_inputs.jsonl and run no model")
    p.add_argument("--verify", type=int, metavar="K", help="score about K rows both ways and report equality; writes nothing to scores.jsonl")
    p.add_argument("--batch-tokens", type=int, default=16384, metavar="N", help="fast mode: padded tokens per batch")
    p.add_argument("--no-prefix-reuse", dest="prefix_reuse", action="store_false",
                   help="fast mode: do not share a sample's prefix keys/values")
    p.add_argument(
        "--causal-block",
        type=int,
        metavar="N",
        help="fast mode: query block for skipping masked attention blocks (0: off; default: 256 on CPU, off elsewhere)",
    )
    add_quiet_option(p)
    g = p.add_argument_group("--engine ray (needs the ray extra: pip install 'charactereval-workbench[ray]')")
    g.add_argument("--engine", choices=list(pipeline.ENGINES), default="local",
                   help="local (default): score in this process; ray: on the workers of a Ray cluster")
    g.add_argument("--address", metavar="ADDR", help="an existing Ray cluster (e.g. auto, HOST:6379); default: start a local one")
    g.add_argument("--workers", type=int, default=1, metavar="N", help="Ray workers, each loading the checkpoint once (default 1)")
    g.add_argument("--gpus-per-worker", type=float, default=0.0, metavar="G", help="GPUs per Ray worker (default 0: CPU)")
    _judge_options(p, required=False)
    g = p.add_argument_group("--scorer judge --dry-run")
    g.add_argument("--price-in", type=float, metavar="USD", help="--dry-run: USD per million input tokens")
    g.add_argument("--price-out", type=float, metavar="USD", help="--dry-run: USD per million output tokens")
    _data_dir_option(p)
    p.set_defaults(func=cmd_score)

    rm = sub.add_parser("rm", help="the reward model: download, check, or make a tiny meaningless one")
    rm_sub = rm.add_subparsers(dest="rm_command", required=True, metavar="ACTION")
    p = rm_sub.add_parser("download", help="fetch morecry/BaichuanCharRM at the pinned revision (resumable)")
    p.add_argument("--dir", default="models/BaichuanCharRM", help="target directory (default: models/BaichuanCharRM)")
    p.add_argument("--endpoint", help="Hugging Face endpoint or mirror URL (default: $HF_ENDPOINT or the Hub)")
    p.set_defaults(func=cmd_rm_download)
    p = rm_sub.add_parser("check", help="check a checkpoint directory's config, tokenizer and weight index")
    p.add_argument("dir", metavar="DIR")
    p.set_defaults(func=cmd_rm_check)
    p = rm_sub.add_parser("make-tiny", help="write a tiny random checkpoint (meaningless scores) for demos and tests")
    p.add_argument("dir", metavar="DIR")
    p.add_argument(
        "--from-data",
        action="store_true",
        help="train its tokenizer on the official data's text (implied by --data-dir; default: synthetic text)",
    )
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--vocab", type=int, help="tokenizer pieces (default 8000 with --from-data, else 2000)")
    p.add_argument("--seed", type=int, default=0)
    _data_dir_option(p)
    p.set_defaults(func=cmd_rm_make_tiny)

    p = sub.add_parser("summarize", help="summary.json + metrics.csv (S9 + bootstrap intervals)")
    p.add_argument("run", metavar="RUN", help=RUN_HELP)
    p.add_argument("--scorer", choices=["reward-model", "judge"], default="reward-model",
                   help="whose scores: reward-model (default) or judge (-> judge_summary.json, judge_metrics.csv)")
    _judge_choice_option(p)
    _allow_mixed_option(p)
    p.add_argument("--n-boot", type=int, default=1000, help="bootstrap resamples (default 1000)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    p.add_argument("--out", metavar="DIR", help="write the summary here (default: the run directory)")
    _data_dir_option(p)
    p.set_defaults(func=cmd_summarize)

    p = sub.add_parser("leaderboard", help="boards of every run found + per-run explorer -> a static site in OUT")
    p.add_argument("paths", metavar="RUN_OR_DIR", nargs="+", help="runs, or folders searched for runs")
    p.add_argument("--out", required=True, metavar="DIR", help="the site's folder (replaced as a whole)")
    _data_dir_option(p)
    p.set_defaults(func=cmd_leaderboard)

    for name, func, text in (
        ("report", cmd_report, "execute the analysis notebook for RUN -> RUN/report.ipynb + RUN/report.html "
                               "(a judge's report: RUN/report-judge-MODEL.html)"),
        ("compare", cmd_compare, "execute the comparison notebook -> OUT/comparison.ipynb + OUT/comparison.html"),
    ):
        p = sub.add_parser(name, help=text)
        if name == "report":
            p.add_argument("run", metavar="RUN", help=RUN_HELP)
            p.add_argument("--out", metavar="DIR", help="output directory (default: the run directory)")
        else:
            p.add_argument("runs", metavar="RUN", nargs="+", help="two or more runs; the first is the reference")
            p.add_argument("--out", required=True, metavar="DIR", help="output directory")
        p.add_argument("--baseline", dest="baselines", action="append", metavar="MODEL",
                       help="paper model to overlay (repeatable; default: GPT-4, Baichuan2-13B, ChatGLM3-6B)")
        p.add_argument("--n-boot", type=int, default=1000, help="bootstrap resamples (default 1000)")
        p.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
        p.add_argument("--show-code", action="store_true", help="keep the code cells in the HTML")
        p.add_argument("--scorer", choices=["reward-model", "judge"], default="reward-model",
                       help="whose scores the main sections show (default reward-model); a run scored by both "
                            "also gets them side by side with their agreement")
        _judge_choice_option(p)
        _allow_mixed_option(p)
        _data_dir_option(p)
        p.set_defaults(func=func)

    p = sub.add_parser("battle", help="judge two runs' replies pairwise in both orders: win/tie/loss, position consistency")
    p.add_argument("run_a", metavar="RUN_A")
    p.add_argument("run_b", metavar="RUN_B")
    p.add_argument("--out", required=True, metavar="DIR", help="battle directory (judgements, summary, run.json)")
    _judge_options(p, required=True)
    p.add_argument("--n-boot", type=int, default=1000, help="bootstrap resamples (default 1000)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    add_quiet_option(p)
    _data_dir_option(p)
    p.set_defaults(func=cmd_battle)

    p = sub.add_parser("metaeval", help="a scorer against human labels: metascore, kappa, alpha, confusion matrix")
    p.add_argument("labels", metavar="LABELS", help="JSON Lines: id, metric_en, reply, human_score or human_choice")
    p.add_argument("--out", required=True, metavar="DIR", help="directory for the rows, scores and summary")
    p.add_argument("--scorer", choices=["judge", "reward-model"], required=True,
                   help="whose predictions meet the labels: judge (an LLM through an OpenAI-compatible API: "
                        "--judge-model, --base-url) or reward-model (--rm DIR)")
    _judge_options(p, required=False)
    g = p.add_argument_group("--scorer reward-model")
    g.add_argument("--rm", metavar="DIR", help="reward-model checkpoint directory")
    g.add_argument("--device", help="cpu, cuda or cuda:N (default: cuda when available, else cpu)")
    g.add_argument("--mode", choices=["faithful", "fast"], default="faithful",
                   help="faithful (default): batch 1, the official arithmetic; fast: batched")
    p.add_argument("--n-boot", type=int, default=1000, help="bootstrap resamples (default 1000)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    add_quiet_option(p)
    _data_dir_option(p)
    p.set_defaults(func=cmd_metaeval)

    p = sub.add_parser("panel", help="several judges' scores of a run combined: verdicts, means, Krippendorff's alpha")
    p.add_argument("run", metavar="RUN", help=RUN_HELP)
    p.add_argument("--judge-model", dest="judge_models", action="append", required=True, metavar="M",
                   help="a judge of the panel (repeat: two or more, each already scored RUN with --scorer judge)")
    p.add_argument("--verdict", choices=["majority", "mean"], default="majority",
                   help="majority (default; a tie goes to the lowest tied grade) or mean of the judges' grades")
    p.add_argument("--out", metavar="DIR", help="where panel_summary.json and panel_verdicts.jsonl go (default RUN/panel)")
    p.add_argument("--n-boot", type=int, default=1000, help="bootstrap resamples (default 1000)")
    p.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    _allow_mixed_option(p)
    p.set_defaults(func=cmd_panel)

    p = sub.add_parser("batch", help="many models from a YAML config: one report each, then a comparison")
    p.add_argument("config", metavar="CONFIG.yaml")
    add_quiet_option(p)
    p.set_defaults(func=cmd_batch)

    p = sub.add_parser("import-official", help="an official generation(_trans)/evaluation JSON file -> a run")
    p.add_argument("file", metavar="FILE")
    p.add_argument("run", metavar="RUN", help=RUN_HELP)
    _data_dir_option(p)
    p.set_defaults(func=cmd_import_official)

    p = sub.add_parser("export-official", help="a run -> official JSON arrays in RUN/official/")
    p.add_argument("run", metavar="RUN", help=RUN_HELP)
    p.add_argument("--out", metavar="DIR", help="output directory (default RUN/official)")
    _data_dir_option(p)
    p.set_defaults(func=cmd_export_official)

    add_coser_parser(sub)
    add_reproduce_parser(sub)
    return parser


def _error(message: object) -> None:
    # One line, whatever the message (a library's can span several).
    print("error: " + " ".join(line.strip() for line in str(message).splitlines() if line.strip()), file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        with faults.sigterm_interrupts():
            return int(args.func(args) or 0)
    except USER_ERRORS as exc:
        _error(exc)
        return 2
    except (RunAborted, faults.Unreachable) as exc:
        _error(exc)
        return 1
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (`... | head`): stop quietly, and keep Python's final flush of
        # stdout from raising again at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except OSError as exc:
        # An output location that cannot be written (read-only, not a directory) or a full disk.
        _error(faults.os_error_line(exc))
        return faults.os_error_status(exc)


if __name__ == "__main__":
    sys.exit(main())
