"""The CharacterEval judge scorer: an LLM judge grades the same (sample, metric) rows as the
reward model, into ``judge_scores.jsonl`` beside ``scores.jsonl``.

Each row's judge messages come from its metric's spec (the shipped ``judge_specs`` by default)
filled with the row's fields: ``role``, ``profile`` (S7's profile text, as the reward model
sees it), ``context`` (the raw dialogue) and ``response`` (the row's S5 reply); ``metric_en`` and
``metric_zh`` are there too for a custom spec shared by every metric. The calls, resume and
records are the engine's (``engine.grading.judging``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from charactereval_lib.charactereval.aggregate import METRIC_ORDER
from charactereval_lib.charactereval.data import OfficialData
from charactereval_lib.charactereval.judge_specs import load_default_specs
from charactereval_lib.charactereval.prompts import profile_text
from charactereval_lib.charactereval.requests import generation_task
from charactereval_lib.engine import runs
from charactereval_lib.engine.generation.base import DecodingParams, GenerationRequest
from charactereval_lib.engine.generation.estimate import CostEstimate, estimate_cost
from charactereval_lib.engine.grading.agreement import OVERALL, agreement_table
from charactereval_lib.engine.grading.judging import JudgeItem
from charactereval_lib.engine.grading.spec import (
    ModelGradedSpec,
    build_judge_messages,
    load_spec,
)

KEY_FIELDS = ("id", "metric_en")
MANIFEST_SECTION = "judge_scoring"
JUDGE_REQUESTS = "judge_requests.jsonl"


def load_specs(spec: str | Path | None = None) -> dict[str, ModelGradedSpec]:
    """The spec of every metric: the shipped defaults; a FILE used for every metric; or a DIR
    holding ``<metric_en>.yaml`` for every metric (a missing one is an error naming it)."""
    if spec is None:
        return load_default_specs()
    path = Path(spec)
    if path.is_dir():
        missing = [m for m in METRIC_ORDER if not (path / f"{m}.yaml").is_file()]
        if missing:
            raise runs.RunError(f"{path}: no spec for metric(s) {', '.join(missing)} (expected <metric_en>.yaml each)")
        return {m: load_spec(path / f"{m}.yaml") for m in METRIC_ORDER}
    one = load_spec(path)
    return dict.fromkeys(METRIC_ORDER, one)


def specs_digest(specs: Mapping[str, ModelGradedSpec]) -> dict[str, str]:
    """SHA-256 of each spec file used (by metric), recorded in run.json."""
    return {metric: hashlib.sha256(Path(spec.source).read_bytes()).hexdigest() for metric, spec in specs.items()}


def judge_items(run: runs.RunDir, data: OfficialData, specs: Mapping[str, ModelGradedSpec]) -> list[JudgeItem]:
    """One judge item per row of ``rows.jsonl`` (in file order)."""
    rows = run.read_rows()
    if not rows:
        raise runs.RunError(f"{run.rows}: no rows (run `charactereval transform` first)")
    samples = data.by_id()
    items = []
    for row in rows:
        sample = samples[row["id"]]
        fields = {"role": sample.role, "profile": profile_text(data.profiles[sample.role]), "context": sample.context,
                  "response": row["model_output"], "metric_en": row["metric_en"], "metric_zh": row["metric_zh"]}
        spec = specs[row["metric_en"]]
        items.append(JudgeItem({"id": row["id"], "metric_en": row["metric_en"]}, spec,
                               build_judge_messages(spec, fields)))
    return items


def judge_params(temperature: float | None, max_tokens: int) -> DecodingParams:
    """The judge's decoding parameters (temperature 0 unless told otherwise)."""
    return DecodingParams.resolve(max_tokens=max_tokens, temperature=temperature)


@dataclass
class JudgeDryRun:
    """What a judge dry run wrote and estimated."""

    requests_written: int
    already_done: int
    estimate: CostEstimate


