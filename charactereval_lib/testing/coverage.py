"""Simulated coverage of every interval the workbench prints, on data drawn like the real ones.

Each kind of interval is computed by the very function the reports call, on data drawn with a
known true value, many times; its coverage is the share of draws whose interval holds the truth,
counted per band of n (the clusters behind the interval) and only where an interval was printed
(below ``stats.MIN_CLUSTERS`` clusters the workbench prints ``stats.TOO_FEW`` instead).

The data mimic the real ones where it matters for an interval:

- reward-model scores (CharacterEval): 1-5, skewed toward the top with a floor and a ceiling
  (clipped), on the bfloat16 grid the reward model's output lives on (steps of 1/128 to 1/32),
  one to two metrics per sample as in the test set (8,032 rows over 4,564 samples) with a
  shared per-sample effect, so rows of one sample are correlated;
- characters of very unequal sizes (most with a handful of samples) with true effects;
- CoSER scores: 0-100 per dimension, integers, skewed, clustered by scene with a scene effect
  shared by its four dimensions and its repeats;
- judge metascores: hits of a judge against human labels, the hit rate varying by item.

True values are the expectations of the generating distribution, computed once by a large
Monte Carlo draw (``true_metric_means``), not the simulation's own parameters: clipping and
rounding move the mean.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import pandas as pd

from charactereval_lib.charactereval.aggregate import METRIC_ORDER
from charactereval_lib.charactereval.protocol import DIMENSIONS, METRICS
from charactereval_lib.engine import stats

# Bands of n (clusters behind an interval) the coverage is reported in.
BANDS: tuple[tuple[int, int], ...] = ((1, 1), (2, 2), (3, 3), (4, 5), (6, 9), (10, 19), (20, 49), (50, 10**9))
NOMINAL = 0.95
TARGET = 0.93
# The test set's mean number of metrics per sample (8,032 rows / 4,564 samples).
ROWS_PER_SAMPLE = 8032 / 4564
# Per-metric centre of the latent score: the 12 metric means of a real run spread over ~2 points.
_METRIC_CENTRES = np.linspace(2.0, 3.9, len(METRIC_ORDER))
_SAMPLE_SD = 0.35  # a sample's shared effect on all its metrics
_NOISE_SCALE = 0.45  # scale of the row noise (a reflected gamma: a long tail toward low scores)
_CHARACTER_SD = 0.15  # spread of true character effects
_SHIFT_B = np.linspace(-0.3, 0.2, len(METRIC_ORDER))  # run B's per-metric shift against run A


def bf16(values: np.ndarray) -> np.ndarray:
    """Values rounded to the nearest bfloat16 (ties to even), back as float64: the reward
    model's scores are bfloat16 outputs."""
    bits = np.asarray(values, dtype=np.float32).view(np.uint32)
    rounded = bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
    return (rounded & np.uint32(0xFFFF0000)).view(np.float32).astype(np.float64)


