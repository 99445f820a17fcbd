"""The one decision "does our number reproduce the paper's, within tolerance?".

Every comparison with a published value (the reproduction report, the leaderboard's anchor
gate) calls ``compare_to_paper``; nothing here knows a benchmark, a column or a model.

Tolerance rule. A published value is printed rounded, so it stands for every value within
half a unit of its last printed digit: the caller passes that half unit as ``tolerance``
(0.005 for a value printed with two decimals, 0.0005 for three; ``rounding_tolerance`` gives
it). Nothing wider is allowed: a looser tolerance would hide a real difference, which must
instead be explained by the caller's reason (one run against a mean of three, a different
split, another judge snapshot).

The decision, in order:

1. our value or the paper's value missing (or not finite): ``within`` is None (undecided);
2. our interval given (e.g. a 95% bootstrap interval): within when the paper's value lies in
   it, each end widened by ``tolerance``;
3. else the paper's ± given: within when our value lies in ``paper ± paper_pm``, widened by
   ``tolerance``;
4. else: within when ``|ours - paper| <= tolerance``.

``delta`` is always ``ours - paper`` (our value minus the published one).

The verdict with margins (``compare_within_margin``). Where the project fixes how far a
recomputed score may lie from the published one (seed 004 L15, V09: each CoSER dimension within
``DIMENSION_MARGIN`` points, their average within ``AVERAGE_MARGIN``), that margin alone decides
``within``: ``|ours - paper| <= margin``. The rounding rule above (our interval, the paper's ±) is
still computed and returned beside it (``interval_within``) as information, never as the verdict:
a 95% interval of one run says how precise the run is, not whether it matches a mean of others.
``faithful_failure_rate`` says how often a run that measures exactly what the paper measured
would still land outside a margin (docs/leaderboard.md states the figures).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# Float noise from adding the tolerance must not decide a boundary case.
_EPS = 1e-9
# Seed 004 L15 (the earlier platform's verdict, V09): a dimension score on 0-100 reproduces the
# paper within 2.5 points, the average of the dimensions within 1.0.
DIMENSION_MARGIN = 2.5
AVERAGE_MARGIN = 1.0


@dataclass(frozen=True)
class AnchorResult:
    """Whether a recomputed value reproduces a published one, by how much, and why."""

    within: bool | None  # None: undecided, a value is missing
    delta: float | None  # ours - paper; None when either is missing
    reason: str  # one line saying which rule decided and with which numbers
    # The interval (rounding) rule's answer when a margin decided ``within``: information only.
    interval_within: bool | None = None


def _missing(value: float | None) -> bool:
    return value is None or not math.isfinite(value)


def rounding_tolerance(decimals: int) -> float:
    """Half a unit of the last printed digit of a value printed with ``decimals`` decimals."""
    if decimals < 0:
        raise ValueError(f"decimals must be >= 0, got {decimals}")
    return 0.5 * 10.0 ** -decimals


def compare_to_paper(
    paper: float | None,
    ours: float | None,
    *,
    paper_pm: float | None = None,
    interval: tuple[float, float] | None = None,
    tolerance: float = 0.0,
) -> AnchorResult:
    """Decide whether ``ours`` reproduces the published ``paper`` value (rule in the module
    docstring). ``paper_pm`` is the paper's ± (spread over its runs), ``interval`` our
    (low, high) interval, ``tolerance`` the published value's rounding (never negative)."""
    if tolerance < 0 or math.isnan(tolerance):
        raise ValueError(f"tolerance must be >= 0, got {tolerance}")
    if _missing(paper):
        return AnchorResult(None, None, "no published value")
    if _missing(ours):
        return AnchorResult(None, None, "no recomputed value")
    delta = ours - paper
    if interval is not None and not (_missing(interval[0]) or _missing(interval[1])):
        low, high = interval
        if low > high:
            raise ValueError(f"interval low {low} is above high {high}")
        within = low - tolerance - _EPS <= paper <= high + tolerance + _EPS
        where = "inside" if within else "outside"
        return AnchorResult(within, delta, f"paper {paper:g} {where} our interval [{low:.4g}, {high:.4g}] "
                                           f"(tolerance {tolerance:g})")
    if not _missing(paper_pm):
        within = abs(delta) <= abs(paper_pm) + tolerance + _EPS
        where = "inside" if within else "outside"
        return AnchorResult(within, delta, f"ours {ours:.4g} {where} paper {paper:g} ± {abs(paper_pm):g} "
                                           f"(tolerance {tolerance:g})")
    within = abs(delta) <= tolerance + _EPS
    return AnchorResult(within, delta, f"|delta| {abs(delta):.4g} {'<=' if within else '>'} tolerance {tolerance:g} "
                                       "(no interval on either side)")


def compare_within_margin(
    paper: float | None,
    ours: float | None,
    *,
    margin: float | None,
    paper_pm: float | None = None,
    interval: tuple[float, float] | None = None,
    tolerance: float = 0.0,
) -> AnchorResult:
    """The verdict with a margin (module docstring): within when ``|ours - paper| <= margin``;
    the interval rule of ``compare_to_paper`` is answered beside it in ``interval_within``.
    ``margin`` None: the column has no margin, so the verdict stays open (``within`` None)."""
    if margin is not None and (margin < 0 or math.isnan(margin)):
        raise ValueError(f"margin must be >= 0, got {margin}")
    information = compare_to_paper(paper, ours, paper_pm=paper_pm, interval=interval, tolerance=tolerance)
    if information.delta is None:
        return information
    delta = information.delta
    if margin is None:
        return AnchorResult(None, delta, f"no margin for this column; interval check (information): "
                                         f"{information.reason}", information.within)
    within = abs(delta) <= margin + _EPS
    return AnchorResult(within, delta,
                        f"|delta| {abs(delta):.2f} {'<=' if within else '>'} margin {margin:g}; "
                        f"interval check (information): {information.reason}", information.within)


def expected_spread(paper_pm: float, runs: int = 3, paper_runs: int = 3) -> float:
    """Standard deviation of (our mean of ``runs`` runs) - (the paper's mean of ``paper_runs``),
    reading the paper's ± as the run-to-run standard deviation (seed 004 L16-L17, N04)."""
    return abs(paper_pm) * math.sqrt(1 / runs + 1 / paper_runs)


def faithful_failure_rate(margin: float, spread: float) -> float:
    """How often a faithful run, whose difference from the paper is normal with mean 0 and
    standard deviation ``spread``, still lands outside ``margin``: P(|Z| > margin / spread)."""
    return math.erfc(margin / spread / math.sqrt(2))
