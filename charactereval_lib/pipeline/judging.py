"""LLM judging of CharacterEval runs: judge scores, pairwise battles, the best of n runs in one
prompt, meta-evaluation against human labels (under one answer format or several side by side),
panels of judges, and the reward model's training annotations as labels."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from charactereval_lib.charactereval import layout
from charactereval_lib.charactereval.data import OfficialData
from charactereval_lib.charactereval.protocol import PROTOCOL_VERSION
from charactereval_lib.engine import faults, outdir
from charactereval_lib.engine.registry import benchmarks
from charactereval_lib.engine.registry.settings import SettingsError, positive
from charactereval_lib.engine.stats import DEFAULT_LEVEL, DEFAULT_N_BOOT, DEFAULT_SEED
from charactereval_lib.engine.storage import artifacts, runs
from charactereval_lib.pipeline.charactereval import _analysable, _data, score
from charactereval_lib.pipeline.settings import JudgeSettings, PanelSettings, ScoreSettings


@dataclass
class JudgeOutcome:
    """What ``judge_score`` did: a judge session or a dry run."""

    run: layout.CharacterEvalRun
    summary: Any = None  # engine.grading.judging.JudgeSummary of a judge session
    dry_run: Any = None  # charactereval.judge.JudgeDryRun
    judge_model: str = ""
    # What the judge's reports will warn of its agreement with human labels (None: nothing).
    calibration: str | None = None


@dataclass
class BattleOutcome:
    """What ``battle`` did: this session's judge calls and the battle summary."""

    out: layout.CharacterEvalRun
    session: Any  # engine.grading.judging.JudgeSummary of this session's judge calls
    summary: dict[str, Any]  # battle_summary.json


@dataclass
class MetaevalOutcome:
    """What ``metaeval`` did: the scoring step and the agreement summary."""

    out: layout.CharacterEvalRun
    summary: dict[str, Any]  # metaeval_summary.json
    scoring: Any = None  # the JudgeOutcome or ScoreOutcome of the scoring step


@dataclass
class EvalTypesOutcome:
    """What ``metaeval_eval_types`` did: each eval type's meta-evaluation and the side-by-side
    summary (``eval_types_summary.json`` in ``out``)."""

    out: Path
    summary: dict[str, Any]
    outcomes: dict[str, MetaevalOutcome]


@dataclass
class BestOutcome:
    """What ``best`` did: this session's judge calls and the best-of-n summary."""

    out: layout.CharacterEvalRun
    session: Any  # engine.grading.judging.JudgeSummary of this session's judge calls
    summary: dict[str, Any]  # best_summary.json


@dataclass
class PanelOutcome:
    """What ``panel`` wrote: the panel summary (``panel_summary.json``) in ``out``."""

    out: Path
    summary: dict[str, Any]
    warnings: list[str] = field(default_factory=list)


@dataclass
class RmTrainOutcome:
    """What ``convert_rm_train`` wrote: the LABELS file, its source and counts."""

    labels: Path
    source: Path
    records: int
    samples: int
    role_prefixed: int


def judge_score(
    run: str | os.PathLike[str] | layout.CharacterEvalRun,
    settings: JudgeSettings,
    *,
    data_dir: str | os.PathLike[str] | None = None,
    data: OfficialData | None = None,
    dry_run: bool = False,
    progress: bool = False,
) -> JudgeOutcome:
    """``score --scorer judge``: every row of ``rows.jsonl`` graded by an LLM judge into
    ``judge_scores.jsonl`` (resuming by request digest; see ``charactereval.judge``). A dry run
    writes ``judge_requests.jsonl`` and estimates tokens and cost, sending nothing.
    ``settings.calibration`` (a ``metaeval`` directory of this judge) is recorded in run.json
    before any call (``charactereval.calibration``); the outcome's ``calibration`` is what the
    judge's reports will warn of its agreement with human labels. Raises
    ``JudgeInterrupted`` (records saved) on Ctrl-C / SIGTERM and ``RunAborted`` when the
    endpoint cannot be reached at all."""
    from charactereval_lib.charactereval import judge
    from charactereval_lib.charactereval.calibration import calibration_caveat, read_calibration
    from charactereval_lib.engine.generation.backends import make_backend
    from charactereval_lib.engine.grading.judging import run_judging

    run = benchmarks.require(layout.CharacterEvalRun.resolve(run), "charactereval")
    run.require(run.rows, "generate and transform the run first")
    run.check_protocol(PROTOCOL_VERSION)
    faults.check_writable(run.path, "run directory")
    data = _data(data_dir, data)
    specs = judge.load_specs(settings.spec, settings.eval_type)
    items = judge.judge_items(run, data, specs)
    params = settings.decoding()
    if dry_run:
        planned = judge.dry_run(run, items, settings.judge_model, params, price_in=settings.price_in,
                                price_out=settings.price_out)
        return JudgeOutcome(run, dry_run=planned, judge_model=settings.judge_model)
    calibration = (read_calibration(settings.calibration, settings.judge_model, settings.metascore_threshold)
                   if settings.calibration else None)
    faults.check_endpoints([settings.base_url], "judge")
    backend = make_backend("openai", settings.judge_model, params, settings.backend_options())
    describe = judge.describe(backend.describe(), specs, data)
    if calibration is not None:
        describe["calibration"] = calibration
    summary = run_judging(run, run.judge_scores, items, backend, judge_model=settings.judge_model, params=params,
                          key_fields=judge.KEY_FIELDS, manifest_section=judge.MANIFEST_SECTION,
                          manifest_key=settings.judge_model, describe=describe, progress=progress)
    return JudgeOutcome(run, summary=summary, judge_model=settings.judge_model,
                        calibration=calibration_caveat(run.manifest(), settings.judge_model))


