"""The CharacterEval judge scorer: an LLM judge grades the same (sample, metric) rows as the
reward model, into ``judge_scores.jsonl`` beside ``scores.jsonl``.

Each row's judge messages come from its metric's spec (the shipped ``judge_specs`` by default)
filled with the row's fields: ``role``, ``profile`` (S7's profile text, as the reward model
sees it), ``context`` (the raw dialogue) and ``response`` (the row's S5 reply); ``metric_en`` and
``metric_zh`` are there too for a custom spec shared by every metric. The calls, resume and
records are the engine's (``engine.grading.judging``); the judge in the reports is
``charactereval.judge_report``.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from charactereval_lib.charactereval import layout
from charactereval_lib.charactereval.aggregate import METRIC_ORDER
from charactereval_lib.charactereval.data import OfficialData
from charactereval_lib.charactereval.judge_specs import load_default_specs
from charactereval_lib.charactereval.prompts import profile_text
from charactereval_lib.charactereval.requests import generation_task
from charactereval_lib.charactereval.summary import JUDGE_SECTION
from charactereval_lib.engine.generation.base import DecodingParams, GenerationRequest
from charactereval_lib.engine.generation.estimate import CostEstimate, estimate_cost
from charactereval_lib.engine.grading.judging import JudgeItem, make_item
from charactereval_lib.engine.grading.spec import ModelGradedSpec, load_spec
from charactereval_lib.engine.storage import artifacts, runs

KEY_FIELDS = ("id", "metric_en")
MANIFEST_SECTION = JUDGE_SECTION
JUDGE_REQUESTS = "judge_requests.jsonl"


def load_specs(spec: str | Path | None = None, eval_type: str | None = None) -> dict[str, ModelGradedSpec]:
    """The spec of every metric: the shipped defaults; a FILE used for every metric; or a DIR
    holding ``<metric_en>.yaml`` for every metric (a missing one is an error naming it).
    ``eval_type`` replaces every spec's answer format (evals' eval-level ``eval_type``: the
    answer suffix and the parse order follow it)."""
    if spec is None:
        specs = load_default_specs()
    elif (path := Path(spec)).is_dir():
        missing = [m for m in METRIC_ORDER if not (path / f"{m}.yaml").is_file()]
        if missing:
            raise runs.RunError(f"{path}: no spec for metric(s) {', '.join(missing)} (expected <metric_en>.yaml each)")
        specs = {m: load_spec(path / f"{m}.yaml") for m in METRIC_ORDER}
    else:
        specs = dict.fromkeys(METRIC_ORDER, load_spec(path))
    if eval_type is None:
        return specs
    return {metric: dataclasses.replace(one, eval_type=eval_type) for metric, one in specs.items()}


def specs_digest(specs: Mapping[str, ModelGradedSpec]) -> dict[str, str]:
    """SHA-256 of each spec file used (by metric), recorded in run.json."""
    return {metric: hashlib.sha256(Path(spec.source).read_bytes()).hexdigest() for metric, spec in specs.items()}


def sample_fields(data: OfficialData, sample: Any) -> dict[str, str]:
    """What every judge prompt of a sample may use: ``role``, ``profile`` (S7's profile text,
    as the reward model sees it) and ``context`` (the raw dialogue)."""
    return {"role": sample.role, "profile": profile_text(data.profiles[sample.role]), "context": sample.context}


def judge_items(run: layout.CharacterEvalRun, data: OfficialData, specs: Mapping[str, ModelGradedSpec]) -> list[JudgeItem]:
    """One judge item per row of ``rows.jsonl`` (in file order)."""
    rows = run.read_rows()
    if not rows:
        raise runs.RunError(f"{run.rows}: no rows (run `charactereval transform` first)")
    samples = data.by_id()
    items = []
    for row in rows:
        fields = {**sample_fields(data, samples[row["id"]]), "response": row["model_output"],
                  "metric_en": row["metric_en"], "metric_zh": row["metric_zh"]}
        items.append(make_item({"id": row["id"], "metric_en": row["metric_en"]}, specs[row["metric_en"]], fields))
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


def dry_run(run: layout.CharacterEvalRun, items: Sequence[JudgeItem], judge_model: str, params: DecodingParams, *,
            price_in: float | None = None, price_out: float | None = None) -> JudgeDryRun:
    """Write every judge request to ``judge_requests.jsonl`` (id, metric_en, spec, messages) and
    estimate the tokens and cost of those a real run would still send; sends nothing."""
    from charactereval_lib.engine.grading.judging import plan_judging

    written = artifacts.write_jsonl_atomic(run.artifact(JUDGE_REQUESTS), (
        {**item.key, "spec": item.spec.name, "judge_model": judge_model, "messages": item.messages,
         **({"refused": item.refused} if item.refused else {})} for item in items))
    plan = plan_judging(run.judge_scores, items, judge_model, params, KEY_FIELDS)
    requests = [GenerationRequest(i, "", item.messages) for i, item in enumerate(plan.pending)]
    estimate = estimate_cost(requests, params.max_tokens, price_in=price_in, price_out=price_out)
    run.update_manifest(judge_dry_run={"judge_model": judge_model, "parameters": params.as_dict(),
                                       "requests": written, "pending": len(plan.pending),
                                       "estimate": {"method": "character-based", "input_tokens": estimate.input_tokens,
                                                    "output_tokens_typical": estimate.output_tokens_typical,
                                                    "output_tokens_max": estimate.output_tokens_max,
                                                    "price_in_usd_per_m": price_in, "price_out_usd_per_m": price_out}})
    return JudgeDryRun(written, plan.done, estimate)


def describe(backend_description: Mapping[str, Any], specs: Mapping[str, ModelGradedSpec],
             data: OfficialData) -> dict[str, Any]:
    """What run.json records about a judge session: the backend's description (never the key),
    the spec of each metric with its file digest, and the data digests."""
    digests = specs_digest(specs)
    return {
        **backend_description,
        "judge_model": backend_description.get("model"),
        "specs": {m: {"name": s.name, "source": s.source, "sha256": digests[m], "parser": s.parser,
                      "eval_type": s.eval_type, "invalid_score": s.invalid_score,
                      "ignored_fields": list(s.ignored_fields)} for m, s in specs.items()},
        "data_sha256": generation_task(data).data_sha256,
    }
