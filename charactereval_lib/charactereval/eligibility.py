"""CharacterEval on the leaderboard: which runs may be ranked, the headline score, the anchor.

The paper has no overall score (seed 001 row 18), so the board ranks by a platform choice said
as such on every board: the unweighted mean of the three dimension averages (S9), with a
cluster-bootstrap interval over sample ids. The rules (``RULES``) are ours, written down in
``docs/leaderboard.md``; each is a named check the board shows beside a run it excludes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from charactereval_lib.charactereval import layout
from charactereval_lib.charactereval.benchmark import NAME as BENCHMARK
from charactereval_lib.charactereval.benchmark import recognises  # noqa: F401 - the board's recogniser
from charactereval_lib.charactereval.doctor import EXPECTED_NO_METRIC_IDS, EXPECTED_ROWS, EXPECTED_SAMPLES
from charactereval_lib.charactereval.documents import CharacterEvalManifest
from charactereval_lib.charactereval.identity import generation_served, judge_served
from charactereval_lib.charactereval.protocol import PROTOCOL_VERSION
from charactereval_lib.charactereval.reference import PAPER_DECIMALS, deltas, load_paper_table
from charactereval_lib.charactereval.statistics import metric_statistics
from charactereval_lib.charactereval.summary import failed_rows_by_metric, load_run_scores
from charactereval_lib.engine import thinking
from charactereval_lib.engine.anchor import compare_to_paper, rounding_tolerance
from charactereval_lib.engine.generation.base import ROUTING_PARAMS
from charactereval_lib.engine.generation.served import ALIASES, caveats, mismatches
from charactereval_lib.engine.leaderboard.board import (
    FAILED,
    REPRODUCED,
    AnchorCheck,
    BoardSpec,
    Rule,
    RunView,
    model_label,
    setting_text,
    thinking_facts,
    thinking_label,
    thinking_rule,
)
from charactereval_lib.engine.storage.manifest import GenerationSection

HEADLINE = "overall: mean of the 3 dimension averages (a platform choice; the paper has no overall score)"
# Failed samples (None/"ERROR" replies) leave every mean, which raises a score (seed 001 row 11);
# the cap keeps that effect small and the count is shown on every row.
MAX_FAILED_SHARE = 0.01
SCORED_IDS = EXPECTED_SAMPLES - EXPECTED_NO_METRIC_IDS
MAX_FAILED = math.floor(MAX_FAILED_SHARE * SCORED_IDS)
# Released generations (`data fetch --with-results`) and their Table 4 rows.
RELEASED = {"chatglm3_6b": "ChatGLM3-6B", "xverse_7b": "XVERSE-7B", "baichuan_7b": "Baichuan2-7B",
            "qwen_7b": "Qwen-7B", "internlm_7b": "InternLM-7B"}
# Anchor tolerance per metric mean: the paper prints three decimals, so a cell stands for every
# value within half a unit of the third (engine.anchor).
ANCHOR_TOLERANCE = rounding_tolerance(PAPER_DECIMALS)


def _protocol(view: RunView) -> list[str]:
    if view.protocol_version != PROTOCOL_VERSION:
        return [f"made under protocol {view.protocol_version}, the current one is {PROTOCOL_VERSION}"]
    return []


def _generated(view: RunView) -> list[str]:
    f = view.facts
    reasons = []
    if f["missing"] is None:
        reasons.append("the official data is not available to list the scored samples")
    elif f["missing"]:
        reasons.append(f"{f['missing']} scored test samples have neither a reply nor a recorded failure")
    if f["failed_scored"] > MAX_FAILED:
        reasons.append(f"{f['failed_scored']} scored samples failed (None/ERROR), more than {MAX_FAILED} "
                       f"({MAX_FAILED_SHARE:.0%} of {SCORED_IDS})")
    return reasons


def _scored(view: RunView) -> list[str]:
    f = view.facts
    reasons = []
    if f["failed_rows"] is None and f["failed_scored"]:
        reasons.append("the official data is not available to count the rows of the failed samples")
    elif f["rows"] + (f["failed_rows"] or 0) != EXPECTED_ROWS:
        # Without the official data there is no row count of failed samples; none failed here.
        failed = f" plus {f['failed_rows']} rows of failed samples" if f["failed_rows"] is not None else ""
        reasons.append(f"{f['rows']} rows{failed}, not the protocol's {EXPECTED_ROWS}")
    if f["unscored_rows"]:
        scorer = f"judge {f['judge']}" if f["judge"] else "reward-model"
        reasons.append(f"{f['unscored_rows']} of {f['rows']} rows have no {scorer} score")
    return reasons


def _official_rm(view: RunView) -> list[str]:
    f = view.facts
    if f["judge"]:
        return [f"scored by the judge {f['judge']}; the protocol's scorer is the reward model BaichuanCharRM"]
    if not f["checkpoints"]:
        return ["no scored row records its checkpoint digest"]
    if len(f["checkpoints"]) > 1:
        return [f"rows scored by {len(f['checkpoints'])} different checkpoints"]
    if f["tiny_label"]:
        return [f"scored by a test checkpoint ({f['tiny_label']}), not BaichuanCharRM"]
    return []


def _mode(view: RunView) -> list[str]:
    if view.facts["judge"]:
        return []  # a judge's modes are its parsers; official-rm already excludes it
    modes = set(view.facts["modes"])
    reasons = [f"scorer mode {m!r} is neither faithful nor fast" for m in sorted(modes - {"faithful", "fast"})]
    if "fast" in modes and not view.facts["fast_verified"]:
        reasons.append("fast mode without a `score --verify` on this run and checkpoint that kept every row within "
                       "one bf16 grid step")
    return reasons


def _served(view: RunView) -> list[str]:
    return mismatches(view.facts["served_roles"])


RULES = (
    Rule("protocol", f"The run was made under the current protocol version ({PROTOCOL_VERSION}); runs of an older "
         "version go to the archive (seed 004 H01).", _protocol),
    Rule("served-models", "The replies (and a judge board's grades) were served by the model the run declares, as "
         "the server reported it in each reply (its `model` field, recorded with the system fingerprint): a router's "
         "provider prefix and a documented alias of the same dated snapshot ("
         + ", ".join(f"{alias} for {snapshot}" for alias, snapshot in ALIASES.items()) + ") are no difference; a "
         "server that names no model is a caveat on the row (served model not reported), not a reason.", _served),
    Rule("all-samples", f"Every one of the {SCORED_IDS:,} scored test samples (those with metrics; the other "
         f"{EXPECTED_NO_METRIC_IDS} of the {EXPECTED_SAMPLES:,} are never scored, and the released generations leave "
         "them out) was generated, a failure counted as one; at most "
         f"{MAX_FAILED} ({MAX_FAILED_SHARE:.0%}) of them failed. A failed "
         "sample (None or ERROR) is dropped from every metric as the official code does, which can only raise a "
         "score, so the count is shown on every row.", _generated),
    Rule("all-rows-scored", f"All {EXPECTED_ROWS:,} (sample, metric) rows are accounted for (rows of failed "
         "samples counted) and every row has a reward-model score.", _scored),
    thinking_rule("No scored reply had a leading <think>...</think> block scored as its answer. S5 removes such a "
                  "block by default (seed 001 row 10, U11: a reasoning model's thinking is not its reply; "
                  "docs/platform-rules.md#thinking-blocks); a run made with --keep-thinking, or before the rule "
                  "existed, scored replies as the official code does and is ranked when none of them starts with a "
                  "block, since both rules then score the same text. Its row says thinking was kept.",
                  ("scored reply starts", "scored replies start"), "S5 scored as the answer"),
    Rule("official-rm", "Every row is scored by one BaichuanCharRM checkpoint, named by its content digest (the "
         "board is per digest; its anchor shows that digest reproduces the paper); test checkpoints never "
         "qualify, read from the score rows themselves (their checkpoint_sha256 and a test checkpoint's "
         "checkpoint_label), run.json only for rows scored before they carried the label.", _official_rm),
    Rule("scorer-mode", "The reward model ran in faithful mode, or in fast mode verified on this run and checkpoint "
         "(`charactereval score --verify K`: no row more than one bf16 grid step from faithful mode).", _mode),
)

ANCHOR_TEXT = (f"each of the {len(RELEASED)} released generations (`charactereval data fetch --with-results`, then "
               f"`import-official`; 40,160 rows in all, seed 000 D1/D5) scored by this board's checkpoint, all 12 "
               f"metric means of each within {ANCHOR_TOLERANCE:g} of its Table 4 row (half a unit of the third "
               "decimal)")


def read(path: Path, manifest: dict[str, Any], context: Mapping[str, Any]) -> list[RunView]:
    """One view per scorer of the run: the reward model's (its board is its checkpoint digest)
    and each judge model's, so scores of different scorers never share a board.
    ``context["charactereval"]``: the official data (None when it cannot be loaded), which
    says which samples are scored and how many rows the failed samples would have had."""
    run = layout.CharacterEvalRun(path)
    typed = run.manifest_model(CharacterEvalManifest)
    generations = run.latest_generations()
    failed = {i for i, g in generations.items() if g.get("model_output") in (None, "ERROR")}
    no_metric = set(typed.transform.no_metric_ids if typed.transform else ())
    scored_failed = failed - no_metric
    data = context.get(BENCHMARK)
    generation = typed.generation or GenerationSection()
    scored = (lambda i: str(i) in data.id2metric) if data else (lambda i: i not in no_metric)
    common = {
        # Under the default rule S5 removed them; under the upstream rule S5 scored their first line.
        **thinking_facts(generation.identity, thinking.count_blocks(
            g["model_output"] for i, g in generations.items() if i not in failed and scored(i))),
        "missing": len({int(i) for i in data.id2metric} - set(generations)) if data else None,
        "failed": len(failed), "failed_scored": len(scored_failed),
        "failed_rows": sum(failed_rows_by_metric(scored_failed, data.id2metric).values()) if data else None,
    }
    generated = generation_served(run, generations)
    common["served_roles"] = [generated] if generated else []
    judges = run.judge_models()
    # A run scored only by judges has no reward-model board to be on.
    scorers = ([None] if run.scores.exists() or not judges else []) + judges
    # Read once for every view and for the explorer (``RunView.parsed``).
    parsed = {"generations": generations, "rows": run.read_rows(),
              "rm": run.latest_scores() if run.scores.exists() else {}}
    return [_view(run, manifest, typed, common, judge, parsed) for judge in scorers]


def _view(run: layout.CharacterEvalRun, manifest: dict[str, Any], typed: CharacterEvalManifest, common: dict[str, Any],
          judge: str | None, parsed: dict[str, Any]) -> RunView:
    frame, counts = load_run_scores(run, layout.JUDGE if judge else layout.REWARD_MODEL, judge, rows=parsed["rows"],
                                    latest=None if judge else parsed["rm"])
    # The scored rows carry their score records' fields: no second read of the score file.
    checkpoints = sorted(frame["checkpoint_sha256"].dropna().unique()) if "checkpoint_sha256" in frame else []
    checkpoint = (typed.scoring.checkpoint if typed.scoring else None) or {}
    # A test checkpoint's label as its score rows carry it (``checkpoint_label``), else as run.json
    # records it (rows scored before the rows carried it): the rows are what was scored.
    row_labels = sorted(frame["checkpoint_label"].dropna().unique()) if "checkpoint_label" in frame else []
    tiny_label = ", ".join(row_labels) if row_labels else checkpoint.get("label")
    verify = typed.rm_verify or {}
    judged = judge_served(run, judge) if judge else None
    facts = {**common, "served_roles": [*common["served_roles"], *([judged] if judged else [])],
             "judge": judge, "rows": counts["rows"], "unscored_rows": counts["unscored_rows"],
             "checkpoints": checkpoints, "modes": sorted({str(m) for m in frame["mode"]}) if "mode" in frame else [],
             "tiny_label": tiny_label,
             "fast_verified": verify.get("rows_beyond_one_step") == 0 and verify.get("checkpoint_sha256") in checkpoints}
    if judge:
        scorer = f"judge {judge}"
    elif len(checkpoints) == 1 and tiny_label:
        # A tiny random model (`rm make-tiny`) scores plumbing, not quality: its board says so.
        scorer = f"test checkpoint {tiny_label} sha256:{checkpoints[0][:12]} (not BaichuanCharRM)"
    elif len(checkpoints) == 1:
        scorer = f"BaichuanCharRM sha256:{checkpoints[0][:12]}"
    else:
        scorer = "reward model, checkpoint not recorded" if not checkpoints else "reward model, mixed checkpoints"
    generation = typed.generation or GenerationSection()
    view = RunView(run.path, BENCHMARK, str(typed.protocol_version), scorer,
                   model_label(str(generation.model or run.path.name), thinking_label(generation.parameters, common)),
                   manifest,
                   n=len(frame), failures=common["failed_scored"], facts=facts, decoding=decoding_text(generation),
                   caveats=caveats(facts["served_roles"]), parsed=parsed)
    if len(frame):
        stats = metric_statistics(frame)
        view.score, low, high = stats.overall
        view.ci = (None, None) if math.isnan(low) else (low, high)
        view.clusters = frame.groupby("id")["score"].mean().to_dict()
        view.facts["stats"] = stats
    return view


def decoding_text(generation: GenerationSection) -> str:
    """How the run's replies were decoded, for its board row (seed 001 row 9, U1: the paper gives
    no settings, so they are part of what a row says): the values the hf backend used, or what
    was sent to an API (an unsent value is the provider's default)."""
    if generation.backend == "offline":
        return "offline placeholder replies (no model, no decoding)"
    used = generation.model_dump().get("decoding_used")
    if used:
        how = (f"sampling: temperature {used.get('temperature')}, top_p {used.get('top_p')}, top_k {used.get('top_k')}"
               if used.get("do_sample") else "greedy")
        seed = f", seed {used['seed']}" if used.get("seed") is not None else ""
        return f"{how}, at most {used.get('max_new_tokens')} new tokens{seed} ({used.get('source')})"
    parameters = generation.parameters
    if not parameters:
        return "decoding not recorded (imported replies)"
    sent = {k: parameters.get(k) for k in ("temperature", "top_p")}
    values = ", ".join(f"{k} {'provider default' if v is None else v}" for k, v in sent.items())
    seed = f", seed {parameters['seed']}" if parameters.get("seed") is not None else ""
    # Every other key that went out (--request-param: top_k, penalties, reasoning, ...), routing aside.
    extra = "".join(f", {k} {setting_text(v)}" for k, v in sorted((parameters.get("request_params") or {}).items())
                    if k not in ROUTING_PARAMS)
    return f"{values}, at most {parameters.get('max_tokens')} tokens{seed}{extra}"


def anchor(view: RunView) -> AnchorCheck | None:
    """A released generation's run: its 12 metric means against the paper's Table 4 row, by the
    one comparison of ``engine.anchor`` (the scorer is deterministic, so no interval: within
    half a unit of the printed third decimal). The published dimension averages are not gated:
    they differ from the mean of the published metrics by up to 0.00067 (data/reference/README.md),
    more than the rounding allows, so a run matching every metric could miss them; their deltas
    are reported beside. The board's anchor needs all five released generations
    (``SPEC.anchor_parts``, seed 000 D1/D5): one model's rows calibrate too little of the scorer."""
    source = ((view.manifest.get("generation") or {}).get("source") or {}).get("file") or ""
    match = re.search(r"generation_trans_(\w+?)\.jsonl?$", Path(source).name)
    paper_model = RELEASED.get(match.group(1)) if match else None
    if paper_model is None or "stats" not in view.facts or view.facts["judge"]:
        return None
    cells = deltas(view.facts["stats"], [paper_model], load_paper_table())
    values = {r.name: float(r.delta) for r in cells.itertuples()}
    results = {r.name: compare_to_paper(float(r.paper), float(r.run), tolerance=ANCHOR_TOLERANCE)
               for r in cells.itertuples() if r.kind == "metric"}
    outside = [f"{name}: {result.reason}" for name, result in results.items() if result.within is not True]
    if outside:
        return AnchorCheck(FAILED, [f"{len(outside)} of {len(results)} metric means of {paper_model} not reproduced",
                                    *(f"{paper_model}: {line}" for line in outside)], values, paper_model)
    largest = max(abs(values[name]) for name in results)
    return AnchorCheck(REPRODUCED, [f"{paper_model}: all {len(results)} metric means within {ANCHOR_TOLERANCE:g} of "
                                    f"Table 4; largest |delta| {largest:.4f}"], values, paper_model)


def compare(views: Sequence[RunView]) -> list[str]:
    """``charactereval compare`` of runs of one board, by the board's scorer."""
    judge = views[0].facts["judge"]
    scorer = ["--scorer", "judge", "--judge-model", judge] if judge else []
    return ["charactereval", "compare", *(str(v.path) for v in views), *scorer,
            "--out", "comparison-" + "-vs-".join(v.path.name for v in views)]


SPEC = BoardSpec(
    benchmark=BENCHMARK,
    title="CharacterEval",
    current_versions=(PROTOCOL_VERSION,),
    headline=HEADLINE,
    cluster="sample id",
    rules=RULES,
    anchor_text=ANCHOR_TEXT,
    read=read,
    anchor=anchor,
    compare=compare,
    anchor_parts=tuple(RELEASED.values()),
)
