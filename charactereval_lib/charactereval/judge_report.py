"""The CharacterEval judge in the reports: which judges a report shows and its file names, both
scorers (reward model and judge) side by side with their agreement, and the sections the
notebooks display (IPython items). The judge's scoring itself is ``charactereval.judge``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pandas as pd

from charactereval_lib.charactereval import judge_figures, layout
from charactereval_lib.charactereval.aggregate import METRIC_ORDER
from charactereval_lib.charactereval.analysis import interval_text, show
from charactereval_lib.charactereval.calibration import calibration_caveat
from charactereval_lib.charactereval.diagnostics import dimension_estimable, estimable, metric_label
from charactereval_lib.charactereval.protocol import DIMENSIONS, metrics_of
from charactereval_lib.charactereval.statistics import Statistics, metric_statistics
from charactereval_lib.charactereval.summary import load_run_scores
from charactereval_lib.engine.grading.agreement import OVERALL, agreement_table
from charactereval_lib.engine.reports.plots import keep
from charactereval_lib.engine.stats import DEFAULT_LEVEL, DEFAULT_N_BOOT, DEFAULT_SEED
from charactereval_lib.engine.storage import runs

# --- which judges a report shows, and its file names ----------------------------------------------


class ReportNames(NamedTuple):
    """A run's report files for one scorer, relative to the run directory."""

    notebook: str
    html: str
    figures: str


def report_names(scorer: str, judge_model: str | None = None) -> ReportNames:
    """The reward model's report is ``report.html`` with ``figures/``; each judge's report has
    its own names (``report-judge-<model>.html``, ``figures-judge-<model>/``), so that no report
    replaces another. Characters of the model name a file name cannot hold become ``_``."""
    if scorer == layout.REWARD_MODEL:
        return ReportNames("report.ipynb", "report.html", "figures")
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", judge_model or "").strip("._") or "judge"
    return ReportNames(f"report-judge-{slug}.ipynb", f"report-judge-{slug}.html", f"figures-judge-{slug}")


def shown_judges(run: str | Path | layout.CharacterEvalRun, scorer: str, judge_model: str | None = None,
                 judges: Sequence[str] = ()) -> list[str]:
    """The judges a report of ``scorer`` shows: a judge report shows its one judge
    (``CharacterEvalRun.select_judge``: a run holding several needs ``judge_model``); a reward-model report
    shows beside it the ``judges`` named, else ``judge_model``, else every judge of the run
    (each named one must have records here)."""
    run = layout.CharacterEvalRun.resolve(run)
    if scorer == layout.JUDGE:
        chosen = run.select_judge(judge_model)
        return [chosen] if chosen else []
    named = list(judges) or ([judge_model] if judge_model else [])
    return [run.select_judge(model) for model in named] if named else run.judge_models()


def common_judge(judges_per_run: Sequence[Sequence[str]], judge_model: str | None = None) -> tuple[str | None, str | None]:
    """The one judge a comparison shows beside the main scorer: ``judge_model``, else the judge
    every run holds (the first of them, with a note naming the others, when they share several);
    None when no judge is common to every run."""
    if judge_model is not None:
        return judge_model, None
    common = [m for m in (judges_per_run[0] if judges_per_run else []) if all(m in js for js in judges_per_run)]
    if len(common) > 1:
        return common[0], (f"the comparison shows the judge {common[0]}; the runs also share "
                           f"{', '.join(common[1:])} (choose with --judge-model)")
    return (common[0] if common else None), None


def side_caveats(run: str | layout.CharacterEvalRun, scorer: str, shown: Sequence[str]) -> list[str]:
    """The warnings of the scorer shown beside the main one: in a judge report, the reward
    model's (a tiny reward model, for one; each once); in a reward-model report, the
    calibration of each judge ``shown`` beside it (``calibration.calibration_caveat``)."""
    from charactereval_lib.charactereval.analysis import run_warnings

    run = layout.CharacterEvalRun.resolve(run)
    if scorer == layout.REWARD_MODEL:
        manifest = run.manifest()
        caveats = [(model, calibration_caveat(manifest, model)) for model in shown]
        return [f"Judge {model} (shown beside the reward model): {text}" for model, text in caveats if text]
    if not shown or not run.latest_scores():
        return []
    main = set(run_warnings(run.path, layout.JUDGE, shown[0]))
    return [f"Reward model (shown beside the judge): {w}" for w in run_warnings(run.path) if w not in main]


