"""Figures of reward-model vs judge agreement, for reports and notebooks.

Input is ``charactereval.judge.paired_scores(run)`` (one row per (id, metric) both scorers
scored). Per metric: a 5x5 heat map of the rounded reward-model score against the judge's grade
(counts in the cells, the diagonal is exact agreement) with every row's unrounded reward-model
score drawn over it as a jittered scatter, so the continuous scores are not hidden by the rounding
the kappa uses.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from charactereval_lib.charactereval.aggregate import METRIC_ORDER
from charactereval_lib.engine import runs
from charactereval_lib.engine.grading.agreement import DEFAULT_SCALE, round_half_up


def agreement_counts(paired: pd.DataFrame, metric: str | None = None,
                     scale: Sequence[int] = DEFAULT_SCALE) -> pd.DataFrame:
    """Counts of (rounded reward-model score, judge grade) for one metric (None: all rows);
    rows with an unscored invalid judge answer are left out. Index: reward model; columns: judge."""
    rows = paired if metric is None else paired[paired["metric_en"] == metric]
    rows = rows.dropna(subset=[runs.REWARD_MODEL, runs.JUDGE])
    low, high = min(scale), max(scale)
    rm = np.clip(round_half_up(rows[runs.REWARD_MODEL].to_numpy(dtype=float)), low, high).astype(int)
    judge = np.clip(round_half_up(rows[runs.JUDGE].to_numpy(dtype=float)), low, high).astype(int)
    table = pd.crosstab(pd.Series(rm, name="reward model"), pd.Series(judge, name="judge"))
    return table.reindex(index=list(scale), columns=list(scale), fill_value=0)


def agreement_axes(ax: Axes, paired: pd.DataFrame, metric: str | None = None, *, seed: int = 0,
                   scale: Sequence[int] = DEFAULT_SCALE) -> Axes:
    """Draw one metric's heat map and scatter on ``ax`` (see the module docstring)."""
    counts = agreement_counts(paired, metric, scale)
    low, high = min(scale), max(scale)
    ax.imshow(counts.to_numpy().T, origin="lower", cmap="Blues", extent=(low - 0.5, high + 0.5, low - 0.5, high + 0.5),
              aspect="auto")
    for i, rm in enumerate(counts.index):
        for j, judge in enumerate(counts.columns):
            if counts.iat[i, j]:
                ax.text(rm, judge, str(counts.iat[i, j]), ha="center", va="center", fontsize=7)
    rows = paired if metric is None else paired[paired["metric_en"] == metric]
    rows = rows.dropna(subset=[runs.REWARD_MODEL, runs.JUDGE])
    # Jitter only the judge axis: its grades are integers, the reward model's scores are not.
    jitter = np.random.default_rng(seed).uniform(-0.3, 0.3, len(rows))
    ax.scatter(rows[runs.REWARD_MODEL], rows[runs.JUDGE] + jitter, s=4, alpha=0.4, color="tab:orange")
    invalid = int(paired[runs.JUDGE].isna().sum() if metric is None else
                  paired.loc[paired["metric_en"] == metric, runs.JUDGE].isna().sum())
    title = metric or "all metrics"
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
