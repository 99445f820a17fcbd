"""The shipped paper table (Table 4) and run-vs-paper deltas; MBTI is never a run number."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from charactereval_lib.charactereval import reference
from charactereval_lib.charactereval.protocol import DIMENSIONS, MBTI_NOT_REPRODUCED, METRICS, metrics_of
from charactereval_lib.charactereval.statistics import metric_statistics
from charactereval_lib.engine.resources import resource_path


@pytest.fixture(scope="module")
def table() -> pd.DataFrame:
    return reference.load_paper_table()


def paper_like_scores(table: pd.DataFrame, model: str) -> pd.DataFrame:
    """Four rows per metric (enough for an interval) whose mean is exactly the published value
    of ``model``."""
    rows = []
    for k, metric in enumerate(METRICS):
        value = float(table.loc[model, metric.metric_en])
        rows += [{"id": 4 * k + j, "metric_en": metric.metric_en, "score": value + (0.25 if j % 2 else -0.25)}
                 for j in range(4)]
    return pd.DataFrame(rows)


def test_table_shape_and_known_cells(table):
    assert len(table) == 15 and table.index[0] == "ChatGLM3-6B"
    assert table.loc["GPT-4", "Exposure"] == 2.250
    assert table.loc["BC-NPC-Turbo", "roleplay_attractiveness_avg"] == 2.946
    assert math.isnan(table.loc["CharacterGLM", reference.MBTI_COLUMN])


def test_published_averages_are_unweighted_means_of_their_metrics(table):
    for dimension in DIMENSIONS:
        names = [m.metric_en for m in metrics_of(dimension)]
        gap = (table[names].mean(axis=1) - table[dimension.key + reference.DIMENSION_SUFFIX]).abs()
        assert gap.max() < 0.0007, dimension.key


def test_published_mbti_values_are_fractions_of_216():
    # 54 characters x 4 letters (seed 001 row 20): each accuracy is some k/216, rounded to the
    # decimals printed ("0.62" has two, "0.694" three).
    printed = pd.read_csv(resource_path(reference.PAPER_TABLE4), dtype=str).set_index("model")[reference.MBTI_COLUMN].dropna()
    assert len(printed) == 14
    for model, text in printed.items():
        decimals = len(text.split(".")[1])
        value = float(text)
        k = round(value * 216)
        assert abs(k / 216 - value) <= 0.5 * 10**-decimals + 1e-12, model


def test_missing_or_malformed_table_is_reported(tmp_path):
    with pytest.raises(reference.ReferenceError, match="missing"):
        reference.load_paper_table(tmp_path / "nope.csv")
    bad = tmp_path / "bad.csv"
    bad.write_text("model,Fluency\nX,3.0\n", encoding="utf-8")
    with pytest.raises(reference.ReferenceError, match=r"missing column\(s\) \['Coherence'"):
        reference.load_paper_table(bad)


def test_unknown_model_is_named(table):
    with pytest.raises(reference.ReferenceError, match=r"unknown paper model\(s\) \['GPT-5'\]"):
        reference.paper_cells(["GPT-5"], table)


def test_deltas_are_zero_for_a_run_that_matches_the_paper(table):
    stats = metric_statistics(paper_like_scores(table, "Qwen-7B"), n_boot=50)
    long = reference.deltas(stats, ["Qwen-7B", "GPT-4"], table)
    qwen = long[long["model"] == "Qwen-7B"]
    assert len(qwen) == 15
    assert qwen.loc[qwen["kind"] == "metric", "delta"].abs().max() < 1e-12
    # Dimension averages are recomputed from the metrics, so they agree within the paper's rounding.
    assert qwen.loc[qwen["kind"] == "dimension", "delta"].abs().max() < 0.0007
    gpt4 = long[(long["model"] == "GPT-4") & (long["key"] == "Exposure")]
    assert gpt4["delta"].item() == pytest.approx(1.956 - 2.250)


def test_delta_table_shows_mbti_as_not_reproduced(table):
    stats = metric_statistics(paper_like_scores(table, "GPT-4"), n_boot=50)
    shown = reference.delta_table(stats, ["GPT-4", "CharacterGLM"], table)
    mbti = shown.loc["MBTI accuracy (personality back-testing)"]
    run_column = "this run [95% CI]"
    assert mbti[run_column] == MBTI_NOT_REPRODUCED
    assert mbti["GPT-4"] == "0.694" and mbti["CharacterGLM"] == "-" and mbti["Δ vs GPT-4"] == "n/a"
    assert shown.loc["Exposure (KE)", "Δ vs GPT-4"] == "+0.000"
    assert shown.loc["Exposure (KE)", run_column].startswith("2.250 [")
    assert len(shown) == 16


def test_delta_matrix_has_one_column_per_run(table):
    stats = metric_statistics(paper_like_scores(table, "GPT-4"), n_boot=20)
    matrix = reference.delta_matrix({"a": stats, "b": stats}, "GPT-4", table)
    assert list(matrix.columns) == ["GPT-4 (paper)", "Δ a", "Δ b"]
    assert matrix.loc["Fluency (Flu)", "GPT-4 (paper)"] == "3.332"


def test_delta_table_marks_a_run_interval_of_one_row(table):
    scores = paper_like_scores(table, "GPT-4")
    scores = scores.drop(scores.index[scores["metric_en"] == "Fluency"][1:])
    stats = metric_statistics(scores, n_boot=20)
    shown = reference.delta_table(stats, ["GPT-4"], table)
    assert shown.loc["Fluency (Flu)", "this run [95% CI]"].endswith(" n<4")
    assert shown.loc["Conversational Ability avg.", "this run [95% CI]"].endswith(" n<4")
    assert shown.loc["Empathy (Emp)", "this run [95% CI]"].endswith("]")
    long = reference.deltas(stats, ["GPT-4"], table).set_index("key")
    assert pd.isna(long.loc["Fluency", "paper_in_ci"]) and long.loc["Empathy", "paper_in_ci"] in (True, False)