def comparison_caveats(run_dirs: Sequence[str | layout.CharacterEvalRun], scorer: str,
                       judge_model: str | None) -> list[str]:
    """What a comparison warns of the judge it shows beside the reward model: each run's
    calibration of that judge (a comparison of the judge's own scores says it in every run's
    warnings already)."""
    if scorer != layout.REWARD_MODEL or judge_model is None:
        return []
    return [f"{layout.CharacterEvalRun.resolve(r).name}: {caveat}" for r in run_dirs
            for caveat in side_caveats(r, scorer, [judge_model])]


def side_warnings(run: layout.CharacterEvalRun, scorer: str, judge_model: str, allow_mixed: bool) -> list[str]:
    """What the CLI says of the scorer shown beside ``scorer``'s scores: its mixed
    configurations (refused unless ``allow_mixed``) and its caveats (``side_caveats``: the
    reward model's in a judge report, the judge's calibration in a reward-model report)."""
    other = layout.JUDGE if scorer == layout.REWARD_MODEL else layout.REWARD_MODEL
    notes = []
    if run.latest_scores(scorer=other, judge_model=judge_model):
        mixed = run.check_consistent(allow_mixed=allow_mixed, scorer=other, judge_model=judge_model)
        notes = [f"MIXED SCORERS: {problem}" for problem in mixed]
    return notes + [w.replace("**", "") for w in side_caveats(run, scorer, [judge_model])]


def scale_items(scores: pd.DataFrame, scorer: str, figures_dir: str | Path | None = None) -> list[Any]:
    """The report section on the main scorer's score scale: for the reward model the bf16 score
    grid (its scores are ``bf16 sigmoid x 4 + 1``); for a judge a count per grade 1-5, the scale
    its grades live on."""
    from IPython.display import Markdown

    from charactereval_lib.charactereval import figures
    from charactereval_lib.charactereval.diagnostics import grid_check

    if scorer == layout.REWARD_MODEL:
        return [Markdown(
            "## Score grid (bf16)\n\nThe official reward model computes its sigmoid in bfloat16, so every faithful "
            "score is `bf16 sigmoid x 4 + 1`: steps of 0.015625 above 3, finer below. Scores off that grid did not "
            "come from a faithful scorer."), show(grid_check(scores)),
            keep(figures.score_grid_histograms(scores), "score_grid", figures_dir)]
    counts = judge_figures.grade_counts(scores)
    return [Markdown(
        "## Grades\n\nThe judge answers with a grade 1-5: rows per grade and metric (`n`: scored rows; invalid "
        "answers a spec scores count under the grade they were given, see the invalid column of the section "
        "below; `other`: a score that is not a whole grade)."), show(counts),
        keep(judge_figures.grade_figure(counts), "grades", figures_dir)]


# --- both scorers side by side -------------------------------------------------------------------


def scorer_scores(run: str | layout.CharacterEvalRun, judge_model: str | None = None) -> pd.DataFrame:
    """Every scorer's latest scores of the run in long form: id, metric_en, scorer, score,
    invalid (judge only; False for the reward model), scorer_model (checkpoint digest or judge
    model). Rows without a score of a scorer are absent for it; invalid judge answers are present.
    The judge is ``judge_model``, or the run's only judge (``CharacterEvalRun.select_judge``)."""
    run = layout.CharacterEvalRun.resolve(run)
    parts = []
    for scorer in layout.SCORERS:
        _, scored = run.scored_rows(scorer, judge_model)
        for record in scored:
            parts.append({"id": record["id"], "metric_en": record["metric_en"], "scorer": scorer,
                          "score": record.get("score"), "invalid": bool(record.get("invalid")),
                          "scorer_model": record.get("judge_model") or record.get("checkpoint_sha256")})
    frame = pd.DataFrame(parts, columns=["id", "metric_en", "scorer", "score", "invalid", "scorer_model"])
    frame["score"] = pd.to_numeric(frame["score"])
    return frame


