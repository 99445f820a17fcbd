"""CharacterEval in ``charactereval batch``: its batch plan (``engine.registry.batching.BatchPlan``), named
by its registry declaration.

A model entry (after the config's ``defaults``) names the model under test (``backend``,
``model`` and the generate shorthands), the reward model (``rm`` and the score shorthands), an
optional metric-stratified ``subset``, and any other ``generate:``/``score:`` setting. Its steps:
data, subset, generate, transform (the generation part: it asks Ray for ``ray.generate_gpus``
GPUs when the model is an hf one, none otherwise: an API or offline model only waits on the
network), then score, summarize, report and one report per judge the config names that the run
holds (the scoring part: ``ray.score_gpus``). The config's ``n_boot``, ``baselines`` and
``judges`` are its report settings; two or more finished models get a comparison.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, ClassVar

from pydantic import model_validator

from charactereval_lib.charactereval import layout
from charactereval_lib.charactereval.benchmark import NAME
from charactereval_lib.charactereval.data import DataError, load_official_data
from charactereval_lib.engine import faults
from charactereval_lib.engine.registry.batching import GENERATION, SCORING, BatchEntry, BatchPlan, ModelResult, Settings, step
from charactereval_lib.engine.validation import expect, is_int, problem
from charactereval_lib.pipeline import charactereval as stages
from charactereval_lib.pipeline.settings import GenerateSettings, ReportSettings, ScoreSettings, SummarizeSettings

SUBSET_IDS = "subset_ids.txt"
# The steps the overall bar counts per model (subset and each judge's report ride along).
BAR_STEPS = ("data", "generate", "transform", "score", "summarize", "report")
GENERATE_SHORTHANDS = ("base_url", "concurrency", "max_tokens", "temperature", "top_p", "seed", "request_params", "limit",
                       "ids")
SCORE_SHORTHANDS = ("device", "mode")

_Text = Annotated[str, expect("a non-empty string", lambda v: isinstance(v, str) and bool(v))]


class CharacterEvalEntry(BatchEntry):
    """One CharacterEval entry of ``models``. The shorthands and the ``generate:``/``score:``
    sections are checked by the pipeline settings they become."""

    unknown_key_hint: ClassVar[str] = " (other settings go under generate: or score:)"

    backend: _Text
    model: _Text
    rm: _Text
    subset: Annotated[int | None, expect("a positive integer", lambda v: v is None or (is_int(v) and v > 0))] = None
    generate: Settings = None
    score: Settings = None
    # Shorthands of generate settings.
    base_url: Any = None
    concurrency: Any = None
    max_tokens: Any = None
    temperature: Any = None
    top_p: Any = None
    seed: Any = None
    request_params: Any = None
    limit: Any = None
    ids: Any = None
    # Shorthands of score settings.
    device: Any = None
    mode: Any = None

    @model_validator(mode="after")
    def _one_selection(self) -> CharacterEvalEntry:
        chosen = [k for k in ("subset", "ids", "limit") if getattr(self, k) is not None]
        if len(chosen) > 1:
            raise problem(f"choose one of subset, ids, limit (got {chosen})")
        return self

    def shorthands(self, keys: tuple[str, ...]) -> dict[str, Any]:
        return {key: getattr(self, key) for key in keys if getattr(self, key) is not None}


@dataclass(frozen=True)
class ModelSpec:
    name: str
    generate: GenerateSettings
    score: ScoreSettings
    subset: int | None = None
    report: ReportSettings | None = None
    data_dir: str | None = None
    benchmark: str = NAME


class CharacterEvalPlan(BatchPlan):
    """CharacterEval's batch plan (see the module docstring)."""

    def entry_class(self) -> type[BatchEntry]:
        return CharacterEvalEntry

    def configure(self, values: Mapping[str, Any], where: str) -> dict[str, Any]:
        report_values = {"n_boot": values["n_boot"]}
        for key in ("baselines", "judges"):
            if values.get(key) is not None:
                report_values[key] = values[key]
        return {"report": ReportSettings.from_mapping(report_values, where), "data_dir": values.get("data_dir")}

    def model(self, entry: CharacterEvalEntry, where: str, shared: dict[str, Any]) -> ModelSpec:
        generate = {"backend": entry.backend, "model": entry.model, **entry.shorthands(GENERATE_SHORTHANDS),
                    **(entry.generate or {})}
        score = {"rm": entry.rm, **entry.shorthands(SCORE_SHORTHANDS), **(entry.score or {})}
        return ModelSpec(entry.name, GenerateSettings.from_mapping(generate, f"{where}: generate"),
                         ScoreSettings.from_mapping(score, f"{where}: score"), entry.subset, shared["report"],
                         entry.data_dir or shared["data_dir"])

    def bar_steps(self) -> tuple[str, ...]:
        return BAR_STEPS

    def preflight(self, models: Sequence[ModelSpec], config: Any) -> list[str]:
        """The official data, every model's reward-model directory, API key variables and
        endpoints. One line per problem."""
        from charactereval_lib.charactereval.reward.download import check_rm_dir

        problems = []
        for data_dir in dict.fromkeys(spec.data_dir for spec in models):
            try:
                load_official_data(data_dir)
            except DataError as exc:
                problems.append(f"data: {exc}")
        checked: dict[str, list[str]] = {}
        for spec in models:
            where = f"{config.path}: model {spec.name!r}"
            rm = spec.score.rm or ""
            if rm not in checked:
                checked[rm] = check_rm_dir(rm, required=("config.json", "tokenizer.model")) if Path(rm).is_dir() \
                    else [f"{rm}: no such reward-model directory (see `charactereval rm download` / `rm make-tiny`)"]
            problems += [f"{where}: rm: {p}" for p in checked[rm]]
            settings = spec.generate
            if settings.backend != "openai":
                continue
            if settings.base_url is None and not os.environ.get(settings.api_key_env):
                problems.append(f"{where}: the API key variable {settings.api_key_env} is not set")
            if settings.base_url is not None:
                found = faults.endpoint_problem(settings.base_url)
                if found:
                    problems.append(f"{where}: {found}")
        return problems

    def gpus(self, part: str, model: ModelSpec, ray: Any) -> float:
        if part == SCORING:
            return ray.score_gpus
        return ray.generate_gpus if model.generate.backend == "hf" else 0.0

    def run(self, model: ModelSpec, config: Any, result: ModelResult, parts: Sequence[str]) -> None:
        run = layout.CharacterEvalRun.resolve(config.output_dir / model.name)
        step(result, "data")
        data = load_official_data(model.data_dir)
        if GENERATION in parts:
            _generation_steps(model, config, result, run, data)
        if SCORING in parts:
            _scoring_steps(model, config, result, run, data)

    def compare(self, models: Sequence[ModelSpec], config: Any) -> str:
        runs_dirs = [layout.CharacterEvalRun.resolve(config.output_dir / spec.name).path for spec in models]
        return str(stages.compare(runs_dirs, config.comparison_dir, models[0].report, data_dir=models[0].data_dir).html)


