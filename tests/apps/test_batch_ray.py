"""``batch`` with ``engine: ray``: the models run concurrently as Ray tasks, and the batch ends
with the sequential batch's summary (statuses, failed steps and reasons, failed-sample counts,
exit status) and the same records; SIGTERM still stops it cleanly; a task asking for GPUs the
cluster lacks is one line before anything runs."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import time
from pathlib import Path

import pytest
from test_batch_interrupt import start_slow_batch, wait_for_records

from charactereval_lib.charactereval import layout
from charactereval_lib.cli import main
from charactereval_lib.engine.storage import artifacts, runs

# Without importing it: collection (on every xdist worker) should not pay for Ray's import.
if importlib.util.find_spec("ray") is None:
    pytest.skip("ray is not installed", allow_module_level=True)


def write_config(path: Path, out: Path, data: Path, rm: Path, engine: str) -> Path:
    # flaky: one failed attempt is final, so some samples fail to generate (the summary counts
    # them); broken: an hf model that is not there fails at generate; the comparison is skipped.
    path.write_text(
        f"""
output_dir: {out}
data_dir: {data}
n_boot: 100
baselines: [GPT-4]
{engine}
defaults: {{backend: offline, rm: {rm}, device: cpu, mode: fast, subset: 6}}
models:
  - {{name: flaky, model: offline-a, generate: {{offline_fault_rate: 0.3, max_attempts: 1}}}}
  - {{name: broken, backend: hf, model: {path.parent / "no-such-model"}}}
""",
        encoding="utf-8",
    )
    return path


def summary(out: Path) -> dict:
    """batch-summary.json without timings, paths relative to the output directory."""
    record = json.loads((out / "batch-summary.json").read_text(encoding="utf-8"))
    for model in record["models"]:
        del model["seconds"]
        model["run_dir"] = os.path.relpath(model["run_dir"], out)
        model["report"] = model["report"] and os.path.relpath(model["report"], out)
    return {k: v for k, v in record.items() if k not in ("config", "finished_at")}


def records(path: Path) -> list[dict]:
    return sorted((json.dumps({k: v for k, v in r.items() if k not in ("latency_s", "elapsed_s")}, sort_keys=True)
                   for r in artifacts.read_jsonl(path).records))


@pytest.mark.slow
def test_ray_batch_ends_with_the_sequential_summary(cluster, official_dir, tiny_rm, tmp_path, capsys):
    outs = {}
    for engine, line in (("local", ""), ("ray", "engine: ray\nray: {cpus: 1, generate_gpus: 0, score_gpus: 0}")):
        outs[engine] = tmp_path / engine
        config = write_config(tmp_path / f"{engine}.yaml", outs[engine], official_dir, tiny_rm, line)
        # A failed model and failed samples: exit status 1 either way.
        assert main(["batch", str(config)]) == 1, capsys.readouterr()
    sequential, on_ray = summary(outs["local"]), summary(outs["ray"])
    assert on_ray == sequential
    flaky, broken = sequential["models"]
    assert flaky["status"] == "ok" and flaky["failed_samples"] and flaky["report"].endswith("report.html")
    assert broken["status"] == "failed" and broken["failed_step"] == "generate" and "no-such-model" in broken["error"]
    assert sequential["comparison"] is None and "a comparison needs two" in sequential["comparison_error"]
    for name in (runs.GENERATIONS, layout.SCORES):
        assert records(outs["ray"] / "flaky" / name) == records(outs["local"] / "flaky" / name)


@pytest.mark.slow
def test_a_task_asking_for_missing_gpus_is_one_line(cluster, official_dir, tiny_rm, tmp_path, capsys):
    config = write_config(tmp_path / "batch.yaml", tmp_path / "out", official_dir, tiny_rm,
                          "engine: ray\nray: {score_gpus: 1}")
    assert main(["batch", str(config)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: ") and "a task asks for 1 GPU(s), the cluster has 0" in err[-1]
    assert not (tmp_path / "out" / "flaky").exists()


@pytest.mark.slow
def test_a_task_no_node_can_run_fails_after_the_wait(cluster, official_dir, tiny_rm, tmp_path, capsys):
    """A task whose node was lost, with no node left that can run it, waits ``lost_node_wait``
    for one to join, then fails as its model's generation; the batch ends. (Here no node ever
    could: one more CPU than the test cluster's one node has.)"""
    from _ray_support import CPUS

    config = write_config(tmp_path / "batch.yaml", tmp_path / "out", official_dir, tiny_rm,
                          f"engine: ray\nray: {{cpus: {CPUS + 1}, lost_node_wait: 1}}")
    assert main(["batch", str(config)]) == 1
    out = capsys.readouterr().out
    record = summary(tmp_path / "out")
    assert [(m["status"], m["failed_step"]) for m in record["models"]] == [("failed", "generation")] * 2
    assert all("no node of the cluster has been able to run it for 1 s" in m["error"] for m in record["models"])
    assert "!! flaky: generation failed: Ray task: no node" in out
    assert not (tmp_path / "out" / "flaky" / runs.GENERATIONS).exists()