def paired_scores(run: str | layout.CharacterEvalRun, judge_model: str | None = None) -> pd.DataFrame:
    """Rows both scorers scored, wide: id, metric_en, reward-model, judge, judge_invalid. A
    judge score is NaN where its answer was invalid and its spec leaves invalid answers unscored."""
    frame = scorer_scores(run, judge_model)
    if set(frame["scorer"]) != set(layout.SCORERS):
        missing = ", ".join(sorted(set(layout.SCORERS) - set(frame["scorer"])))
        raise runs.RunError(f"{layout.CharacterEvalRun.resolve(run).path}: no scores of {missing} yet; both scorers must score it")
    wide = frame.pivot_table(index=["id", "metric_en"], columns="scorer", values="score", aggfunc="first",
                             dropna=False)
    invalid = frame[frame["scorer"] == layout.JUDGE].set_index(["id", "metric_en"])["invalid"]
    wide = wide.reindex(columns=list(layout.SCORERS))
    both = frame.groupby(["id", "metric_en"])["scorer"].nunique() == len(layout.SCORERS)
    wide = wide[both.reindex(wide.index, fill_value=False)]
    wide["judge_invalid"] = invalid.reindex(wide.index).fillna(False).astype(bool)
    wide.columns.name = None
    return wide.reset_index()


def scorer_agreement(run: str | layout.CharacterEvalRun, *, judge_model: str | None = None, n_boot: int = 1000, seed: int = 0,
                     confidence: float = 0.95, paired: pd.DataFrame | None = None) -> pd.DataFrame:
    """Agreement of the reward model and the judge on the rows both scored (``agreement_table``:
    Pearson, Spearman, Kendall tau-b, quadratic kappa, exact; per metric and overall, each with
    a cluster-bootstrap interval by sample). Rows with an unscored invalid judge answer are left
    out; ``invalid_left_out`` per metric says how many. ``paired``: ``paired_scores(run)`` when
    already read."""
    paired = paired_scores(run, judge_model) if paired is None else paired
    table = agreement_table(paired, layout.REWARD_MODEL, layout.JUDGE, n_boot=n_boot, seed=seed, confidence=confidence)
    left_out = paired[paired[layout.JUDGE].isna()].groupby("metric_en").size()
    table["invalid_left_out"] = [int(left_out.sum()) if m == OVERALL else int(left_out.get(m, 0))
                                 for m in table["metric_en"]]
    return table


# --- the two scorers in the reports --------------------------------------------------------------


@dataclass
class ScorerComparison:
    """One run's two scorers for its report: each scorer's statistics (S9 means with intervals),
    the judge's invalid answers, and their agreement on the rows both scored. ``paired`` and
    ``agreement`` are None when the run holds only one scorer's scores."""

    run: str
    judge_model: str
    stats: dict[str, Statistics]
    judge_invalid: dict[str, int]
    paired: pd.DataFrame | None = None
    agreement: pd.DataFrame | None = None

    @property
    def both(self) -> bool:
        return self.agreement is not None


def compare_scorers(run: str | layout.CharacterEvalRun, *, judge_model: str | None = None, n_boot: int = DEFAULT_N_BOOT,
                    seed: int = DEFAULT_SEED, level: float = DEFAULT_LEVEL) -> ScorerComparison | None:
    """Both scorers of ``run`` side by side (None when the run holds no judge scores)."""
    run = layout.CharacterEvalRun.resolve(run)
    judge_model = run.select_judge(judge_model)
    if judge_model is None:
        return None
    stats, counts = {}, {}
    for scorer in layout.SCORERS:
        frame, counts[scorer] = load_run_scores(run, scorer, judge_model)
        if len(frame):
            stats[scorer] = metric_statistics(frame, n_boot=n_boot, seed=seed, level=level)
    comparison = ScorerComparison(run.name, judge_model, stats, counts[layout.JUDGE]["invalid_by_metric"])
    if len(stats) == len(layout.SCORERS):
        comparison.paired = paired_scores(run, judge_model)
        comparison.agreement = scorer_agreement(run, n_boot=n_boot, seed=seed, confidence=level,
                                                paired=comparison.paired)
    return comparison


