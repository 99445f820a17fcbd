"""Figures: each function returns a Figure with the expected content and saves as PNG."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

from charactereval_lib.charactereval import analysis, diagnostics, figures
from charactereval_lib.charactereval.data import load_official_data
from charactereval_lib.charactereval.diagnostics import on_bf16_grid
from charactereval_lib.charactereval.protocol import METRICS
from charactereval_lib.charactereval.statistics import metric_statistics, paired_comparison
from charactereval_lib.engine.reports import plots
from charactereval_lib.testing.synthetic import write_synthetic_data, write_synthetic_run


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("plots")
    data = load_official_data(write_synthetic_data(root / "data", 100), verify=False)
    a = analysis.load_run(write_synthetic_run(root / "a", data, seed=1, failed_ids=[data.samples[2].id]), data=data,
                          n_boot=100)
    b = analysis.load_run(write_synthetic_run(root / "b", data, seed=2, shift=0.3), data=data, n_boot=100)
    return a, b


def legend_labels(fig: Figure) -> list[str]:
    return [text.get_text() for legend in fig.legends for text in legend.get_texts()]


def drawn(fig: Figure):
    fig.canvas.draw()
    return fig.canvas.get_renderer()


def test_radars_side_by_side_on_the_declared_scale(two_runs):
    a, b = two_runs
    fig = figures.radars({"a": a.stats, "b": b.stats}, ["GPT-4", "Qwen-7B"])
    assert isinstance(fig, Figure)
    metrics, dimensions = fig.axes
    assert legend_labels(fig) == ["a", "b", "GPT-4 (paper)", "Qwen-7B (paper)"]
    assert [t.get_text() for t in metrics.get_xticklabels()] == [m.abbr for m in METRICS]
    assert [t.get_text().replace("\n", " ") for t in dimensions.get_xticklabels()] == [
        "Conversational Ability", "Character Consistency", "Role-playing Attractiveness"]
    # The GPT-4 ring passes through its published Exposure value (closed ring: 13 points).
    gpt4 = [line for line in metrics.get_lines() if line.get_label() == "GPT-4 (paper)"][0]
    assert len(gpt4.get_ydata()) == 13 and gpt4.get_ydata()[3] == pytest.approx(2.250)
    for ax in (metrics, dimensions):
        # The declared 1-5 scale whatever the data, and its centre labelled 1.
        assert ax.get_ylim() == (1.0, 5.0)
        assert [t.get_text() for t in ax.texts] == ["1"] and ax.texts[0].get_position()[1] == 1.0
    # Side by side: the two radars do not overlap, left to right.
    renderer = drawn(fig)
    left, right = (ax.get_tightbbox(renderer) for ax in (metrics, dimensions))
    assert left.x1 <= right.x0


def test_radar_labels_are_not_overdrawn_and_titles_fit(two_runs):
    a, _ = two_runs
    fig = figures.radars({"a": a.stats}, ["GPT-4"])
    renderer = drawn(fig)
    figure_box = fig.bbox
    for ax in fig.axes:
        labels = [t for t in ax.get_xticklabels() + ax.get_yticklabels() + ax.texts if t.get_visible() and t.get_text()]
        boxes = [t.get_window_extent(renderer) for t in labels]
        for i, first in enumerate(boxes):
            for second in boxes[i + 1:]:
                assert not first.overlaps(second), (labels[i].get_text(), [t.get_text() for t in labels])
        title = ax.title.get_window_extent(renderer)
        assert figure_box.x0 <= title.x0 and title.x1 <= figure_box.x1 and title.y1 <= figure_box.y1
    assert "1-5" in fig.get_suptitle()


def test_radar_marks_metrics_without_an_interval(two_runs):
    a, _ = two_runs
    scores = pd.concat([a.scores[a.scores["metric_en"] != "Fluency"],
                        a.scores[a.scores["metric_en"] == "Fluency"].head(1)])
    stats = metric_statistics(scores, n_boot=50)
    fig = figures.radars({"one": stats})
    metrics, dimensions = fig.axes
    assert metrics.get_xticklabels()[0].get_text() == "Flu\n(n<4)"
    assert "(n<4)" in dimensions.get_xticklabels()[0].get_text()
    assert metrics.get_xticklabels()[1].get_text() == "Coh"


@pytest.mark.slow
def test_grid_histograms_flag_off_grid_scores(two_runs):
    a, _ = two_runs
    clean = figures.score_grid_histograms(a.scores)
    assert len(clean.axes) == 12 and all("off grid: 0" in ax.get_title() for ax in clean.axes)
    broken = a.scores.copy()
    first = broken.index[broken["metric_en"] == "Empathy"][0]
    broken.loc[first, "score"] = 3.0001
    flagged = figures.score_grid_histograms(broken)
    titles = {ax.get_title().split()[0]: ax.get_title() for ax in flagged.axes}
    assert "OFF GRID: 1" in titles["Emp"] and "off grid: 0" in titles["Flu"]
    assert "Off grid in total: 1 of" in flagged.get_suptitle()


@pytest.mark.slow
def test_sample_size_context_failure_and_paired_figures(two_runs, tmp_path):
    a, b = two_runs
    drawn = {
        "sample_size": figures.sample_size_figure(a.stats, a.scores, failed=a.failed_by_metric()),
        "context": figures.context_length_figure(a.scores_with_context()),
        "failures": figures.failure_figure(a.failures()),
        "paired": figures.paired_difference_figure({"b - a": paired_comparison(b.scores, a.scores, n_boot=50)}),
    }
    assert len(drawn["sample_size"].axes) == 4
    assert "Rows per character" in drawn["sample_size"].axes[3].get_title()
    assert len(drawn["context"].axes) == 3
    labels = [t.get_text() for t in drawn["failures"].axes[0].get_yticklabels()]
    assert "generation error: APITimeoutError" in labels
    assert len(drawn["paired"].axes[0].get_yticklabels()) == 15
    for name, fig in drawn.items():
        path = plots.save_png(fig, tmp_path / f"{name}.png", dpi=40)
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_missing_inputs_give_a_message_not_an_error(two_runs):
    a, _ = two_runs
    fig = figures.context_length_figure(pd.DataFrame())
    assert "official data was not available" in fig.axes[0].texts[0].get_text()
    assert "No scores yet" in figures.context_length_figure(a.scores_with_context().iloc[0:0]).axes[0].texts[0].get_text()
    assert "No scores yet" in figures.score_grid_histograms(a.scores.iloc[0:0]).axes[0].texts[0].get_text()
    # An unscored run: one message, not four empty panels with negative axes.
    unscored = figures.sample_size_figure(metric_statistics(a.scores.iloc[0:0], n_boot=5), a.scores.iloc[0:0])
    assert len(unscored.axes) == 1 and "No scores yet" in unscored.axes[0].texts[0].get_text()
    empty_groups = analysis.group_results(a.scores.iloc[0:0], "role", n_boot=5)
    assert "No scores yet" in figures.group_extremes(empty_groups, "role", label="characters").axes[0].texts[0].get_text()


@pytest.mark.slow
def test_count_axes_have_integer_ticks_labels_and_integer_bins(two_runs):
    a, _ = two_runs
    fig = figures.sample_size_figure(a.stats, a.scores, failed=a.failed_by_metric())
    drawn(fig)
    ax_n, _, _, ax_role = fig.axes
    assert ax_n.get_ylabel() == "rows"
    assert ax_role.get_xlabel() == "rows per character" and ax_role.get_ylabel() == "characters"
    for axis in (ax_n.yaxis, ax_role.xaxis, ax_role.yaxis):
        ticks = axis.get_ticklocs()
        assert np.allclose(ticks, np.round(ticks)), ticks
    # Rows per character are integers: every bin is centred on whole numbers (edges at k + 0.5).
    edges = {round(p.get_x(), 6) for p in ax_role.patches} | {round(p.get_x() + p.get_width(), 6)
                                                              for p in ax_role.patches}
    assert all(abs(e - math.floor(e) - 0.5) < 1e-9 for e in edges)
    assert sum(p.get_height() for p in ax_role.patches) == a.scores["role"].nunique()
    grid = figures.score_grid_histograms(a.scores)
    drawn(grid)
    assert grid.axes[0].get_ylabel() == "rows"
    assert all(np.allclose(ax.get_yticks(), np.round(ax.get_yticks())) for ax in grid.axes)
    assert plots.integer_bins(np.array([3, 3, 5])).tolist() == [2.5, 3.5, 4.5, 5.5]
    assert plots.integer_bins(np.arange(0, 100), max_bins=10).tolist()[:3] == [-0.5, 9.5, 19.5]


def test_character_extremes_show_intervals_and_the_ends(two_runs):
    a, _ = two_runs
    table = analysis.group_results(a.scores, "role", n_boot=50)
    fig = figures.group_extremes(table, "role", label="characters", k=3)
    labels = [t.get_text() for t in fig.axes[0].get_yticklabels()]
    assert len(labels) == 6 and labels[0].startswith(table["role"].iloc[0])
    assert labels[-1].startswith(table["role"].iloc[-1])
    assert "lowest and highest 3 of" in fig.axes[0].get_title()
    whole = figures.group_extremes(table, "role", label="characters", k=10)
    assert len(whole.axes[0].get_yticklabels()) == len(table)


def test_chinese_labels_render_with_a_cjk_font_or_a_warning(two_runs, monkeypatch, recwarn):
    a, _ = two_runs
    fig = figures.group_extremes(analysis.group_results(a.scores, "role", n_boot=20), "role", label="characters")
    if plots.cjk_font() is not None:
        assert plots.font_warnings() == []
        plots.render_png(fig)
        assert not [w for w in recwarn if "missing from font" in str(w.message)]
    # Without a CJK font: one warning for the report instead of one per glyph while drawing.
    monkeypatch.setattr(plots, "cjk_font", lambda: None)
    assert plots.font_warnings() == [plots.FONT_WARNING] and "fonts-noto-cjk" in plots.FONT_WARNING
    recwarn.clear()
    plots.render_png(fig)
    assert not [w for w in recwarn if "missing from font" in str(w.message)]


def test_keep_saves_the_png_it_displays(two_runs, tmp_path):
    a, _ = two_runs
    shown = plots.keep(figures.failure_figure(a.failures()), "failures", tmp_path / "figures")
    assert shown.data == (tmp_path / "figures" / "failures.png").read_bytes()
    assert shown.data.startswith(b"\x89PNG")


def test_failure_labels_spell_the_role_marker_as_the_tables_do():
    generations = pd.DataFrame([{"id": 1, "model_output": "x", "status": "ok", "error": None}])
    rows = pd.DataFrame([{"id": 1, "role": "甲", "metric_en": "Fluency", "model_output": "x"}])
    table = diagnostics.failure_breakdown(generations, rows, pd.DataFrame())
    labels = [t.get_text() for t in figures.failure_figure(table).axes[0].get_yticklabels()]
    assert any("role\uff1a" in label for label in labels) and any("role\uff1a" in d for d in table["detail"])
    assert not any("role:" in label for label in labels)


def test_grid_values_are_marked_when_few_enough():
    scores = pd.DataFrame({"id": [1, 2, 3], "metric_en": ["Fluency", "Empathy", "Empathy"],
                           "score": [3.015625, 3.5, 3.25]})
    ticks = figures.score_grid_histograms(scores).axes[0].get_xticks(minor=True)
    # Every grid value from the lowest to the highest score (matplotlib drops the minor tick that
    # would sit on the major tick at 3.5).
    assert on_bf16_grid(ticks).all() and (np.diff(ticks) == 2**-6).all()
    assert ticks[0] == 3.015625 and ticks[-1] == 3.484375


def test_paired_differences_mark_cells_without_an_interval():
    a = pd.DataFrame([{"id": 1, "metric_en": "Fluency", "score": 3.5}]
                     + [{"id": 10 + i, "metric_en": "Empathy", "score": 3.0 + (i % 3) * 0.25} for i in range(20)])
    b = a.assign(score=a["score"] - 0.25 * (a["id"] % 2))
    fig = figures.paired_difference_figure({"a − b": paired_comparison(a, b, n_boot=30)})
    ax = fig.axes[0]
    assert "hollow: n<4 shared rows" in ax.get_xlabel()
    hollow = [line for line in ax.get_lines() if line.get_markerfacecolor() == "white"]
    # Fluency (one shared row) and the Conversational Ability average built on it.
    assert len(hollow) == 1 and len(hollow[0].get_xdata()) >= 2


def test_an_unscored_run_leaves_radar_axes_unflagged():
    fig = figures.radars({"unscored": metric_statistics(pd.DataFrame(columns=["id", "metric_en", "score"]), n_boot=5)},
                       ["GPT-4"])
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == [m.abbr for m in METRICS]
