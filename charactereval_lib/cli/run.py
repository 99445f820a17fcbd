"""The run's stages: ``generate``, ``transform``, ``score`` (reward model or judge) and ``summarize``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from charactereval_lib import pipeline
from charactereval_lib.cli.options import (
    RUN_HELP,
    allow_mixed_option,
    bootstrap_options,
    data_dir_option,
    deprecated_alias,
    engine_options,
    judge_choice_option,
    judge_options,
    metascore_threshold_option,
    request_param_option,
    settings_from_args,
    warn,
)
from charactereval_lib.engine.progress import add_quiet_option, bars_wanted
from charactereval_lib.engine.storage import runs


def cmd_generate(args: argparse.Namespace) -> int:
    from charactereval_lib.engine.generation.base import RunAborted
    from charactereval_lib.engine.generation.engine import GenerationInterrupted, exit_code

    settings = settings_from_args(pipeline.GenerateSettings, args, api_key_env="" if args.no_api_key else args.api_key_env)
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
        if planned.plan.done or planned.plan.kept_failed:
            print(f"{planned.plan.done} already ok and {planned.plan.kept_failed} earlier error(s) in this run "
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


def cmd_transform(args: argparse.Namespace) -> int:
    outcome = pipeline.transform(args.run, data_dir=args.data_dir)
    warn(outcome.warnings)
    c = outcome.result.counts()
    print(
        f"{outcome.run.rows}: {c['rows']} rows; dropped {c['failed']} failed generation(s), "
        f"{c['no_metric']} sample(s) without metrics; {c['missing']} sample(s) not generated yet"
    )
    return 0


def cmd_summarize(args: argparse.Namespace) -> int:
    from charactereval_lib.charactereval.summary import summary_table_lines

    outcome = pipeline.summarize(args.run, settings_from_args(pipeline.SummarizeSettings, args), data_dir=args.data_dir,
                                 out=args.out)
    summary = outcome.summary
    counts = summary["counts"]
    judge = summary["scorer"] == "judge"
    if not (outcome.run.path / runs.MANIFEST).exists():
        # Said first: every line below is read from the record files alone.
        warn([line for line in outcome.warnings if line.startswith("No run.json")])
    print("\n".join(summary_table_lines(summary, columns=("n", "failed", "invalid") if judge else ("n", "failed"))))
    scorers = ", ".join(f"{label} ({n} rows)" for label, n in counts["scorers"].items()) or "none"
    failures = counts["generation_failures"]
    print(
        f"scored rows {counts['scored_rows']}/{counts['rows']}; generation failures "
        f"{'unknown (no transform record in run.json)' if failures is None else failures}; scorers: {scorers}; MBTI: {summary['mbti']}"
    )
    if judge:
        print(f"judge {counts['judge_model']}: invalid answers {counts['invalid_answers']} ({counts['invalid_unscored']} left out of the means "
              "by their spec, the rest scored as the spec says)")
    warn(outcome.warnings)
    if not outcome.warnings and outcome.evidence.all_clear:
        print(outcome.evidence.clear_line())
    scorer = summary["scorer"]
    out = Path(args.out) if args.out else outcome.run.path
    print(f"wrote {out / outcome.run.summary_file(scorer).name} and {out / outcome.run.metrics_csv_file(scorer).name}")
    return 0


def cmd_judge_score(args: argparse.Namespace) -> int:
    """score --scorer judge: prints the session line, or the dry run's estimate."""
    from charactereval_lib.engine.generation.base import RunAborted
    from charactereval_lib.engine.grading.judging import JudgeInterrupted

    if (args.rm or args.shard or args.verify or args.device or args.mode != "faithful" or args.engine != "local"
            or args.address or args.workers != 1 or args.gpus_per_worker
            or args.lost_node_wait != pipeline.ScoreSettings.default("lost_node_wait")):
        raise pipeline.SettingsError("--rm, --shard, --verify, --device, --mode and the --engine options belong to the "
                                     "reward model, not --scorer judge")
    settings = settings_from_args(pipeline.JudgeSettings, args, api_key_env="" if args.no_api_key else args.api_key_env)
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
    warn([outcome.calibration] if outcome.calibration else [])
    return 1 if summary.errors else 0


