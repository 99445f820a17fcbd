"""The Ray benchmark runs as shipped at its smallest size (``test_perf_scripts.py`` says why), on the
session's one Ray cluster: it is one of the Ray files that one xdist worker runs (conftest)."""

from __future__ import annotations

import re

import pytest
from test_perf_scripts import run_benchmark

# Ten rows of one mode on one worker, and two generated requests; the node-loss benchmark on its
# own multi-node cluster, with the session's tiny checkpoint and about ten rows.
SMOKE = {"bench_ray.py": ["--rows", "10", "--workers", "1", "--modes", "fast", "--generation", "2", "--rm", "{rm}"],
         "bench_ray_node_loss.py": ["--rows", "10", "--rm", "{rm}"]}


@pytest.mark.bench
def test_the_ray_benchmark_runs_at_its_smallest_size_and_prints_its_ratios(ray_address, official_dir, tmp_path, request):
    printed = run_benchmark("bench_ray.py", [*SMOKE["bench_ray.py"], "--address", ray_address],
                            {"CHARACTEREVAL_DATA_DIR": str(official_dir)}, tmp_path, request)
    assert re.search(r"fast    : .*\(ratio x1/local [\d.]+; .*bitwise equal: True", printed), printed[-3000:]
    assert re.search(r"generate: .*\(ratio [\d.]+; .*same records: True", printed), printed[-3000:]


@pytest.mark.bench
def test_the_node_loss_benchmark_runs_at_its_smallest_size_and_finishes_complete(official_dir, tmp_path, request):
    printed = run_benchmark("bench_ray_node_loss.py", SMOKE["bench_ray_node_loss.py"],
                            {"CHARACTEREVAL_DATA_DIR": str(official_dir)}, tmp_path, request)
    # At ten rows the run may end before the loss is seen (null seconds): the smoke run measures nothing.
    for loss in ("graceful", "abrupt"):
        assert re.search(rf'"loss": "{loss}", "seconds_to_next_row": (null|[\d.]+).*"complete": true, "duplicates": 0, '
                         r'"bitwise_equal_to_local": true', printed), printed[-3000:]
