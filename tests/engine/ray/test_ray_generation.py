"""``generate --backend hf --engine ray`` on a local two-worker Ray cluster with the tiny chat
model: the records of the single-process hf backend (greedy), a worker killed mid-run costs
nothing, a killed driver resumes (here with the single-process engine) without duplicates; and
the option's one-line errors."""

from __future__ import annotations

import os
import signal
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from _ray_support import check_ray_section
from charactereval_lib import pipeline
from charactereval_lib.charactereval.requests import generation_task, make_requests
from charactereval_lib.cli import main
from charactereval_lib.engine.storage import artifacts, runs
from charactereval_lib.testing.tiny_chat_model import build_model, build_tokenizer
from tests.generation_support import kill_mid_run, slow_writes, synthetic_data

SAMPLES = 12
# Timings differ between any two runs; everything else of a record must not.
TIMINGS = ("latency_s", "elapsed_s")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("tiny-chat") / "model"
    build_model(path, build_tokenizer(path))
    return path


def settings(model_dir: Path, engine: str = "local", **extra) -> pipeline.GenerateSettings:
    # Batches of 2: six work units, so both workers get several.
    ray = {"engine": "ray", "workers": 2} if engine == "ray" else {}
    return pipeline.GenerateSettings(backend="hf", model=str(model_dir), max_tokens=6, batch_size=2, dtype="float32",
                                     **ray, **extra)


def records(run: Path, leave_out: tuple[str, ...] = ()) -> list[dict]:
    """The run's records without timings (and ``leave_out``), checking that no id was written
    twice."""
    found = [{k: v for k, v in r.items() if k not in TIMINGS + leave_out}
             for r in artifacts.read_jsonl(run / runs.GENERATIONS).records]
    ids = [r["id"] for r in found]
    assert len(ids) == len(set(ids)), "a request was recorded twice"
    return sorted(found, key=lambda r: r["id"])


@pytest.fixture(scope="module")
def reference_run(model_dir, tmp_path_factory) -> Path:
    """The single-process hf backend's run of the same requests."""
    run = tmp_path_factory.mktemp("reference") / "run"
    pipeline.generate(run, settings(model_dir), data=synthetic_data(SAMPLES))
    return run


@pytest.fixture(scope="module")
def reference(reference_run) -> list[dict]:
    return records(reference_run)


@pytest.mark.slow
def test_two_workers_generate_the_records_of_one_process_when_one_is_killed_mid_run(cluster, model_dir,
                                                                                     reference_run, reference,
                                                                                     tmp_path):
    """The killed worker's units go to the other worker (or its replacement), and every record is
    still the one of the single-process backend. (No separate run without a kill: each run starts its workers, which
    import torch, several seconds of CPU each; ``pipeline.generate`` with engine ray runs in the
    killed-driver test below.)"""
    from charactereval_lib.engine.generation.engine import run_generation
    from charactereval_lib.engine.generation.ray_hf import RayHFBackend
    from charactereval_lib.engine.ray_cluster import RaySettings

    data = synthetic_data(SAMPLES)
    killed = []

    def kill_one_worker(workers, finished):
        if not killed:
            killed.append(workers[0].pid)
            os.kill(workers[0].pid, signal.SIGKILL)

    chosen = settings(model_dir, "ray")
    # One unit in flight per worker: when the first result comes back, four of the six units are
    # still queued, so the killed worker is always handed another one (with two in flight, a busy
    # driver could see both of its units finish before the kill and the queue empty: no loss seen).
    backend = RayHFBackend(chosen.model, chosen.decoding(), chosen.backend_options(),
                           RaySettings(workers=2, in_flight_per_worker=1), on_result=kill_one_worker)
    summary = run_generation(tmp_path / "run", make_requests(data.samples, data), backend, generation_task(data),
                             progress=False)
    assert killed and summary.ok == SAMPLES and backend.pool.lost == 1
    # Text, token counts, digests, finish reasons, batch sizes: all those of one process.
    assert records(tmp_path / "run") == reference
    generation = runs.load_manifest(tmp_path / "run")["generation"]
    assert generation["engine"] == "ray" and generation["status"] == "complete"
    check_ray_section(generation["ray"], lost=1)
    # What a resume checks is the same, so either engine can resume the other's run.
    assert generation["identity"] == runs.load_manifest(reference_run)["generation"]["identity"]


DRIVER = slow_writes(0.3) + textwrap.dedent(
    """
    import sys
    from charactereval_lib import pipeline
    from tests.generation_support import synthetic_data
    settings = pipeline.GenerateSettings(backend="hf", model=sys.argv[2], max_tokens=6, batch_size=2, dtype="float32",
                                         engine="ray", workers=2, address=sys.argv[4])
    pipeline.generate(sys.argv[1], settings, data=synthetic_data(int(sys.argv[3])))
    """
)


@pytest.mark.slow
def test_a_killed_driver_resumes_without_duplicates(ray_address, model_dir, reference, tmp_path, request):
    run = tmp_path / "run"
    generations = run / runs.GENERATIONS
    kill_mid_run(request, DRIVER, [str(run), str(model_dir), str(SAMPLES), ray_address], generations, tmp_path)
    before = len(artifacts.read_jsonl(generations).records)
    assert 3 <= before < SAMPLES, "the kill must land mid-run"

    # The other engine resumes the run: same identity, so it only generates what is missing.
    result = pipeline.generate(run, settings(model_dir), data=synthetic_data(SAMPLES))
    assert result.session.already_ok == before and result.session.ok == SAMPLES - before
    # The resumed session batches only the missing requests, so batch sizes may differ.
    assert records(run, ("batch_size",)) == [{k: v for k, v in r.items() if k != "batch_size"} for r in reference]


def test_engine_ray_is_for_the_hf_backend_and_needs_ray(tmp_path, monkeypatch, capsys):
    status = main(["generate", str(tmp_path / "run"), "--backend", "offline", "--model", "m", "--engine", "ray"])
    assert status == 2 and "engine ray runs the hf backend" in capsys.readouterr().err
    status = main(["generate", str(tmp_path / "run"), "--backend", "hf", "--model", "m", "--workers", "2"])
    assert status == 2 and "need engine ray" in capsys.readouterr().err


def test_without_ray_the_engine_fails_in_one_line(model_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    with pytest.raises(runs.RunError, match=r"^--engine ray needs Ray, an optional extra: pip install 'charactereval-workbench\[ray\]'"):
        pipeline.generate(tmp_path / "run", settings(model_dir, "ray"), data=synthetic_data(2))
    assert not (tmp_path / "run" / runs.GENERATIONS).exists()


@pytest.mark.slow
def test_more_gpus_than_the_cluster_has_is_one_line(cluster, model_dir, tmp_path):
    with pytest.raises(runs.RunError, match=r"^--workers 2 x --gpus-per-worker 1: the cluster has 0 GPU\(s\)$"):
        pipeline.generate(tmp_path / "run", settings(model_dir, "ray", gpus_per_worker=1.0), data=synthetic_data(2))
    assert not (tmp_path / "run" / runs.GENERATIONS).exists()