def cmd_score(args: argparse.Namespace) -> int:
    if args.scorer == "judge":
        return cmd_judge_score(args)
    if (args.judge_model or args.spec or args.base_url or args.eval_type or args.calibration
            or args.metascore_threshold != pipeline.JudgeSettings.default("metascore_threshold")):
        raise pipeline.SettingsError("--judge-model, --spec, --base-url, --eval-type, --calibration and "
                                     "--metascore-threshold need --scorer judge")
    outcome = pipeline.score(args.run, settings_from_args(pipeline.ScoreSettings, args), data_dir=args.data_dir,
                             dry_run=args.dry_run, progress=bars_wanted(args.quiet))
    run, settings = outcome.run, outcome.settings
    if outcome.dry_run_rows is not None:
        counted = "with token counts" if args.rm else "without token counts (no --rm given)"
        print(f"{run.artifact('rm_inputs.jsonl')}: {outcome.dry_run_rows} reward-model input(s) {counted}; "
              "no model was run")
        return 0
    warn(outcome.warnings)
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


def _generate_parser(p: argparse.ArgumentParser) -> None:
    G = pipeline.GenerateSettings
    p.add_argument("run", metavar="RUN", help=RUN_HELP)
    p.add_argument("--backend", choices=["openai", "hf", "offline"], required=True,
                   help="openai: an OpenAI-compatible endpoint; hf: a local transformers model; offline: "
                        "placeholder replies, for trying the command")
    p.add_argument("--model", required=True, help="model name (API model id or local path)")
    p.add_argument("--base-url", help="OpenAI-compatible endpoint")
    p.add_argument("--concurrency", type=int, default=G.default("concurrency"),
                   help="most requests in flight (openai/offline; lowered on 429s, default %(default)s)")
    p.add_argument("--max-tokens", type=int, default=G.default("max_tokens"),
                   help="reply length limit sent with every request (default %(default)s)")
    p.add_argument("--temperature", type=float, help="sent only when given (default: the provider's/model's)")
    p.add_argument("--top-p", type=float, help="sent only when given (default: the provider's/model's)")
    p.add_argument("--decoding-seed", dest="seed", type=int, help="the decoding seed, sent only when given")
    deprecated_alias(p, "--seed", "--decoding-seed", dest="seed", type=int)
    p.add_argument("--limit", type=int, help="only the first N samples (test-file order)")
    p.add_argument("--ids", metavar="FILE", help="only the sample ids listed in FILE, one per line")
    p.add_argument("--dry-run", action="store_true",
                   help="write RUN/requests.jsonl, print a token/cost estimate and send nothing")
    p.add_argument("--preset", choices=["chatglm3"],
                   help="chatglm3: sample with temperature 0.8, top_p 0.8 (ChatGLM3 chat() defaults); flags win")
    p.add_argument("--retry-errors", action="store_true", help="also retry ids whose latest record is an error")
    p.add_argument("--keep-thinking", action="store_true",
                   help="score a reply's leading <think>...</think> block as upstream does (default: S5 removes it "
                        "before the first-line cut; recorded in the run's identity)")
    add_quiet_option(p, legacy_no_progress=True)
    p.add_argument("--price-in", type=float, metavar="USD", help="--dry-run: USD per million input tokens")
    p.add_argument("--price-out", type=float, metavar="USD", help="--dry-run: USD per million output tokens")
    g = p.add_argument_group("openai backend (the retry settings also apply to offline)")
    g.add_argument("--api-key-env", default=G.default("api_key_env"), metavar="NAME",
                   help="environment variable holding the API key (default %(default)s); the key is never stored")
    g.add_argument("--no-api-key", action="store_true",
                   help="send no key (a local server that needs none; a placeholder is sent)")
    request_param_option(g, "--request-param", "request_params", "each request")
    g.add_argument("--max-context", type=int, metavar="N",
                   help="the served model's context in tokens: longer prompts are recorded as PromptTooLong, not sent "
                        "(hf: read from the model config unless given)")
    g.add_argument("--context-tokenizer", metavar="PATH",
                   help="tokenizer (local path or hub id) that counts prompt tokens for --max-context (default: --model)")
    g.add_argument("--same-answer-limit", type=int, default=G.default("same_answer_limit"), metavar="N",
                   help="stop retrying a request after N identical failures in a row (default %(default)s)")
    g.add_argument("--max-attempts", type=int, default=G.default("max_attempts"),
                   help="attempts per request, first one included (default %(default)s)")
    g.add_argument("--retry-base-delay", type=float, default=G.default("retry_base_delay"), metavar="S",
                   help="first back-off in seconds, doubled per attempt, with jitter (default %(default)g)")
    g.add_argument("--retry-max-delay", type=float, default=G.default("retry_max_delay"), metavar="S",
                   help="longest back-off (default %(default)g)")
    g.add_argument("--timeout", type=float, default=G.default("timeout"), metavar="S",
                   help="seconds per attempt (default %(default)g)")
    g = p.add_argument_group("hf backend")
    g.add_argument("--device", help="torch device: cpu, cuda, cuda:N (default cpu; with --engine ray: cuda on a "
                                    "worker given a GPU, else cpu)")
    g.add_argument("--dtype", default=G.default("dtype"), choices=["auto", "float32", "float16", "bfloat16"],
                   help="weights' dtype (default auto: the checkpoint's own)")
    g.add_argument("--batch-size", type=int, default=G.default("batch_size"),
                   help="prompts per generate() call, length-sorted (default %(default)s)")
    g.add_argument("--trust-remote-code", action="store_true", help="run the model repository's own code")
    g = p.add_argument_group("hf backend, --engine ray (needs the ray extra: pip install 'charactereval-workbench[ray]')")
    engine_options(g, G, "generate in this process; ray: batches on the workers of a Ray cluster", "the model")
    g = p.add_argument_group("offline backend (replies mean nothing)")
    g.add_argument("--offline-latency", type=float, default=G.default("offline_latency"), metavar="S",
                   help="simulated seconds per request")
    g.add_argument("--offline-fault-rate", type=float, default=G.default("offline_fault_rate"), metavar="P",
                   help="simulated transient failure probability per attempt")
    data_dir_option(p)
    p.set_defaults(func=cmd_generate)


