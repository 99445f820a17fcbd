"""Benchmark: what a report's kernel spends outside the report's own content, against the way
it was spent before, measured in the same run.

  (a) the bf16 score grid figure (12 panels, up to 400 bins each), built and rendered to PNG:
      ours draws one filled step outline per panel; the baseline one bar per bin, as the reports
      did before (``Axes.hist``: up to 4,800 patches). The two PNGs must be byte-identical.
  (b) a fresh process importing the report notebook's modules: ours; the baseline also imports
      scipy.stats, which every report's kernel imported before (through seaborn, where the
      colours came from, and for the normal quantiles of the minimum detectable difference).

The run is synthetic: 4,564 samples by default, as many as the official data, their metrics
drawn at random (about 9,000 rows), scores on the bf16 grid.
Writes benchmarks/results/bench_report_figures_<label>.json (or ``--out FILE``).

    python benchmarks/bench_report_figures.py [--samples 4564] [--repeat 3] [--label cpu_2core] [--out FILE]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from matplotlib.axes import Axes

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from charactereval_lib.charactereval import figures, summary
from charactereval_lib.charactereval.data import load_official_data
from charactereval_lib.engine.reports import plots
from charactereval_lib.testing.synthetic import write_synthetic_data, write_synthetic_run

ROOT = Path(__file__).resolve().parent.parent

# The first cell of notebooks/analyse.ipynb, as its kernel runs it.
REPORT_IMPORTS = ("import pandas; from IPython.display import HTML, Markdown, display; "
                  "from charactereval_lib.charactereval import analysis, diagnostics, figures, judge_report, reference; "
                  "from charactereval_lib.engine.reports import plots")


@contextlib.contextmanager
def one_bar_per_bin():
    """``Axes.stairs`` drawn as the reports drew the grid before: a histogram of the same counts,
    one bar patch per bin."""
    stairs = Axes.stairs

    def as_bars(self, values, edges, *, fill, color, linewidth):
        return self.hist(edges[:-1], bins=edges, weights=values, color=color, linewidth=linewidth)

    Axes.stairs = as_bars
    try:
        yield
    finally:
        Axes.stairs = stairs


def grid_png(scores) -> tuple[float, bytes]:
    start = time.perf_counter()
    png = plots.render_png(figures.score_grid_histograms(scores))
    return time.perf_counter() - start, png


def best_of(repeat: int, func):
    results = [func() for _ in range(repeat)]
    return min(r[0] for r in results), results[-1][1]


def import_seconds(code: str, repeat: int) -> float:
    def once():
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
        return time.perf_counter() - start, None

    return best_of(repeat, once)[0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=4564)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--label", default="cpu_2core")
    parser.add_argument("--out", metavar="FILE", help="write the figures here instead of benchmarks/results/")
    parser.add_argument("--no-write", action="store_true", help="print only (the smoke run)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        data = load_official_data(write_synthetic_data(Path(tmp) / "data", args.samples, seed=7), verify=False)
        scores, _ = summary.load_run_scores(write_synthetic_run(Path(tmp) / "run", data, seed=1))
    grid_png(scores)  # fonts and caches warmed for both
    ours, ours_png = best_of(args.repeat, lambda: grid_png(scores))
    with one_bar_per_bin():
        bars, bars_png = best_of(args.repeat, lambda: grid_png(scores))
    if ours_png != bars_png:
        print("error: the score grid's PNG differs from the one-bar-per-bin baseline", file=sys.stderr)
        return 1
    imports = import_seconds(REPORT_IMPORTS, args.repeat)
    with_scipy_stats = import_seconds(REPORT_IMPORTS + "; import scipy.stats", args.repeat)
    result = {"rows": len(scores), "grid_s": round(ours, 3), "grid_bars_s": round(bars, 3),
              "grid_speedup": round(bars / ours, 2), "png_identical": True, "imports_s": round(imports, 3),
              "imports_with_scipy_stats_s": round(with_scipy_stats, 3),
              "imports_speedup": round(with_scipy_stats / imports, 2)}
    print(f"score grid, {len(scores)} rows: {ours:.2f} s, one bar per bin {bars:.2f} s "
          f"({bars / ours:.2f}x; PNG byte-identical)")
    print(f"report imports: {imports:.2f} s, with scipy.stats {with_scipy_stats:.2f} s "
          f"({with_scipy_stats / imports:.2f}x)")
    if not args.no_write:
        out = Path(args.out) if args.out else ROOT / "benchmarks" / "results" / f"bench_report_figures_{args.label}.json"
        out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
