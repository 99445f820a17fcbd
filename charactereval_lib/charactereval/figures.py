"""CharacterEval's report figures: radars beside the paper, the bf16 score grid, sample sizes,
context length, failures, character and novel extremes, paired differences. Built from the
engine's figure blocks (``engine.reports.plots``) on the Agg canvas, with the CJK font when installed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from charactereval_lib.charactereval import reference
from charactereval_lib.charactereval.diagnostics import (
    NOT_ESTIMABLE,
    binned_means,
    dimension_estimable,
    estimable,
    grid_bins,
    grid_check,
    grid_step,
    on_bf16_grid,
    paired_estimable,
    sample_size_table,
    score_grid,
)
from charactereval_lib.charactereval.protocol import DIMENSIONS, METRICS
from charactereval_lib.charactereval.statistics import PairedComparison, Statistics
from charactereval_lib.engine.reports.plots import (
    RUN_PALETTE,
    color_palette,
    count_axis,
    integer_bins,
    message_figure,
    new_figure,
    radar_axes,
    with_cjk_font,
    wrap_label,
)

# Where the score grid's step changes (sigmoid crosses a power of two), within typical scores.
GRID_STEP_BOUNDARIES = (1.5, 2.0, 3.0)
# Above this many grid values in the plotted range, minor ticks would merge into a bar.
MAX_GRID_TICKS = 300
# The declared score scale: the reward model's sigmoid x 4 + 1.
SCORE_MIN, SCORE_MAX = 1.0, 5.0


def _run_values(runs: Mapping[str, Statistics], level: str) -> pd.DataFrame:
    frames = []
    for name, stats in runs.items():
        if level == "metric":
            table = stats.metrics.assign(axis=stats.metrics["abbr"], estimable=estimable(stats.metrics["n"]))
        else:
            table = stats.dimensions.assign(axis=stats.dimensions["name"], estimable=dimension_estimable(stats))
        frames.append(table.assign(series=name, kind="run", value=table["mean"])[
            ["series", "kind", "axis", "value", "ci_low", "ci_high", "estimable"]])
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def _paper_values(baselines: Sequence[str], level: str, table: pd.DataFrame | None) -> pd.DataFrame:
    if not baselines:
        return pd.DataFrame(columns=["series", "kind", "axis", "value"])
    cells = reference.paper_cells(baselines, table)
    cells = cells[cells["kind"] == level]
    axis = cells["abbr"] if level == "metric" else cells["name"]
    return pd.DataFrame({"series": cells["model"], "kind": "paper", "axis": axis, "value": cells["value"]})


def _not_estimable_labels(names: Sequence[str], runs: Mapping[str, Statistics], level: str) -> list[str]:
    """Axis labels, with "(n<4)" where some run has a value on that axis but no interval (an
    axis without any value, before scoring, is simply left empty)."""
    flagged = set()
    for stats in runs.values():
        if level == "metric":
            m = stats.metrics
            flagged |= set(m.loc[~estimable(m["n"]) & m["mean"].notna(), "abbr"])
        else:
            d = stats.dimensions
            flagged |= set(d.loc[~dimension_estimable(stats) & d["mean"].notna(), "name"])
    return [f"{name}\n({NOT_ESTIMABLE})" if name in flagged else name for name in names]


@with_cjk_font
def radars(
    runs: Mapping[str, Statistics], baselines: Sequence[str] = (), *, table: pd.DataFrame | None = None
) -> Figure:
    """Two radars side by side on the declared 1-5 scale: the 12 metric means and the 3
    dimension averages of one or more runs (intervals shaded) with chosen paper baselines
    (dashed), one legend for both. Axes whose interval cannot be estimated say n<4."""
    fig = new_figure(14, 7.2)
    halves = [np.nanmax((s.metrics["ci_high"] - s.metrics["ci_low"]).to_numpy(float) / 2) for s in runs.values()
              if s.metrics["ci_low"].notna().any()]
    widest = f", widest ±{max(halves):.2f}" if halves else ""
    level = next((f"{round(s.level * 100)}% " for s in runs.values()), "")
    fig.suptitle(f"Mean scores on the 1-5 scale (band and capped bars: {level}interval{widest}; dashed: paper, Table 4)")
    ax_m, ax_d = fig.subplots(1, 2, subplot_kw={"projection": "polar"})
    metric_axes = [m.abbr for m in METRICS]
    radar_axes(ax_m, pd.concat([_run_values(runs, "metric"), _paper_values(baselines, "metric", table)],
                                ignore_index=True),
                metric_axes, _not_estimable_labels(metric_axes, runs, "metric"), "12 metrics",
                (SCORE_MIN, SCORE_MAX))
    dimension_axes = [d.name for d in DIMENSIONS]
    radar_axes(ax_d, pd.concat([_run_values(runs, "dimension"), _paper_values(baselines, "dimension", table)],
                                ignore_index=True),
                dimension_axes, [wrap_label(lab) for lab in _not_estimable_labels(dimension_axes, runs, "dimension")],
                "3 dimensions (unweighted mean of metric means)", (SCORE_MIN, SCORE_MAX))
    fig.align_titles()
    handles, labels = ax_m.get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=min(len(labels), 6), frameon=False)
    return fig


# --- bf16 score grid ---------------------------------------------------------------------------


@with_cjk_font
def score_grid_histograms(scores: pd.DataFrame, *, max_bins: int = 400) -> Figure:
    """One histogram per metric with bins centred on the bf16 score grid (one grid value per bin
    unless the range holds more than ``max_bins`` values). Dotted lines mark where the grid step
    changes; off-grid scores are drawn in red below the axis and counted in the panel title."""
    if scores.empty:
        return message_figure("No scores yet: nothing to histogram.")
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
    color = color_palette(RUN_PALETTE)[0]
    for ax, metric in zip(axes.ravel(), METRICS):
        part = scores.loc[scores["metric_en"] == metric.metric_en, "score"].to_numpy(float)
        # One filled step outline per panel, not one bar per bin: up to 400 bins in 12 panels made
        # 4,800 patches, most of the figure's drawing time, for the same picture.
        ax.stairs(np.histogram(part, bins=edges)[0], edges, fill=True, color=color, linewidth=0)
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
    for ax in axes[:, 0]:
        count_axis(ax.yaxis, "rows")
    for ax in axes.ravel():
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    fig.supxlabel("score = bf16 sigmoid x 4 + 1")
    return fig


# --- sample size -------------------------------------------------------------------------------


@with_cjk_font
def sample_size_figure(
    stats: Statistics, scores: pd.DataFrame, *, failed: Mapping[str, int] | None = None,
    alpha: float = 0.05, power: float = 0.8,
) -> Figure:
    """Four panels: rows per metric (failed rows stacked when known), interval half-width vs n
    with the 1.96*sd/sqrt(n) curve (metrics with n<4 named, not plotted), minimum detectable
    difference per metric, and a histogram of rows per character."""
    if scores.empty:
        return message_figure("No scores yet: sample sizes are shown once the run is scored.")
    table = sample_size_table(stats, alpha=alpha, power=power)
    fig = new_figure(13, 8.5)
    (ax_n, ax_hw), (ax_mdd, ax_role) = fig.subplots(2, 2)
    palette = color_palette(RUN_PALETTE)
    x = np.arange(len(table))
    ax_n.bar(x, table["n"], color=palette[0], label="scored rows")
    if failed is not None:
        lost = np.array([failed.get(name, 0) for name in table["metric_en"]])
        ax_n.bar(x, lost, bottom=table["n"], color=palette[3], label="lost to failed generations")
    ax_n.set_xticks(x, table["abbr"], rotation=45)
    count_axis(ax_n.yaxis, "rows")
    ax_n.set_title("Rows per metric")
    # Headroom above the tallest bar keeps the legend off the bars.
    ax_n.set_ylim(0, ax_n.get_ylim()[1] * 1.2)
    ax_n.legend(fontsize="small", loc="upper center", ncol=2)

    shown = table[estimable(table["n"])]
    ax_hw.scatter(shown["n"], shown["ci_half_width"], color=palette[0])
    for _, row in shown.iterrows():
        ax_hw.annotate(row["abbr"], (row["n"], row["ci_half_width"]), fontsize="x-small", xytext=(3, 3),
                       textcoords="offset points")
    valid = shown.dropna(subset=["sd"])
    if len(valid):
        grid_n = np.linspace(max(2, valid["n"].min() * 0.8), valid["n"].max() * 1.2, 100)
        pooled_sd = float(np.sqrt(np.average(valid["sd"] ** 2, weights=valid["n"])))
        ax_hw.plot(grid_n, 1.96 * pooled_sd / np.sqrt(grid_n), color="grey", linestyle="--",
                   label=f"1.96 x sd / sqrt(n), sd = {pooled_sd:.2f}")
        ax_hw.legend(fontsize="small")
    small = table.loc[~estimable(table["n"]), "abbr"]
    if len(small):
        ax_hw.text(0.98, 0.02, f"{NOT_ESTIMABLE}, no interval: {', '.join(small)}", transform=ax_hw.transAxes,
                   ha="right", va="bottom", fontsize="small", color="firebrick")
    ax_hw.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax_hw.set_xlabel("n (rows)")
    ax_hw.set_ylabel(f"{round(stats.level * 100)}% CI half-width (score points)")
    ax_hw.set_title("Interval half-width vs n")

    ax_mdd.bar(x, table["mdd"], color=palette[2])
    for xi in x[~estimable(table["n"])]:
        ax_mdd.text(xi, 0, f" {NOT_ESTIMABLE}", rotation=90, ha="center", va="bottom", fontsize="small",
                    color="firebrick")
    ax_mdd.set_xticks(x, table["abbr"], rotation=45)
    ax_mdd.set_ylabel("score points")
    ax_mdd.set_title(f"Minimum detectable difference vs another run ({round(power * 100)}% power, alpha {alpha})")

    if "role" in scores.columns:
        per_role = scores.groupby("role").size().to_numpy()
        ax_role.hist(per_role, bins=integer_bins(per_role), color=palette[1], edgecolor="white")
        ax_role.set_title(
            f"Rows per character ({len(per_role)} characters; min {per_role.min()}, "
            f"median {np.median(per_role):g}, max {per_role.max()})"
        )
        count_axis(ax_role.xaxis, "rows per character")
        count_axis(ax_role.yaxis, "characters")
    else:
        ax_role.axis("off")
        ax_role.text(0.5, 0.5, "no character information", ha="center")
    return fig


# --- context length ------------------------------------------------------------------------------


@with_cjk_font
def context_length_figure(scores_with_context: pd.DataFrame, *, bins: int = 8) -> Figure:
    """Score vs dialogue-context length (characters, log scale) per dimension, with the mean
    score in equal-count length bins."""
    if "context_chars" not in scores_with_context:
        return message_figure("No context lengths: the official data was not available.")
    if scores_with_context.empty:
        return message_figure("No scores yet: nothing to plot against context length.")
    dimension_of = {m.metric_en: m.dimension for m in METRICS}
    frame = scores_with_context.assign(dimension=scores_with_context["metric_en"].map(lambda m: dimension_of[m].name))
    fig = new_figure(15, 4.5)
    axes = fig.subplots(1, len(DIMENSIONS), sharey=True)
    palette = color_palette(RUN_PALETTE)
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


def failures_sentence(breakdown: pd.DataFrame) -> str | None:
    """What a report says instead of the failures figure when it would draw no bar (nothing to
    inspect, or every check at 0); None when some check counts something."""
    if breakdown.empty:
        return "No generations or rows to inspect."
    if not breakdown["count"].any():
        return f"No failures and no warning signs: all {len(breakdown)} checks are at 0."
    return None


@with_cjk_font
def failure_figure(breakdown: pd.DataFrame) -> Figure:
    """Share of samples or rows affected by each failure kind, with counts. Labels keep the
    ``role：`` marker as the tables spell it (full-width colon). Reports show
    ``failures_sentence`` instead when it has one (an empty panel says less than a sentence)."""
    sentence = failures_sentence(breakdown)
    if sentence:
        return message_figure(sentence)
    labels = breakdown["category"] + ": " + breakdown["detail"]
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


# --- characters and novels -----------------------------------------------------------------------


@with_cjk_font
def group_extremes(table: pd.DataFrame, by: str, *, label: str, k: int = 8, level: float = 0.95) -> Figure:
    """Forest plot of the ``k`` groups with the lowest and the ``k`` with the highest pooled
    centred mean (``analysis.group_results``: empirical Bayes, so a group of one sample sits
    near the average, not at an end), with their intervals and n; all groups when there are at
    most 2k. A grey cross marks each group's raw mean, to show how far pooling moved it."""
    if table.empty:
        return message_figure(f"No scores yet: no {label} to rank.")
    shown = table if len(table) <= 2 * k else pd.concat([table.head(k), table.tail(k)])
    fig = new_figure(9, 0.32 * len(shown) + 1.6)
    ax = fig.add_subplot()
    y = np.arange(len(shown))
    pooled = shown["pooled"].to_numpy(float)
    err = np.vstack([pooled - shown["pooled_low"].to_numpy(float), shown["pooled_high"].to_numpy(float) - pooled])
    color = color_palette(RUN_PALETTE)[0]
    ax.errorbar(pooled, y, xerr=err, fmt="o", color=color, capsize=2, markersize=4, label="pooled (empirical Bayes)")
    ax.plot(shown["mean_centred"].to_numpy(float), y, "x", color="grey", markersize=4, label="raw mean")
    ax.set_yticks(y, [f"{name} (n={n})" for name, n in zip(shown[by], shown["n_ids"])])
    ax.invert_yaxis()
    ax.axvline(0, color="grey", linewidth=0.8)
    if len(shown) < len(table):
        ax.axhline(k - 0.5, color="lightgrey", linewidth=0.8, linestyle="--")
    ax.legend(loc="best", fontsize="small")
    ax.set_xlabel(f"centred mean score (score minus its metric's run mean), pooled, {round(level * 100)}% interval")
    which = f"lowest and highest {k} of {len(table)}" if len(shown) < len(table) else f"all {len(table)}"
    ax.set_title(f"{label.capitalize()}: {which} (n = samples)")
    return fig