def _transform_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", metavar="RUN", help=RUN_HELP)
    data_dir_option(p)
    p.set_defaults(func=cmd_transform)


def _score_parser(p: argparse.ArgumentParser) -> None:
    S = pipeline.ScoreSettings
    p.add_argument("run", metavar="RUN", help=RUN_HELP)
    p.add_argument("--scorer", choices=["reward-model", "judge"], default="reward-model",
                   help="reward-model (default, the official scorer) or judge (an LLM through an OpenAI-compatible API)")
    p.add_argument("--rm", metavar="DIR", help="reward-model checkpoint directory (optional with --dry-run)")
    p.add_argument("--device", help="cpu, cuda or cuda:N (default: cuda when available, else cpu)")
    p.add_argument(
        "--mode",
        choices=["faithful", "fast"],
        default=S.default("mode"),
        help="faithful (default): batch 1, the official arithmetic; fast: batched, verified with --verify",
    )
    p.add_argument("--shard", metavar="I/N", help="score only shard I of N (1-based) into scores.shard-I-of-N.jsonl")
    p.add_argument("--dry-run", action="store_true", help="write RUN/rm_inputs.jsonl and run no model")
    p.add_argument("--verify", type=int, metavar="K", help="score about K rows both ways and report equality; writes nothing to scores.jsonl")
    p.add_argument("--batch-tokens", type=int, default=S.default("batch_tokens"), metavar="N",
                   help="fast mode: padded tokens per batch (default %(default)s)")
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
    engine_options(g, S, "score in this process; ray: on the workers of a Ray cluster", "the checkpoint")
    judge_options(p, required=False)
    p.add_argument("--calibration", metavar="METAEVAL_DIR",
                   help="--scorer judge: a `metaeval` directory of the same judge model; its agreement with human "
                        "labels is recorded in run.json and warned about wherever the judge's scores are shown")
    metascore_threshold_option(p)
    g = p.add_argument_group("--scorer judge --dry-run")
    g.add_argument("--price-in", type=float, metavar="USD", help="--dry-run: USD per million input tokens")
    g.add_argument("--price-out", type=float, metavar="USD", help="--dry-run: USD per million output tokens")
    data_dir_option(p)
    p.set_defaults(func=cmd_score)


def _summarize_parser(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", metavar="RUN", help=RUN_HELP)
    p.add_argument("--scorer", choices=["reward-model", "judge"], default="reward-model",
                   help="whose scores: reward-model (default) or judge (-> judge_summary.json, judge_metrics.csv)")
    judge_choice_option(p)
    allow_mixed_option(p)
    bootstrap_options(p, pipeline.SummarizeSettings)
    p.add_argument("--out", metavar="DIR", help="write the summary here (default: the run directory)")
    data_dir_option(p)
    p.set_defaults(func=cmd_summarize)


# The arguments of each command of this module (its help line is in ``cli.COMMANDS``).
PARSERS = {
    "generate": _generate_parser,
    "transform": _transform_parser,
    "score": _score_parser,
    "summarize": _summarize_parser,
}
