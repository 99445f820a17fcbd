"""Figures for the reports. Each function returns a matplotlib Figure; ``save_png`` writes one.

Figures are built on the Agg canvas directly (no pyplot): nothing depends on, or changes, a
global backend, no figure accumulates in pyplot's registry, and Jupyter still displays a
returned Figure inline. Labels stay ASCII (metric abbreviations, English names) because the
default fonts have no CJK glyphs.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from charactereval_lib.charactereval import reference
from charactereval_lib.charactereval.statistics import PairedComparison, Statistics
from charactereval_lib.charactereval.diagnostics import binned_means, grid_bins, grid_check, grid_step, on_bf16_grid, sample_size_table, score_grid
from charactereval_lib.charactereval.protocol import DIMENSIONS, METRICS

RUN_PALETTE = "deep"
BASELINE_PALETTE = "Dark2"
# Where the score grid's step changes (sigmoid crosses a power of two), within typical scores.
GRID_STEP_BOUNDARIES = (1.5, 2.0, 3.0)
# Above this many grid values in the plotted range, minor ticks would merge into a bar.
MAX_GRID_TICKS = 300


def new_figure(width: float, height: float) -> Figure:
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def save_png(fig: Figure, path: Path | str, *, dpi: int = 120) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi, format="png")
    return path


def keep(fig: Figure, name: str, directory: Path | str | None) -> Figure:
    """Save ``fig`` as ``directory/name.png`` when a directory is given, and return it for display:
    reports show each figure inline and leave a PNG beside the HTML for slides and papers."""
    if directory is not None:
        save_png(fig, Path(directory) / f"{name}.png")
    return fig


def _message_figure(text: str, width: float = 6, height: float = 2) -> Figure:
    fig = new_figure(width, height)
    ax = fig.add_subplot()
    ax.axis("off")
    ax.text(0.5, 0.5, text, ha="center", va="center", wrap=True)
    return fig


# --- radar -------------------------------------------------------------------------------------


def radar(values: pd.DataFrame, axes: Sequence[str], *, title: str) -> Figure:
    """Radar chart of tidy ``values`` (series, axis, value, kind run|paper, optional ci_low /
    ci_high). Runs are solid with their interval shaded; paper baselines are dashed."""
    if values.empty:
        return _message_figure(f"{title}: nothing to plot")
    angles = np.linspace(0, 2 * np.pi, len(axes), endpoint=False)
    closed = np.append(angles, angles[0])
    fig = new_figure(7, 7.5)
    ax = fig.add_subplot(projection="polar")
    ax.set_theta_offset(np.pi / 2)
    ax.set_theta_direction(-1)
    kinds = values.groupby("series", sort=False)["kind"].first()
    run_colors = iter(sns.color_palette(RUN_PALETTE, max(1, (kinds == "run").sum())))
    paper_colors = iter(sns.color_palette(BASELINE_PALETTE, max(1, (kinds == "paper").sum())))
    for series, kind in kinds.items():
        part = values[values["series"] == series].set_index("axis").reindex(list(axes))
        ring = np.append(part["value"].to_numpy(float), part["value"].iloc[0])
        if kind == "run":
            color = next(run_colors)
            ax.plot(closed, ring, color=color, linewidth=2, marker="o", markersize=3, label=series)
            if {"ci_low", "ci_high"} <= set(part.columns):
                low = np.append(part["ci_low"].to_numpy(float), part["ci_low"].iloc[0])
                high = np.append(part["ci_high"].to_numpy(float), part["ci_high"].iloc[0])
                ax.fill_between(closed, low, high, color=color, alpha=0.2, linewidth=0)
        else:
            ax.plot(closed, ring, color=next(paper_colors), linewidth=1.2, linestyle="--", label=f"{series} (paper)")
    finite = values[["value"]].to_numpy(float)
    finite = finite[np.isfinite(finite)]
    if finite.size:
        ax.set_ylim(max(1.0, math.floor((finite.min() - 0.25) * 2) / 2), min(5.0, math.ceil((finite.max() + 0.25) * 2) / 2))
    ax.set_xticks(angles)
    ax.set_xticklabels(list(axes))
    # Radial scale between the first two spokes, clear of the axis labels and the first values.
    ax.set_rlabel_position(float(np.degrees(angles[1] / 2)))
    ax.set_title(title, pad=24)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.08), ncol=3, fontsize="small", frameon=False)
    return fig


def _run_values(runs: Mapping[str, Statistics], level: str) -> pd.DataFrame:
    frames = []
    for name, stats in runs.items():
        if level == "metric":
            table = stats.metrics.assign(axis=stats.metrics["abbr"])
        else:
            table = stats.dimensions.assign(axis=stats.dimensions["name"])
        frames.append(table.assign(series=name, kind="run", value=table["mean"])[["series", "kind", "axis", "value", "ci_low", "ci_high"]])
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _paper_values(baselines: Sequence[str], level: str, table: pd.DataFrame | None) -> pd.DataFrame:
    if not baselines:
        return pd.DataFrame(columns=["series", "kind", "axis", "value"])
    cells = reference.paper_cells(baselines, table)
    cells = cells[cells["kind"] == level]
    axis = cells["abbr"] if level == "metric" else cells["name"]
    return pd.DataFrame({"series": cells["model"], "kind": "paper", "axis": axis, "value": cells["value"]})


def radar_metrics(
    runs: Mapping[str, Statistics], baselines: Sequence[str] = (), *, table: pd.DataFrame | None = None
) -> Figure:
    """The 12 metric means of one or more runs (with intervals) and chosen paper baselines."""
    values = pd.concat([_run_values(runs, "metric"), _paper_values(baselines, "metric", table)], ignore_index=True)
    return radar(values, [m.abbr for m in METRICS], title="12 metrics (mean score, 1-5)")


def radar_dimensions(
    runs: Mapping[str, Statistics], baselines: Sequence[str] = (), *, table: pd.DataFrame | None = None
) -> Figure:
    """The 3 dimension averages of one or more runs (with intervals) and chosen paper baselines."""
    values = pd.concat([_run_values(runs, "dimension"), _paper_values(baselines, "dimension", table)], ignore_index=True)
    return radar(values, [d.name for d in DIMENSIONS], title="3 dimensions (unweighted mean of metric means)")


# --- bf16 score grid ---------------------------------------------------------------------------


def score_grid_histograms(scores: pd.DataFrame, *, max_bins: int = 400) -> Figure:
    """One histogram per metric with bins centred on the bf16 score grid (one grid value per bin
    unless the range holds more than ``max_bins`` values). Dotted lines mark where the grid step
    changes; off-grid scores are drawn in red below the axis and counted in the panel title."""
    if scores.empty:
        return _message_figure("No scores yet: nothing to histogram.")
    values = scores["score"].to_numpy(float)
    finite = values[np.isfinite(values)]
    low, high = max(1.0, float(finite.min())), min(5.0, float(finite.max()))
    edges = grid_bins(low, high, max_bins=max_bins)
    checks = grid_check(scores).set_index("metric_en")
    fig = new_figure(16, 10)
    axes = fig.subplots(3, 4, sharex=True)
    grid = score_grid(edges[0], edges[-1])
    if len(grid) <= MAX_GRID_TICKS:
        # Minor ticks on every grid value: the gaps between bars are the grid, not missing data.
        axes[-1, 0].set_xticks(grid, minor=True)
    color = sns.color_palette(RUN_PALETTE)[0]
    for ax, metric in zip(axes.ravel(), METRICS):
        part = scores.loc[scores["metric_en"] == metric.metric_en, "score"].to_numpy(float)
        ax.hist(part, bins=edges, color=color, linewidth=0)
        for boundary in GRID_STEP_BOUNDARIES:
            if edges[0] < boundary < edges[-1]:
                ax.axvline(boundary, color="grey", linestyle=":", linewidth=0.8)
        off = part[~on_bf16_grid(part)] if part.size else part
        check = checks.loc[metric.metric_en]
        title = f"{metric.abbr}  n={check['n']}"
        if off.size:
            ax.plot(off, np.zeros_like(off), "|", color="red", markersize=12, clip_on=False)
            ax.set_title(f"{title}  OFF GRID: {check['off_grid']}", color="red")
        else:
            ax.set_title(f"{title}  off grid: 0")
    steps = ", ".join(f"{grid_step(b):g} above {b:g}" for b in reversed(GRID_STEP_BOUNDARIES))
    fig.suptitle(
        f"Scores on the bf16 grid (bins centred on grid values; step {steps}; dotted: step changes). "
        f"Off grid in total: {int(checks['off_grid'].sum())} of {len(scores)}"
    )
    fig.supxlabel("score = bf16 sigmoid x 4 + 1")
    return fig


# --- sample size -------------------------------------------------------------------------------


def sample_size_figure(
    stats: Statistics, scores: pd.DataFrame, *, failed: Mapping[str, int] | None = None,
    alpha: float = 0.05, power: float = 0.8,
) -> Figure:
    """Four panels: rows per metric (failed rows stacked when known), interval half-width vs n
    with the 1.96*sd/sqrt(n) curve, minimum detectable difference per metric, rows per
    character."""
    table = sample_size_table(stats, alpha=alpha, power=power)
    fig = new_figure(13, 8.5)
    (ax_n, ax_hw), (ax_mdd, ax_role) = fig.subplots(2, 2)
    palette = sns.color_palette(RUN_PALETTE)
    x = np.arange(len(table))
    ax_n.bar(x, table["n"], color=palette[0], label="scored rows")
    if failed is not None:
        lost = np.array([failed.get(name, 0) for name in table["metric_en"]])
        ax_n.bar(x, lost, bottom=table["n"], color=palette[3], label="lost to failed generations")
    ax_n.set_xticks(x, table["abbr"], rotation=45)
    ax_n.set_ylabel("rows")
    ax_n.set_title("Rows per metric")
    ax_n.legend(fontsize="small")

    ax_hw.scatter(table["n"], table["ci_half_width"], color=palette[0])
    for _, row in table.iterrows():
        ax_hw.annotate(row["abbr"], (row["n"], row["ci_half_width"]), fontsize="x-small", xytext=(3, 3),
                       textcoords="offset points")
    valid = table.dropna(subset=["sd"])
    if len(valid) and valid["n"].max() > 1:
        grid_n = np.linspace(max(2, valid["n"].min() * 0.8), valid["n"].max() * 1.2, 100)
        pooled_sd = float(np.sqrt(np.average(valid["sd"] ** 2, weights=valid["n"])))
        ax_hw.plot(grid_n, 1.96 * pooled_sd / np.sqrt(grid_n), color="grey", linestyle="--",
                   label=f"1.96 x sd / sqrt(n), sd = {pooled_sd:.2f}")
        ax_hw.legend(fontsize="small")
    ax_hw.set_xlabel("n (rows)")
    ax_hw.set_ylabel(f"{round(stats.level * 100)}% CI half-width")
    ax_hw.set_title("Interval half-width vs n")

    ax_mdd.bar(x, table["mdd"], color=palette[2])
    ax_mdd.set_xticks(x, table["abbr"], rotation=45)
    ax_mdd.set_ylabel("score points")
    ax_mdd.set_title(f"Minimum detectable difference vs another run ({round(power * 100)}% power, alpha {alpha})")

    if "role" in scores.columns and len(scores):
        per_role = scores.groupby("role").size()
        ax_role.hist(per_role.to_numpy(), bins=min(30, max(5, len(per_role) // 2)), color=palette[1])
        ax_role.set_title(
            f"Rows per character ({len(per_role)} characters; min {per_role.min()}, "
            f"median {int(per_role.median())}, max {per_role.max()})"
        )
        ax_role.set_xlabel("rows")
        ax_role.set_ylabel("characters")
    else:
        ax_role.axis("off")
        ax_role.text(0.5, 0.5, "no character information", ha="center")
    return fig


# --- context length ------------------------------------------------------------------------------


def context_length_figure(scores_with_context: pd.DataFrame, *, bins: int = 8) -> Figure:
    """Score vs dialogue-context length (characters, log scale) per dimension, with the mean
    score in equal-count length bins."""
    if scores_with_context.empty or "context_chars" not in scores_with_context:
        return _message_figure("No context lengths: the official data was not available.")
    dimension_of = {m.metric_en: m.dimension for m in METRICS}
    frame = scores_with_context.assign(dimension=scores_with_context["metric_en"].map(lambda m: dimension_of[m].name))
    fig = new_figure(15, 4.5)
    axes = fig.subplots(1, len(DIMENSIONS), sharey=True)
    palette = sns.color_palette(RUN_PALETTE)
    for ax, dimension, color in zip(axes, DIMENSIONS, palette):
        part = frame[frame["dimension"] == dimension.name]
        # Fainter points for bigger runs, so both 100 and 3,000 rows stay readable.
        alpha = float(np.clip(200 / max(len(part), 1), 0.15, 0.7))
        ax.scatter(part["context_chars"], part["score"], s=8, alpha=alpha, color=color, linewidths=0)
        means = binned_means(part, "context_chars", bins=bins)
        ax.plot(means["x_mid"], means["mean"], color="black", marker="o", markersize=3, label="binned mean")
        ax.set_xscale("log")
        ax.set_xlabel("context length (characters)")
        ax.set_title(f"{dimension.name} ({len(part)} rows)")
        ax.legend(fontsize="small")
    axes[0].set_ylabel("score")
    return fig


# --- failures ------------------------------------------------------------------------------------


def failure_figure(breakdown: pd.DataFrame) -> Figure:
    """Share of samples or rows affected by each failure kind, with counts."""
    if breakdown.empty:
        return _message_figure("No generations or rows to inspect.")
    labels = breakdown["category"] + ": " + breakdown["detail"].str.replace("\uff1a", ":", regex=False)
    fig = new_figure(10, 0.45 * len(breakdown) + 1.5)
    ax = fig.add_subplot()
    shares = breakdown["share"].fillna(0).to_numpy(float) * 100
    colors = ["#c44e52" if c else "#8c8c8c" for c in breakdown["count"]]
    y = np.arange(len(breakdown))
    ax.barh(y, shares, color=colors)
    for yi, share, count, total, unit in zip(y, shares, breakdown["count"], breakdown["total"], breakdown["unit"]):
        ax.text(share, yi, f"  {count} / {total} {unit}", va="center", fontsize="small")
    ax.set_yticks(y, labels)
    ax.invert_yaxis()
    ax.set_xlim(0, max(10.0, shares.max() * 1.3))
    ax.set_xlabel("% of samples or rows")
    ax.set_title("Failures and warning signs")
    return fig


# --- comparisons ---------------------------------------------------------------------------------


def paired_difference_figure(comparisons: Mapping[str, PairedComparison]) -> Figure:
    """Forest plot: per metric and dimension, each comparison's mean difference (A - B on shared
    rows) with its paired bootstrap interval."""
    if not comparisons:
        return _message_figure("No comparisons.")
    labels = [m.abbr for m in METRICS] + [f"{d.name} avg." for d in DIMENSIONS]
    fig = new_figure(9, 0.35 * len(labels) * max(1, len(comparisons)) ** 0.5 + 2)
    ax = fig.add_subplot()
    palette = sns.color_palette(RUN_PALETTE, len(comparisons))
    offsets = np.linspace(-0.25, 0.25, len(comparisons)) if len(comparisons) > 1 else [0.0]
    y = np.arange(len(labels))
    for (label, comparison), color, offset in zip(comparisons.items(), palette, offsets):
        cells = pd.concat([comparison.metrics, comparison.dimensions], ignore_index=True)
        diff = cells["diff"].to_numpy(float)
        err = np.vstack([diff - cells["ci_low"].to_numpy(float), cells["ci_high"].to_numpy(float) - diff])
        ax.errorbar(diff, y + offset, xerr=err, fmt="o", color=color, capsize=2, markersize=4, label=label)
    ax.axvline(0, color="grey", linewidth=0.8)
    ax.axhline(len(METRICS) - 0.5, color="lightgrey", linewidth=0.8)
    ax.set_yticks(y, labels)
    ax.invert_yaxis()
    ax.set_xlabel("mean score difference on shared rows (with paired bootstrap interval)")
    ax.legend(fontsize="small")
    return fig
