"""Benchmark: summarize with 1,000 cluster-bootstrap resamples on 8,032 rows (target < 2 s),
against a plain pandas loop over resamples measured in the same run, and the analysis report
notebook end to end (target < 60 s).

    python benchmarks/bench_analysis.py [--n-boot 1000] [--baseline-boot 1000] [--no-report]

The run has the real shape: with $CHARACTEREVAL_DATA_DIR it uses the official ids and metrics
(4,531 scored samples, 8,032 rows); without it, synthetic data with the same per-metric row
counts. Scores are synthetic bf16-grid values either way (no reward model runs here).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from charactereval_lib import pipeline
from charactereval_lib.charactereval import statistics, summary
from charactereval_lib.charactereval.data import DATA_DIR_ENV, load_official_data
from charactereval_lib.testing.synthetic import write_synthetic_data, write_synthetic_run

# Rows per metric of the official data (DESIGN §2).
REAL_METRIC_ROWS = {"Empathy": 744, "Diversity": 737, "Communication_skills": 734, "Utterance": 724,
                    "Humanlikeness": 724, "Behavior": 720, "Accuracy": 718, "Consistency": 715, "Exposure": 714,
                    "Coherence": 708, "Hallucination": 486, "Fluency": 308}


def naive_bootstrap(scores: pd.DataFrame, n_boot: int, seed: int) -> pd.DataFrame:
    """The textbook loop: per resample, draw sample ids, gather their rows, group and average."""
    rng = np.random.default_rng(seed)
    indexed = scores.set_index("id")
    ids = np.array(sorted(scores["id"].unique()))
    draws = []
    for _ in range(n_boot):
        picked = indexed.loc[rng.choice(ids, size=len(ids), replace=True)]
        draws.append(picked.groupby("metric_en")["score"].mean())
    table = pd.DataFrame(draws)
    return pd.DataFrame({"ci_low": table.quantile(0.025), "ci_high": table.quantile(0.975)})


def timed(func, *args, repeat: int = 1, **kwargs):
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        result = func(*args, **kwargs)
        best = min(best, time.perf_counter() - start)
    return best, result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-boot", type=int, default=1000)
    parser.add_argument("--baseline-boot", type=int, default=1000, help="resamples for the pandas loop")
    parser.add_argument("--no-report", action="store_true", help="skip the notebook benchmark")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        real_dir = os.environ.get(DATA_DIR_ENV)
        if real_dir:
            data, data_dir, verify, source = load_official_data(real_dir), real_dir, True, "official ids and metrics"
        else:
            data_dir = str(write_synthetic_data(tmp / "data", 4564, metric_rows=REAL_METRIC_ROWS, no_metric_share=33 / 4564))
            data, verify, source = load_official_data(data_dir, verify=False), False, "synthetic, official per-metric rows"
        run = write_synthetic_run(tmp / "bench-run", data, seed=1)
        scores, _ = summary.load_run_scores(run)
        print(f"run: {len(scores)} rows, {scores['id'].nunique()} samples ({source})")

        t_stats, _ = timed(statistics.metric_statistics, scores, n_boot=args.n_boot, repeat=3)
        t_summary, _ = timed(summary.summarize_run, run, id2metric=data.id2metric, n_boot=args.n_boot, repeat=3)
        t_naive, _ = timed(naive_bootstrap, scores, args.baseline_boot, 0)
        per_resample_naive = t_naive / args.baseline_boot
        per_resample_ours = t_stats / args.n_boot
        print(f"metric_statistics, {args.n_boot} resamples:          {t_stats:7.3f} s")
        print(f"summarize_run (read + stats + write), {args.n_boot}:  {t_summary:7.3f} s   (target < 2 s)")
        print(f"pandas loop baseline, {args.baseline_boot} resamples:         {t_naive:7.3f} s")
        print(f"speed-up per resample (pandas loop / vectorised): {per_resample_naive / per_resample_ours:7.1f}x")

        if not args.no_report:
            t_report, outcome = timed(pipeline.report, run, pipeline.ReportSettings(verify_data=verify, n_boot=args.n_boot),
                                      data_dir=data_dir)
            html = outcome.html
            print(f"analysis notebook end to end (papermill + HTML): {t_report:7.1f} s   (target < 60 s); "
                  f"{html.stat().st_size / 1e6:.1f} MB HTML")
    return 0


if __name__ == "__main__":
    sys.exit(main())