def _reward_scores(centre: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    # Gamma(2) reflected: most rows near the centre, a long tail down to the floor at 1.
    noise = -(rng.gamma(2.0, _NOISE_SCALE, size=centre.shape) - 2.0 * _NOISE_SCALE)
    return bf16(np.clip(centre + noise, 1.0, 5.0))


@lru_cache(maxsize=None)
def true_metric_means(shift: bool = False, draws: int = 1_000_000) -> np.ndarray:
    """Expected score per metric (run A, or run B with its shift) over samples and noise."""
    rng = np.random.default_rng(12345 + shift)
    centre = _METRIC_CENTRES + (_SHIFT_B if shift else 0.0)
    latent = rng.normal(0.0, _SAMPLE_SD, size=(draws, 1))
    return _reward_scores(centre[None, :] + latent, rng).mean(axis=0)


def _sample_metrics(n_samples: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Each sample's metrics: one or two distinct ones (about 1.76 on average, as the test set)."""
    two = rng.random(n_samples) < ROWS_PER_SAMPLE - 1
    return [rng.choice(len(METRIC_ORDER), size=2 if t else 1, replace=False) for t in two]


def reward_run(n_samples: int, rng: np.random.Generator, *, paired: bool = False,
               characters: np.ndarray | None = None, effects: np.ndarray | None = None) -> pd.DataFrame:
    """One simulated run: rows (id, metric_en, score[, score_b][, role]). ``paired`` adds run B's
    scores of the same rows (the same sample effect, its own noise, shifted per metric);
    ``characters`` (a character per sample) with ``effects`` (per character) adds a role column
    and the character's effect to its samples' latent scores."""
    metrics = _sample_metrics(n_samples, rng)
    ids = np.repeat(np.arange(n_samples), [len(m) for m in metrics])
    cols = np.concatenate(metrics)
    latent = rng.normal(0.0, _SAMPLE_SD, size=n_samples)
    if effects is not None:
        latent = latent + effects[characters]
    centre = _METRIC_CENTRES[cols] + latent[ids]
    frame = pd.DataFrame({"id": ids, "metric_en": np.asarray(METRIC_ORDER)[cols], "score": _reward_scores(centre, rng)})
    if paired:
        frame["score_b"] = _reward_scores(centre + _SHIFT_B[cols], rng)
    if characters is not None:
        frame["role"] = characters[ids]
    return frame


@dataclass
class Tally:
    """Hits and trials per (interval kind, n band)."""

    hits: dict[tuple[str, tuple[int, int]], int]
    trials: dict[tuple[str, tuple[int, int]], int]
    widths: dict[tuple[str, tuple[int, int]], list[float]]

    @classmethod
    def empty(cls) -> Tally:
        return cls(defaultdict(int), defaultdict(int), defaultdict(list))

    def add(self, kind: str, n: Iterable[int], low: Iterable[float], high: Iterable[float],
            truth: Iterable[float]) -> None:
        """Count the printed intervals (finite bounds) and whether each holds its truth."""
        for k, lo, hi, t in zip(n, low, high, truth):
            if not (np.isfinite(lo) and np.isfinite(hi)):
                continue
            band = band_of(int(k))
            self.trials[kind, band] += 1
            self.hits[kind, band] += int(lo <= t <= hi)
            self.widths[kind, band].append(hi - lo)

    def table(self) -> pd.DataFrame:
        """kind, band, trials, coverage, its Monte Carlo standard error, median width (a row per
        cell with at least one printed interval). The standard error says how far a cell's
        coverage may lie from the method's true coverage by the simulation's chance alone."""
        rows = []
        for (kind, band), n in sorted(self.trials.items(), key=lambda item: (item[0][0], item[0][1])):
            covered = self.hits[kind, band] / n
            rows.append({"kind": kind, "band": band_label(band), "trials": n, "coverage": covered,
                         "mc_se": float(np.sqrt(covered * (1 - covered) / n)),
                         "median_width": float(np.median(self.widths[kind, band]))})
        return pd.DataFrame(rows, columns=["kind", "band", "trials", "coverage", "mc_se", "median_width"])


def band_of(n: int) -> tuple[int, int]:
    return next(b for b in BANDS if b[0] <= n <= b[1])


def band_label(band: tuple[int, int]) -> str:
    if band[1] >= 10**9:
        return f"{band[0]}+"
    return str(band[0]) if band[0] == band[1] else f"{band[0]}-{band[1]}"


# --- the interval kinds -------------------------------------------------------------------------


def _dimension_truth(metric_truth: np.ndarray) -> np.ndarray:
    position = {name: i for i, name in enumerate(METRIC_ORDER)}
    return np.array([np.mean([metric_truth[position[m.metric_en]] for m in METRICS if m.dimension.key == d.key])
                     for d in DIMENSIONS])


def run_means(tally: Tally, n_samples: int, rng: np.random.Generator, n_boot: int) -> None:
    """Metric means, dimension averages and the board's overall score of one run."""
    from charactereval_lib.charactereval.statistics import metric_statistics

    frame = reward_run(n_samples, rng)
    found = metric_statistics(frame, n_boot=n_boot, seed=int(rng.integers(2**31)))
    truth = true_metric_means()
    tally.add("metric mean", found.metrics["n"], found.metrics["ci_low"], found.metrics["ci_high"], truth)
    dims = _dimension_truth(truth)
    tally.add("dimension average", _dimension_clusters(frame), found.dimensions["ci_low"], found.dimensions["ci_high"], dims)
    # The overall score's band is that of its smallest metric: that is what decides whether it
    # is printed at all.
    tally.add("board row (overall)", [int(found.metrics["n"].min())], [found.overall[1]], [found.overall[2]],
              [dims.mean()])


def paired_differences(tally: Tally, n_samples: int, rng: np.random.Generator, n_boot: int) -> None:
    """Run A minus run B on the same rows, per metric and per dimension: the intervals
    ``paired_comparison`` prints, which are ``metric_statistics`` of the paired differences
    (called directly: its Wilcoxon tests, a permutation test on tied data, would be most of the
    simulation's time and print no interval)."""
    from charactereval_lib.charactereval.statistics import metric_statistics, paired_rows

    frame = reward_run(n_samples, rng, paired=True)
    a = frame[["id", "metric_en", "score"]]
    b = frame[["id", "metric_en", "score_b"]].rename(columns={"score_b": "score"})
    rows = paired_rows(a, b)
    found = metric_statistics(rows.rename(columns={"diff": "score"}), n_boot=n_boot, seed=int(rng.integers(2**31)))
    truth = true_metric_means() - true_metric_means(shift=True)
    tally.add("paired difference (metric)", found.metrics["n"], found.metrics["ci_low"], found.metrics["ci_high"],
              truth)
    tally.add("paired difference (dimension)", _dimension_clusters(rows), found.dimensions["ci_low"],
              found.dimensions["ci_high"], _dimension_truth(truth))


def _dimension_clusters(frame: pd.DataFrame) -> list[int]:
    """Samples with a row in each dimension."""
    return [frame[frame["metric_en"].isin([m.metric_en for m in METRICS if m.dimension.key == d.key])]["id"].nunique()
            for d in DIMENSIONS]


@lru_cache(maxsize=None)
def _effect_curve() -> tuple[np.ndarray, np.ndarray]:
    """True centred effect of a character as a function of its latent effect: the expected score
    over metrics and samples minus the metric means, on a grid (clipping bends it)."""
    rng = np.random.default_rng(777)
    grid = np.linspace(-0.8, 0.8, 33)
    latent = rng.normal(0.0, _SAMPLE_SD, size=(20_000, 1))
    base = true_metric_means()
    values = [float((_reward_scores(_METRIC_CENTRES[None, :] + latent + a, rng).mean(axis=0) - base).mean())
              for a in grid]
    return grid, np.asarray(values)


def character_effects(tally: Tally, n_samples: int, rng: np.random.Generator, n_boot: int) -> None:
    """Pooled character effects: characters of unequal sizes (a few large, many small)."""
    from charactereval_lib.charactereval.analysis import group_results

    n_characters = max(4, n_samples // 12)
    # Zipf-like sizes: character k draws samples in proportion to 1/(k+1).
    weights = 1.0 / np.arange(1, n_characters + 1)
    characters = rng.choice(n_characters, size=n_samples, p=weights / weights.sum())
    latent = rng.normal(0.0, _CHARACTER_SD, size=n_characters)
    frame = reward_run(n_samples, rng, characters=characters, effects=latent)
    found = group_results(frame, "role", n_boot=n_boot, seed=int(rng.integers(2**31)))
    grid, curve = _effect_curve()
    effect = np.interp(latent, grid, curve)
    # Centred means are relative to the run's metric means, which carry the run's own mix of
    # characters: the estimand is a character's effect minus the sample-weighted mean effect.
    share = np.bincount(characters, minlength=n_characters) / n_samples
    truth = (effect - np.sum(share * effect))[found["role"].to_numpy(int)]
    tally.add("character effect (pooled)", found["n_ids"], found["pooled_low"], found["pooled_high"], truth)


def coser_frame(n_scenes: int, rng: np.random.Generator, repeats: int = 2) -> pd.DataFrame:
    """CoSER judgements: per (repeat, scene, dimension) an integer score 0-100, skewed (a tail
    toward low scores), with a scene effect shared by its dimensions and repeats."""
    from charactereval_lib.coser.upstream import DIMENSIONS as COSER_DIMENSIONS

    centres = np.array([62.0, 55.0, 48.0, 58.0])[: len(COSER_DIMENSIONS)]
    scene_effect = rng.normal(0.0, 9.0, size=n_scenes)
    noise = -(rng.gamma(2.0, 6.0, size=(repeats, n_scenes, len(centres))) - 12.0)
    scores = np.clip(np.round(centres[None, None, :] + scene_effect[None, :, None] + noise), 0, 100)
    repeat, scene, dimension = (axis.ravel() for axis in np.indices(scores.shape))
    return pd.DataFrame({"repeat": repeat, "scene": [f"s{k}" for k in scene],
                         "tag": np.where(scene % 2 == 0, "id", "ood"), "book": [f"b{k // 3}" for k in scene],
                         "dimension": np.asarray(COSER_DIMENSIONS)[dimension], "score": scores.ravel()})


@lru_cache(maxsize=None)
def coser_truth() -> np.ndarray:
    """Expected CoSER score per dimension, then their average."""
    rng = np.random.default_rng(4242)
    frame = coser_frame(100_000, rng, repeats=1)
    means = frame.groupby("dimension", sort=False)["score"].mean().to_numpy()
    return np.append(means, means.mean())


def coser_scores(tally: Tally, n_scenes: int, rng: np.random.Generator, n_boot: int) -> None:
    """CoSER dimension scores and their average, overall and per split (id/ood: half the scenes)."""
    from charactereval_lib.coser.statistics import interval_table

    frame = coser_frame(n_scenes, rng)
    seed = int(rng.integers(2**31))
    truth = coser_truth()
    for kind, part in (("CoSER score", frame), ("CoSER split", frame[frame["tag"] == "id"])):
        table = interval_table(part, n_boot, seed)
        n = part["scene"].nunique()
        cells = list(table.values())
        tally.add(kind, [n] * len(cells), [_nan(c["low"]) for c in cells], [_nan(c["high"]) for c in cells], truth)


def _nan(value: float | None) -> float:
    return math.nan if value is None else float(value)


def judge_metascores(tally: Tally, n_items: int, rng: np.random.Generator, n_boot: int) -> None:
    """A judge's exact agreement with human labels: items of 1-3 labels, the hit rate varying by
    item around 0.8."""
    from charactereval_lib.engine.grading.agreement import label_agreement

    labels_per_item = rng.integers(1, 4, size=n_items)
    item = np.repeat(np.arange(n_items), labels_per_item)
    rate = 1 / (1 + np.exp(-(1.4 + rng.normal(0.0, 0.8, size=n_items))))
    hits = rng.random(len(item)) < rate[item]
    human = np.where(rng.random(len(item)) < 0.5, "A", "B")
    predicted = np.where(hits, human, np.where(human == "A", "B", "A"))
    found = label_agreement(predicted.tolist(), human.tolist(), item.tolist(), alpha_level="nominal", n_boot=n_boot,
                            seed=int(rng.integers(2**31)))
    tally.add("judge metascore", [n_items], [found.metascore.low], [found.metascore.high], [_true_hit_rate()])


@lru_cache(maxsize=None)
def _true_hit_rate() -> float:
    # Items are drawn with 1-3 labels each: a label's expected hit rate weighs items by size.
    rng = np.random.default_rng(99)
    rate = 1 / (1 + np.exp(-(1.4 + rng.normal(0.0, 0.8, size=2_000_000))))
    size = rng.integers(1, 4, size=rate.size)
    return float(np.sum(rate * size) / np.sum(size))


# Kind -> (simulation, the run sizes it is drawn at). Sizes are samples (CharacterEval), scenes
# (CoSER) or items (metascore); a run's metrics then fall into several bands of n.
SIMULATIONS: dict[str, tuple[Callable[[Tally, int, np.random.Generator, int], None], tuple[int, ...]]] = {
    "means": (run_means, (10, 24, 48, 120, 400, 1000)),
    "paired": (paired_differences, (10, 24, 48, 120, 400, 1000)),
    "characters": (character_effects, (60, 200, 600)),
    "coser": (coser_scores, (4, 6, 10, 24, 60)),
    "metascore": (judge_metascores, (4, 8, 15, 30, 80)),
}


def simulate(reps: int, *, n_boot: int = 1000, seed: int = 0, only: Sequence[str] | None = None) -> Tally:
    """Coverage of every interval kind: ``reps`` simulated runs at each size of each simulation."""
    rng = np.random.default_rng(seed)
    tally = Tally.empty()
    for name, (simulation, sizes) in SIMULATIONS.items():
        if only is not None and name not in only:
            continue
        for size in sizes:
            for _ in range(reps):
                simulation(tally, size, rng, n_boot)
    return tally


def alternatives(reps: int, *, n_boot: int = 1000, seed: int = 0) -> Tally:
    """Metric means by the methods not chosen, on the same kind of runs: the percentile cluster
    bootstrap the workbench used before (intervals from n >= 2), and the studentized interval and
    the cluster-robust t interval were they printed below ``stats.MIN_CLUSTERS`` (from n >= 2):
    the evidence for where an interval starts."""
    from scipy.special import stdtrit

    rng = np.random.default_rng(seed)
    tally = Tally.empty()
    truth = true_metric_means()
    for size in SIMULATIONS["means"][1]:
        for _ in range(reps):
            frame = reward_run(size, rng)
            clusters = stats.cluster_totals(frame, METRIC_ORDER, label="metric")
            boot_seed = int(rng.integers(2**31))
            n = frame.groupby("metric_en").size().reindex(METRIC_ORDER, fill_value=0).to_numpy()
            low, high = stats.percentile_interval(stats.bootstrap_means(clusters, n_boot, boot_seed))
            tally.add("metric mean: percentile bootstrap (before)", n, np.where(n >= 2, low, np.nan), high, truth)
            found = stats.studentized_intervals(clusters, n_boot=n_boot, seed=boot_seed, min_clusters=2)
            tally.add("metric mean: studentized from n=2", n, found.low, found.high, truth)
            with np.errstate(invalid="ignore"):
                half = stdtrit(np.maximum(n - 1, 1), 0.975) * found.se
            tally.add("metric mean: cluster-robust t from n=2", n, np.where(n >= 2, found.value - half, np.nan),
                      found.value + half, truth)
    return tally