def _generation_steps(spec: ModelSpec, config: Any, result: ModelResult, run: layout.CharacterEvalRun, data: Any) -> None:
    from charactereval_lib.charactereval.subsets import stratified_subset, write_ids

    settings = spec.generate
    if spec.subset is not None:
        step(result, "subset")
        ids = stratified_subset(data, spec.subset)
        path = write_ids(run.artifact(SUBSET_IDS), ids, comment=f"stratified subset of {spec.subset} samples")
        settings = GenerateSettings.from_mapping({**settings.as_dict(), "ids": str(path)})
    step(result, "generate")
    generated = stages.generate(run, settings, data=data, progress=config.progress)
    result.failed_samples = generated.failed
    step(result, "transform")
    stages.transform(run, data=data)


def _scoring_steps(spec: ModelSpec, config: Any, result: ModelResult, run: layout.CharacterEvalRun, data: Any) -> None:
    step(result, "score")
    stages.score(run, spec.score, data=data, progress=config.progress)
    step(result, "summarize")
    stages.summarize(run, SummarizeSettings(n_boot=spec.report.n_boot), data_dir=spec.data_dir)
    step(result, "report")
    held = run.judge_models()
    judges = tuple(j for j in spec.report.judges if j in held)
    if len(judges) < len(spec.report.judges):
        missing = ", ".join(j for j in spec.report.judges if j not in held)
        print(f"   {result.name}: no scores of judge(s) {missing}; the report shows {', '.join(judges) or 'every judge of the run'}",
              flush=True)
    result.report = str(stages.report(run, spec.report.replace(judges=judges), data_dir=spec.data_dir).html)
    for model in judges:
        step(result, f"report of judge {model}")
        judged = spec.report.replace(scorer=layout.JUDGE, judge_model=model, judges=())
        result.judge_reports.append(str(stages.report(run, judged, data_dir=spec.data_dir).html))
