"""benchmarks/gpu_check.py must work the first time it runs on a GPU machine that is lent for
minutes: its whole code path (random model built on the device, the length table, stratified
sample, both modes through the scorer's loop, the result file, the deadline) runs here on the
CPU with the tiny shape."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "benchmarks" / "gpu_check.py")
    module = importlib.util.module_from_spec(spec)
    # Registered first: its dataclasses look their module up while being created.
    sys.modules["gpu_check"] = module
    spec.loader.exec_module(module)
    return module


def test_committed_length_table_covers_every_official_row(gpu_check):
    table = gpu_check.load_length_table(gpu_check.LENGTHS)
    assert table["rows"] == 8032 == sum(len(rows) for _, rows in table["samples"])
    assert table["tokens"] == sum(sum(rows) for _, rows in table["samples"])
    assert max(max(rows) for _, rows in table["samples"]) <= table["max_tokens"]
    # The metrics of a sample share most of their input (profile, context, reply).
    shared = sum(p * (len(rows) - 1) for p, rows in table["samples"])
    assert shared > 0.05 * table["tokens"]


def test_stratified_sample_is_whole_samples_and_any_prefix_spans_the_strata(gpu_check):
    samples = [(0, [n] * (1 + n % 3)) for n in range(10, 1010, 10)]
    order = gpu_check.stratified_order(samples, rows=60, strata=4, seed=0)
    assert len(set(order)) == len(order) and 60 <= sum(len(samples[i][1]) for i in order) < 63
    # The first four picks come from the four length quartiles, shortest bin first.
    assert [i * 4 // len(samples) for i in order[:4]] == [0, 1, 2, 3]


def test_random_ids_keep_lengths_and_shared_prefix(gpu_check):
    [(index, rows)] = gpu_check.random_ids([(5, [9, 12, 7])], [0], vocab=50, seed=1)
    assert index == 0 and [len(r) for r in rows] == [9, 12, 7]
    assert rows[0][:5] == rows[1][:5] == rows[2][:5] and all(r[-1] == gpu_check.EOS_ID for r in rows)
    assert all(3 <= t < 50 for r in rows for t in r[:-1])


def test_tiny_cpu_run_prints_and_writes_every_figure(gpu_check, tmp_path, capsys):
    out = tmp_path / "result.json"
    status = gpu_check.main(["--tiny", "--device", "cpu", "--rows", "6", "--no-hf-test", "--out", str(out)])
    assert status == 0
    result = json.loads(out.read_text())
    scoring = result["scoring"]
    assert scoring["rows"] >= 6 and not result["stopped_early"]
    assert scoring["equality"]["exact_equal_fraction"] == 1.0 and scoring["equality"]["max_diff_grid_steps"] == 0
    for mode in ("faithful", "fast"):
        assert scoring[mode]["rows_per_s"] > 0 and scoring[mode]["projected_minutes_all_rows"] > 0
    assert scoring["faithful"]["bf16_peak_fraction"] > 0 and scoring["fast"]["bf16_peak_fraction_effective"] > 0
    assert scoring["sigmoid_spread"]["distinct"] > 1 and scoring["non_finite"] == 0
    printed = capsys.readouterr().out
    assert "rows/s" in printed and "bitwise equal" in printed and str(out) in printed


def test_real_shape_flop_count_matches_the_issue(gpu_check):
    assert 25 < gpu_check.matmul_gflop_per_token(gpu_check.REAL) < 27


def test_deadline_stops_early_and_still_writes(gpu_check, tmp_path, monkeypatch, capsys):
    # A clock that advances one second per reading: the 30 s budget runs out mid-run.
    clock = iter(range(10**6))
    monkeypatch.setattr(gpu_check, "clock", lambda: float(next(clock)))
    out = tmp_path / "result.json"
    gpu_check.main(["--tiny", "--rows", "12", "--batch-rows", "2", "--max-minutes", "0.5", "--no-hf-test", "--out", str(out)])
    result = json.loads(out.read_text())
    assert result["stopped_early"] is True
    assert 0 < result["scoring"]["rows"] < 12
    assert "STOPPED EARLY" in capsys.readouterr().out


def test_cuda_requested_without_cuda_is_one_clear_error(gpu_check, tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(SystemExit, match="CUDA is not available"):
        gpu_check.main(["--tiny", "--device", "cuda", "--no-hf-test", "--out", str(tmp_path / "r.json")])


def test_the_anchor_runs_the_five_released_generations_end_to_end(gpu_check, tmp_path, capsys):
    # Seed 000 §4 item 2 / seed 001 row 23 on synthetic released files and the tiny random
    # checkpoint: the path the real weights take, which must never call its scores an anchor.
    from _reward_support import released_generations, tiny_checkpoint

    # Two samples, a short context window: every step runs, in seconds.
    data, files = released_generations(tmp_path, samples=2)
    result, status = gpu_check.anchor_check(tiny_checkpoint(max_len=256), "cpu", n_boot=20, data=data, files=files)
    assert status == 1 and result["meaningless"]
    verdict = result["verdict"]
    assert not verdict["reproduced"] and verdict["tolerance"] == 0.0005
    assert list(verdict["models"]) == ["ChatGLM3-6B", "Baichuan2-7B", "Qwen-7B", "InternLM-7B", "XVERSE-7B"]
    assert verdict["metrics"] == 60 and all(m["metrics"] == 12 for m in verdict["models"].values())
    assert [f["sha256"] for f in result["files"]] == [
        hashlib.sha256(files[key].read_bytes()).hexdigest() for key in files]
    gpu_check.print_anchor(result)
    printed = capsys.readouterr().out
    assert "MEANINGLESS" in printed and "ChatGLM3-6B: generation_trans_chatglm3_6b.jsonl sha256 " in printed
    assert f"anchor NOT REPRODUCED: {verdict['within']}/60 metric means within 0.0005 of Table 4" in printed
    with pytest.raises(SystemExit, match="not a checkpoint directory"):
        gpu_check.main(["--anchor", str(tmp_path / "no-weights"), "--device", "cpu"])
