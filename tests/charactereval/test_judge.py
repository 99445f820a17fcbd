"""The judge scorer end to end against the local mock server acting as a deterministic judge:
valid, multi-line, invalid and refused answers, 429 / 5xx retries, failed calls, resume by
request digest, no key in any artifact, the judge summary, and agreement with the tiny reward
model. Real data from $CHARACTEREVAL_DATA_DIR (skipped with the reason otherwise)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from charactereval_lib import pipeline
from charactereval_lib.charactereval import judge, judge_figures, judge_report, layout
from charactereval_lib.charactereval.data import OfficialData, Sample
from charactereval_lib.cli import main
from charactereval_lib.engine.grading.choices import INVALID
from charactereval_lib.engine.grading.judging import item_sha256
from charactereval_lib.engine.storage import artifacts, runs
from charactereval_lib.testing.mockserver import MockServer, judge_grade, request_key

SECRET = "sk-judge-test-SECRET-0123456789abcdef"
FIELDS = ("id", "metric_en", "scorer", "judge_model", "choice", "score", "invalid", "request_sha256", "reply")


def small_data(data: OfficialData, count: int) -> OfficialData:
    """The first ``count`` test samples that have metrics (a run's rows come from these)."""
    samples: list[Sample] = [s for s in data.samples if data.id2metric.get(str(s.id))][:count]
    return OfficialData(data.data_dir, samples, data.profiles, data.id2metric, data.sha256)


def make_run(path: Path, data: OfficialData, count: int) -> layout.CharacterEvalRun:
    ids = path.parent / f"{path.name}-ids.txt"
    ids.write_text("\n".join(str(s.id) for s in small_data(data, count).samples) + "\n")
    pipeline.generate(path, pipeline.GenerateSettings(backend="offline", model="demo", ids=str(ids)), data=data)
    pipeline.transform(path, data=data)
    return layout.CharacterEvalRun.resolve(path)


def judge_settings(server: MockServer, **overrides) -> pipeline.JudgeSettings:
    values = {"judge_model": "judge-x", "base_url": server.base_url, "api_key_env": "JUDGE_TEST_KEY",
              "concurrency": 8, "max_attempts": 4, "retry_base_delay": 0.01, "retry_max_delay": 0.05,
              "timeout": 10.0}
    return pipeline.JudgeSettings(**{**values, **overrides})


def test_judge_grades_every_row_keeps_invalid_answers_retries_and_resumes(official_data, tmp_path, monkeypatch):
    monkeypatch.setenv("JUDGE_TEST_KEY", SECRET)
    run = make_run(tmp_path / "run", official_data, 10)
    rows = run.read_rows()
    items = judge.judge_items(run, official_data, judge.load_specs())
    keys = [request_key(item.messages) for item in items]
    # One failure shape per row, in row order; the rest answer as a plain judge.
    shapes = ["judge", "judge_multiline", "judge_invalid", "refusal", ["429:0", "judge"], ["500", "503", "judge"],
              ["500"]]
    assert len(rows) > len(shapes)
    plan = {key: ([shape] if isinstance(shape, str) else shape) for key, shape in zip(keys, shapes)}
    with MockServer(plan=plan, default_action="judge") as server:
        outcome = pipeline.judge_score(run, judge_settings(server), data=official_data)
        first_sent = len(server.received)
        assert {p["temperature"] for p in server.received} == {0.0}
        assert {p["model"] for p in server.received} == {"judge-x"}
        assert server.authorizations == {f"Bearer {SECRET}"}

        summary = outcome.summary
        assert summary.pending == len(rows) and summary.graded == len(rows) - 1
        assert summary.invalid == 2 and summary.refusals == 1 and sum(summary.errors.values()) == 1

        records = artifacts.read_jsonl(run.judge_scores).records
        assert len(records) == len(rows)
        by_key = {(r["id"], r["metric_en"]): r for r in records}
        for record in records:
            assert set(FIELDS) <= record.keys() and record["scorer"] == "judge" and record["judge_model"] == "judge-x"
        for index, (item, key) in enumerate(zip(items, keys)):
            record = by_key[(item.key["id"], item.key["metric_en"])]
            assert record["request_sha256"] == item_sha256(item, "judge-x", outcome_params())
            shape = shapes[index] if index < len(shapes) else "judge"
            if shape == "judge_invalid" or shape == "refusal":
                assert record["invalid"] is True and record["choice"] == INVALID and record["score"] is None
                assert record["reply"] is not None  # the raw answer is kept, never dropped
                assert record["refusal"] is (shape == "refusal")
            elif shape == ["500"]:
                assert record["status"] == "error" and record["score"] is None and record["invalid"] is None
                assert record["error"]["status"] == 500 and record["error"]["repeated"] == 3
            else:
                assert record["status"] == "ok" and record["invalid"] is False
                assert record["score"] == float(judge_grade(key)) and record["choice"] == str(judge_grade(key))
                assert record["attempts"] == (1 if isinstance(shape, str) else len(shape))

        # The key is nowhere: not in records, manifest, requests or anything else written.
        for path in run.path.iterdir():
            if path.is_file():
                assert SECRET not in path.read_text(encoding="utf-8", errors="replace"), path.name
        manifest = run.manifest()["judge_scoring"]["judges"]["judge-x"]
        assert manifest["api_key_env"] == "JUDGE_TEST_KEY" and manifest["judge_model"] == "judge-x"
        assert manifest["parameters"]["temperature"] == 0.0 and set(manifest["specs"]) == set(judge.METRIC_ORDER)
        assert manifest["status"] == "partial"

        # Resume: only the failed call goes out again (it fails again: one more error record).
        again = pipeline.judge_score(run, judge_settings(server), data=official_data).summary
        assert again.already_done == len(rows) - 1 and again.pending == 1 and again.errors_retried == 1
        assert len(server.received) == first_sent + 3
        assert len(artifacts.read_jsonl(run.judge_scores).records) == len(rows) + 1

    # The judge summary counts invalid answers; the reward-model summary is untouched.
    outcome = pipeline.summarize(run, pipeline.SummarizeSettings(scorer="judge", n_boot=50))
    counts = outcome.summary["counts"]
    assert counts["scored_rows"] == len(rows) - 3 and counts["invalid_answers"] == 2
    assert counts["invalid_unscored"] == 2 and counts["unscored_rows"] == 3
    assert sum(m["invalid"] for m in outcome.summary["metrics"]) == 2
    assert sum(m["n"] for m in outcome.summary["metrics"]) == len(rows) - 3
    assert run.summary_file("judge").exists() and not run.summary.exists()
    assert "invalid" in run.metrics_csv_file("judge").read_text().splitlines()[0]


def test_summarize_prints_the_judge_s_invalid_answers(official_data, official_dir, tmp_path, capsys):
    run = make_run(tmp_path / "run", official_data, 3)
    key = request_key(judge.judge_items(run, official_data, judge.load_specs())[0].messages)
    with MockServer(plan={key: ["judge_invalid"]}, default_action="judge") as server:
        pipeline.judge_score(run, judge_settings(server, api_key_env=""), data=official_data)
    assert main(["summarize", str(run.path), "--scorer", "judge", "--n-boot", "20",
                 "--data-dir", str(official_dir)]) == 0
    out = capsys.readouterr().out
    assert "judge judge-x: invalid answers 1 (1 left out of the means" in out and "judge_summary.json" in out
    assert out.splitlines()[0].split()[:5] == ["metric", "n", "failed", "invalid", "mean"]


def outcome_params():
    return pipeline.JudgeSettings(judge_model="judge-x").decoding()


def test_judge_dry_run_writes_requests_and_estimates_cost(official_data, official_dir, tmp_path, capsys):
    run = make_run(tmp_path / "run", official_data, 3)
    code = main(["score", str(run.path), "--scorer", "judge", "--judge-model", "judge-x", "--dry-run",
                 "--price-in", "2.5", "--price-out", "10", "--data-dir", str(official_dir)])
    out = capsys.readouterr().out
    assert code == 0
    requests = artifacts.read_jsonl(run.artifact(judge.JUDGE_REQUESTS)).records
    assert len(requests) == len(run.read_rows())
    assert {(r["id"], r["metric_en"]) for r in requests} == {(r["id"], r["metric_en"]) for r in run.read_rows()}
    assert all(r["messages"][-1]["role"] == "user" and r["judge_model"] == "judge-x" for r in requests)
    assert "judge judge-x:" in out and "estimated cost" in out and "nothing was sent" in out
    assert not run.judge_scores.exists()
    assert run.manifest()["judge_dry_run"]["pending"] == len(requests)


def test_score_rejects_mixed_scorer_flags(official_dir, tmp_path, capsys):
    assert main(["score", str(tmp_path / "r"), "--judge-model", "x", "--data-dir", str(official_dir)]) == 2
    assert "--scorer judge" in capsys.readouterr().err
    assert main(["score", str(tmp_path / "r"), "--scorer", "judge", "--data-dir", str(official_dir)]) == 2
    assert "error: judge_model: missing (required: a string)" in capsys.readouterr().err


def test_a_custom_spec_file_is_used_for_every_metric(official_data, tmp_path):
    spec = tmp_path / "one.yaml"
    spec.write_text('prompt: "Grade {response} of {role} for {metric_en}."\nchoice_strings: "12345"\n'
                    'choice_scores: from_strings\neval_type: classify\ninput_outputs: {context: response}\n')
    run = make_run(tmp_path / "run", official_data, 2)
    items = judge.judge_items(run, official_data, judge.load_specs(spec))
    assert all(i.spec.name == "one" for i in items)
    row = run.read_rows()[0]
    assert items[0].messages[0]["content"].startswith(f"Grade {row['model_output']} of {row['role']} for "
                                                      f"{row['metric_en']}.")


@pytest.mark.slow
def test_agreement_of_the_tiny_reward_model_and_the_judge(official_data, tiny_rm, tmp_path):
    rm = tiny_rm
    run = make_run(tmp_path / "run", official_data, 12)
    pipeline.score(run, pipeline.ScoreSettings(rm=str(rm), device="cpu", mode="fast"), data=official_data)
    items = judge.judge_items(run, official_data, judge.load_specs())
    invalid_key = request_key(items[0].messages)
    with MockServer(plan={invalid_key: ["judge_invalid"]}, default_action="judge") as server:
        pipeline.judge_score(run, judge_settings(server, api_key_env=""), data=official_data)

    rows = run.read_rows()
    with pytest.raises(runs.RunError, match="no scores of judge"):
        judge_report.paired_scores(make_run(tmp_path / "unjudged", official_data, 1))
    tidy = judge_report.scorer_scores(run)
    assert Counter(tidy["scorer"]) == {"reward-model": len(rows), "judge": len(rows)}
    paired = judge_report.paired_scores(run)
    assert len(paired) == len(rows) and int(paired["judge_invalid"].sum()) == 1
    assert int(paired["judge"].isna().sum()) == 1

    table = judge_report.scorer_agreement(run, n_boot=100)
    overall = table[table["metric_en"] == "overall"].set_index("statistic")
    assert set(overall.index) == {"pearson", "spearman", "kendall_tau_b", "quadratic_kappa", "exact"}
    assert (overall["n"] == len(rows) - 1).all() and (overall["invalid_left_out"] == 1).all()
    assert (overall["n_clusters"] == paired.dropna(subset=["judge"])["id"].nunique()).all()
    exact = ((judge_figures.agreement_counts(paired).to_numpy().diagonal().sum()) / (len(rows) - 1))
    assert overall.loc["exact", "value"] == pytest.approx(exact)
    assert set(table["metric_en"]) - {"overall"} == {r["metric_en"] for r in rows}

    grid = judge_figures.agreement_grid(paired)
    one = judge_figures.agreement_figure(paired, rows[0]["metric_en"])
    for figure in (grid, one):
        figure.savefig(tmp_path / "figure.png")
    assert (tmp_path / "figure.png").stat().st_size > 0

    # Both scorers live in one run: each summary reads its own scores.
    rm_summary = pipeline.summarize(run, pipeline.SummarizeSettings(n_boot=50)).summary
    judge_summary = pipeline.summarize(run, pipeline.SummarizeSettings(scorer="judge", n_boot=50)).summary
    assert rm_summary["counts"]["scored_rows"] == len(rows) and rm_summary["scorer"] == "reward-model"
    assert judge_summary["counts"]["scored_rows"] == len(rows) - 1
    assert list(judge_summary["counts"]["scorers"]) == ["judge judge-x mode=evals"]
    assert json.loads(run.summary.read_text())["scorer"] == "reward-model"


def test_a_changed_grading_rule_regrades_stored_replies_without_a_call(official_data, tmp_path):
    """Choice scores (or the parser) are not in the request, so the digest cannot tell that they
    changed: the stored replies are graded again under the spec as it is now, with no call."""
    spec = tmp_path / "one.yaml"
    text = ('prompt: "Grade {response} of {role} for {metric_en}."\nchoice_strings: "12345"\n'
            "choice_scores: %s\neval_type: classify\ninput_outputs: {context: response}\n")
    spec.write_text(text % "from_strings")
    run = make_run(tmp_path / "run", official_data, 3)
    with MockServer(default_action="judge") as server:
        first = pipeline.judge_score(run, judge_settings(server, api_key_env="", spec=str(spec)), data=official_data)
        calls = len(server.received)
        spec.write_text(text % '{"1": 5, "2": 4, "3": 3, "4": 2, "5": 1}')
        second = pipeline.judge_score(run, judge_settings(server, api_key_env="", spec=str(spec)), data=official_data)
        assert len(server.received) == calls  # nothing was asked again
        third = pipeline.judge_score(run, judge_settings(server, api_key_env="", spec=str(spec)), data=official_data)
    n = first.summary.graded
    assert n > 0 and second.summary.already_done == n and second.summary.pending == 0
    changed = sum(1 for r in run.latest_scores(scorer=layout.JUDGE).values() if r["choice"] != "3")
    assert second.summary.regraded == changed > 0 and third.summary.regraded == 0
    assert "re-graded from their stored reply" in second.summary.line()
    for record in run.latest_scores(scorer=layout.JUDGE).values():
        assert record["score"] == 6 - int(record["choice"])
