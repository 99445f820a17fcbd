"""Figures of reward-model vs judge agreement, for reports and notebooks.

Input is ``charactereval.judge_report.paired_scores(run)`` (one row per (id, metric) both scorers
scored). Per metric: a 5x5 heat map of the rounded reward-model score against the judge's grade
(counts in the cells, white on dark cells, the diagonal is exact agreement) with every row's
unrounded reward-model score drawn as a jittered scatter above and below each count, so the
continuous scores are not hidden by the rounding the kappa uses and the counts stay readable.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from charactereval_lib.charactereval import layout
from charactereval_lib.charactereval.aggregate import METRIC_ORDER
from charactereval_lib.charactereval.diagnostics import metric_label
from charactereval_lib.engine.grading.agreement import DEFAULT_SCALE, round_half_up


def agreement_counts(paired: pd.DataFrame, metric: str | None = None,
                     scale: Sequence[int] = DEFAULT_SCALE) -> pd.DataFrame:
    """Counts of (rounded reward-model score, judge grade) for one metric (None: all rows);
    rows with an unscored invalid judge answer are left out. Index: reward model; columns: judge."""
    rows = paired if metric is None else paired[paired["metric_en"] == metric]
    rows = rows.dropna(subset=[layout.REWARD_MODEL, layout.JUDGE])
    low, high = min(scale), max(scale)
    rm = np.clip(round_half_up(rows[layout.REWARD_MODEL].to_numpy(dtype=float)), low, high).astype(int)
    judge = np.clip(round_half_up(rows[layout.JUDGE].to_numpy(dtype=float)), low, high).astype(int)
    table = pd.crosstab(pd.Series(rm, name="reward model"), pd.Series(judge, name="judge"))
    return table.reindex(index=list(scale), columns=list(scale), fill_value=0)


CELL_CMAP = "Blues"
# A count label stays clear of the dots: they are jittered into the outer part of each cell row.
LABEL_BAND = 0.18
DOT_REACH = 0.45


def label_colours(counts: pd.DataFrame, cmap: str = CELL_CMAP) -> pd.DataFrame:
    """The colour of each cell's count label: white on a dark cell, black on a light one, by the
    relative luminance (sRGB weights) of the cell's colour under ``cmap`` scaled 0..max."""
    from matplotlib import colormaps

    values = counts.to_numpy(dtype=float)
    rgba = colormaps[cmap](values / max(1.0, values.max()))
    luminance = rgba[..., :3] @ np.array([0.2126, 0.7152, 0.0722])
    return pd.DataFrame(np.where(luminance < 0.5, "white", "black"), index=counts.index, columns=counts.columns)


def dot_offsets(n: int, seed: int = 0) -> np.ndarray:
    """Vertical jitter of the raw-score dots on the judge axis (its grades are integers, the
    reward model's scores are not): ``LABEL_BAND`` to ``DOT_REACH`` above or below the grade, so
    no dot lands on the count label at the cell's centre."""
    rng = np.random.default_rng(seed)
    return rng.choice([-1.0, 1.0], n) * rng.uniform(LABEL_BAND, DOT_REACH, n)


def agreement_axes(ax: Axes, paired: pd.DataFrame, metric: str | None = None, *, seed: int = 0,
                   scale: Sequence[int] = DEFAULT_SCALE) -> Axes:
    """Draw one metric's heat map and scatter on ``ax`` (see the module docstring)."""
    counts = agreement_counts(paired, metric, scale)
    low, high = min(scale), max(scale)
    ax.imshow(counts.to_numpy().T, origin="lower", cmap=CELL_CMAP, vmin=0, vmax=max(1, int(counts.to_numpy().max())),
              extent=(low - 0.5, high + 0.5, low - 0.5, high + 0.5), aspect="auto")
    colours = label_colours(counts)
    for i, rm in enumerate(counts.index):
        for j, judge in enumerate(counts.columns):
            if counts.iat[i, j]:
                ax.text(rm, judge, str(counts.iat[i, j]), ha="center", va="center", fontsize=7,
                        color=colours.iat[i, j], zorder=3)
    rows = paired if metric is None else paired[paired["metric_en"] == metric]
    rows = rows.dropna(subset=[layout.REWARD_MODEL, layout.JUDGE])
    ax.scatter(rows[layout.REWARD_MODEL], rows[layout.JUDGE] + dot_offsets(len(rows), seed), s=4, alpha=0.4,
               color="tab:orange", zorder=2)
    invalid = int(paired[layout.JUDGE].isna().sum() if metric is None else
                  paired.loc[paired["metric_en"] == metric, layout.JUDGE].isna().sum())
    title = metric_label(metric) if metric else ALL_METRICS
    ax.set_title(f"{title} (n={len(rows)}{f', {invalid} invalid' if invalid else ''})", fontsize=8)
    ax.set_xlim(low - 0.5, high + 0.5)
    ax.set_ylim(low - 0.5, high + 0.5)
    ax.set_xticks(list(scale))
    ax.set_yticks(list(scale))
    return ax