def battle(
    run_a: str | os.PathLike[str] | layout.CharacterEvalRun,
    run_b: str | os.PathLike[str] | layout.CharacterEvalRun,
    out: str | os.PathLike[str],
    settings: JudgeSettings,
    *,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = DEFAULT_SEED,
    data_dir: str | os.PathLike[str] | None = None,
    data: OfficialData | None = None,
    progress: bool = False,
) -> BattleOutcome:
    """Run A against run B: each sample both replied to judged pairwise in both presentation
    orders (``settings.spec``: a pairwise spec; default the shipped ``battles/role_play.yaml``),
    resuming into ``OUT/battle_judgements.jsonl``; then win / tie / loss and position
    consistency with intervals in ``OUT/battle_summary.json``."""
    from charactereval_lib.charactereval import battle as battles
    from charactereval_lib.charactereval.judge_specs import load_battle_spec

    positive("n_boot", n_boot)
    _no_calibration(settings, "battle")
    run_a, run_b = (benchmarks.require(layout.CharacterEvalRun.resolve(r), "charactereval") for r in (run_a, run_b))
    out_dir = layout.CharacterEvalRun(Path(out))
    faults.check_writable(out_dir.path, "battle directory")
    pair = battles.check_pair(out_dir, run_a, run_b)
    data = _data(data_dir, data)
    spec = _comparison_spec(settings, load_battle_spec)
    items = battles.battle_items(run_a, run_b, data, spec)
    session = _judge_into(out_dir, battles, items, settings, {**pair, "spec": spec.source}, progress)
    summary = battles.summarize_battle(out_dir, spec, n_boot=n_boot, seed=seed)
    return BattleOutcome(out_dir, session, summary)


def _comparison_spec(settings: JudgeSettings, shipped: Callable[[], Any]) -> Any:
    """The spec of a battle or a best-of-n: ``settings.spec``, else the ``shipped`` one, with
    ``settings.eval_type`` as its answer format when given."""
    from charactereval_lib.engine.grading.spec import load_spec

    spec = load_spec(settings.spec) if settings.spec else shipped()
    return spec if settings.eval_type is None else dataclasses.replace(spec, eval_type=settings.eval_type)


def _judge_into(out_dir: layout.CharacterEvalRun, module: Any, items: Sequence[Any], settings: JudgeSettings,
                describe: Mapping[str, Any], progress: bool) -> Any:
    """One judge session of a comparison's ``items`` into ``OUT/<module.JUDGEMENTS>``, keyed by
    ``module.KEY_FIELDS`` and recorded under ``module.MANIFEST_SECTION`` with ``describe``."""
    from charactereval_lib.engine.generation.backends import make_backend
    from charactereval_lib.engine.grading.judging import run_judging

    params = settings.decoding()
    faults.check_endpoints([settings.base_url], "judge")
    backend = make_backend("openai", settings.judge_model, params, settings.backend_options())
    return run_judging(out_dir, out_dir.artifact(module.JUDGEMENTS), items, backend,
                       judge_model=settings.judge_model, params=params, key_fields=module.KEY_FIELDS,
                       manifest_section=module.MANIFEST_SECTION, progress=progress,
                       describe={**backend.describe(), "judge_model": settings.judge_model, **describe})


