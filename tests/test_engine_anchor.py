"""The anchor decision: each rule of engine/anchor.py on a case it alone decides."""

import math

import pytest

from charactereval_lib.engine.anchor import AnchorResult, compare_to_paper, rounding_tolerance


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
