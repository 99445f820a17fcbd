"""With ``CHARACTEREVAL_HOME`` set, a batch's relative ``output_dir`` is under it for everything
the batch writes: the runs, the comparison, ``batch-summary.json`` and the run directory an
interrupted model records."""

from __future__ import annotations

import json

from charactereval_lib.apps import batch, batch_stages
from charactereval_lib.engine.storage import runs

CONFIG = """output_dir: outputs
models:
  - {name: a, backend: offline, model: m, rm: r}
  - {name: b, backend: offline, model: m, rm: r}
"""


def test_a_relative_output_dir_is_under_the_workspace_for_every_artifact(tmp_path, monkeypatch):
    home, elsewhere = tmp_path / "home", tmp_path / "elsewhere"
    home.mkdir(), elsewhere.mkdir()
    monkeypatch.setenv(runs.WORKSPACE_ENV, str(home))
    monkeypatch.chdir(elsewhere)
    path = elsewhere / "batch.yaml"
    path.write_text(CONFIG, encoding="utf-8")
    config = batch.load_config(path)
    assert config.output_dir == home / "outputs"
    assert config.comparison_dir == home / "outputs" / "comparison"
    spec = config.models[0]
    assert batch_stages.new_result(spec, config).run_dir == str(home / "outputs" / "a")
    assert batch_stages.interrupted_result(spec, config, 1.0).run_dir == str(home / "outputs" / "a")

    # The summary goes beside the runs (no model runs here: the summary of an empty outcome).
    monkeypatch.setattr(batch, "_run_in_turn", lambda config, outcome: None)
    batch.run_batch(config)
    assert json.loads((home / "outputs" / batch.SUMMARY_FILE).read_text(encoding="utf-8"))
    assert not (elsewhere / "outputs").exists()