def best(
    run_list: Sequence[str | os.PathLike[str] | layout.CharacterEvalRun],
    out: str | os.PathLike[str],
    settings: JudgeSettings,
    *,
    orders: str = "rotations",
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = DEFAULT_SEED,
    data_dir: str | os.PathLike[str] | None = None,
    data: OfficialData | None = None,
    progress: bool = False,
) -> BestOutcome:
    """The best of n runs: each sample every run replied to judged with all n replies in one
    prompt (evals' multicomp; ``settings.spec``: a multicomp spec, default the shipped
    ``best/role_play.yaml``), in every cyclic order (``orders="rotations"``) or once in the order
    given (``"given"``, evals' own), resuming into ``OUT/best_judgements.jsonl``; then how often
    each run and each position was chosen, with intervals, in ``OUT/best_summary.json``."""
    from charactereval_lib.charactereval import best as bests
    from charactereval_lib.charactereval.judge_specs import load_best_spec
    from charactereval_lib.engine.grading.multicomp import ORDERS

    positive("n_boot", n_boot)
    _no_calibration(settings, "best")
    if orders not in ORDERS:
        raise SettingsError(f"orders {orders!r}: expected one of {', '.join(ORDERS)}")
    resolved = [benchmarks.require(layout.CharacterEvalRun.resolve(r), "charactereval") for r in run_list]
    out_dir = layout.CharacterEvalRun(Path(out))
    spec = _comparison_spec(settings, load_best_spec)
    faults.check_writable(out_dir.path, "best directory")
    chosen = bests.check_runs(out_dir, resolved, spec, orders)
    data = _data(data_dir, data)
    items = bests.best_items(resolved, data, spec, orders)
    session = _judge_into(out_dir, bests, items, settings,
                          {**chosen, "spec": spec.source, "eval_type": spec.eval_type}, progress)
    summary = bests.summarize_best(out_dir, spec, [r.name for r in resolved], n_boot=n_boot, seed=seed)
    return BestOutcome(out_dir, session, summary)


def metaeval(
    labels: str | os.PathLike[str],
    out: str | os.PathLike[str],
    settings: JudgeSettings | ScoreSettings,
    *,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = DEFAULT_SEED,
    data_dir: str | os.PathLike[str] | None = None,
    data: OfficialData | None = None,
    progress: bool = False,
) -> MetaevalOutcome:
    """A scorer against human labels (format in ``charactereval.metaeval``): the labels become the
    rows of the run directory OUT, scored by the judge (``JudgeSettings``) or the reward model
    (``ScoreSettings``) exactly as a run is, resuming; then metascore, Cohen's kappa,
    Krippendorff's alpha and the confusion matrix with intervals in ``OUT/metaeval_summary.json``."""
    from charactereval_lib.charactereval import metaeval as meta
    from charactereval_lib.charactereval.calibration import METASCORE_THRESHOLD, metaeval_warnings

    positive("n_boot", n_boot)
    _no_calibration(settings, "metaeval")
    faults.check_writable(out, "metaeval directory")
    data = _data(data_dir, data)
    records = meta.read_labels(labels, data)
    out_run = layout.CharacterEvalRun(Path(out))
    meta.write_rows(out_run, records, data)
    if isinstance(settings, JudgeSettings):
        scorer, scoring = layout.JUDGE, judge_score(out_run, settings, data=data, progress=progress)
        scorer_model = settings.judge_model
    else:
        scorer, scoring = layout.REWARD_MODEL, score(out_run, settings, data=data, progress=progress)
        scorer_model = settings.rm
    judge_model = settings.judge_model if isinstance(settings, JudgeSettings) else None
    summary = meta.metaevaluate(records, meta.predictions(out_run, records, scorer, judge_model), n_boot=n_boot,
                                seed=seed)
    threshold = settings.metascore_threshold if isinstance(settings, JudgeSettings) else METASCORE_THRESHOLD
    summary = {"labels": str(Path(labels).resolve()), "scorer": scorer, "scorer_model": scorer_model,
               "eval_type": settings.eval_type if isinstance(settings, JudgeSettings) else None,
               "bootstrap": {"n_boot": n_boot, "seed": seed, "level": DEFAULT_LEVEL}, **summary,
               "metascore_threshold": threshold, "warnings": metaeval_warnings(summary, threshold),
               "created_at": runs.utc_now()}
    meta.write_summary(out_run, summary)
    return MetaevalOutcome(out_run, summary, scoring)


# The answer formats evals' meta-evaluation compares on one label set (its three entries that
# differ only in eval_type).
COMPARED_EVAL_TYPES = ("classify", "classify_cot", "cot_classify")
EVAL_TYPES_SUMMARY = "eval_types_summary.json"