def _estimate_text(value: float, low: float, high: float, ok: bool) -> str:
    return "–" if math.isnan(value) else f"{value:.3f} {interval_text(low, high, ok)}"


def scorer_table(comparison: ScorerComparison) -> pd.DataFrame:
    """Metric means and dimension averages of both scorers, one row per cell: per scorer its
    rows ``n`` and "mean [CI]" (n<4 where no interval), and the judge's invalid answers."""
    pct = round(next(iter(comparison.stats.values())).level * 100)
    columns: dict[str, list] = {}
    for scorer in layout.SCORERS:
        stats = comparison.stats.get(scorer)
        if stats is None:
            continue
        label = "reward model" if scorer == layout.REWARD_MODEL else f"judge {comparison.judge_model}"
        metrics, dims = stats.metrics, stats.dimensions
        columns.setdefault("cell", [metric_label(m) for m in metrics["metric_en"]] + [f"{n} avg." for n in dims["name"]])
        columns[f"{label} n"] = [*metrics["n"].astype(int), *([pd.NA] * len(dims))]
        if scorer == layout.JUDGE:
            columns[f"{label} invalid"] = [comparison.judge_invalid[m] for m in metrics["metric_en"]] + \
                [sum(comparison.judge_invalid[m.metric_en] for m in metrics_of(d)) for d in DIMENSIONS]
        ok = [*estimable(metrics["n"]), *dimension_estimable(stats)]
        cells = pd.concat([metrics, dims], ignore_index=True)
        columns[f"{label} mean [{pct}% CI]"] = [_estimate_text(v, lo, hi, k) for v, lo, hi, k in
                                               zip(cells["mean"], cells["ci_low"], cells["ci_high"], ok)]
    return pd.DataFrame(columns)


def agreement_display(table: pd.DataFrame, level: float = DEFAULT_LEVEL) -> pd.DataFrame:
    """``scorer_agreement``'s long table as shown: one row per metric (protocol order, overall
    last) with the rows used, the samples, the invalid answers left out, and each statistic as
    "value [CI]" (n<2 or undefined where it has no value)."""
    names = {"pearson": "Pearson", "spearman": "Spearman", "kendall_tau_b": "Kendall tau-b",
             "quadratic_kappa": "quadratic kappa", "exact": "exact agreement"}
    order = [m for m in [*METRIC_ORDER, OVERALL] if m in set(table["metric_en"])]
    rows = []
    for metric in order:
        part = table[table["metric_en"] == metric].set_index("statistic")
        first = part.iloc[0]
        row = {"metric": metric_label(metric) if metric != OVERALL else "overall", "n": int(first["n"]),
               "samples": int(first["n_clusters"]), "invalid left out": int(first["invalid_left_out"])}
        for statistic, name in names.items():
            estimate = part.loc[statistic]
            # Agreement statistics keep their percentile bootstrap: undefined below two rows.
            undefined = "n<2" if row["n"] < 2 else "undefined"
            row[name] = undefined if math.isnan(estimate["value"]) else _estimate_text(
                estimate["value"], estimate["low"], estimate["high"], bool(np.isfinite(estimate["low"])))
        rows.append(row)
    frame = pd.DataFrame(rows)
    frame.attrs["level"] = level
    return frame


