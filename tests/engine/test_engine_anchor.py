"""The anchor decision: each rule of engine/anchor.py on a case it alone decides."""

import math
from pathlib import Path

import pytest

from charactereval_lib.engine.anchor import (
    AVERAGE_MARGIN,
    DIMENSION_MARGIN,
    AnchorResult,
    compare_to_paper,
    compare_within_margin,
    expected_spread,
    faithful_failure_rate,
    rounding_tolerance,
)


def test_paper_value_inside_our_interval_widened_by_tolerance():
    inside = compare_to_paper(59.88, 60.4, interval=(59.885, 61.0), tolerance=0.005)
    assert inside.within is True and inside.delta == pytest.approx(0.52)
    assert "inside our interval" in inside.reason
    outside = compare_to_paper(59.87, 60.4, interval=(59.885, 61.0), tolerance=0.005)
    assert outside.within is False and "outside our interval" in outside.reason


def test_interval_takes_precedence_over_the_papers_pm():
    # Within the paper's ± but the paper's value is not in our interval: the interval decides.
    result = compare_to_paper(50.0, 51.0, paper_pm=2.0, interval=(50.5, 51.5), tolerance=0.005)
    assert result.within is False


def test_without_our_interval_the_papers_pm_decides():
    assert compare_to_paper(55.31, 56.7, paper_pm=1.4, tolerance=0.005).within is True
    far = compare_to_paper(55.31, 56.8, paper_pm=1.4, tolerance=0.005)
    assert far.within is False and "paper 55.31 ± 1.4" in far.reason


def test_without_any_interval_only_rounding_is_tolerated():
    assert compare_to_paper(3.827, 3.8274, tolerance=rounding_tolerance(3)).within is True
    assert compare_to_paper(3.827, 3.8276, tolerance=rounding_tolerance(3)).within is False


@pytest.mark.parametrize("paper, ours, reason", [(None, 1.0, "no published value"), (1.0, None, "no recomputed value"),
                                                 (math.nan, 1.0, "no published value")])
def test_a_missing_value_is_undecided_not_a_failure(paper, ours, reason):
    assert compare_to_paper(paper, ours, tolerance=0.005) == AnchorResult(None, None, reason)


def test_bad_settings_are_errors():
    with pytest.raises(ValueError):
        compare_to_paper(1.0, 1.0, tolerance=-0.1)
    with pytest.raises(ValueError):
        compare_to_paper(1.0, 1.0, interval=(2.0, 1.0))
    with pytest.raises(ValueError):
        rounding_tolerance(-1)
    assert rounding_tolerance(2) == pytest.approx(0.005)


def test_seed_004_margins_decide_and_the_interval_check_stays_beside():
    assert (DIMENSION_MARGIN, AVERAGE_MARGIN) == (2.5, 1.0)  # seed 004 L15
    # Inside the margin although the paper's value is outside our interval: the margin decides.
    near = compare_within_margin(48.95, 50.5, margin=DIMENSION_MARGIN, interval=(49.8, 51.2), tolerance=0.005)
    assert near.within is True and near.interval_within is False and "margin 2.5" in near.reason
    # Outside the margin although the paper's value is inside our (wide) interval.
    far = compare_within_margin(48.95, 51.69, margin=DIMENSION_MARGIN, interval=(46.0, 57.0), tolerance=0.005)
    assert far.within is False and far.interval_within is True and far.delta == pytest.approx(2.74)
    assert compare_within_margin(59.95, 60.95, margin=AVERAGE_MARGIN).within is True
    assert compare_within_margin(59.95, 60.96, margin=AVERAGE_MARGIN).within is False
    open_ = compare_within_margin(5.9, 6.3, margin=None, paper_pm=0.16, tolerance=0.005)
    assert open_.within is None and open_.interval_within is False and open_.delta == pytest.approx(0.4)
    assert compare_within_margin(None, 1.0, margin=1.0).within is None
    with pytest.raises(ValueError):
        compare_within_margin(1.0, 1.0, margin=-1.0)


def test_a_faithful_run_fails_the_character_fidelity_margin_about_one_time_in_13():
    # Seed 004 N04: the paper's ± 1.73 gives a spread of sqrt(2/3) * 1.73 = 1.41 between two means
    # of three runs; 2.5 is only 1.77 of it.
    spread = expected_spread(1.73)
    assert spread == pytest.approx(1.4125, abs=1e-4) and DIMENSION_MARGIN / spread == pytest.approx(1.77, abs=0.005)
    assert faithful_failure_rate(DIMENSION_MARGIN, spread) == pytest.approx(0.0768, abs=1e-4)
    assert faithful_failure_rate(AVERAGE_MARGIN, expected_spread(0.50)) == pytest.approx(0.0143, abs=1e-4)


def test_the_docs_state_the_computed_failure_rates():
    text = (Path(__file__).resolve().parents[2] / "docs" / "leaderboard.md").read_text(encoding="utf-8")
    cf = faithful_failure_rate(DIMENSION_MARGIN, expected_spread(1.73))
    average = faithful_failure_rate(AVERAGE_MARGIN, expected_spread(0.50))
    others = [faithful_failure_rate(DIMENSION_MARGIN, expected_spread(pm)) for pm in (0.66, 0.48, 0.59)]
    assert max(others) < 1e-5
    for figure in (f"{DIMENSION_MARGIN / expected_spread(1.73):.2f}", f"{cf:.1%}", f"{average:.1%}",
                   f"{cf + average + sum(others):.1%}", f"{expected_spread(1.73, runs=1):.2f}"):
        assert f"**{figure}" in text or figure in text, figure