def test_ray_settings_are_checked_with_the_config(tmp_path):
    from charactereval_lib.apps import batch
    from charactereval_lib.engine.registry.batching import GENERATION, SCORING

    path = tmp_path / "batch.yaml"
    for text, message in (
        ("engine: spark", "engine: expected one of local, ray, got 'spark'"),
        ("ray: {cpus: 2}", "'ray' settings need engine: ray"),
        ("engine: ray\nray: {gpus: 1}", "ray: unknown key(s) ['gpus']"),
        ("engine: ray\nray: {score_gpus: -1}", "ray.score_gpus: expected a number of at least 0, got -1"),
        ("engine: ray\nray: {lost_node_wait: 0}", "ray.lost_node_wait: expected a number above 0, got 0"),
    ):
        path.write_text(f"{text}\nmodels: [{{name: a, backend: offline, model: m, rm: r}}]\n", encoding="utf-8")
        with pytest.raises(batch.BatchError) as error:
            batch.load_config(path)
        assert message in str(error.value) and str(path) in str(error.value)
    # The shipped example: an API model asks for no GPU, the hf model's generation and every
    # scoring for one.
    shipped = batch.load_config(Path(__file__).resolve().parents[2] / "configs" / "ray.yaml")
    assert shipped.engine == "ray"
    assert [(shipped.ray.gpus(m, GENERATION), shipped.ray.gpus(m, SCORING)) for m in shipped.models] == \
        [(0.0, 1), (1, 1)]


@pytest.mark.slow
def test_sigterm_stops_a_ray_batch(ray_address, official_dir, tiny_rm, tmp_path):
    process, out = start_slow_batch(tmp_path, official_dir, tiny_rm, limit=400,
                                    engine=f'engine: ray\nray: {{address: "{ray_address}"}}', new_session=True)
    generations = [out / name / runs.GENERATIONS for name in ("first", "second")]
    wait_for_records(process, generations, 4, timeout=120)
    process.send_signal(signal.SIGTERM)
    stdout, stderr = process.communicate(timeout=90)
    assert process.returncode == 130, (stdout, stderr)
    summary = json.loads((out / "batch-summary.json").read_text(encoding="utf-8"))
    assert summary["interrupted"] and [m["status"] for m in summary["models"]] == ["interrupted", "interrupted"]
    for path in generations:
        # What each task received before the signal is saved, once per sample, no torn line.
        read = artifacts.read_jsonl(path)
        ids = [r["id"] for r in read.records]
        assert 4 <= len(ids) < 400 and len(ids) == len(set(ids)) and not read.warnings
        # Recorded by the task's own generation (its session, with the state of every id), though
        # the cluster's workers ignore SIGINT (_ray_support), not by the driver's last resort.
        generation = runs.load_manifest(path.parent)["generation"]
        assert generation["status"] == "interrupted" and generation["sessions"][-1]["interrupted"]
        assert generation["state"]["ok"] + generation["state"]["error"] == len(ids)


@pytest.mark.slow
def test_a_task_still_running_after_the_wait_is_killed_and_its_generation_closed(cluster, tmp_path, capsys):
    from charactereval_lib.apps import batch_ray

    def stuck_generation(run_dir: str) -> None:
        """A task whose generation is running and that Ctrl-C never stops (as one stuck in a
        call that never returns to the interpreter). Defined here: Ray ships it by value."""
        runs.update_manifest(Path(run_dir), generation={"status": "running"})
        while True:
            try:
                time.sleep(0.05)
            except KeyboardInterrupt:
                pass

    (tmp_path / "stuck").mkdir()
    run = runs.RunDir.resolve(tmp_path / "stuck")
    ref = cluster.remote(stuck_generation).options(num_cpus=1, max_retries=0).remote(str(run.path))
    deadline = time.monotonic() + 120
    while not (run.manifest_path.exists() and run.manifest().get("generation")):
        assert time.monotonic() < deadline and not cluster.wait([ref], timeout=0)[0]
        time.sleep(0.1)
    batch_ray._stop_tasks(cluster, {ref: ("stuck", run)}, wait_s=1)
    # Killed: ended, with Ray's error instead of a result.
    assert cluster.wait([ref], timeout=0)[0] == [ref]
    with pytest.raises(cluster.exceptions.RayError):
        cluster.get(ref)
    assert run.manifest()["generation"]["status"] == "interrupted"
    assert "!! stuck: its Ray task was still running 1 s after the interrupt: killed" in capsys.readouterr().out


class InterruptedWaits:
    """Ray's wait, cancel and kill as ``_stop_tasks`` sees them, for a task that ignores the
    soft cancel, while the user presses Ctrl-C again during the first wait: the wait raises
    KeyboardInterrupt, as Ray's does when the driver gets SIGINT."""

    def __init__(self, ref):
        self.ref, self.cancels, self.waits = ref, [], []

    def cancel(self, ref, force=False):
        self.cancels.append((ref, force))

    def wait(self, refs, num_returns, timeout):
        self.waits.append(timeout)
        if len(self.waits) == 1:
            raise KeyboardInterrupt
        killed = (self.ref, True) in self.cancels
        return (list(refs), []) if killed else ([], list(refs))


def test_a_second_interrupt_ends_the_wait_kills_the_task_and_closes_its_generation(tmp_path, capsys):
    from charactereval_lib.apps import batch_ray

    run = runs.RunDir.resolve(tmp_path / "stuck")
    run.path.mkdir()
    runs.update_manifest(run.path, generation={"status": "running"})
    ray = InterruptedWaits("task")
    batch_ray._stop_tasks(ray, {"task": ("stuck", run)}, wait_s=batch_ray.CANCEL_WAIT_S)
    # Soft cancel, the interrupted wait, a look at what still runs, the kill and its wait.
    assert ray.cancels == [("task", False), ("task", True)]
    assert ray.waits == [batch_ray.CANCEL_WAIT_S, 0, batch_ray.KILL_WAIT_S]
    assert run.manifest()["generation"]["status"] == "interrupted"
    assert capsys.readouterr().out == "!! stuck: its Ray task was still running at the second interrupt: killed\n"
