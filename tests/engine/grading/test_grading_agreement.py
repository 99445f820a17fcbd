"""Agreement statistics: hand-computed cases, references, weighted == repeated, bootstrap."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from charactereval_lib.engine.grading import agreement as ag
from charactereval_lib.engine.stats import bootstrap_means, cluster_totals, cluster_weights, resample_counts


def test_pearson_by_hand():
    # dx = (-1, 0, 1), dy = (-4/3, -1/3, 5/3): r = 3 / sqrt(2 * 14/3)
    value = ag.weighted_pearson(np.array([1, 2, 3]), np.array([1, 2, 4]), np.ones(3))[0]
    assert value == pytest.approx(3 / math.sqrt(28 / 3), abs=1e-12)


def test_cohen_kappa_by_hand():
    # p_o = 3/4, p_e = 2/4 * 1/4 + 2/4 * 3/4 = 1/2, kappa = (3/4 - 1/2) / (1/2)
    kappa = ag.weighted_kappa(["Y", "Y", "N", "N"], ["Y", "N", "N", "N"], np.ones(4))[0]
    assert kappa == pytest.approx(0.5, abs=1e-12)


def test_quadratic_kappa_by_hand():
    # One of three pairs is 1 apart on a 3-grade scale: sum w*O = 1/4 * 1/3; sum w*E = 5/12.
    kappa = ag.weighted_kappa([1, 2, 3], [1, 3, 3], np.ones(3), labels=[1, 2, 3], quadratic=True)[0]
    assert kappa == pytest.approx(0.8, abs=1e-12)


def test_krippendorff_alpha_by_hand():
    # Units (1,1), (1,2), (2,2): o = [[2,1],[1,2]], n = 6, alpha = 1 - 5 * 2 / (3 * 3 * 2) = 4/9.
    data = np.array([[1, 1, 2], [1, 2, 2]], dtype=float)
    assert ag.krippendorff_alpha(data, "nominal") == pytest.approx(4 / 9, abs=1e-12)
    assert ag.weighted_krippendorff_alpha(data, np.ones(3), "nominal")[0] == pytest.approx(4 / 9, abs=1e-12)


def test_exact_agreement_is_case_sensitive():
    assert ag.weighted_exact(["Y", "y", "N"], ["Y", "Y", "N"], np.ones(3))[0] == pytest.approx(2 / 3)


def test_rounding_is_half_up():
    assert ag.round_half_up(np.array([1.5, 2.5, 2.49, 4.5])).tolist() == [2.0, 3.0, 2.0, 5.0]


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(7)
    x = rng.uniform(1, 5, 60)
    y = np.clip(np.round(x + rng.normal(0, 1, 60)), 1, 5)
    weights = rng.integers(0, 4, 60).astype(float)
    return x, y, weights


def repeat(values, weights):
    return np.repeat(np.asarray(values), weights.astype(int))


def test_correlations_match_scipy_unweighted_and_repeated(data):
    x, y, weights = data
    for weighted, reference in [
        (ag.weighted_pearson, lambda a, b: stats.pearsonr(a, b)[0]),
        (ag.weighted_spearman, lambda a, b: stats.spearmanr(a, b)[0]),
        (ag.weighted_kendall_tau_b, lambda a, b: stats.kendalltau(a, b, variant="b")[0]),
    ]:
        assert weighted(x, y, np.ones(len(x)))[0] == pytest.approx(reference(x, y), abs=1e-12)
        assert weighted(x, y, weights)[0] == pytest.approx(
            reference(repeat(x, weights), repeat(y, weights)), abs=1e-12
        )


def test_kappas_and_alpha_on_weights_equal_repeated_rows(data):
    x, y, weights = data
    a, b = ag.round_half_up(x), y
    for quadratic in (False, True):
        weighted = ag.weighted_kappa(a, b, weights, labels=[1, 2, 3, 4, 5], quadratic=quadratic)[0]
        repeated = ag.weighted_kappa(repeat(a, weights), repeat(b, weights), np.ones(int(weights.sum())),
                                     labels=[1, 2, 3, 4, 5], quadratic=quadratic)[0]  # fmt: skip
        assert weighted == pytest.approx(repeated, abs=1e-12)
    matrix = np.array([a, b])
    matrix[1, 5] = np.nan
    for level in ag.ALPHA_LEVELS:
        package = ag.krippendorff_alpha(matrix, level)
        assert ag.weighted_krippendorff_alpha(matrix, np.ones(len(a)), level)[0] == pytest.approx(
            package, abs=1e-10
        )
        repeated = ag.krippendorff_alpha(np.repeat(matrix, weights.astype(int), axis=1), level)
        assert ag.weighted_krippendorff_alpha(matrix, weights, level)[0] == pytest.approx(repeated, abs=1e-10)


def test_bootstrap_draws_whole_clusters():
    clusters = ["c", "a", "a", "b", "c", "c"]
    weights = cluster_weights(clusters, 200, seed=3)
    assert weights.shape == (200, 6)
    assert (weights[:, 1] == weights[:, 2]).all() and (weights[:, 0] == weights[:, 5]).all()
    # Each replicate draws three clusters: a and b count 1 row each per draw, c three rows.
    drawn = weights[:, 1] + weights[:, 3] + weights[:, 0]
    assert (drawn == 3).all()
    assert (cluster_weights(clusters, 200, seed=3) == weights).all()
    # The agreement intervals resample exactly as the mean intervals do (one bootstrap): cluster
    # k of the sorted clusters is drawn resample_counts(...)[:, k] times.
    assert (weights[:, [1, 3, 0]] == resample_counts(3, 200, 3)).all()


def test_bootstrap_means_and_row_weights_see_the_same_resamples():
    frame = pd.DataFrame({"id": [5, 5, 2, 9, 9, 9], "metric_en": ["m"] * 6, "score": [1.0, 2, 3, 4, 5, 2]})
    draws = bootstrap_means(cluster_totals(frame, ["m"]), 50, seed=7)[:, 0]
    weights = cluster_weights(frame["id"].tolist(), 50, seed=7)
    assert np.allclose(draws, (weights @ frame["score"].to_numpy()) / weights.sum(axis=1))


def test_label_agreement_of_nothing_is_undefined():
    result = ag.label_agreement([], [], n_boot=20)
    for estimate in (result.metascore, result.cohen_kappa, result.krippendorff_alpha):
        assert np.isnan([estimate.value, estimate.low, estimate.high]).all()
        assert (estimate.n, estimate.n_clusters) == (0, 0)
    assert result.confusion.empty


def test_scorer_agreement_intervals_cover_the_estimate(data):
    x, y, _ = data
    clusters = np.arange(len(x)) // 2
    result = ag.scorer_agreement(x, y, clusters, n_boot=300, seed=1)
    assert set(result) == set(ag.SCORER_STATISTICS)
    for estimate in result.values():
        assert estimate.low <= estimate.value <= estimate.high
        assert (estimate.n, estimate.n_clusters) == (60, 30)
    perfect = ag.scorer_agreement(y, y, n_boot=50)
    assert all(e.value == pytest.approx(1.0) for e in perfect.values())


def test_scorer_agreement_refuses_missing_scores():
    with pytest.raises(ValueError, match="NaN"):
        ag.scorer_agreement([1.0, np.nan], [1.0, 2.0])


def test_agreement_table_per_metric_and_overall():
    rng = np.random.default_rng(0)
    ids = np.repeat(np.arange(40), 2)
    frame = pd.DataFrame({
        "id": ids, "metric_en": ["Fluency", "Empathy"] * 40,
        "rm": rng.uniform(1, 5, 80), "judge": rng.integers(1, 6, 80).astype(float),
    })  # fmt: skip
    frame.loc[3, "judge"] = np.nan
    table = ag.agreement_table(frame, "rm", "judge", n_boot=100)
    assert list(table["metric_en"].unique()) == ["Fluency", "Empathy", ag.OVERALL]
    counts = table.groupby("metric_en")["n"].first()
    assert (counts["Fluency"], counts["Empathy"], counts[ag.OVERALL]) == (40, 39, 79)
    assert set(table["statistic"]) == set(ag.SCORER_STATISTICS)


def test_label_agreement_against_human_labels():
    human = ["Y", "N", "Y", "N", "Y", "y"]
    predicted = ["Y", "N", "N", "Y", "__invalid__", "Y"]
    result = ag.label_agreement(predicted, human, n_boot=100, alpha_level="nominal")
    assert result.metascore.value == pytest.approx(2 / 6)
    assert result.confusion.loc["Y", "N"] == 1 and result.confusion.loc["Y", "__invalid__"] == 1
    assert int(result.confusion.to_numpy().sum()) == 6
    assert result.cohen_kappa.low <= result.cohen_kappa.value <= result.cohen_kappa.high


def test_label_agreement_ordinal_alpha_ignores_invalid_parses():
    human = [1, 2, 3, 4, 5, 3]
    predicted = ["1", "2", "3", "4", "5", "__invalid__"]
    result = ag.label_agreement([p if p == "__invalid__" else int(p) for p in predicted], human, n_boot=50)
    assert result.krippendorff_alpha.value == pytest.approx(1.0)
    assert result.metascore.value == pytest.approx(5 / 6)
