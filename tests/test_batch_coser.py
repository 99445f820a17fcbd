"""``batch`` runs a CoSER model too: an entry that names ``benchmark: coser`` goes through CoSER's
stages from the registry (run, summarize, report), here against the scripted mock server that
plays every CoSER role."""

from __future__ import annotations

import json

import pytest

from charactereval_lib.cli import main
from charactereval_lib.coser.run import JUDGEMENTS, SUMMARY
from charactereval_lib.testing.coser_script import scripted_reply
from charactereval_lib.testing.mockserver import MockServer
from tests.coser_golden import data_dir


@pytest.mark.slow
def test_a_coser_entry_runs_summarizes_and_reports_in_a_batch(tmp_path, capsys):
    config = tmp_path / "batch.yaml"
    with MockServer(reply=scripted_reply) as server:
        config.write_text(f"""output_dir: {tmp_path / "out"}
models:
  - name: coser-smoke
    benchmark: coser
    data_dir: {data_dir()}
    run: {{actor_model: mock-actor, preset: smoke, limit: 1, base_url: "{server.base_url}", no_api_key: true,
           retry_base_delay: 0.01, timeout: 5}}
    summarize: {{n_boot: 20}}
    report: {{n_boot: 20}}
""", encoding="utf-8")
        assert main(["batch", str(config), "--quiet"]) == 0
    out = capsys.readouterr().out
    run = tmp_path / "out" / "coser-smoke"
    assert f"ok      coser-smoke: {run / 'report.html'}" in out
    assert (run / JUDGEMENTS).exists() and json.loads((run / SUMMARY).read_text(encoding="utf-8"))
    summary = json.loads((tmp_path / "out" / "batch-summary.json").read_text(encoding="utf-8"))
    assert [(m["name"], m["status"]) for m in summary["models"]] == [("coser-smoke", "ok")]