def agreement_figure(paired: pd.DataFrame, metric: str | None = None, *, seed: int = 0) -> Figure:
    """One metric's reward-model vs judge figure (None: all rows pooled)."""
    # A Figure with its own canvas, not pyplot: no global state, nothing shown twice in notebooks.
    fig = Figure(figsize=(3.6, 3.4))
    FigureCanvasAgg(fig)
    ax = fig.subplots()
    agreement_axes(ax, paired, metric, seed=seed)
    ax.set_xlabel("reward model (rounded cells, raw points)")
    ax.set_ylabel("judge")
    fig.tight_layout()
    return fig


def agreement_grid(paired: pd.DataFrame, *, seed: int = 0) -> Figure:
    """Every metric's figure in one grid (protocol order; metrics without paired rows skipped)."""
    metrics = [m for m in METRIC_ORDER if (paired["metric_en"] == m).any()]
    columns = 4
    rows = max(1, -(-len(metrics) // columns))
    fig = Figure(figsize=(3.2 * columns, 3.0 * rows))
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, columns, squeeze=False)
    for ax, metric in zip(axes.flat, metrics):
        agreement_axes(ax, paired, metric, seed=seed)
    for ax in list(axes.flat)[len(metrics):]:
        ax.set_visible(False)
    fig.supxlabel("reward model")
    fig.supylabel("judge")
    fig.tight_layout()
    return fig


ALL_METRICS = "all metrics"


def grade_counts(scores: pd.DataFrame, scale: Sequence[int] = DEFAULT_SCALE) -> pd.DataFrame:
    """A judge's scored rows counted per grade: one row per metric (``metric_en``, protocol order,
    metrics with no rows kept at 0) and ``ALL_METRICS``; columns ``n`` and one per grade. A score that is not
    a grade of ``scale`` (a spec with other choice scores) is counted under ``other``."""
    grades = [float(g) for g in scale]
    rows = []
    for metric in [*METRIC_ORDER, None]:
        part = scores if metric is None else scores[scores["metric_en"] == metric]
        values = pd.to_numeric(part["score"]).to_numpy(dtype=float)
        row = {"metric_en": metric or ALL_METRICS, "n": len(values)}
        row.update({str(int(g)): int((values == g).sum()) for g in grades})
        row["other"] = int(len(values) - sum(row[str(int(g))] for g in grades))
        rows.append(row)
    return pd.DataFrame(rows)


def grade_figure(counts: pd.DataFrame) -> Figure:
    """``grade_counts`` as one bar chart per metric: a count per grade, its n in the title."""
    per_metric = counts[counts["metric_en"] != ALL_METRICS]
    grades = [c for c in counts.columns if c not in ("metric_en", "n", "other")]
    columns = 4
    rows = max(1, -(-len(per_metric) // columns))
    fig = Figure(figsize=(3.2 * columns, 2.4 * rows))
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, columns, squeeze=False, sharey=False)
    for ax, (_, row) in zip(axes.flat, per_metric.iterrows()):
        heights = [int(row[g]) for g in grades]
        ax.bar(grades, heights, color="tab:blue")
        for x, height in zip(grades, heights):
            ax.text(x, height, str(height), ha="center", va="bottom", fontsize=7)
        other = f", {int(row['other'])} other" if row["other"] else ""
        ax.set_title(f"{metric_label(row['metric_en'])} (n={int(row['n'])}{other})", fontsize=8)
        ax.set_ylim(0, max(1, max(heights)) * 1.18)
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    for ax in list(axes.flat)[len(per_metric):]:
        ax.set_visible(False)
    fig.supxlabel("judge grade")
    fig.supylabel("rows")
    fig.tight_layout()
    return fig