def dry_run(run: runs.RunDir, items: Sequence[JudgeItem], judge_model: str, params: DecodingParams, *,
            price_in: float | None = None, price_out: float | None = None) -> JudgeDryRun:
    """Write every judge request to ``judge_requests.jsonl`` (id, metric_en, spec, messages) and
    estimate the tokens and cost of those a real run would still send; sends nothing."""
    from charactereval_lib.engine.grading.judging import plan_judging

    written = runs.write_jsonl_atomic(run.artifact(JUDGE_REQUESTS), (
        {**item.key, "spec": item.spec.name, "judge_model": judge_model, "messages": item.messages} for item in items))
    plan = plan_judging(run.judge_scores, items, judge_model, params, KEY_FIELDS)
    requests = [GenerationRequest(i, "", item.messages) for i, item in enumerate(plan.pending)]
    estimate = estimate_cost(requests, params.max_tokens, price_in=price_in, price_out=price_out)
    run.update_manifest(judge_dry_run={"judge_model": judge_model, "parameters": params.as_dict(),
                                       "requests": written, "pending": len(plan.pending),
                                       "estimate": {"method": "character-based", "input_tokens": estimate.input_tokens,
                                                    "output_tokens_typical": estimate.output_tokens_typical,
                                                    "output_tokens_max": estimate.output_tokens_max,
                                                    "price_in_usd_per_m": price_in, "price_out_usd_per_m": price_out}})
    return JudgeDryRun(written, plan.already_done, estimate)


def describe(backend_description: Mapping[str, Any], specs: Mapping[str, ModelGradedSpec],
             data: OfficialData) -> dict[str, Any]:
    """What run.json records about a judge session: the backend's description (never the key),
    the spec of each metric with its file digest, and the data digests."""
    digests = specs_digest(specs)
    return {
        **backend_description,
        "judge_model": backend_description.get("model"),
        "specs": {m: {"name": s.name, "source": s.source, "sha256": digests[m], "parser": s.parser,
                      "eval_type": s.eval_type, "invalid_score": s.invalid_score} for m, s in specs.items()},
        "data_sha256": generation_task(data).data_sha256,
    }


# --- both scorers side by side -------------------------------------------------------------------


def scorer_scores(run: str | runs.RunDir) -> pd.DataFrame:
    """Every scorer's latest scores of the run in long form: id, metric_en, scorer, score,
    invalid (judge only; False for the reward model), scorer_model (checkpoint digest or judge
    model). Rows without a score of a scorer are absent for it; invalid judge answers are present."""
    run = runs.RunDir.resolve(run)
    parts = []
    for scorer in runs.SCORERS:
        _, scored = run.scored_rows(scorer)
        for record in scored:
            parts.append({"id": record["id"], "metric_en": record["metric_en"], "scorer": scorer,
                          "score": record.get("score"), "invalid": bool(record.get("invalid")),
                          "scorer_model": record.get("judge_model") or record.get("checkpoint_sha256")})
    frame = pd.DataFrame(parts, columns=["id", "metric_en", "scorer", "score", "invalid", "scorer_model"])
    frame["score"] = pd.to_numeric(frame["score"])
    return frame


def paired_scores(run: str | runs.RunDir) -> pd.DataFrame:
    """Rows both scorers scored, wide: id, metric_en, reward-model, judge, judge_invalid. A
    judge score is NaN where its answer was invalid and its spec leaves invalid answers unscored."""
    frame = scorer_scores(run)
    if set(frame["scorer"]) != set(runs.SCORERS):
        missing = ", ".join(sorted(set(runs.SCORERS) - set(frame["scorer"])))
        raise runs.RunError(f"{runs.RunDir.resolve(run).path}: no scores of {missing} yet; both scorers must score it")
    wide = frame.pivot_table(index=["id", "metric_en"], columns="scorer", values="score", aggfunc="first",
                             dropna=False)
    invalid = frame[frame["scorer"] == runs.JUDGE].set_index(["id", "metric_en"])["invalid"]
    wide = wide.reindex(columns=list(runs.SCORERS))
    both = frame.groupby(["id", "metric_en"])["scorer"].nunique() == len(runs.SCORERS)
    wide = wide[both.reindex(wide.index, fill_value=False)]
    wide["judge_invalid"] = invalid.reindex(wide.index).fillna(False).astype(bool)
    wide.columns.name = None
    return wide.reset_index()


def scorer_agreement(run: str | runs.RunDir, *, n_boot: int = 1000, seed: int = 0,
                     confidence: float = 0.95) -> pd.DataFrame:
    """Agreement of the reward model and the judge on the rows both scored (``agreement_table``:
    Pearson, Spearman, Kendall tau-b, quadratic kappa, exact; per metric and overall, each with
    a cluster-bootstrap interval by sample). Rows with an unscored invalid judge answer are left
    out; ``invalid_left_out`` per metric says how many."""
    paired = paired_scores(run)
    table = agreement_table(paired, runs.REWARD_MODEL, runs.JUDGE, n_boot=n_boot, seed=seed, confidence=confidence)
    left_out = paired[paired[runs.JUDGE].isna()].groupby("metric_en").size()
    table["invalid_left_out"] = [int(left_out.sum()) if m == OVERALL else int(left_out.get(m, 0))
                                 for m in table["metric_en"]]
    return table
