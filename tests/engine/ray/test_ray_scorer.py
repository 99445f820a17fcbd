"""``score --engine ray`` on a local two-worker Ray cluster with the tiny model: bitwise the scores
of the single-process scorer, a worker killed mid-run costs nothing, a killed driver resumes
without duplicates; and without Ray, one line saying how to install it."""

from __future__ import annotations

import os
import signal
import sys
import textwrap

import pytest

from _ray_support import check_ray_section, keys_once, reference
from _ray_support import scorer_settings as settings
from _reward_support import write_rows
from charactereval_lib.charactereval import layout
from charactereval_lib.charactereval.reward import scorer
from charactereval_lib.cli import main
from charactereval_lib.engine.storage import artifacts, runs
from tests.generation_support import kill_mid_run, slow_writes

pytestmark = pytest.mark.usefixtures("private_digest_cache")


@pytest.mark.slow
def test_fast_mode_on_two_workers_scores_bitwise_like_one_process(cluster, setup, rm_dir):
    from charactereval_lib.charactereval.reward.ray_scorer import RayEngine, RaySettings

    data, data_dir, run_dir, rows = setup
    report = scorer.score_run(run_dir, rm_dir, data, settings("fast"), RayEngine(RaySettings(workers=2)))
    assert report.scored == len(rows)
    assert len(keys_once(run_dir / layout.SCORES)) == len(rows)
    # Every field, the sigmoid bit for bit included.
    expected = reference(run_dir, data_dir, data, rm_dir, "fast")
    assert {(r["id"], r["metric_en"]): r for r in artifacts.read_jsonl(run_dir / layout.SCORES).records} == expected
    scoring = runs.load_manifest(run_dir)["scoring"]
    assert scoring["engine"] == "ray"
    check_ray_section(scoring["ray"], lost=0)


@pytest.mark.slow
def test_two_workers_score_bitwise_like_one_process_when_one_is_killed_mid_run(cluster, setup, rm_dir):
    """Faithful mode: the killed worker's unit goes to its replacement, and the scores are still
    those of the single-process scorer, every field bit for bit. (No separate run without a kill:
    each run starts its workers, which import torch, several seconds of CPU each.)"""
    from charactereval_lib.charactereval.reward.ray_scorer import RayEngine, RaySettings

    data, data_dir, run_dir, rows = setup
    killed = []

    def kill_one_worker(workers, written):
        if not killed:
            killed.append(workers[0].pid)
            os.kill(workers[0].pid, signal.SIGKILL)

    engine = RayEngine(RaySettings(workers=2), on_result=kill_one_worker)
    report = scorer.score_run(run_dir, rm_dir, data, settings(), engine)
    assert killed and report.scored == len(rows)
    assert len(keys_once(run_dir / layout.SCORES)) == len(rows)
    expected = reference(run_dir, data_dir, data, rm_dir, "faithful")
    assert {(r["id"], r["metric_en"]): r for r in artifacts.read_jsonl(run_dir / layout.SCORES).records} == expected
    scoring = runs.load_manifest(run_dir)["scoring"]
    assert scoring["engine"] == "ray"
    check_ray_section(scoring["ray"], lost=1)


DRIVER = slow_writes(0.05) + textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from charactereval_lib.charactereval.data import load_official_data
    from charactereval_lib.charactereval.reward.ray_scorer import RayEngine, RaySettings
    from charactereval_lib.charactereval.reward.scorer import ScorerSettings, score_run
    data = load_official_data(sys.argv[1], verify=False)
    score_run(Path(sys.argv[2]), Path(sys.argv[3]), data, ScorerSettings(progress=False), RayEngine(RaySettings(workers=2, address=sys.argv[4])))
    """
)


@pytest.mark.slow
def test_a_killed_driver_resumes_without_duplicates(cluster, ray_address, setup, rm_dir, tmp_path, request):
    from charactereval_lib.charactereval.reward.ray_scorer import RayEngine, RaySettings

    data, data_dir, run_dir, rows = setup
    scores = run_dir / layout.SCORES
    kill_mid_run(request, DRIVER, [str(data_dir), str(run_dir), str(rm_dir), ray_address], scores, tmp_path,
                        env={"XDG_CACHE_HOME": str(tmp_path / "cache")})
    before = artifacts.read_jsonl(scores).records
    assert 3 <= len(before) < len(rows), "the kill must land mid-run"

    report = scorer.score_run(run_dir, rm_dir, data, settings(), RayEngine(RaySettings(workers=2)))
    assert report.already_scored == len(before) and report.scored == len(rows) - len(before)
    assert len(keys_once(scores)) == len(rows)
    expected = reference(run_dir, data_dir, data, rm_dir, "faithful")
    assert {(r["id"], r["metric_en"]): r for r in artifacts.read_jsonl(scores).records} == expected


def test_without_ray_the_engine_fails_in_one_line(setup, rm_dir, monkeypatch, capsys):
    _, data_dir, run_dir, _ = setup
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    status = main(["score", str(run_dir), "--rm", str(rm_dir), "--data-dir", str(data_dir), "--engine", "ray", "--quiet"])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1
    assert err[0].startswith("error: --engine ray needs Ray") and "pip install 'charactereval-workbench[ray]'" in err[0]
    assert not (run_dir / layout.SCORES).exists()


def test_ray_options_need_the_ray_engine(setup, rm_dir, capsys):
    _, data_dir, run_dir, _ = setup
    status = main(["score", str(run_dir), "--rm", str(rm_dir), "--data-dir", str(data_dir), "--workers", "2"])
    assert status == 2 and "need engine ray" in capsys.readouterr().err


@pytest.mark.slow
def test_a_worker_that_cannot_start_is_one_clear_error(cluster, setup, rm_dir):
    import torch

    from charactereval_lib.charactereval.reward.ray_scorer import RayEngine, RaySettings

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    data, _, run_dir, _ = setup
    cuda = scorer.ScorerSettings(device="cuda", progress=False)
    with pytest.raises(runs.RunError, match=r"^a Ray worker could not start: --device cuda: CUDA is not available"):
        scorer.score_run(run_dir, rm_dir, data, cuda, RayEngine(RaySettings(workers=1)))
    assert not artifacts.read_jsonl(run_dir / layout.SCORES).records


@pytest.mark.slow
def test_a_refused_ray_run_leaves_run_json_as_it_was(cluster, setup, rm_dir, tmp_path):
    from charactereval_lib.charactereval.reward.ray_scorer import RayEngine, RaySettings

    data, data_dir, _, _ = setup
    run_dir = tmp_path / "run"
    write_rows(run_dir, data_dir)
    scorer.score_run(run_dir, rm_dir, data, settings())
    before = (run_dir / runs.MANIFEST).read_bytes()
    with pytest.raises(runs.RunError, match=r"--gpus-per-worker 4: the cluster has 0 GPU\(s\)$"):
        scorer.score_run(run_dir, rm_dir, data, settings("fast"), RayEngine(RaySettings(gpus_per_worker=4)))
    # Refused before any work: the manifest still says how the scores were made.
    assert (run_dir / runs.MANIFEST).read_bytes() == before