def metaeval_eval_types(
    labels: str | os.PathLike[str],
    out: str | os.PathLike[str],
    settings: JudgeSettings,
    eval_types: tuple[str, ...] = COMPARED_EVAL_TYPES,
    *,
    n_boot: int = DEFAULT_N_BOOT,
    seed: int = DEFAULT_SEED,
    data_dir: str | os.PathLike[str] | None = None,
    data: OfficialData | None = None,
    progress: bool = False,
) -> EvalTypesOutcome:
    """One label set judged under several answer formats, side by side: a ``metaeval`` of the
    judge per eval type (every spec's ``eval_type`` replaced) in ``OUT/<eval_type>/``, each
    resuming on its own, then per eval type the metascore, Cohen's kappa, Krippendorff's alpha
    and the invalid answers in ``OUT/eval_types_summary.json``."""
    if not isinstance(settings, JudgeSettings):
        raise SettingsError("answer formats are the judge's: eval types need --scorer judge")
    if settings.eval_type is not None:
        raise SettingsError("give either one eval_type (every spec's) or several eval_types to compare, not both")
    if len(eval_types) < 2 or len(set(eval_types)) != len(eval_types):
        raise SettingsError(f"eval_types: two or more different answer formats to compare, got {list(eval_types)}")
    faults.check_writable(out, "metaeval directory")
    data = _data(data_dir, data)
    outcomes = {t: metaeval(labels, Path(out) / t, settings.replace(eval_type=t), n_boot=n_boot, seed=seed,
                            data=data, progress=progress) for t in eval_types}
    rows = []
    for eval_type, outcome in outcomes.items():
        overall = outcome.summary["groups"].get("overall") or {}
        rows.append({"eval_type": eval_type, "n": (overall.get("metascore") or {}).get("n", 0),
                     "unscored": outcome.summary["unscored"], "invalid": overall.get("invalid"),
                     **{name: overall.get(name) for name in ("metascore", "cohen_kappa", "krippendorff_alpha")}})
    summary = {"labels": str(Path(labels).resolve()), "judge_model": settings.judge_model,
               "bootstrap": {"n_boot": n_boot, "seed": seed, "level": DEFAULT_LEVEL}, "eval_types": rows,
               "metascore_threshold": settings.metascore_threshold,
               "warnings": [f"{t}: {w}" for t, o in outcomes.items() for w in o.summary["warnings"]],
               "created_at": runs.utc_now()}
    artifacts.write_json_atomic(Path(out) / EVAL_TYPES_SUMMARY, summary)
    return EvalTypesOutcome(Path(out), summary, outcomes)


def _no_calibration(settings: JudgeSettings | ScoreSettings, command: str) -> None:
    if isinstance(settings, JudgeSettings) and settings.calibration:
        raise SettingsError(f"calibration (--calibration) is recorded by score --scorer judge, not by {command}")


def panel(
    run: str | os.PathLike[str] | layout.CharacterEvalRun,
    settings: PanelSettings,
    out: str | os.PathLike[str] | None = None,
) -> PanelOutcome:
    """Several judges' scores of one run combined (``charactereval.panel``): each row's verdict,
    panel metric means with intervals, the judges' Krippendorff's alpha with its interval and
    every judge's invalid answers, into ``OUT`` (default ``RUN/panel``). Each judge's records
    must come from one configuration unless ``allow_mixed``."""
    from charactereval_lib.charactereval import panel as panels

    run = _analysable(run)
    default = run.artifact(panels.DEFAULT_DIR)
    if out is not None:
        outdir.check(out, outdir.REPORTS, inputs=[run.path], default=default)
    warnings = []
    for model in settings.judge_models:
        mixed = run.check_consistent(allow_mixed=settings.allow_mixed, scorer=layout.JUDGE,
                                     judge_model=run.select_judge(model))
        warnings += [f"MIXED SCORERS: {problem}" for problem in mixed]
    out_dir = Path(out) if out is not None else default
    faults.check_writable(out_dir, "panel directory")
    summary = panels.summarize_panel(run, settings.judge_models, settings.verdict, out_dir, n_boot=settings.n_boot,
                                     seed=settings.seed, level=settings.level, warnings=warnings)
    outdir.mark(out_dir, outdir.REPORTS, default=default)
    return PanelOutcome(out_dir, summary, summary["warnings"])


def convert_rm_train(
    out: str | os.PathLike[str],
    *,
    source: str | os.PathLike[str] | None = None,
    keys: Mapping[str, str] | None = None,
    data_dir: str | os.PathLike[str] | None = None,
    data: OfficialData | None = None,
) -> RmTrainOutcome:
    """The reward model's training annotations as a metaeval LABELS file ``out``, written only
    once every record passed the checks of ``metaeval.rm_train_labels`` (``source``: that file
    as it is; default: the data directory's ``rm_train_data.json``, checked against the pinned
    digests). Agreement on these rows is in-sample: the reward model was trained on them."""
    from charactereval_lib.charactereval import metaeval as meta
    from charactereval_lib.charactereval.data import load_rm_train

    faults.check_writable(Path(out).parent, "labels directory")
    data = _data(data_dir, data)
    path, document = load_rm_train(data_dir, source)
    labels = meta.rm_train_labels(document, path, data, dict(keys or {}))
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    artifacts.write_jsonl_atomic(out, labels)
    return RmTrainOutcome(out, path, len(labels), len({label["id"] for label in labels}),
                          meta.role_prefixed(labels, data))
