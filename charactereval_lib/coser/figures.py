"""Figures of the CoSER reports, built from the shared blocks of ``engine.reports.plots`` (canvas,
CJK-font fallback for book and character names, count axes): the scores against the paper's
anchor, the per-book averages, and rounds per scene with how scenes ended."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from charactereval_lib.coser.upstream import DIMENSIONS
from charactereval_lib.engine.reports.plots import RUN_PALETTE, color_palette, count_axis, new_figure, with_cjk_font
from charactereval_lib.engine.stats import MIN_CLUSTERS, TOO_FEW

SCORES = (*DIMENSIONS, "average")
SPLIT_COLORS = {"id": "#1f77b4", "ood": "#d62728"}
ANCHOR_COLOR = "black"
# Height per book row: 100 books fit without empty bands, two without squashing.
BOOK_ROW_INCHES = 0.22
# Title, axis label and legend: room for them however few the books.
BOOK_BASE_INCHES = 1.8


def _errors(cells: list[dict[str, Any]]) -> np.ndarray:
    """Matplotlib's (2, n) error lengths below and above each mean; 0 where there is no interval."""
    low = [c["mean"] - c["low"] if c.get("low") is not None else 0.0 for c in cells]
    high = [c["high"] - c["mean"] if c.get("high") is not None else 0.0 for c in cells]
    return np.array([low, high])


@with_cjk_font
def scores_figure(tables: Mapping[str, Mapping[str, Any]], anchor: Mapping[str, Any]) -> Figure:
    """Each run's four dimensions and average with 95% intervals (one marker colour per run),
    beside the paper's GPT-4o value with its printed +- (black diamonds)."""
    fig = new_figure(8, 1.2 + 0.75 * len(SCORES))
    ax = fig.add_subplot()
    y = np.arange(len(SCORES))[::-1].astype(float)
    width = 0.6 / max(1, len(tables))
    colors = color_palette(RUN_PALETTE, max(1, len(tables)))
    for k, (name, table) in enumerate(tables.items()):
        present = [i for i, s in enumerate(SCORES) if (table.get(s) or {}).get("mean") is not None]
        cells = [table[SCORES[i]] for i in present]
        offset = 0.3 - (k + 0.5) * width
        ax.errorbar([c["mean"] for c in cells], y[present] + offset, xerr=_errors(cells), fmt="o", capsize=3,
                    color=colors[k], label=f"{name} (95% interval)")
    paper = [anchor["dimensions"][s] for s in SCORES]
    ax.errorbar([p["value"] for p in paper], y - 0.38, xerr=[p["plus_minus"] for p in paper], fmt="D",
                color=ANCHOR_COLOR, capsize=3, markersize=5, label="paper: GPT-4o (±, as printed)")
    ax.set_yticks(y, [s if s != "average" else "Average" for s in SCORES])
    ax.set_xlabel("score (unclipped scores can exceed 100)")
    ax.grid(axis="x", alpha=0.3)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=2, fontsize="small", frameon=False)
    ax.set_title("Scores against the paper's anchor")
    return fig


@with_cjk_font
def book_figure(by_book: Mapping[str, Mapping[str, Any]]) -> Figure:
    """Each book's average score with its 95% interval (over the book's own scenes), sorted,
    coloured by split, its full title on the axis. A book of fewer than 4 scenes has no interval: a hollow
    marker labelled n<4. The rows fill the axis with half a row of margin, so no marker is cut."""
    books = sorted(((b, e) for b, e in by_book.items() if e["scores"].get("average", {}).get("mean") is not None),
                   key=lambda item: item[1]["scores"]["average"]["mean"])
    fig = new_figure(9, BOOK_BASE_INCHES + BOOK_ROW_INCHES * max(1, len(books)))
    ax = fig.add_subplot()
    y = np.arange(len(books), dtype=float)
    for tag, color in SPLIT_COLORS.items():
        chosen = [i for i, (_, e) in enumerate(books) if e["tag"] == tag]
        cells = [books[i][1]["scores"]["average"] for i in chosen]
        with_interval = [k for k, c in enumerate(cells) if c.get("low") is not None]
        alone = [k for k, c in enumerate(cells) if c.get("low") is None]
        if with_interval:
            ax.errorbar([cells[k]["mean"] for k in with_interval], y[[chosen[k] for k in with_interval]],
                        xerr=_errors([cells[k] for k in with_interval]), fmt="o", capsize=2, color=color,
                        markersize=4, label=f"{tag} books")
        if alone:
            ax.plot([cells[k]["mean"] for k in alone], y[[chosen[k] for k in alone]], "o", markersize=4,
                    markerfacecolor="white", color=color, label=f"{tag} books, fewer than {MIN_CLUSTERS} scenes ({TOO_FEW})")
            for k in alone:
                ax.annotate(TOO_FEW, (cells[k]["mean"], y[chosen[k]]), xytext=(5, 0), textcoords="offset points",
                            va="center", fontsize="x-small", color="grey")
    ax.set_yticks(y, [b for b, _ in books], fontsize="small")
    ax.set_ylim(-0.6, max(0.6, len(books) - 0.4))
    ax.margins(x=0.08)
    ax.set_xlabel("average of the four dimensions (paper-era scores are not clipped at 100)")
    ax.grid(axis="x", alpha=0.3)
    if books:
        # Below the axis: inside it the legend would cover the best or the worst books.
        fig.legend(loc="outside lower center", ncol=4, fontsize="small", frameon=False)
    ax.set_title("Per book: average with 95% interval")
    return fig


@with_cjk_font
def rounds_figure(histogram: Mapping[Any, int], ended_by: Mapping[str, int]) -> Figure:
    """Left: finished scene runs per number of rounds; right: how the preset's scene runs ended."""
    fig = new_figure(10, 3.2)
    left, right = fig.subplots(1, 2, width_ratios=[2, 1])
    counts = {int(r): n for r, n in histogram.items()}  # JSON keys are strings
    left.bar(list(counts), list(counts.values()), color="#4c72b0")
    left.set_xlabel("rounds in the scene (at most 20)")
    count_axis(left.yaxis, "scene runs")
    left.set_xlim(0.5, 20.5)
    left.xaxis.set_major_locator(MaxNLocator(integer=True))
    left.set_title("Rounds per scene")
    names = list(ended_by)
    right.barh(names[::-1], [ended_by[n] for n in names][::-1], color="#55a868")
    count_axis(right.xaxis, "scene runs")
    right.set_title("How scenes ended")
    return fig
