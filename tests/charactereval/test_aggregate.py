"""S9: per-metric means and unweighted dimension averages against hand-computed values."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from charactereval_lib.charactereval.aggregate import dimension_averages, metric_means, scores_frame
from charactereval_lib.charactereval.protocol import METRICS


def frame(rows):
    return scores_frame([{"id": i, "metric_en": m, "score": s} for i, m, s in rows])


def test_metric_means_by_hand():
    means = metric_means(frame([(1, "Fluency", 3.0), (2, "Fluency", 4.5), (1, "Empathy", 2.015625)]))
    table = means.set_index("metric_en")
    assert list(means["metric_en"]) == [m.metric_en for m in METRICS]
    assert table.loc["Fluency", "n"] == 2 and table.loc["Fluency", "mean"] == 3.75
    assert table.loc["Empathy", "mean"] == 2.015625 and table.loc["Empathy", "abbr"] == "Emp"
    assert table.loc["Coherence", "n"] == 0 and math.isnan(table.loc["Coherence", "mean"])


def test_dimension_average_is_unweighted_mean_of_metric_means():
    # Fluency has 3 rows, Coherence 1, Consistency 1: a row-weighted mean would give 2.4.
    rows = [(1, "Fluency", 2.0), (2, "Fluency", 2.0), (3, "Fluency", 2.0), (1, "Coherence", 3.0), (1, "Consistency", 3.0)]
    dims = dimension_averages(metric_means(frame(rows))).set_index("dimension")
    assert dims.loc["conversational_ability", "mean"] == pytest.approx((2.0 + 3.0 + 3.0) / 3, abs=0)
    assert dims.loc["conversational_ability", "n_metrics"] == 3
    # A dimension with a metric that has no rows has no paper-comparable average.
    assert math.isnan(dims.loc["character_consistency", "mean"])


def test_character_consistency_has_five_metrics_including_exposure():
    rows = [(1, m, float(k)) for k, m in enumerate(["Exposure", "Accuracy", "Hallucination", "Behavior", "Utterance"], 1)]
    dims = dimension_averages(metric_means(frame(rows))).set_index("dimension")
    assert dims.loc["character_consistency", "mean"] == 3.0
    assert dims.loc["character_consistency", "n_metrics"] == 5


def test_paper_table_averages_are_reproduced_by_the_rule():
    # Table 4, ChatGLM3-6B: metric means as published -> the published averages within rounding.
    published = {"Fluency": 3.269, "Coherence": 3.647, "Consistency": 3.283, "Exposure": 2.016, "Accuracy": 2.792,
                 "Hallucination": 2.704, "Behavior": 2.455, "Utterance": 2.812, "Humanlikeness": 3.064,
                 "Communication_skills": 2.932, "Diversity": 1.969, "Empathy": 2.993}
    means = pd.DataFrame([{"metric_en": m.metric_en, "mean": published[m.metric_en]} for m in METRICS])
    dims = dimension_averages(means).set_index("dimension")["mean"]
    assert dims["conversational_ability"] == pytest.approx(3.399, abs=0.0007)
    assert dims["character_consistency"] == pytest.approx(2.556, abs=0.0007)
    assert dims["roleplay_attractiveness"] == pytest.approx(2.739, abs=0.0007)


def test_scores_frame_requires_columns():
    with pytest.raises(ValueError, match=r"lack column\(s\) \['score'\]"):
        scores_frame([{"id": 1, "metric_en": "Fluency"}])
