"""Benchmark: the simulated coverage of every interval the workbench prints, per interval kind
and band of n, at a nominal 95% (target: at least 93% in every cell where an interval is
printed), and what the studentized intervals cost against the percentile bootstrap they
replaced, measured in the same run.

  (a) coverage: ``charactereval_lib.testing.coverage`` draws runs like the real ones (1-5
      reward-model scores on the bf16 grid, skewed and discrete, 1-2 metrics per sample; CoSER
      0-100 scores clustered by scene; characters of unequal sizes; judge hits against labels)
      ``--reps`` times per run size and counts how often each printed interval holds the truth;
      beside it, the methods not chosen (the percentile bootstrap, and intervals below n=4).
  (b) time: ``metric_statistics`` (12 metrics, 3 dimensions and the overall score, 1,000
      resamples) on a full-size run (4,564 samples, ~8,000 rows), against the percentile
      bootstrap of the same resamples.

Writes benchmarks/results/bench_coverage_<label>.json (unless ``--no-write``).

    python benchmarks/bench_coverage.py [--reps 200] [--n-boot 1000] [--label cpu_2core] [--no-write]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from charactereval_lib.charactereval.aggregate import METRIC_ORDER
from charactereval_lib.charactereval.statistics import dimension_draws, metric_clusters, metric_statistics
from charactereval_lib.engine import stats
from charactereval_lib.testing import coverage

ROOT = Path(__file__).resolve().parent.parent


def best_of(repeat: int, func) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        func()
        times.append(time.perf_counter() - start)
    return min(times)


def percentile_statistics(scores, n_boot: int) -> None:
    """What ``metric_statistics`` computed before: percentile intervals of the same resamples."""
    draws = stats.bootstrap_means(metric_clusters(scores), n_boot, 0)
    stats.percentile_interval(draws)
    stats.percentile_interval(dimension_draws(draws))
    stats.percentile_interval(dimension_draws(draws).mean(axis=1)[:, None])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=200, help="simulated runs per run size and kind")
    parser.add_argument("--n-boot", type=int, default=1000)
    parser.add_argument("--samples", type=int, default=4564, help="samples of the timed run")
    parser.add_argument("--label", default="cpu_2core")
    parser.add_argument("--no-write", action="store_true")
    args = parser.parse_args()

    load_at_start = os.getloadavg()
    start = time.perf_counter()
    tally = coverage.simulate(args.reps, n_boot=args.n_boot, seed=1)
    table = tally.table()
    simulated = time.perf_counter() - start
    others = coverage.alternatives(args.reps, n_boot=args.n_boot, seed=2).table()

    print(f"coverage at a nominal 95% ({args.reps} runs per size, {args.n_boot} resamples; {simulated:.0f} s)")
    header = f"{'interval':42} {'n':>6} {'trials':>7} {'coverage':>9} {'MC s.e.':>8} {'median width':>13}"
    print(header)
    for row in table.itertuples():
        print(f"{row.kind:42} {row.band:>6} {row.trials:7d} {row.coverage:9.1%} {row.mc_se:8.1%} {row.median_width:13.3f}")
    worst = table.loc[table["coverage"].idxmin()]
    print(f"worst printed cell: {worst['kind']}, n {worst['band']}: {worst['coverage']:.1%} "
          f"(target {coverage.TARGET:.0%})")
    print("\nmethods not chosen (metric means; scores span 1-5, so a width above 4 says nothing)")
    print(header)
    for row in others.itertuples():
        print(f"{row.kind:42} {row.band:>6} {row.trials:7d} {row.coverage:9.1%} {row.mc_se:8.1%} {row.median_width:13.3f}")

    rng = np.random.default_rng(3)
    scores = coverage.reward_run(args.samples, rng)
    ours = best_of(3, lambda: metric_statistics(scores, n_boot=args.n_boot))
    before = best_of(3, lambda: percentile_statistics(scores, args.n_boot))
    print(f"\nmetric_statistics on {len(scores)} rows ({args.samples} samples), {args.n_boot} resamples: "
          f"{ours:.3f} s studentized vs {before:.3f} s percentile ({ours / before:.2f}x)")

    if not args.no_write:
        result = {
            "reps": args.reps, "n_boot": args.n_boot, "nominal": coverage.NOMINAL, "target": coverage.TARGET,
            "min_clusters": stats.MIN_CLUSTERS,
            "coverage": table.to_dict(orient="records"),
            "alternatives": others.to_dict(orient="records"),
            "worst": {"kind": worst["kind"], "band": worst["band"], "coverage": float(worst["coverage"])},
            "timing": {"rows": len(scores), "samples": args.samples, "metrics": len(METRIC_ORDER),
                       "studentized_s": round(ours, 4), "percentile_s": round(before, 4),
                       "studentized_over_percentile": round(ours / before, 2)},
            "simulation_s": round(simulated, 1),
            "load_average_1_5_15_at_start": [round(x, 2) for x in load_at_start],
            "load_average_1_5_15_at_end": [round(x, 2) for x in os.getloadavg()],
        }
        out = ROOT / "benchmarks" / "results" / f"bench_coverage_{args.label}.json"
        out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