def report_items(comparison: ScorerComparison | None, figures_dir: str | Path | None = None, *,
                 several: bool = False) -> list[Any]:
    """What a report shows of the two scorers, in order (headings, tables, the agreement grid),
    for the notebook to display; nothing for a run without judge scores, so its report is the
    reward model's alone. ``several``: the report shows several judges, so each one's headings
    and grid file carry its name."""
    from IPython.display import Markdown

    if comparison is None:
        return []
    pct = round(next(iter(comparison.stats.values())).level * 100)
    suffix = f": {comparison.judge_model}" if several else ""
    grid_name = "agreement" + (report_names(layout.JUDGE, comparison.judge_model).figures[len("figures"):]
                               if several else "")
    items: list[Any] = [Markdown(
        f"## Reward model and LLM judge{suffix}\n\nThe judge **{comparison.judge_model}** graded the same (sample, metric) "
        "rows. Per scorer: the rows it scored (`n`), the mean with its cluster-bootstrap interval and, for the judge, "
        "its invalid answers (no grade could be read: counted here, left out of the means when their spec says "
        "so). Dimension averages are unweighted means of the metric means."), show(scorer_table(comparison))]
    if comparison.both:
        items += [Markdown(
            f"### Agreement of the two scorers{suffix}\n\nOn the rows both scored (rows with an unscored invalid judge answer "
            f"left out and counted): Pearson, Spearman and Kendall tau-b on the raw scores; quadratic-weighted kappa "
            f"and exact agreement on scores rounded half up to grades 1-5. Each with a {pct}% cluster-bootstrap "
            "interval (sample ids resampled). The grid shows, per metric, the rounded reward-model score against "
            "the judge's grade (counts in the cells, the diagonal is exact agreement) with every row's raw score "
            "scattered over it."), show(agreement_display(comparison.agreement, pct / 100)),
            keep(judge_figures.agreement_grid(comparison.paired), grid_name, figures_dir)]
    else:
        missing = "reward model" if layout.REWARD_MODEL not in comparison.stats else "judge"
        items.append(Markdown(f"No agreement can be shown: the {missing} has not scored this run."))
    return items


def comparison_items(run_dirs: Sequence[str | layout.CharacterEvalRun], *, scorer: str = layout.REWARD_MODEL,
                     judge_model: str | None = None, n_boot: int = DEFAULT_N_BOOT, seed: int = DEFAULT_SEED,
                     level: float = DEFAULT_LEVEL) -> list[Any]:
    """What a comparison shows of the second scorer, in order: its means side by side (the
    comparison's main sections show ``scorer``'s) and each run's agreement of the two scorers.
    Nothing without ``judge_model`` (the runs were not all judged by one judge model)."""
    from IPython.display import Markdown

    from charactereval_lib.charactereval.analysis import load_run, side_by_side

    if judge_model is None:
        return []
    other = layout.JUDGE if scorer == layout.REWARD_MODEL else layout.REWARD_MODEL
    pct = round(level * 100)
    analyses = [load_run(r, n_boot=n_boot, seed=seed, level=level, scorer=other, judge_model=judge_model)
                for r in run_dirs]
    other_name = f"the LLM judge {judge_model}" if other == layout.JUDGE else "the reward model"
    items: list[Any] = [
        Markdown(f"## Reward model and LLM judge\n\nThe same rows scored by {other_name}: mean [{pct}% interval] "
                 "per metric and dimension average, runs in the order given (n<4: too few rows for an "
                 "interval)."),
        show(side_by_side(analyses)),
    ]
    comparisons = [compare_scorers(r, judge_model=judge_model, n_boot=n_boot, seed=seed, level=level)
                   for r in run_dirs]
    agreeing = [c for c in comparisons if c is not None and c.both]
    if agreeing:
        items += [
            Markdown(f"### Agreement of the two scorers\n\nPer run, on the rows both scored, with {pct}% "
                     "cluster-bootstrap intervals (see the single-run report for the definitions and the grid)."),
            show(pd.concat([agreement_display(c.agreement, level).assign(run=c.run) for c in agreeing],
                           ignore_index=True).pipe(lambda f: f[["run", *[c for c in f.columns if c != "run"]]])),
        ]
    return items
