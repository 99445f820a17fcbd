"""The interval methods of ``engine.stats`` by hand, and their simulated coverage (a small run
of ``testing.coverage``; ``benchmarks/bench_coverage.py`` runs the large one)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats as scipy_stats

from charactereval_lib.engine import stats
from charactereval_lib.testing import coverage


def clusters_of(rows):
    frame = pd.DataFrame(rows, columns=["id", "metric_en", "score"])
    return frame, stats.cluster_totals(frame, ["a", "b"])


def test_the_studentized_interval_by_hand():
    rng = np.random.default_rng(4)
    rows = [(i, m, float(v)) for i in range(30) for m, v in zip("ab", rng.normal([2.0, 3.0], 0.7))
            if m == "a" or i % 3]
    frame, clusters = clusters_of(rows)
    combo = np.array([[1.0, 0.0, 0.5], [0.0, 1.0, 0.5]])
    found = stats.studentized_intervals(clusters, combo, n_boot=200, seed=7)
    weights = stats.resample_counts(30, 200, 7)

    def estimate_and_se(w):
        # Ratio means and their cluster-robust (linearised) standard errors, one resample at a time.
        sums, counts = w @ clusters.sums, w @ clusters.counts
        means = sums / counts
        influence = (clusters.sums - means * clusters.counts) / counts
        values = means @ combo
        used = (clusters.counts > 0).astype(float) @ (combo != 0)
        g = (used > 0).sum(axis=0)
        se = np.sqrt(g / (g - 1) * (w[:, None] * (influence @ combo) ** 2).sum(axis=0))
        return values, se

    value, se = estimate_and_se(np.ones(30))
    assert found.value == pytest.approx(value) and found.se == pytest.approx(se)
    assert found.value[:2] == pytest.approx(frame.groupby("metric_en")["score"].mean().to_numpy())
    t = np.array([(estimate_and_se(w)[0] - value) / estimate_and_se(w)[1] for w in weights])
    tail = (1 - 0.95) / 2  # as the module computes it: 0.025 plus a rounding error, which decides the order statistic
    q_low, q_high = np.quantile(t, [tail, 1 - tail], method="inverted_cdf", axis=0)
    student = scipy_stats.t.ppf(0.975, found.n_clusters - 1)
    assert found.low == pytest.approx(value - np.maximum(q_high, student) * se)
    assert found.high == pytest.approx(value - np.minimum(q_low, -student) * se)


def test_below_four_clusters_there_is_no_interval():
    _, clusters = clusters_of([(i, "a", 1.0 + i) for i in range(3)] + [(i, "b", 2.0 + i % 2) for i in range(4)])
    found = stats.studentized_intervals(clusters, n_boot=50)
    assert math.isnan(found.low[0]) and math.isnan(found.high[0]) and found.n_clusters.tolist() == [3, 4]
    assert found.low[1] < found.value[1] < found.high[1]
    assert stats.TOO_FEW == "n<4" and "93%" in stats.TOO_FEW_REASON


def test_clopper_pearson_known_values():
    # 0 of 10: the upper bound solves (1 - p)^10 = 0.025.
    assert stats.clopper_pearson(0, 10) == pytest.approx((0.0, 1 - 0.025 ** 0.1))
    assert stats.clopper_pearson(10, 10) == pytest.approx((0.025 ** 0.1, 1.0))
    low, high = stats.clopper_pearson(7, 20)
    assert (low, high) == pytest.approx((scipy_stats.beta.ppf(0.025, 7, 14), scipy_stats.beta.ppf(0.975, 8, 13)))
    assert all(math.isnan(x) for x in stats.clopper_pearson(0, 0))
    # Labels of one item agree together: fewer effective labels, a wider interval.
    hits = np.repeat([1.0, 0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0], 3)
    clustered = stats.proportion_interval(hits, np.repeat(np.arange(8), 3))
    independent = stats.proportion_interval(hits)
    assert clustered[1] - clustered[0] > independent[1] - independent[0]


def test_partial_pooling_shrinks_small_groups_most():
    rng = np.random.default_rng(8)
    groups = np.array([f"g{k}" for k in range(10) for _ in range(15)] + ["lone"])
    values = np.array([0.1 * (k - 5) + rng.normal(0, 0.4) for k in range(10) for _ in range(15)] + [1.0])
    table = stats.partial_pooling(values, np.ones(len(values)), groups).set_index("group")
    lone, big = table.loc["lone"], table.loc["g9"]
    assert lone["raw"] == 1.0 and lone["n"] == 1 and lone["shrinkage"] > 3 * big["shrinkage"]
    assert lone["pooled"] < 0.8 and lone["low"] < lone["pooled"] < lone["high"]
    assert big["raw"] == pytest.approx(values[groups == "g9"].mean())
    # The one-sample group's interval is wider than any 15-sample group's.
    assert lone["high"] - lone["low"] > (table["high"] - table["low"]).drop("lone").max()


def test_simulated_coverage_of_every_printed_interval():
    # A small run of the benchmark's simulation (a few seconds): every kind of interval holds the
    # truth in at least 90% of its draws at a nominal 95% (the benchmark's large run: >= 93% in
    # every band of n). The seed is fixed, so the counts are the same on every machine.
    tally = coverage.simulate(2, n_boot=150, seed=5)
    table = tally.table()
    by_kind = table.assign(hits=table["coverage"] * table["trials"]).groupby("kind")[["hits", "trials"]].sum()
    rates = by_kind["hits"] / by_kind["trials"]
    assert set(rates.index) == {"metric mean", "dimension average", "board row (overall)", "paired difference (metric)",
                                "paired difference (dimension)", "character effect (pooled)", "CoSER score",
                                "CoSER split", "judge metascore"}
    assert (rates >= 0.90).all(), rates.to_dict()
    # Nothing is printed below 4 clusters except pooled character effects (pooling borrows
    # strength from the other characters).
    small = table[table["band"].isin(["1", "2", "3"])]
    assert set(small["kind"]) <= {"character effect (pooled)"}


@pytest.mark.parametrize("draw", ["normal", "integers", "rounded", "few values"])
def test_the_signed_rank_p_value_is_scipys_with_ties_and_zeros_at_every_size(draw):
    """Above 50 non-zero differences ``wilcoxon_p`` computes scipy's normal approximation
    itself (average ranks, tie correction); it must be scipy's number, to the bit, there and at the switch."""
    rng = np.random.default_rng(len(draw))
    for n in [*range(45, 60), 120, 500, 4564]:
        if draw == "normal":
            d = rng.normal(0.05, 1, n)
        elif draw == "integers":
            d = rng.integers(-4, 5, n).astype(float)
        elif draw == "rounded":
            d = np.round(rng.normal(0.1, 1, n), 1)
        else:
            d = rng.integers(-1, 2, n) * rng.choice([0.25, 0.5, 1.0], n)
        expected = scipy_stats.wilcoxon(d, zero_method="wilcox").pvalue
        assert stats.wilcoxon_p(d) == expected, (draw, n)
    assert np.isnan(stats.wilcoxon_p(np.zeros(80)))
