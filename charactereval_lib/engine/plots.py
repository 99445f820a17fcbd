"""Figures for the reports. Each function returns a matplotlib Figure; ``save_png`` writes one
and ``keep`` renders one for display (and saves it beside the report).

Figures are built on the Agg canvas directly (no pyplot): nothing depends on, or changes, a
global backend, and no figure accumulates in pyplot's registry. Chinese text (character and
novel names, the ``role：`` marker) needs a CJK font: ``cjk_font`` finds one when installed
(Debian: ``fonts-noto-cjk``) and every figure is built with it as the fallback for glyphs the
default font lacks; without one, ``font_warnings`` says so for the report's warning box.
"""

from __future__ import annotations

import contextlib
import functools
import io
import math
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib import font_manager
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from charactereval_lib.charactereval import reference
from charactereval_lib.charactereval.aggregate import PairedComparison, Statistics
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
from charactereval_lib.charactereval.protocol import COLON, DIMENSIONS, METRICS

RUN_PALETTE = "deep"
BASELINE_PALETTE = "Dark2"
# Where the score grid's step changes (sigmoid crosses a power of two), within typical scores.
GRID_STEP_BOUNDARIES = (1.5, 2.0, 3.0)
# Above this many grid values in the plotted range, minor ticks would merge into a bar.
MAX_GRID_TICKS = 300
# The declared score scale: the reward model's sigmoid x 4 + 1.
SCORE_MIN, SCORE_MAX = 1.0, 5.0
PNG_DPI = 120

# CJK-capable families, most common first (fontconfig names on Debian/Ubuntu, macOS, Windows).
CJK_FONTS = (
    "Noto Sans CJK SC", "Noto Sans CJK JP", "Noto Sans SC", "Source Han Sans SC", "Source Han Sans CN",
    "WenQuanYi Zen Hei", "WenQuanYi Micro Hei", "Droid Sans Fallback", "PingFang SC", "Hiragino Sans GB",
    "Heiti SC", "Microsoft YaHei", "SimHei", "AR PL UMing CN",
)
# File name fragments of those fonts, to find one installed after matplotlib cached its font list.
CJK_FONT_FILES = ("notosanscjk", "notoserifcjk", "sourcehansans", "wqy-", "droidsansfallback", "ukai", "uming")
FONT_WARNING = (
    "No CJK font was found, so Chinese text in the figures (character and novel names, the "
    f"role{COLON} marker) renders as empty boxes. Install one (Debian/Ubuntu: "
    "`apt-get install fonts-noto-cjk`) and render the report again."
)
# Matplotlib's complaint about each glyph no font has: without a CJK font the report says it once.
_MISSING_GLYPH = r"Glyph \d+ .*missing from font"


@functools.cache
def cjk_font() -> str | None:
    """The family name of an installed CJK-capable font (``CJK_FONTS`` order), or None. Fonts
    installed after matplotlib cached its font list are found on disk and registered."""
    found = _listed_cjk_font()
    if found is None:
        registered = _register_system_cjk_fonts()
        found = _listed_cjk_font() or (registered[0] if registered else None)
    return found


def _listed_cjk_font() -> str | None:
    listed = {f.name for f in font_manager.fontManager.ttflist}
    return next((name for name in CJK_FONTS if name in listed), None)


def _register_system_cjk_fonts() -> list[str]:
    """Register every system font file that looks CJK by its file name; their family names."""
    names = []
    for path in sorted(font_manager.findSystemFonts()):
        if any(part in Path(path).name.lower() for part in CJK_FONT_FILES):
            try:
                font_manager.fontManager.addfont(path)
            except (OSError, RuntimeError):
                continue  # an unreadable font file: the others may do
            names.append(font_manager.FontProperties(fname=path).get_name())
    return names


def font_warnings() -> list[str]:
    """The report's warning about fonts: empty when a CJK font is installed."""
    return [] if cjk_font() else [FONT_WARNING]


