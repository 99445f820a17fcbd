"""Figures: each function returns a Figure with the expected content and saves as PNG."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

from charactereval_lib.charactereval import analysis
from charactereval_lib.charactereval import diagnostics
from charactereval_lib.engine import plots
from charactereval_lib.charactereval.statistics import paired_comparison
from charactereval_lib.charactereval.data import load_official_data
from charactereval_lib.charactereval.diagnostics import on_bf16_grid
from charactereval_lib.charactereval.protocol import METRICS
from charactereval_lib.testing.synthetic import write_synthetic_data, write_synthetic_run


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("plots")
    data = load_official_data(write_synthetic_data(root / "data", 100), verify=False)
    a = analysis.load_run(write_synthetic_run(root / "a", data, seed=1, failed_ids=[data.samples[2].id]), data=data,
                          n_boot=100)
    b = analysis.load_run(write_synthetic_run(root / "b", data, seed=2, shift=0.3), data=data, n_boot=100)
    return a, b


def line_labels(fig: Figure) -> list[str]:
    return [line.get_label() for ax in fig.axes for line in ax.get_lines() if not line.get_label().startswith("_")]


def test_radar_of_metrics_overlays_runs_and_paper_baselines(two_runs):
    a, b = two_runs
    fig = plots.radar_metrics({"a": a.stats, "b": b.stats}, ["GPT-4", "Qwen-7B"])
    assert isinstance(fig, Figure)
    assert line_labels(fig) == ["a", "b", "GPT-4 (paper)", "Qwen-7B (paper)"]
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == [m.abbr for m in METRICS]
    # The GPT-4 ring passes through its published Exposure value (closed ring: 13 points).
    gpt4 = [line for line in ax.get_lines() if line.get_label() == "GPT-4 (paper)"][0]
    assert len(gpt4.get_ydata()) == 13 and gpt4.get_ydata()[3] == pytest.approx(2.250)


def test_radar_of_dimensions_has_three_axes(two_runs):
    a, _ = two_runs
    fig = plots.radar_dimensions({"a": a.stats}, ["GPT-4"])
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == [
        "Conversational Ability", "Character Consistency", "Role-playing Attractiveness"]
    assert line_labels(fig) == ["a", "GPT-4 (paper)"]


def test_grid_histograms_flag_off_grid_scores(two_runs):
    a, _ = two_runs
    clean = plots.score_grid_histograms(a.scores)
    assert len(clean.axes) == 12 and all("off grid: 0" in ax.get_title() for ax in clean.axes)
    broken = a.scores.copy()
    first = broken.index[broken["metric_en"] == "Empathy"][0]
    broken.loc[first, "score"] = 3.0001
    flagged = plots.score_grid_histograms(broken)
    titles = {ax.get_title().split()[0]: ax.get_title() for ax in flagged.axes}
    assert "OFF GRID: 1" in titles["Emp"] and "off grid: 0" in titles["Flu"]
    assert "Off grid in total: 1 of" in flagged.get_suptitle()


def test_sample_size_context_failure_and_paired_figures(two_runs, tmp_path):
    a, b = two_runs
    figures = {
        "sample_size": plots.sample_size_figure(a.stats, a.scores, failed=a.failed_by_metric()),
        "context": plots.context_length_figure(a.scores_with_context()),
        "failures": plots.failure_figure(a.failures()),
        "paired": plots.paired_difference_figure({"b - a": paired_comparison(b.scores, a.scores, n_boot=50)}),
    }
    assert len(figures["sample_size"].axes) == 4
    assert "Rows per character" in figures["sample_size"].axes[3].get_title()
    assert len(figures["context"].axes) == 3
    labels = [t.get_text() for t in figures["failures"].axes[0].get_yticklabels()]
    assert "generation error: APITimeoutError" in labels
    assert len(figures["paired"].axes[0].get_yticklabels()) == 15
    for name, fig in figures.items():
        path = plots.save_png(fig, tmp_path / f"{name}.png", dpi=40)
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_missing_inputs_give_a_message_not_an_error(two_runs):
    a, _ = two_runs
    fig = plots.context_length_figure(a.scores.iloc[0:0])
    assert "official data was not available" in fig.axes[0].texts[0].get_text()
    assert "No scores yet" in plots.score_grid_histograms(a.scores.iloc[0:0]).axes[0].texts[0].get_text()


def test_failure_breakdown_plot_uses_ascii_labels():
    generations = pd.DataFrame([{"id": 1, "model_output": "x", "status": "ok", "error": None}])
    rows = pd.DataFrame([{"id": 1, "role": "甲", "metric_en": "Fluency", "model_output": "x"}])
    table = diagnostics.failure_breakdown(generations, rows, pd.DataFrame())
    labels = [t.get_text() for t in plots.failure_figure(table).axes[0].get_yticklabels()]
    assert any("role:" in label for label in labels)
    assert all("\uff1a" not in label for label in labels)


def test_grid_values_are_marked_when_few_enough():
    scores = pd.DataFrame({"id": [1, 2, 3], "metric_en": ["Fluency", "Empathy", "Empathy"],
                           "score": [3.015625, 3.5, 3.25]})
    ticks = plots.score_grid_histograms(scores).axes[0].get_xticks(minor=True)
    # Every grid value from the lowest to the highest score (matplotlib drops the minor tick that
    # would sit on the major tick at 3.5).
    assert on_bf16_grid(ticks).all() and (np.diff(ticks) == 2**-6).all()
    assert ticks[0] == 3.015625 and ticks[-1] == 3.484375
