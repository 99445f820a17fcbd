"""Diagnostics: the bf16 score grid, sample sizes, failure breakdown, context lengths."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from charactereval_lib.charactereval import diagnostics
from charactereval_lib.charactereval.data import load_official_data
from charactereval_lib.charactereval.diagnostics import grid_bins, grid_step, on_bf16_grid, score_grid
from charactereval_lib.charactereval.statistics import metric_statistics
from charactereval_lib.testing.synthetic import to_bf16, write_synthetic_data


def official_score(sigmoid: torch.Tensor) -> list[float]:
    """What the official scorer reports: ``float(bf16 sigmoid) * 4 + 1`` in Python floats."""
    return [float(s) * 4 + 1 for s in sigmoid.to(torch.bfloat16)]


def test_scores_from_a_bf16_sigmoid_are_on_the_grid():
    logits = torch.linspace(-12, 12, 5001, dtype=torch.float32)
    scores = official_score(torch.sigmoid(logits.to(torch.bfloat16)))
    assert on_bf16_grid(np.array(scores)).all()
    assert on_bf16_grid(1.0) is True and on_bf16_grid(5.0) is True and on_bf16_grid(3.015625) is True


def test_scores_from_other_precisions_are_flagged():
    rng = np.random.default_rng(0)
    sigmoid32 = torch.sigmoid(torch.tensor(rng.normal(0, 2, 2000), dtype=torch.float32))
    scores = np.array([float(s) * 4 + 1 for s in sigmoid32])
    # Almost every float32 sigmoid has bits below bf16's 8 significant bits.
    assert (~on_bf16_grid(scores)).mean() > 0.99
    assert on_bf16_grid(3.01) is False and on_bf16_grid(float("nan")) is False
    # A rounded display value is off the grid too.
    assert on_bf16_grid(round(3.0 + 4 * 2**-8 * 3, 3)) is False


def test_on_grid_agrees_with_torch_bfloat16_round_trip():
    rng = np.random.default_rng(1)
    candidates = np.concatenate([to_bf16(rng.uniform(0, 1, 500)) * 4 + 1, rng.uniform(1, 5, 500)])
    x = torch.tensor((candidates - 1) / 4, dtype=torch.float64)
    representable = (x.to(torch.bfloat16).to(torch.float64) == x).numpy()
    assert np.array_equal(on_bf16_grid(candidates), representable)


def test_grid_steps_match_the_bf16_spacing():
    grid = score_grid(1.5, 5.0)
    assert np.allclose(np.diff(grid[grid >= 3.0]), 0.015625, rtol=0, atol=0)
    assert np.allclose(np.diff(grid[(grid >= 2.0) & (grid <= 3.0)]), 0.0078125, rtol=0, atol=0)
    assert np.allclose(np.diff(grid[(grid >= 1.5) & (grid <= 2.0)]), 0.00390625, rtol=0, atol=0)
    assert len(score_grid(3.0, 5.0)) == 129  # 128 steps of 2^-8 in [0.5, 1], both ends included
    assert grid_step(3.5) == 0.015625 and grid_step(2.0) == 0.0078125 and grid_step(1.75) == 0.00390625
    with pytest.raises(ValueError, match="outside"):
        grid_step(5.0)


def test_bins_hold_exactly_one_grid_value_each():
    edges = grid_bins(2.4, 3.6)
    grid = score_grid(1.0, 5.0)
    counts, _ = np.histogram(grid, bins=edges)
    assert (counts == 1).all()
    assert edges[0] < 2.4 and edges[-1] > 3.6


def test_bins_merge_whole_grid_cells_when_there_are_too_many():
    edges = grid_bins(1.2, 5.0, max_bins=100)
    assert len(edges) - 1 <= 100
    grid = score_grid(1.0, 5.0)
    # No grid value sits on an edge: merged bins still hold whole grid cells.
    assert not np.isin(edges, grid).any()


def test_grid_check_counts_off_grid_rows():
    scores = pd.DataFrame(
        {"id": [1, 2, 3, 4], "metric_en": ["Fluency", "Fluency", "Empathy", "Empathy"],
         "score": [3.015625, 3.0123, 2.0078125, 2.0078125]}
    )
    check = diagnostics.grid_check(scores).set_index("metric_en")
    assert check.loc["Fluency", "off_grid"] == 1 and check.loc["Empathy", "off_grid"] == 0
    assert check.loc["Empathy", "distinct_scores"] == 1 and check.loc["Coherence", "n"] == 0


def test_sample_size_table_by_hand():
    scores = pd.DataFrame({"id": range(100), "metric_en": "Empathy", "score": np.tile([2.0, 4.0], 50)})
    table = diagnostics.sample_size_table(metric_statistics(scores, n_boot=200)).set_index("metric_en")
    sd = np.tile([2.0, 4.0], 50).std(ddof=1)
    assert table.loc["Empathy", "n"] == 100 and table.loc["Empathy", "sd"] == pytest.approx(sd)
    z = 1.959963984540054 + 0.8416212335729143
    assert table.loc["Empathy", "mdd"] == pytest.approx(z * sd * math.sqrt(2 / 100))
    assert 0.1 < table.loc["Empathy", "ci_half_width"] < 0.3
    assert math.isnan(table.loc["Fluency", "mdd"])


def test_failure_breakdown_counts_each_kind():
    generations = pd.DataFrame(
        [
            {"id": 1, "model_output": "甲：好", "status": "ok", "error": None},
            {"id": 2, "model_output": None, "status": "error", "error": {"class": "RateLimitError", "message": "x"}},
            {"id": 3, "model_output": None, "status": "error", "error": {"class": "RateLimitError", "message": "y"}},
            {"id": 4, "model_output": "ERROR", "status": "ok", "error": None},
            {"id": 5, "model_output": "\n甲：好", "status": "ok", "error": None},
            {"id": 6, "model_output": "好的", "status": "ok", "error": None},
        ]
    )
    rows = pd.DataFrame(
        [
            {"id": 1, "role": "甲", "metric_en": "Fluency", "model_output": "甲：好"},
            {"id": 1, "role": "甲", "metric_en": "Empathy", "model_output": "甲：好"},
            {"id": 5, "role": "甲", "metric_en": "Fluency", "model_output": ""},
            {"id": 6, "role": "甲", "metric_en": "Fluency", "model_output": "好的"},
        ]
    )
    scores = rows.iloc[:3].assign(score=3.0, truncated=[False, True, False])
    table = diagnostics.failure_breakdown(generations, rows, scores)
    by = {(c, d): (n, t) for c, d, n, t in zip(table["category"], table["detail"], table["count"], table["total"])}
    assert by[("generation error", "RateLimitError")] == (2, 6)
    assert by[("reply dropped by S5", 'null or "ERROR" output')] == (1, 6)
    assert by[("empty reply", "first line is empty (scored)")] == (1, 3)
    # Ids 5 (empty) and 6 lack the "甲：" prefix; the ASCII colon would not count either.
    assert by[("no role prefix", "reply does not start with 'role：'")] == (2, 3)
    assert by[("RM input truncated", "kept the last 4096 tokens")] == (1, 3)
    assert by[("unscored", "row has no score yet")] == (1, 4)


def test_failure_breakdown_shows_zero_errors_explicitly():
    generations = pd.DataFrame([{"id": 1, "model_output": "a：b", "status": "ok", "error": None}])
    rows = pd.DataFrame([{"id": 1, "role": "a", "metric_en": "Fluency", "model_output": "a：b"}])
    table = diagnostics.failure_breakdown(generations, rows, rows.assign(score=3.0))
    assert ("generation error", "none", 0) in set(zip(table["category"], table["detail"], table["count"]))


def test_context_lengths_and_binned_means(tmp_path):
    data = load_official_data(write_synthetic_data(tmp_path / "data", 40), verify=False)
    lengths = diagnostics.context_lengths(data).set_index("id")
    sample = data.samples[0]
    assert lengths.loc[sample.id, "context_chars"] == len(sample.context)
    assert lengths.loc[sample.id, "context_lines"] == len(sample.context.split("\n"))
    frame = pd.DataFrame({"x": np.arange(100), "score": np.arange(100) * 0.01})
    means = diagnostics.binned_means(frame, "x", bins=4)
    assert list(means["n"]) == [25, 25, 25, 25]
    assert means["mean"].iloc[0] == pytest.approx(np.arange(25).mean() * 0.01)