def _with_cjk_font(build: Callable[..., Figure]) -> Callable[..., Figure]:
    """Build a figure with the CJK font after the default ones: matplotlib then draws each glyph
    the default font lacks (Chinese names, the full-width colon) with it. Text takes its font
    family when it is created, so this must wrap the building, not the drawing."""

    @functools.wraps(build)
    def built_with_fonts(*args: Any, **kwargs: Any) -> Figure:
        cjk = cjk_font()
        with matplotlib.rc_context({"font.family": [*matplotlib.rcParams["font.family"], cjk]} if cjk else {}):
            return build(*args, **kwargs)

    return built_with_fonts


@contextlib.contextmanager
def _glyph_warnings_reported_once() -> Iterator[None]:
    """Without a CJK font, drop matplotlib's warning for every missing glyph while drawing:
    ``font_warnings`` puts one in the report instead."""
    with warnings.catch_warnings():
        if cjk_font() is None:
            warnings.filterwarnings("ignore", message=_MISSING_GLYPH, category=UserWarning)
        yield


def new_figure(width: float, height: float) -> Figure:
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def render_png(fig: Figure, *, dpi: int = PNG_DPI) -> bytes:
    """The figure as PNG bytes, trimmed to its content so that no title or legend is clipped."""
    buffer = io.BytesIO()
    with _glyph_warnings_reported_once():
        fig.savefig(buffer, dpi=dpi, format="png", bbox_inches="tight", pad_inches=0.15, facecolor="white")
    return buffer.getvalue()


def save_png(fig: Figure, path: Path | str, *, dpi: int = PNG_DPI) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(render_png(fig, dpi=dpi))
    return path


def keep(fig: Figure, name: str, directory: Path | str | None) -> Any:
    """Render ``fig`` once as PNG, save it as ``directory/name.png`` when a directory is given,
    and return it for display: the report shows exactly the image left beside it."""
    from IPython.display import Image

    png = render_png(fig)
    if directory is not None:
        path = Path(directory) / f"{name}.png"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(png)
    return Image(data=png, format="png")


@_with_cjk_font
def _message_figure(text: str, width: float = 6, height: float = 1.5) -> Figure:
    fig = new_figure(width, height)
    ax = fig.add_subplot()
    ax.axis("off")
    ax.text(0.5, 0.5, text, ha="center", va="center", wrap=True)
    return fig


def _count_axis(axis: Any, label: str) -> None:
    """A count axis: integer ticks only, and its unit named."""
    axis.set_major_locator(MaxNLocator(integer=True))
    axis.set_label_text(label)


def integer_bins(values: np.ndarray, max_bins: int = 30) -> np.ndarray:
    """Histogram edges for integer data: each bin covers whole numbers, centred on them (edges at
    k - 0.5), several integers per bin when the range is wider than ``max_bins``."""
    low, high = int(np.min(values)), int(np.max(values))
    width = max(1, math.ceil((high - low + 1) / max_bins))
    return np.arange(low, high + width + 1, width) - 0.5


# --- radar -------------------------------------------------------------------------------------


def _wrap(label: str, width: int = 14) -> str:
    """Break a long axis label at spaces so it stays beside its spoke instead of running off."""
    words, lines = label.split(), [""]
    for word in words:
        if lines[-1] and len(lines[-1]) + 1 + len(word) > width:
            lines.append(word)
        else:
            lines[-1] = f"{lines[-1]} {word}".strip()
    return "\n".join(lines)