# --- comparisons ---------------------------------------------------------------------------------


@with_cjk_font
def paired_difference_figure(comparisons: Mapping[str, PairedComparison]) -> Figure:
    """Forest plot: per metric and dimension, each comparison's mean difference (on shared rows)
    with its paired bootstrap interval; a hollow marker where fewer than 4 shared rows leave no
    interval."""
    if not comparisons:
        return message_figure("No comparisons.")
    labels = [m.abbr for m in METRICS] + [f"{d.name} avg." for d in DIMENSIONS]
    fig = new_figure(9, 0.35 * len(labels) * max(1, len(comparisons)) ** 0.5 + 2)
    ax = fig.add_subplot()
    palette = color_palette(RUN_PALETTE, len(comparisons))
    offsets = np.linspace(-0.25, 0.25, len(comparisons)) if len(comparisons) > 1 else [0.0]
    y = np.arange(len(labels))
    flagged = False
    for (label, comparison), color, offset in zip(comparisons.items(), palette, offsets):
        ok = paired_estimable(comparison)
        cells = pd.concat([comparison.metrics, comparison.dimensions], ignore_index=True)
        diff = cells["diff"].to_numpy(float)
        err = np.vstack([diff - cells["ci_low"].to_numpy(float), cells["ci_high"].to_numpy(float) - diff])
        ax.errorbar(diff[ok], (y + offset)[ok], xerr=err[:, ok], fmt="o", color=color, capsize=2, markersize=4,
                    label=label)
        if (~ok).any():
            flagged = True
            ax.plot(diff[~ok], (y + offset)[~ok], "o", color=color, markerfacecolor="white", markersize=4)
    ax.axvline(0, color="grey", linewidth=0.8)
    ax.axhline(len(METRICS) - 0.5, color="lightgrey", linewidth=0.8)
    ax.set_yticks(y, labels)
    ax.invert_yaxis()
    note = f"; hollow: {NOT_ESTIMABLE} shared rows, no interval" if flagged else ""
    ax.set_xlabel(f"mean score difference on shared rows (with paired bootstrap interval{note})")
    ax.legend(fontsize="small")
    return fig
