"""CharacterEval's stages: generate (S3, S4), transform (S5), score (S6, S8), summarize (S9),
report, compare and a run's overview."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from charactereval_lib.charactereval import layout
from charactereval_lib.charactereval.data import DataError, OfficialData, load_official_data
from charactereval_lib.charactereval.protocol import PROTOCOL_VERSION
from charactereval_lib.engine import faults, outdir
from charactereval_lib.engine.registry import benchmarks
from charactereval_lib.engine.storage import artifacts, runs
from charactereval_lib.pipeline.outcomes import COMPARISON_HTML, COMPARISON_NOTEBOOK, FIGURES_DIR, ReportOutcome, SummaryOutcome
from charactereval_lib.pipeline.settings import GenerateSettings, ReportSettings, ScoreSettings, SummarizeSettings, _ray_settings

if TYPE_CHECKING:
    import pandas as pd

@dataclass
class GenerateResult:
    run: layout.CharacterEvalRun
    # A dry run (nothing sent) or a real session; exactly one is set.
    dry_run: Any = None
    session: Any = None
    # Every test sample's state after this call: ok, error, missing.
    state: dict[str, int] = field(default_factory=dict)
    backend: str = ""

    @property
    def failed(self) -> int:
        """Selected samples whose latest record is an error (this session's or kept from before)."""
        return self.session.failed if self.session is not None else 0

    def exit_code(self) -> int:
        from charactereval_lib.engine.generation.engine import EXIT_OK, exit_code

        return EXIT_OK if self.session is None else exit_code(self.session)


@dataclass
class TransformOutcome:
    run: layout.CharacterEvalRun
    result: Any  # charactereval.transform.TransformResult
    warnings: list[str] = field(default_factory=list)


@dataclass
class ScoreOutcome:
    run: layout.CharacterEvalRun
    settings: Any  # the scorer settings actually used (device resolved)
    report: Any = None  # ScoringReport of a scoring session
    verify: dict[str, Any] | None = None  # the report of --verify
    dry_run_rows: int | None = None  # rm_inputs written by a dry run
    warnings: list[str] = field(default_factory=list)


# --- stages --------------------------------------------------------------------------------------


def _data(data_dir: str | os.PathLike[str] | None, data: OfficialData | None) -> OfficialData:
    return data if data is not None else load_official_data(data_dir)


def generate(
    run: str | os.PathLike[str] | layout.CharacterEvalRun,
    settings: GenerateSettings,
    *,
    data_dir: str | os.PathLike[str] | None = None,
    data: OfficialData | None = None,
    dry_run: bool = False,
    progress: bool = False,
) -> GenerateResult:
    """S3 + S4: the replies of the model under test, resuming (ids already ok are skipped).
    Raises ``GenerationInterrupted`` (records saved) when stopped by Ctrl-C or SIGTERM and
    ``RunAborted`` when the endpoint cannot be reached at all; works under Jupyter and papermill
    too (the engine runs its own event loop there)."""
    from charactereval_lib.charactereval.requests import generation_task, make_requests, read_ids_file, select_samples
    from charactereval_lib.engine.generation import engine
    from charactereval_lib.engine.generation.backends import make_backend

    run = layout.CharacterEvalRun.resolve(run)
    faults.check_writable(run.path, "run directory")
    data = _data(data_dir, data)
    ids = read_ids_file(Path(settings.ids)) if settings.ids else None
    samples = select_samples(data, limit=settings.limit, ids=ids)
    run.check_protocol(PROTOCOL_VERSION)
    requests, task = make_requests(samples, data), generation_task(data, keep_thinking=settings.keep_thinking)
    if dry_run:
        planned = engine.dry_run(run.path, requests, task, settings.decoding(), backend=settings.backend,
                                 model=settings.model, base_url=settings.base_url, retry_errors=settings.retry_errors,
                                 price_in=settings.price_in, price_out=settings.price_out)
        return GenerateResult(run, dry_run=planned, backend=settings.backend)
    if settings.backend == "openai":
        faults.check_endpoints([settings.base_url], "generate")
    if settings.engine == "ray":
        from charactereval_lib.engine.generation.ray_hf import RayHFBackend

        backend = RayHFBackend(settings.model, settings.decoding(), settings.backend_options(), _ray_settings(settings))
    else:
        backend = make_backend(settings.backend, settings.model, settings.decoding(), settings.backend_options())
    session = engine.run_generation(run.path, requests, backend, task, retry_errors=settings.retry_errors,
                                    progress=progress)
    return GenerateResult(run, session=session, state=engine.run_state(run.path, task.all_ids),
                          backend=settings.backend)


def transform(
    run: str | os.PathLike[str] | layout.CharacterEvalRun,
    *,
    data_dir: str | os.PathLike[str] | None = None,
    data: OfficialData | None = None,
) -> TransformOutcome:
    """S5: ``generations.jsonl`` -> ``rows.jsonl``."""
    from charactereval_lib.charactereval.transform import transform_run

    run = layout.CharacterEvalRun.resolve(run)
    run.check_protocol(PROTOCOL_VERSION)
    faults.check_writable(run.path, "run directory")
    result = transform_run(run.path, _data(data_dir, data))
    return TransformOutcome(run, result, list(result.warnings))


def score(
    run: str | os.PathLike[str] | layout.CharacterEvalRun,
    settings: ScoreSettings,
    *,
    data_dir: str | os.PathLike[str] | None = None,
    data: OfficialData | None = None,
    dry_run: bool = False,
    progress: bool = False,
) -> ScoreOutcome:
    """S6 + S8: score the rows not yet scored with this checkpoint and mode (resuming); a dry
    run writes the reward-model inputs only; ``settings.verify`` compares the two modes."""
    from charactereval_lib.charactereval.reward import scorer

    run = layout.CharacterEvalRun.resolve(run)
    run.check_protocol(PROTOCOL_VERSION)
    faults.check_writable(run.path, "run directory")
    scorer_settings = settings.scorer_settings(dry_run=dry_run, progress=progress)
    engine = None
    if settings.engine == "ray" and not dry_run:
        from charactereval_lib.charactereval.reward.ray_scorer import RayEngine

        # Before any work: without Ray installed, this is the one line saying how to install it.
        engine = RayEngine(_ray_settings(settings))
    data = _data(data_dir, data)
    outcome = ScoreOutcome(run, scorer_settings)
    rm_dir = Path(settings.rm) if settings.rm else None
    if dry_run:
        outcome.dry_run_rows = scorer.dry_run(run.path, data, rm_dir, scorer_settings.shard)
        return outcome
    if rm_dir is None:
        raise runs.RunError("a reward-model checkpoint directory is required (see `charactereval rm download`)")
    from charactereval_lib.charactereval.reward.tiny import tiny_label

    label = tiny_label(rm_dir)
    if label:
        outcome.warnings.append(f"{rm_dir}: {label}")
    if settings.verify:
        outcome.verify = scorer.verify_run(run.path, rm_dir, data, scorer_settings, settings.verify)
        return outcome
    outcome.report = scorer.score_run(run.path, rm_dir, data, scorer_settings, engine)
    if engine is not None and engine.pool.workers:
        # What the workers resolved "auto" to (cuda where Ray gave them a GPU), for the closing line.
        outcome.settings = replace(scorer_settings, device=",".join(engine.pool.devices()))
    outcome.warnings += outcome.report.warnings
    return outcome


def optional_data(data_dir: str | os.PathLike[str] | None) -> tuple[OfficialData | None, str | None]:
    """The official data when it can be loaded (per-metric failure counts need it), else None
    and the reason: a summary, or the leaderboard (CharacterEval's ``board_inputs``), is still
    worth having without it."""
    try:
        return load_official_data(data_dir), None
    except DataError as exc:
        return None, f"per-metric failure counts unavailable ({exc})"


def run_warnings(run: layout.CharacterEvalRun, *, allow_mixed: bool, scorer: str = layout.REWARD_MODEL,
                 judge_model: str | None = None) -> list[str]:
    """What a reader must know before any number of this run: refuses a run whose ``scorer``
    scores mix configurations unless ``allow_mixed`` (then the mix is the first warning)."""
    return warnings_and_evidence(run, allow_mixed=allow_mixed, scorer=scorer, judge_model=judge_model)[0]


def warnings_and_evidence(run: layout.CharacterEvalRun, *, allow_mixed: bool, scorer: str = layout.REWARD_MODEL,
                          judge_model: str | None = None, data: Any = None) -> tuple[list[str], Any]:
    """``run_warnings`` and the evidence checks (``engine.reports.evidence.Evidence``) they rest on;
    ``data``: the official data, which the samples check counts against when given."""
    from charactereval_lib.charactereval import analysis

    mixed = run.check_consistent(allow_mixed=allow_mixed, scorer=scorer, judge_model=judge_model)
    notes = [f"MIXED SCORERS: {problem}" for problem in mixed]
    caveats, evidence = analysis.run_warnings_and_evidence(run.path, scorer=scorer, judge_model=judge_model,
                                                           mix_said=bool(mixed), data=data)
    return notes + [_plain(warning) for warning in caveats], evidence


def _report_scorers(run: layout.CharacterEvalRun, settings: ReportSettings) -> tuple[list[str], list[str]]:
    """The judges a report shows (the judge of a judge report; for the reward model's, every
    judge it shows beside it: ``charactereval.judge_report.shown_judges``) and the warnings of every
    scorer it shows; each scorer's mixed configurations are refused unless ``allow_mixed``."""
    from charactereval_lib.charactereval.judge_report import shown_judges, side_warnings

    judge_models = shown_judges(run, settings.scorer, settings.judge_model, settings.judges)
    if settings.scorer == layout.JUDGE and not judge_models:
        raise runs.RunError(f"{run.path}: no judge scores (run `charactereval score RUN --scorer judge` first)")
    main_judge = judge_models[0] if settings.scorer == layout.JUDGE else None
    warnings = run_warnings(run, allow_mixed=settings.allow_mixed, scorer=settings.scorer, judge_model=main_judge)
    for model in judge_models:
        warnings = side_warnings(run, settings.scorer, model, settings.allow_mixed) + warnings
    return judge_models, warnings


def _plain(markdown: str) -> str:
    return markdown.replace("**", "")


def summarize(
    run: str | os.PathLike[str] | layout.CharacterEvalRun,
    settings: SummarizeSettings | None = None,
    *,
    data_dir: str | os.PathLike[str] | None = None,
    out: str | os.PathLike[str] | None = None,
) -> SummaryOutcome:
    """S9 with intervals of one scorer's scores: ``summary.json`` and ``metrics.csv`` for the
    reward model (default), ``judge_summary.json`` and ``judge_metrics.csv`` for the judge, in
    the run directory or ``out``; refuses a run that mixes scorer configurations unless
    ``settings.allow_mixed``."""
    from charactereval_lib.charactereval.summary import summarize_run

    settings = settings if settings is not None else SummarizeSettings()
    run = benchmarks.require(layout.CharacterEvalRun.resolve(run).require_dir(), "charactereval")
    if out:
        outdir.check(out, outdir.REPORTS, inputs=[run.path], default=run.path)
    faults.check_writable(out or run.path, "summary directory")
    judge_model = run.select_judge(settings.judge_model) if settings.scorer == layout.JUDGE else None
    data, note = optional_data(data_dir)
    warnings, evidence = warnings_and_evidence(run, allow_mixed=settings.allow_mixed, scorer=settings.scorer,
                                               judge_model=judge_model, data=data)
    if note:
        warnings.append(note)
    summary = summarize_run(run, id2metric=data.id2metric if data else None, n_boot=settings.n_boot,
                            seed=settings.seed, level=settings.level, warnings=warnings, scorer=settings.scorer,
                            judge_model=judge_model, out=Path(out) if out else None)
    if out:
        outdir.mark(out, outdir.REPORTS, default=run.path)
    return SummaryOutcome(run, summary, warnings, evidence)


def _analysable(run: str | os.PathLike[str] | layout.CharacterEvalRun) -> layout.CharacterEvalRun:
    run = benchmarks.require(layout.CharacterEvalRun.resolve(run).require_dir(), "charactereval")
    run.require(run.rows, "generate and transform the run first")
    return run


def _notebook_parameters(settings: ReportSettings, data_dir: str | os.PathLike[str] | None, figures: Path) -> dict:
    """Parameters the report and the comparison share (paths absolute: the kernel may run elsewhere)."""
    return {
        "data_dir": str(Path(data_dir).resolve()) if data_dir else None,
        "verify_data": settings.verify_data,
        "baselines": list(settings.baselines),
        "n_boot": settings.n_boot,
        "seed": settings.seed,
        "level": settings.level,
        "figures_dir": str(figures.resolve()),
        "scorer": settings.scorer,
    }


def report(
    run: str | os.PathLike[str] | layout.CharacterEvalRun,
    settings: ReportSettings | None = None,
    *,
    data_dir: str | os.PathLike[str] | None = None,
    out: str | os.PathLike[str] | None = None,
) -> ReportOutcome:
    """One run's report: ``OUT/report.ipynb`` (papermill) and ``OUT/report.html`` (OUT: the run
    directory unless given; a judge's report has its own names, see ``report_names``), both
    written only once the notebook ran through. The main sections show ``settings.scorer``'s
    scores; a run that also holds the other scorer's gets both side by side and their agreement."""
    from charactereval_lib.charactereval.judge_report import report_names
    from charactereval_lib.engine.reports import notebook as notebooks

    settings = settings if settings is not None else ReportSettings()
    run = _analysable(run)
    judge_models, warnings = _report_scorers(run, settings)
    judge_model = judge_models[0] if settings.scorer == layout.JUDGE else None
    names = report_names(settings.scorer, judge_model)
    out_dir = (outdir.check(out, outdir.REPORTS, inputs=[run.path], default=run.path)
               if out else run.path)
    parameters = {"run_dir": str(run.path.resolve()), "judge_model": judge_model, "judge_models": judge_models,
                  **_notebook_parameters(settings, data_dir, out_dir / names.figures)}
    # A failed notebook is kept in the folder for inspection: claimed first, so a rerun may use it.
    outdir.mark(out_dir, outdir.REPORTS, default=run.path)
    source = benchmarks.get("charactereval").notebook_path("analyse")
    notebook, html = notebooks.render(source, out_dir / names.notebook, out_dir / names.html, parameters,
                                      show_code=settings.show_code, title=f"CharacterEval report: {run.name}"
                                      + (f" (judge {judge_model})" if judge_model else ""))
    return ReportOutcome(notebook, html, warnings)


def compare_problems(run_list: Sequence[layout.CharacterEvalRun], scorer: str = layout.REWARD_MODEL,
                     judge_model: str | None = None) -> list[str]:
    """Why runs must not be compared as they are: the same run twice, or ``scorer``'s scores made
    with different configurations (checkpoint or judge model, mode) or protocol versions."""
    from charactereval_lib.engine.reports import kit

    problems = kit.repeated_runs(run_list)
    identities = {r.name: sorted(i.label() for i in r.scorer_identities(scorer, judge_model)) for r in run_list}
    if len({tuple(v) for v in identities.values()}) > 1:
        detail = "; ".join(f"{name}: {', '.join(labels) or 'unscored'}" for name, labels in identities.items())
        problems.append(f"the runs were scored with different scorer configurations ({detail})")
    protocols = {r.name: r.manifest().get("protocol_version") for r in run_list}
    return problems + kit.differing(protocols, "follow different protocol versions")


def compare(
    run_list: Sequence[str | os.PathLike[str] | layout.CharacterEvalRun],
    out_dir: str | os.PathLike[str],
    settings: ReportSettings | None = None,
    *,
    data_dir: str | os.PathLike[str] | None = None,
) -> ReportOutcome:
    """A comparison report of several runs (the first is the reference): ``OUT/comparison.ipynb``
    and ``OUT/comparison.html``. The main sections compare ``settings.scorer``'s scores; when
    every run also holds the judge's (of the same judge model), the judge's means and each run's
    agreement of the two scorers follow. Refuses runs that cannot be compared unless
    ``allow_mixed``."""
    from charactereval_lib.charactereval.judge_report import common_judge
    from charactereval_lib.engine.reports import notebook as notebooks

    settings = settings if settings is not None else ReportSettings()
    if len(run_list) < 2:
        raise runs.RunError("compare needs at least two runs")
    resolved = [_analysable(r) for r in run_list]
    out = outdir.check(out_dir, outdir.REPORTS, inputs=[*(r.path for r in resolved)])
    # A judge named for the batch that one run lacks is simply not common to the runs.
    judged = [_report_scorers(run, settings.replace(judges=tuple(
        j for j in settings.judges if j in run.judge_models()))) for run in resolved]
    # The judge's section needs one judge model in every run.
    judge_model, judge_note = common_judge([models for models, _ in judged], settings.judge_model)
    judges_text = ", ".join(f"{r.name}: {', '.join(m) or 'no judge scores'}" for r, (m, _) in zip(resolved, judged))
    if settings.scorer == layout.JUDGE and judge_model is None:
        raise runs.MixedRunError(f"cannot compare: the runs were not judged by one judge model ({judges_text})")
    problems = compare_problems(resolved, settings.scorer, judge_model)
    if judge_model is not None and settings.scorer == layout.REWARD_MODEL:
        problems += [p for p in compare_problems(resolved, layout.JUDGE, judge_model) if p not in problems]
    if problems and not settings.allow_mixed:
        raise runs.MixedRunError(f"cannot compare: {problems[0]} (--allow-mixed compares anyway, with a warning)")
    warnings = [f"NOT COMPARABLE: {p}" for p in problems]
    if judge_note:
        warnings.append(judge_note)
    if judge_model is None and any(m for m, _ in judged):
        warnings.append(f"the judge's section is left out: the runs were not judged by one judge model ({judges_text})")
    for run, (_, run_notes) in zip(resolved, judged):
        warnings += [f"{run.name}: {w}" for w in run_notes]
    parameters = {"run_dirs": [str(r.path.resolve()) for r in resolved], "judge_model": judge_model,
                  **_notebook_parameters(settings, data_dir, out / FIGURES_DIR)}
    title = "CharacterEval comparison: " + ", ".join(r.name for r in resolved)
    # A failed notebook is kept in the folder for inspection: claimed first, so a rerun may use it.
    outdir.mark(out, outdir.REPORTS)
    source = benchmarks.get("charactereval").notebook_path("compare")
    notebook, html = notebooks.render(source, out / COMPARISON_NOTEBOOK, out / COMPARISON_HTML, parameters,
                                      show_code=settings.show_code, title=title)
    return ReportOutcome(notebook, html, warnings)


@dataclass
class ImportOutcome:
    """What ``import_official`` made: the run, the file's kind (generation, generation_trans or
    evaluation) and the counts (``charactereval.official.ImportResult``)."""

    run: layout.CharacterEvalRun
    kind: str
    result: Any


def import_official(path: str | os.PathLike[str], run: str | os.PathLike[str] | layout.CharacterEvalRun, *,
                    data_dir: str | os.PathLike[str] | None = None, data: OfficialData | None = None) -> ImportOutcome:
    """An official generation / generation_trans / evaluation JSON file as a new run
    (``charactereval.official``)."""
    from charactereval_lib.charactereval.official import import_official as import_file

    run = layout.CharacterEvalRun.resolve(run)
    kind, result = import_file(Path(path), run.path, _data(data_dir, data))
    return ImportOutcome(run, kind, result)


def export_official(run: str | os.PathLike[str] | layout.CharacterEvalRun, *, out: str | os.PathLike[str] | None = None,
                    data_dir: str | os.PathLike[str] | None = None, data: OfficialData | None = None) -> list[Path]:
    """A run as the official scripts' JSON files in ``out`` (default ``RUN/official``); the
    paths written."""
    from charactereval_lib.charactereval.official import export_official as export_run

    run = layout.CharacterEvalRun.resolve(run)
    default = run.path / "official"
    if out:
        outdir.check(out, outdir.REPORTS, inputs=[run.path], default=default)
    written = export_run(run.path, _data(data_dir, data), Path(out) if out else None)
    if out:
        outdir.mark(out, outdir.REPORTS, default=default)
    return written


def overview(run: str | os.PathLike[str] | layout.CharacterEvalRun) -> pd.DataFrame:
    """What a run directory holds so far: one line per artifact with its record count."""
    import pandas as pd

    run = layout.CharacterEvalRun.resolve(run)
    statuses = pd.Series([g.get("status", "ok") for g in run.latest_generations().values()], dtype=object)
    lines = [
        ("requests.jsonl (dry run payloads)", len(artifacts.read_jsonl(run.requests).records)),
        ("generations: samples with a reply", int((statuses == "ok").sum())),
        ("generations: samples that failed", int((statuses != "ok").sum())),
        ("rows.jsonl: (id, metric) rows", len(run.read_rows())),
        ("rm_inputs.jsonl (dry run payloads)", len(artifacts.read_jsonl(run.artifact("rm_inputs.jsonl")).records)),
        ("scores: scored rows", len(run.latest_scores())),
        *((f"judge_scores: rows judged by {model}", len(run.latest_scores(scorer=layout.JUDGE, judge_model=model)))
          for model in run.judge_models()),
    ]
    return pd.DataFrame(lines, columns=["artifact", "count"]).assign(run=str(run.path))


def reproduction(*, data_dir: str | os.PathLike[str] | None = None, n_boot: int = 1000, seed: int = 0,
                 progress: bool = False, rm: str | None = None, device: str | None = None,
                 data: OfficialData | None = None,
                 files: dict[str, Path] | None = None) -> Callable[[Path], dict[str, Any]]:
    """CharacterEval's ``reproduce`` (``engine.registry.benchmarks.Reproduction``): the five released
    generations, scored with the checkpoint ``rm`` when given. The files and the official data
    (``files``/``data`` replace them, e.g. synthetic ones in tests) are checked here, before any
    work: a missing file is a one-line error, not a half-made report."""
    from charactereval_lib.charactereval.reproduce import released_paths
    from charactereval_lib.charactereval.reproduce import reproduce as recompute

    files = files if files is not None else released_paths(data_dir)
    data = _data(data_dir, data)
    settings = ScoreSettings(rm=rm, device=device)

    def make(staging: Path) -> dict[str, Any]:
        return recompute(staging, data=data, files=files, rm=rm, device=device, n_boot=n_boot, seed=seed,
                         score=lambda run_dir: score(run_dir, settings, data=data, progress=progress))

    return make
