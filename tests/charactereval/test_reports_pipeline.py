"""The whole pipeline on the official data: offline replies, the tiny reward model, reports.

``charactereval batch`` with one deliberately failing model must finish the others and say
which model failed, at which step and why; score.ipynb must score and summarise a run.
"""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from charactereval_lib import pipeline
from charactereval_lib.apps import batch
from charactereval_lib.charactereval import analysis, layout
from charactereval_lib.charactereval.requests import read_ids_file
from charactereval_lib.cli import main
from charactereval_lib.engine.reports import notebook
from charactereval_lib.engine.storage import artifacts, runs
from charactereval_lib.pipeline.charactereval_batch import SUBSET_IDS


@pytest.mark.slow
def test_batch_finishes_the_other_models_when_one_fails(official_dir, tiny_rm, tmp_path, capsys):
    out = tmp_path / "out"
    config = tmp_path / "batch.yaml"
    config.write_text(
        f"""
output_dir: {out}
data_dir: {official_dir}
comparison: cmp
baselines: [GPT-4]
n_boot: 200
defaults: {{backend: offline, rm: {tiny_rm}, device: cpu, mode: fast}}
models:
  - {{name: model-a, model: offline-a, subset: 6}}
  - {{name: broken, model: offline-c, limit: 2, rm: {tmp_path / "no-such-rm"}}}
  - {{name: model-b, model: offline-b, limit: 6}}
""",
        encoding="utf-8",
    )
    # The pre-flight finds the missing checkpoint before anything is generated.
    assert main(["batch", str(config)]) == 1
    assert "model 'broken': rm: " in capsys.readouterr().err and not out.exists()
    # Past the pre-flight (a checkpoint that vanished later), the other models still finish.
    outcome = batch.run_batch(batch.load_config(config))
    printed = "\n".join(batch.summary_lines(outcome))
    assert "FAILED  broken: at score: " in printed and "no-such-rm" in printed
    assert "2/3 model(s) finished; failed: broken" in printed
    for name in ("model-a", "model-b"):
        html = (out / name / pipeline.REPORT_HTML).read_text(encoding="utf-8")
        # The real generate and score commands recorded an offline backend and a tiny checkpoint.
        assert analysis.OFFLINE_CAVEAT.split("**")[0] in html and "tiny, randomly initialised" in html
        assert len(artifacts.read_jsonl(out / name / layout.SCORES).records) == len(artifacts.read_jsonl(out / name / layout.ROWS).records)
        assert (out / name / layout.SUMMARY).exists()
    comparison = (out / "cmp" / pipeline.COMPARISON_HTML).read_text(encoding="utf-8")
    assert "model-b − model-a" in comparison and "<strong>broken</strong>" not in comparison
    # The subset was written as an ids file and generated exactly.
    subset = read_ids_file(out / "model-a" / SUBSET_IDS)
    assert len(subset) == 6 and {r["id"] for r in artifacts.read_jsonl(out / "model-a" / runs.GENERATIONS).records} == set(subset)
    summary = json.loads((out / "batch-summary.json").read_text(encoding="utf-8"))
    statuses = {m["name"]: (m["status"], m["failed_step"]) for m in summary["models"]}
    assert statuses == {"model-a": ("ok", None), "broken": ("failed", "score"), "model-b": ("ok", None)}
    assert "no-such-rm" in summary["models"][1]["error"]
    assert summary["comparison"].endswith("comparison.html")


def test_example_configs_hold_valid_settings():
    # Every setting the shipped configs use exists in the pipeline's generate and score settings.
    for name in ("example.yaml", "demo.yaml"):
        assert batch.load_config(Path(__file__).resolve().parents[2] / "configs" / name).models


@pytest.mark.slow
def test_score_notebook_scores_and_summarises(official_dir, tiny_rm, tmp_path):
    run = tmp_path / "run"
    pipeline.generate(run, pipeline.GenerateSettings(backend="offline", model="offline-n", limit=6), data_dir=official_dir)
    pipeline.transform(run, data_dir=official_dir)
    output = tmp_path / "score.ipynb"
    notebook.execute(notebook.shipped("score.ipynb"), output, {"run_dir": str(run), "rm": str(tiny_rm), "device": "cpu", "mode": "fast",
                                           "data_dir": str(official_dir)})
    outputs = [o for c in nbformat.read(str(output), as_version=4).cells for o in c.get("outputs", [])]
    assert not [o for o in outputs if o.output_type == "error"]
    # No progress bars in an executed notebook (the tiny-model warning on stderr is welcome).
    stderr = "".join(o.text for o in outputs if o.output_type == "stream" and o.name == "stderr")
    assert "%|" not in stderr and "\r" not in stderr
    rows = artifacts.read_jsonl(run / layout.ROWS).records
    assert rows and len(artifacts.read_jsonl(run / layout.SCORES).records) == len(rows)
    assert json.loads((run / layout.SUMMARY).read_text(encoding="utf-8"))["counts"]["scored_rows"] == len(rows)
