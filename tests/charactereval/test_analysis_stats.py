"""Statistics: cluster bootstrap, paired comparisons, power, breakdowns, summaries with intervals."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as scipy_stats

from charactereval_lib.charactereval.aggregate import METRIC_ORDER
from charactereval_lib.charactereval.data import load_official_data
from charactereval_lib.charactereval.statistics import group_breakdown, group_summary, metric_clusters, metric_statistics, paired_comparison
from charactereval_lib.charactereval.summary import METRICS_TABLE_COLUMNS, summarize_run
from charactereval_lib.engine.stats import (
    BOOTSTRAP_METHOD,
    bootstrap_means,
    minimum_detectable_difference,
    percentile_interval,
    resample_counts,
    studentized_intervals,
)
from charactereval_lib.testing.synthetic import write_synthetic_data, write_synthetic_run


def frame(rows, **extra):
    return pd.DataFrame([{"id": i, "metric_en": m, "score": s, **extra} for i, m, s in rows])


def clustered_scores(n_ids: int, rng: np.random.Generator, mu: float = 3.0) -> pd.DataFrame:
    """Each id carries 1-4 metrics sharing a per-id effect (so rows of an id correlate)."""
    rows = []
    for i in range(n_ids):
        effect = rng.normal(0, 0.5)
        for m in rng.choice(len(METRIC_ORDER), size=int(rng.integers(1, 5)), replace=False):
            rows.append((i, METRIC_ORDER[int(m)], mu + effect + rng.normal(0, 0.3)))
    return frame(rows)


def test_cluster_totals_by_hand():
    totals = metric_clusters(frame([(7, "Fluency", 3.0), (7, "Empathy", 2.0), (3, "Fluency", 4.0), (7, "Fluency", 1.0)]))
    assert list(totals.ids) == [3, 7]
    fl, emp = METRIC_ORDER.index("Fluency"), METRIC_ORDER.index("Empathy")
    assert totals.sums[1, fl] == 4.0 and totals.counts[1, fl] == 2 and totals.sums[1, emp] == 2.0
    assert totals.sums[0, fl] == 4.0 and totals.counts.sum() == 4


def test_unknown_metric_is_named():
    with pytest.raises(ValueError, match=r"unknown metric name\(s\) \['Fluencyy'\]"):
        metric_clusters(frame([(1, "Fluencyy", 3.0)]))


def test_resample_counts_are_multinomial_draws_of_ids():
    counts = resample_counts(50, 200, seed=3)
    assert counts.shape == (200, 50) and (counts.sum(axis=1) == 50).all()
    # The same seed gives the same resamples; each id is drawn once per resample on average.
    assert np.array_equal(counts, resample_counts(50, 200, seed=3))
    assert counts.mean() == pytest.approx(1.0)


def test_vectorised_bootstrap_equals_a_naive_loop_over_resampled_ids():
    rng = np.random.default_rng(0)
    scores = clustered_scores(40, rng)
    draws = bootstrap_means(metric_clusters(scores), n_boot=25, seed=11)
    ids = np.array(sorted(scores["id"].unique()))
    picks = np.random.default_rng(11).integers(0, len(ids), size=(25, len(ids)))
    for b in range(25):
        resampled = pd.concat([scores[scores["id"] == ids[k]] for k in picks[b]])
        naive = resampled.groupby("metric_en")["score"].mean()
        for col, name in enumerate(METRIC_ORDER):
            if name in naive.index:
                assert draws[b, col] == pytest.approx(naive[name], rel=1e-12)
            else:
                assert math.isnan(draws[b, col])


def test_percentile_interval_ignores_nan_draws_and_checks_level():
    draws = np.array([[1.0, np.nan], [2.0, np.nan], [3.0, np.nan], [np.nan, np.nan]])
    low, high = percentile_interval(draws, 0.5)
    assert low[0] == pytest.approx(1.5) and high[0] == pytest.approx(2.5)
    assert math.isnan(low[1]) and math.isnan(high[1])
    with pytest.raises(ValueError, match="between 0 and 1"):
        percentile_interval(draws, 95)


def test_metric_statistics_keeps_s9_means_and_adds_intervals():
    rng = np.random.default_rng(1)
    scores = clustered_scores(300, rng)
    stats = metric_statistics(scores, n_boot=400, seed=0)
    table = stats.metrics.set_index("metric_en")
    expected = scores.groupby("metric_en")["score"].agg(["mean", "std", "count"])
    for name in METRIC_ORDER:
        assert table.loc[name, "mean"] == pytest.approx(expected.loc[name, "mean"], rel=1e-12)
        assert table.loc[name, "sd"] == pytest.approx(expected.loc[name, "std"], rel=1e-12)
        assert table.loc[name, "n"] == expected.loc[name, "count"]
        assert table.loc[name, "ci_low"] < table.loc[name, "mean"] < table.loc[name, "ci_high"]
    # Dimension intervals come from the same resamples: the studentized interval of the average
    # of the dimension's metric means.
    dims = stats.dimensions.set_index("dimension")
    cols = [METRIC_ORDER.index(n) for n in ("Fluency", "Coherence", "Consistency")]
    combo = np.zeros((len(METRIC_ORDER), 1))
    combo[cols, 0] = 1 / 3
    direct = studentized_intervals(metric_clusters(scores), combo, n_boot=400, seed=0)
    assert dims.loc["conversational_ability", "ci_low"] == pytest.approx(direct.low[0])
    assert dims.loc["conversational_ability", "ci_high"] == pytest.approx(direct.high[0])
    assert dims.loc["conversational_ability", "mean"] == pytest.approx(table.loc[["Fluency", "Coherence", "Consistency"], "mean"].mean())
    assert stats.settings()["n_boot"] == 400


def test_bootstrap_interval_width_matches_the_standard_error():
    # One metric per id, so rows are independent: the 95% interval is about 2 x 1.96 x SE.
    rng = np.random.default_rng(5)
    scores = frame([(i, "Empathy", float(v)) for i, v in enumerate(rng.normal(3.0, 0.8, size=2000))])
    stats = metric_statistics(scores, n_boot=1000, seed=0).metrics.set_index("metric_en").loc["Empathy"]
    se = scores["score"].std(ddof=1) / math.sqrt(len(scores))
    assert (stats["ci_high"] - stats["ci_low"]) == pytest.approx(2 * 1.96 * se, rel=0.1)


@pytest.mark.slow
def test_cluster_bootstrap_coverage_of_a_known_mean():
    # 200 synthetic runs with a known true mean (3.0 for every metric, id effects shared by a
    # sample's metrics): the 95% interval of the dimension average should cover 3.0 about 95%
    # of the time. Bounds allow for Monte Carlo error (sd of the rate ~ 1.5 points).
    rng = np.random.default_rng(2024)
    covered_dim = covered_metric = 0
    trials = 200
    for trial in range(trials):
        stats = metric_statistics(clustered_scores(120, rng), n_boot=300, seed=trial)
        dim = stats.dimensions.set_index("dimension").loc["roleplay_attractiveness"]
        covered_dim += dim["ci_low"] <= 3.0 <= dim["ci_high"]
        metric = stats.metrics.set_index("metric_en").loc["Empathy"]
        covered_metric += metric["ci_low"] <= 3.0 <= metric["ci_high"]
    assert 0.88 <= covered_dim / trials <= 0.99
    assert 0.86 <= covered_metric / trials <= 0.99


def test_ignoring_clusters_would_understate_the_dimension_interval():
    # Rows of one sample share a strong effect: resampling rows instead of ids gives a
    # narrower (wrong) interval; the cluster bootstrap keeps the sample's rows together.
    rng = np.random.default_rng(9)
    rows = []
    for i in range(300):
        effect = rng.normal(0, 1.0)
        rows += [(i, m, 3 + effect + rng.normal(0, 0.1)) for m in ("Fluency", "Coherence", "Consistency")]
    scores = frame(rows)
    clustered = metric_statistics(scores, n_boot=500).dimensions.set_index("dimension").loc["conversational_ability"]
    as_rows = metric_statistics(scores.assign(id=range(len(scores))), n_boot=500).dimensions
    as_rows = as_rows.set_index("dimension").loc["conversational_ability"]
    assert (clustered["ci_high"] - clustered["ci_low"]) > 1.4 * (as_rows["ci_high"] - as_rows["ci_low"])


def test_minimum_detectable_difference_by_hand():
    z = 1.959963984540054 + 0.8416212335729143
    assert minimum_detectable_difference(0.5, 100) == pytest.approx(z * 0.05)
    assert minimum_detectable_difference(0.5, 100, paired=False) == pytest.approx(z * 0.05 * math.sqrt(2))
    assert minimum_detectable_difference(1.0, 25, alpha=0.01, power=0.9) == pytest.approx(
        (scipy_stats.norm.ppf(0.995) + scipy_stats.norm.ppf(0.9)) / 5
    )


def test_paired_comparison_by_hand_and_against_scipy():
    a = frame([(1, "Fluency", 3.5), (2, "Fluency", 3.0), (3, "Fluency", 4.0), (4, "Fluency", 2.0),
               (1, "Coherence", 3.0), (2, "Coherence", 3.25), (9, "Empathy", 3.0)])
    b = frame([(1, "Fluency", 3.0), (2, "Fluency", 3.25), (3, "Fluency", 3.0), (4, "Fluency", 1.75),
               (1, "Coherence", 2.0), (2, "Coherence", 3.0), (5, "Empathy", 1.0)])
    result = paired_comparison(a, b, n_boot=200, seed=0)
    m = result.metrics.set_index("metric_en")
    diffs = np.array([0.5, -0.25, 1.0, 0.25])
    assert m.loc["Fluency", "n"] == 4
    assert m.loc["Fluency", "diff"] == pytest.approx(diffs.mean())
    assert m.loc["Fluency", "mean_a"] == pytest.approx(3.125) and m.loc["Fluency", "mean_b"] == pytest.approx(2.75)
    assert m.loc["Fluency", "p_wilcoxon"] == pytest.approx(scipy_stats.wilcoxon(diffs).pvalue)
    assert m.loc["Fluency", "sd_diff"] == pytest.approx(diffs.std(ddof=1))
    assert m.loc["Fluency", "ci_low"] <= diffs.mean() <= m.loc["Fluency", "ci_high"]
    # Ids 9 and 5 are not shared: Empathy has no paired row.
    assert m.loc["Empathy", "n"] == 0 and math.isnan(m.loc["Empathy", "diff"])
    # Conversational ability: per-sample mean differences over the dimension's rows.
    dims = result.dimensions.set_index("dimension")
    per_sample = np.array([(0.5 + 1.0) / 2, (-0.25 + 0.25) / 2, 1.0, 0.25])
    assert dims.loc["conversational_ability", "n_ids"] == 4
    assert dims.loc["conversational_ability", "p_wilcoxon"] == pytest.approx(scipy_stats.wilcoxon(per_sample).pvalue)
    # The Consistency metric has no rows, so the dimension difference is undefined (as its average is).
    assert math.isnan(dims.loc["conversational_ability", "diff"])


def test_identical_runs_differ_by_exactly_zero_with_undefined_p():
    scores = clustered_scores(30, np.random.default_rng(4))
    result = paired_comparison(scores, scores.copy(), n_boot=50)
    assert (result.metrics["diff"].dropna() == 0).all()
    assert (result.metrics["ci_low"].dropna() == 0).all() and (result.metrics["ci_high"].dropna() == 0).all()
    assert result.metrics["p_wilcoxon"].isna().all()


def test_paired_comparison_refuses_duplicate_rows():
    a = frame([(1, "Fluency", 3.0), (1, "Fluency", 3.5)])
    with pytest.raises(ValueError, match="run A has more than one score"):
        paired_comparison(a, frame([(1, "Fluency", 3.0)]))


def test_group_breakdown_and_centred_summary_by_hand():
    scores = pd.DataFrame(
        [
            {"id": 1, "role": "r1", "metric_en": "Fluency", "score": 4.0},
            {"id": 1, "role": "r1", "metric_en": "Empathy", "score": 2.0},
            {"id": 2, "role": "r2", "metric_en": "Fluency", "score": 2.0},
            {"id": 3, "role": "r2", "metric_en": "Empathy", "score": 1.0},
        ]
    )
    breakdown = group_breakdown(scores, "role")
    assert list(breakdown["metric_en"]) == ["Fluency", "Empathy", "Fluency", "Empathy"]
    assert breakdown.loc[(breakdown["role"] == "r1") & (breakdown["metric_en"] == "Empathy"), "mean"].item() == 2.0
    summary = group_summary(scores, "role").set_index("role")
    # Metric means: Fluency 3.0, Empathy 1.5 -> r1 rows centred +1.0, +0.5; r2 rows -1.0, -0.5.
    assert summary.loc["r1", "mean_centred"] == pytest.approx(0.75)
    assert summary.loc["r2", "mean_centred"] == pytest.approx(-0.75)
    assert summary.loc["r2", "n_ids"] == 2 and summary.loc["r2", "n_rows"] == 2
    with pytest.raises(ValueError, match="no column 'novel'"):
        group_summary(scores, "novel")


def test_summarize_run_writes_intervals_and_failures(tmp_path):
    data = load_official_data(write_synthetic_data(tmp_path / "data", 90, seed=3), verify=False)
    failed = [data.samples[0].id, data.samples[1].id]
    run = write_synthetic_run(tmp_path / "run", data, failed_ids=failed)
    summary = summarize_run(run, id2metric=data.id2metric, n_boot=200, seed=1)
    saved = json.loads((run / "summary.json").read_text(encoding="utf-8"))
    assert saved["bootstrap"] == {"method": BOOTSTRAP_METHOD, "n_boot": 200, "seed": 1, "level": 0.95}
    lost = sum(len(data.id2metric.get(str(i), ())) for i in failed)
    assert sum(m["failed"] for m in summary["metrics"]) == lost
    for metric in saved["metrics"]:
        if metric["n"] > 1:
            assert metric["ci_low"] <= metric["mean"] <= metric["ci_high"]
    csv = pd.read_csv(run / "metrics.csv")
    assert list(csv.columns) == METRICS_TABLE_COLUMNS
    assert len(csv) == 15 and csv["ci_low"].notna().all()
    # Without id2metric the per-metric failures are unknown, not zero.
    assert all(m["failed"] is None for m in summarize_run(run, n_boot=10)["metrics"])


def test_summarize_is_deterministic_for_a_seed(tmp_path):
    data = load_official_data(write_synthetic_data(tmp_path / "data", 60), verify=False)
    run = write_synthetic_run(tmp_path / "run", data)
    first = summarize_run(run, n_boot=100, seed=5)["metrics"]
    again = summarize_run(run, n_boot=100, seed=5)["metrics"]
    other = summarize_run(run, n_boot=100, seed=6)["metrics"]
    assert [m["ci_low"] for m in first] == [m["ci_low"] for m in again]
    assert [m["ci_low"] for m in first] != [m["ci_low"] for m in other]


def test_a_metric_with_one_row_has_no_interval_in_the_summary(tmp_path):
    rows = [(1, "Fluency", 3.0), *((i, "Empathy", 2.0 + i / 10) for i in range(2, 12))]
    stats = metric_statistics(frame(rows), n_boot=50)
    table = stats.metrics.set_index("metric_en")
    assert table.loc["Fluency", "n"] == 1 and np.isnan(table.loc["Fluency", ["ci_low", "ci_high"]].astype(float)).all()
    assert table.loc["Empathy", "ci_low"] < table.loc["Empathy", "ci_high"]
    dims = stats.dimensions.set_index("dimension")
    assert np.isnan(float(dims.loc["conversational_ability", "ci_low"]))