def _radar_axes(ax: Axes, values: pd.DataFrame, axes: Sequence[str], labels: Sequence[str], title: str) -> None:
    """One radar on ``ax`` on the declared 1-5 scale: runs solid with their interval shaded
    (no shading where it cannot be estimated), paper baselines dashed."""
    angles = np.linspace(0, 2 * np.pi, len(axes), endpoint=False)
    closed = np.append(angles, angles[0])
    ax.set_theta_offset(np.pi / 2)
    ax.set_theta_direction(-1)
    kinds = values.groupby("series", sort=False)["kind"].first()
    run_colors = iter(sns.color_palette(RUN_PALETTE, max(1, int((kinds == "run").sum()))))
    paper_colors = iter(sns.color_palette(BASELINE_PALETTE, max(1, int((kinds == "paper").sum()))))
    for series, kind in kinds.items():
        part = values[values["series"] == series].set_index("axis").reindex(list(axes))
        ring = np.append(part["value"].to_numpy(float), part["value"].iloc[0])
        if kind == "run":
            color = next(run_colors)
            ax.plot(closed, ring, color=color, linewidth=2, marker="o", markersize=3, label=series)
            low = part["ci_low"].where(part["estimable"].astype(bool)).to_numpy(float)
            high = part["ci_high"].where(part["estimable"].astype(bool)).to_numpy(float)
            ax.fill_between(closed, np.append(low, low[0]), np.append(high, high[0]), color=color, alpha=0.2,
                            linewidth=0)
        else:
            ax.plot(closed, ring, color=next(paper_colors), linewidth=1.2, linestyle="--", label=f"{series} (paper)")
    ax.set_ylim(SCORE_MIN, SCORE_MAX)
    # The centre is the scale's minimum, 1, not 0: it is labelled on its own (matplotlib does not
    # draw a tick label at the origin). Tick labels sit between the first two spokes on a white
    # patch, clear of the lines.
    ax.set_yticks(np.arange(SCORE_MIN + 1, SCORE_MAX + 1))
    ax.set_rlabel_position(float(np.degrees(angles[1] / 2)))
    ax.text(0, SCORE_MIN, str(int(SCORE_MIN)), ha="center", va="center", fontsize="small", color="dimgrey",
            bbox={"facecolor": "white", "edgecolor": "lightgrey", "boxstyle": "circle", "pad": 0.2})
    for tick in ax.get_yticklabels():
        tick.set_fontsize("small")
        tick.set_color("dimgrey")
        tick.set_bbox({"facecolor": "white", "edgecolor": "none", "alpha": 0.8, "pad": 1})
    ax.set_xticks(angles, list(labels))
    ax.tick_params(axis="x", pad=10)
    ax.set_title(title, pad=28, fontsize="medium")


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
    """Axis labels, with "(n<2)" where some run has a value on that axis but no interval (an
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


@_with_cjk_font
def radars(
    runs: Mapping[str, Statistics], baselines: Sequence[str] = (), *, table: pd.DataFrame | None = None
) -> Figure:
    """Two radars side by side on the declared 1-5 scale: the 12 metric means and the 3
    dimension averages of one or more runs (intervals shaded) with chosen paper baselines
    (dashed), one legend for both. Axes whose interval cannot be estimated say n<2."""
    fig = new_figure(14, 7.2)
    fig.suptitle("Mean scores on the 1-5 scale (shaded: bootstrap interval; dashed: paper, Table 4)")
    ax_m, ax_d = fig.subplots(1, 2, subplot_kw={"projection": "polar"})
    metric_axes = [m.abbr for m in METRICS]
    _radar_axes(ax_m, pd.concat([_run_values(runs, "metric"), _paper_values(baselines, "metric", table)],
                                ignore_index=True),
                metric_axes, _not_estimable_labels(metric_axes, runs, "metric"), "12 metrics")
    dimension_axes = [d.name for d in DIMENSIONS]
    _radar_axes(ax_d, pd.concat([_run_values(runs, "dimension"), _paper_values(baselines, "dimension", table)],
                                ignore_index=True),
                dimension_axes, [_wrap(lab) for lab in _not_estimable_labels(dimension_axes, runs, "dimension")],
                "3 dimensions (unweighted mean of metric means)")
    fig.align_titles()
    handles, labels = ax_m.get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=min(len(labels), 6), frameon=False)
    return fig


# --- bf16 score grid ---------------------------------------------------------------------------


@_with_cjk_font
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
    for ax in axes[:, 0]:
        _count_axis(ax.yaxis, "rows")
    for ax in axes.ravel():
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    fig.supxlabel("score = bf16 sigmoid x 4 + 1")
    return fig


# --- sample size -------------------------------------------------------------------------------


@_with_cjk_font
def sample_size_figure(
    stats: Statistics, scores: pd.DataFrame, *, failed: Mapping[str, int] | None = None,
    alpha: float = 0.05, power: float = 0.8,
) -> Figure:
    """Four panels: rows per metric (failed rows stacked when known), interval half-width vs n
    with the 1.96*sd/sqrt(n) curve (metrics with n<2 named, not plotted), minimum detectable
    difference per metric, and a histogram of rows per character."""
    if scores.empty:
        return _message_figure("No scores yet: sample sizes are shown once the run is scored.")
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
    _count_axis(ax_n.yaxis, "rows")
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
        _count_axis(ax_role.xaxis, "rows per character")
        _count_axis(ax_role.yaxis, "characters")
    else:
        ax_role.axis("off")
        ax_role.text(0.5, 0.5, "no character information", ha="center")
    return fig


# --- context length ------------------------------------------------------------------------------


@_with_cjk_font
def context_length_figure(scores_with_context: pd.DataFrame, *, bins: int = 8) -> Figure:
    """Score vs dialogue-context length (characters, log scale) per dimension, with the mean
    score in equal-count length bins."""
    if "context_chars" not in scores_with_context:
        return _message_figure("No context lengths: the official data was not available.")
    if scores_with_context.empty:
        return _message_figure("No scores yet: nothing to plot against context length.")
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


@_with_cjk_font
def failure_figure(breakdown: pd.DataFrame) -> Figure:
    """Share of samples or rows affected by each failure kind, with counts. Labels keep the
    ``role：`` marker as the tables spell it (full-width colon)."""
    if breakdown.empty:
        return _message_figure("No generations or rows to inspect.")
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


@_with_cjk_font
def group_extremes(table: pd.DataFrame, by: str, *, label: str, k: int = 8, level: float = 0.95) -> Figure:
    """Forest plot of the ``k`` groups with the lowest and the ``k`` with the highest centred
    mean (``analysis.group_results``), with their intervals; all groups when there are at most
    2k. Groups of one sample have no interval and say n<2."""
    if table.empty:
        return _message_figure(f"No scores yet: no {label} to rank.")
    shown = table if len(table) <= 2 * k else pd.concat([table.head(k), table.tail(k)])
    fig = new_figure(9, 0.32 * len(shown) + 1.6)
    ax = fig.add_subplot()
    y = np.arange(len(shown))
    ok = estimable(shown["n_ids"])
    mean = shown["mean_centred"].to_numpy(float)
    err = np.vstack([mean - shown["ci_low"].to_numpy(float), shown["ci_high"].to_numpy(float) - mean])
    color = sns.color_palette(RUN_PALETTE)[0]
    ax.errorbar(mean[ok], y[ok], xerr=err[:, ok], fmt="o", color=color, capsize=2, markersize=4)
    ax.plot(mean[~ok], y[~ok], "o", markerfacecolor="white", color=color, markersize=4)
    names = [f"{name} (n={n})" if good else f"{name} ({NOT_ESTIMABLE})"
             for name, n, good in zip(shown[by], shown["n_ids"], ok)]
    ax.set_yticks(y, names)
    ax.invert_yaxis()
    ax.axvline(0, color="grey", linewidth=0.8)
    if len(shown) < len(table):
        ax.axhline(k - 0.5, color="lightgrey", linewidth=0.8, linestyle="--")
    ax.set_xlabel(f"centred mean score (score minus its metric's run mean), {round(level * 100)}% interval")
    which = f"lowest and highest {k} of {len(table)}" if len(shown) < len(table) else f"all {len(table)}"
    ax.set_title(f"{label.capitalize()}: {which} (n = samples)")
    return fig


# --- comparisons ---------------------------------------------------------------------------------


@_with_cjk_font
def paired_difference_figure(comparisons: Mapping[str, PairedComparison]) -> Figure:
    """Forest plot: per metric and dimension, each comparison's mean difference (on shared rows)
    with its paired bootstrap interval; a hollow marker where fewer than 2 shared rows leave no
    interval."""
    if not comparisons:
        return _message_figure("No comparisons.")
    labels = [m.abbr for m in METRICS] + [f"{d.name} avg." for d in DIMENSIONS]
    fig = new_figure(9, 0.35 * len(labels) * max(1, len(comparisons)) ** 0.5 + 2)
    ax = fig.add_subplot()
    palette = sns.color_palette(RUN_PALETTE, len(comparisons))
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
