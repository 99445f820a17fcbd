"""Served identity of CharacterEval's generation and judge (issue 39 item 1): what the server
reported in each reply is counted per session in run.json and read back from the records by the
run's warnings; a resumed run whose server now serves another model stops before recording its
reply. Real HTTP to the local mock server (which reports `mock-served-model`, the requested
model, or none)."""

from __future__ import annotations

import pytest

from charactereval_lib import cli, pipeline
from charactereval_lib.charactereval.data import load_official_data
from charactereval_lib.charactereval.identity import served_caveats
from charactereval_lib.engine.storage import artifacts, runs
from charactereval_lib.testing.mockserver import AS_REQUESTED, SERVED_MODEL, SYSTEM_FINGERPRINT, MockServer


def generate(run, url, official_dir, limit=3):
    return cli.main(["generate", str(run), "--backend", "openai", "--model", "m", "--base-url", url, "--no-api-key",
                     "--data-dir", str(official_dir), "--limit", str(limit), "--quiet", "--retry-base-delay", "0.01"])


def test_the_served_model_is_counted_and_another_one_than_declared_is_said(tmp_path, official_dir):
    run = tmp_path / "run"
    with MockServer() as server:
        assert generate(run, server.base_url, official_dir) == 0
    session = runs.load_manifest(run)["generation"]["sessions"][-1]
    assert (session["served_models"], session["system_fingerprints"], session["model_not_reported"]) == (
        {SERVED_MODEL: 3}, {SYSTEM_FINGERPRINT: 3}, 0)
    assert served_caveats(run) == [f"The model under test was declared 'm' but its server reported '{SERVED_MODEL}' "
                                   "for 3 of 3 replies."]


@pytest.mark.parametrize(("served", "said"), [
    (AS_REQUESTED, []),
    (None, ["Served model not reported: 3 of 3 replies of the model under test came from a server that named no "
            "model, so nothing shows they came from 'm'."]),
])
def test_a_server_that_serves_what_it_is_asked_or_names_nothing(tmp_path, official_dir, served, said):
    with MockServer(served_model=served) as server:
        assert generate(tmp_path / "run", server.base_url, official_dir) == 0
    assert served_caveats(tmp_path / "run") == said


def test_a_resume_served_by_another_model_stops_before_recording_it(tmp_path, official_dir, capsys):
    run = tmp_path / "run"
    with MockServer() as server:
        assert generate(run, server.base_url, official_dir) == 0
    capsys.readouterr()
    with MockServer(served_model="other-model") as server:
        assert generate(run, server.base_url, official_dir, limit=5) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: generate: the server now reports the model 'other-model', "
                                                   f"but this run's earlier replies were served by '{SERVED_MODEL}'")
    records = artifacts.read_jsonl(run / runs.GENERATIONS).records
    assert len(records) == 3 and {r["model"] for r in records} == {SERVED_MODEL}
    assert runs.load_manifest(run)["generation"]["status"] == "aborted"
    # Against the server that served the run, the resume finishes it.
    with MockServer() as server:
        assert generate(run, server.base_url, official_dir, limit=5) == 0
    assert len(artifacts.read_jsonl(run / runs.GENERATIONS).records) == 5


def test_a_judge_session_counts_its_served_model_and_the_warnings_name_it(tmp_path, official_dir):
    run = tmp_path / "run"
    with MockServer(served_model=AS_REQUESTED) as server:
        assert generate(run, server.base_url, official_dir) == 0
    data = load_official_data(official_dir, verify=False)
    pipeline.transform(run, data=data)
    with MockServer(default_action="judge") as server:
        pipeline.judge_score(run, pipeline.JudgeSettings(judge_model="judge-x", base_url=server.base_url,
                                                         api_key_env="", retry_base_delay=0.01), data=data)
    judge = runs.load_manifest(run)["judge_scoring"]["judges"]["judge-x"]
    rows = len(artifacts.read_jsonl(run / "judge_scores.jsonl").records)
    assert judge["sessions"][-1]["served"] == {"models": {SERVED_MODEL: rows},
                                               "system_fingerprints": {SYSTEM_FINGERPRINT: rows},
                                               "model_not_reported": 0}
    assert served_caveats(run) == []  # the generation was served as declared
    assert served_caveats(run, "judge-x") == [f"The judge judge-x was declared 'judge-x' but its server reported "
                                              f"'{SERVED_MODEL}' for {rows} of {rows} replies."]
