"""Every benchmark in ``benchmarks/`` runs as shipped, at its smallest size, and prints its ratio.

A benchmark is a script nobody runs between measurements: ``bench_generation.py`` once broke
silently when an API it calls changed. These runs measure nothing (sizes of a few requests, rows
or scenes, on a busy machine); they prove that each script still runs to its end, exits 0 and
prints the figure it exists for, and that a smoke run writes nothing under benchmarks/results/.
The Ray benchmark runs beside the other Ray tests (``test_perf_scripts_ray.py``). They are marked
``bench``: ``make bench-smoke`` runs them (CI does, after ``make test``), the suite does not.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from charactereval_lib.coser.data import locate_data_dir as coser_data_dir

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"
RESULTS = BENCHMARKS / "results"

# script: (its smallest-size arguments, the line that carries its ratio, needs the CoSER data).
# Latencies of 10 ms instead of 200 ms: the smoke run checks the path, not the rate.
SMOKE = {
    "bench_analysis.py": (["--n-boot", "20", "--baseline-boot", "20", "--no-report"],
                          r"speed-up per resample \(pandas loop / vectorised\): +[\d.]+x", False),
    "bench_cli.py": (["--repeat", "1"], r"slowest --help \(median\): [\d.]+ s", False),
    "bench_coverage.py": (["--reps", "1", "--n-boot", "50", "--samples", "200", "--no-write"],
                          r"worst printed cell: .*: [\d.]+%[\s\S]*studentized vs [\d.]+ s percentile \([\d.]+x\)", False),
    "bench_coser.py": (["--scenes", "2", "--sequential-scenes", "1", "--latency", "0.01"],
                       r'"ours_over_ideal": [\d.]+,\s.*"speedup_vs_sequential": [\d.]+', True),
    "bench_coser_metrics.py": (["--scenes", "5"], r'"speedup": [\d.]+', True),
    "bench_generation.py": (["--requests", "40", "--concurrency", "8", "--latency", "0.01", "--sequential", "4"],
                            r"ours / raw += [\d.]+ .*\n.*\nours / sequential = [\d.]+x", False),
    "bench_judge.py": (["--requests", "40", "--concurrency", "8", "--latency", "0.01"], r"ours / raw = [\d.]+ ", False),
    "bench_leaderboard.py": (["--ce-runs", "1", "--coser-runs", "1", "--synthetic", "--out", "{tmp}/leaderboard.json"],
                             r'"build_over_baseline": [\d.]+,\n.*\n.*"rebuild_over_build": [\d.]+', False),
    "bench_report_figures.py": (["--samples", "200", "--repeat", "1", "--no-write"],
                                r"\([\d.]+x; PNG byte-identical\)\nreport imports: .*\([\d.]+x\)", False),
    "bench_scoring.py": (["--rows", "10", "--repeat", "1", "--subset-only", "--layers", "1", "--hidden", "32", "--heads", "2",
                          "--vocab", "4000", "--rss-mb", "16"],
                         r"fast [\d.]+ rows/s \([\d.]+x\).*\n.*: [\d.]+x, equal .*\n(loading .*\n){3}", False),
}


def results_state() -> dict[str, int]:
    return {path.name: path.stat().st_mtime_ns for path in RESULTS.iterdir()}


def run_benchmark(script: str, args: list[str], env: dict[str, str], tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """Runs ``benchmarks/script`` as a user would (its own process, from the checkout) and
    returns what it printed; fails with its output unless it exits 0 and left results/ alone.
    ``{tmp}`` in an argument is ``tmp_path``; ``{rm}`` the session's tiny reward model (training
    a tokenizer on the data again would be most of a smoke run's time)."""
    before = results_state()
    rm = request.getfixturevalue("tiny_rm") if any("{rm}" in a for a in args) else None
    done = subprocess.run([sys.executable, str(BENCHMARKS / script), *(a.format(tmp=tmp_path, rm=rm) for a in args)],
                          cwd=ROOT, env={**os.environ, "TQDM_DISABLE": "1", **env}, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, f"{script} exited {done.returncode}:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert results_state() == before, f"{script}: a smoke run changed benchmarks/results/"
    return done.stdout


def test_every_benchmark_has_a_smoke_run():
    from test_perf_scripts_ray import SMOKE as RAY_SMOKE

    assert sorted(p.name for p in BENCHMARKS.glob("bench_*.py")) == sorted({*SMOKE, *RAY_SMOKE})


@pytest.mark.bench
@pytest.mark.parametrize("script", list(SMOKE))
def test_the_benchmark_runs_at_its_smallest_size_and_prints_its_ratio(script, official_dir, tmp_path, request):
    args, ratio, coser = SMOKE[script]
    if coser and not coser_data_dir().is_dir():
        pytest.skip(f"CoSER data not found at {coser_data_dir()} (set COSER_DATA_DIR)")
    printed = run_benchmark(script, args, {"CHARACTEREVAL_DATA_DIR": str(official_dir)}, tmp_path, request)
    assert re.search(ratio, printed, re.DOTALL if coser else 0), printed[-3000:]


def test_the_leaderboard_benchmark_says_why_it_skips_the_browser_where_playwright_is_missing(monkeypatch):
    """Chromium installed but not the playwright package: the browser part is skipped with a line,
    not a ModuleNotFoundError at the end of the run (``None`` in ``sys.modules`` hides a package)."""
    import importlib.util

    monkeypatch.setitem(sys.modules, "playwright", None)
    spec = importlib.util.spec_from_file_location("bench_leaderboard_under_test", BENCHMARKS / "bench_leaderboard.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "CHROMIUM", sys.executable)  # a file that exists, as chromium would
    assert "playwright package is not installed" in module.browser_missing()
    monkeypatch.setattr(module, "CHROMIUM", str(ROOT / "no-such-chromium"))
    assert "is missing" in module.browser_missing()
