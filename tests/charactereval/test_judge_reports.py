"""Reports and comparisons of runs that hold the judge's scores: both scorers side by side, their
agreement table and grid, judge-only reports, several judges per run and the mixed-configuration
checks per scorer. Synthetic runs judged through the local mock server, notebooks executed by
real papermill."""

from __future__ import annotations

import json
import re

import pytest
from test_reports_notebooks import PNG, cell_problems, sections

from charactereval_lib import pipeline
from charactereval_lib.charactereval import layout
from charactereval_lib.charactereval.data import load_official_data
from charactereval_lib.charactereval.judge import judge_items, load_specs
from charactereval_lib.cli import main
from charactereval_lib.engine.storage import artifacts, runs
from charactereval_lib.testing.mockserver import MockServer, request_key
from charactereval_lib.testing.synthetic import write_synthetic_data, write_synthetic_run


def judge(run, data, server, model="judge-x", **overrides):
    settings = pipeline.JudgeSettings(judge_model=model, base_url=server.base_url, api_key_env="", concurrency=8,
                                      max_attempts=2, retry_base_delay=0.01, timeout=10.0, **overrides)
    return pipeline.judge_score(run, settings, data=data)


@pytest.fixture(scope="module")
def judged(tmp_path_factory):
    """Two synthetic runs scored by the reward model and judged by judge-x; a third judged only;
    run A also judged by a second judge that always answers 3."""
    root = tmp_path_factory.mktemp("judged")
    data_dir = write_synthetic_data(root / "data", 40, seed=3)
    data = load_official_data(data_dir, verify=False)
    a = write_synthetic_run(root / "model-a", data, seed=1)
    b = write_synthetic_run(root / "model-b", data, seed=2, shift=0.5)
    only = write_synthetic_run(root / "judge-only", data, seed=4, unscored=10**6)
    # One invalid answer of judge-x in run A: counted beside the means, left out of them.
    invalid_key = request_key(judge_items(layout.CharacterEvalRun(a), data, load_specs())[0].messages)

    def plan(key, attempt, payload):
        if payload["model"] == "judge-three":
            return "judge:3"
        return "judge_invalid" if key == invalid_key else "judge"

    with MockServer(plan=plan) as server:
        for run in (a, b, only):
            judge(run, data, server)
        judge(a, data, server, model="judge-three")
    return data_dir, data, a, b, only


@pytest.mark.slow
def test_report_shows_both_scorers_and_their_agreement(judged):
    data_dir, _, a, _, _ = judged
    outcome = pipeline.report(a, pipeline.ReportSettings(verify_data=False, n_boot=50, judge_model="judge-x"),
                              data_dir=str(data_dir))
    assert cell_problems(outcome.notebook) == []
    html = outcome.html.read_text(encoding="utf-8")
    parts = sections(html)
    both = parts["Reward model and LLM judge"]
    headers = re.findall(r"<th[^>]*>([^<]*)</th>", both)
    assert headers == ["cell", "reward model n", "reward model mean [95% CI]", "judge judge-x n",
                       "judge judge-x invalid", "judge judge-x mean [95% CI]"]
    assert both.count("<tr>") - 1 == 12 + 3  # every metric and dimension average
    agreement = parts["Agreement of the two scorers"]
    for statistic in ("Pearson", "Spearman", "Kendall tau-b", "quadratic kappa", "exact agreement",
                      "invalid left out"):
        assert statistic in agreement
    assert agreement.count(PNG) == 1 and (a / "figures" / "agreement.png").read_bytes().startswith(b"\x89PNG")
    # The overall row counts the one invalid answer left out of the agreement.
    overall = re.search(r"<tr>\s*<td[^>]*>overall</td>(.*?)</tr>", agreement, re.DOTALL).group(1)
    assert re.findall(r"<td[^>]*>([^<]*)</td>", overall)[2] == "1"
    # The main sections stay the reward model's: its figures are all still there.
    assert {"radars.png", "score_grid.png", "failures.png"} <= {p.name for p in (a / "figures").iterdir()}
    assert "not of CharacterEval's reward model" not in html
    # The judge shown beside the reward model has no calibration: said before its scores.
    assert "Judge judge-x (shown beside the reward model): The judge judge-x has no recorded agreement" in \
        html.split("<h2", 1)[0]


@pytest.mark.slow
def test_a_run_scored_only_by_the_judge_is_reported_with_scorer_judge(judged, capsys):
    data_dir, _, _, _, only = judged
    with pytest.raises(runs.RunError, match="no judge scores"):
        pipeline.report(write_synthetic_run(only.parent / "unjudged", load_official_data(data_dir, verify=False)),
                        pipeline.ReportSettings(scorer="judge", verify_data=False), data_dir=str(data_dir))
    assert main(["report", str(only), "--scorer", "judge", "--n-boot", "30", "--data-dir", str(data_dir)]) == 0
    # A judge's report has its own files: it never replaces the reward model's report.
    notebook = only / "report-judge-judge-x.ipynb"
    assert cell_problems(notebook) == [] and not (only / pipeline.REPORT_HTML).exists()
    html = (only / "report-judge-judge-x.html").read_text(encoding="utf-8")
    head = html.split("<h2", 1)[0]
    assert "scores of the LLM judge <strong>judge-x</strong>" in head and "not of CharacterEval's reward model" in head
    rows = len(layout.CharacterEvalRun(only).read_rows())
    assert f"{rows} scored rows of {rows}" in head and "Scoring is incomplete" not in head
    assert "The judge judge-x has no recorded agreement with human labels" in head
    parts = sections(html)
    assert "judge judge-x mean" in parts["Reward model and LLM judge"]
    assert "No agreement can be shown: the reward model has not scored this run." in parts["Reward model and LLM judge"]
    assert "Agreement of the two scorers" not in parts
    # Its scale section counts grades; the reward model's bf16 grid is not drawn for integer grades.
    assert "Score grid (bf16)" not in parts and "bf16 sigmoid" not in html
    grades = parts["Grades"]
    assert re.findall(r"<th[^>]*>([^<]*)</th>", grades)[:8] == ["metric", "n", "1", "2", "3", "4", "5", "other"]
    assert {p.name for p in (only / "figures-judge-judge-x").iterdir()} >= {"grades.png", "radars.png"}


def test_several_judges_in_one_run(judged, capsys):
    data_dir, _, a, _, _ = judged
    run = layout.CharacterEvalRun(a)
    assert run.judge_models() == ["judge-x", "judge-three"]
    records = artifacts.read_jsonl(run.judge_scores).records
    assert len(records) == 2 * len(run.read_rows())
    # Each judge resumes on its own records: nothing is sent again.
    with MockServer(default_action="judge") as server:
        again = judge(a, load_official_data(data_dir, verify=False), server, model="judge-x").summary
        assert again.pending == 0 and again.already_done == len(run.read_rows()) and not server.received
    # Several judges and none chosen: one line listing them.
    assert main(["summarize", str(a), "--scorer", "judge", "--n-boot", "20", "--data-dir", str(data_dir)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "holds 2 judge models (judge-x, judge-three); choose one with --judge-model" in err
    assert main(["summarize", str(a), "--scorer", "judge", "--judge-model", "judge-three", "--n-boot", "20",
                 "--data-dir", str(data_dir)]) == 0
    assert "judge judge-three: invalid answers 0" in capsys.readouterr().out
    summary = json.loads(run.summary_file("judge").read_text(encoding="utf-8"))
    assert summary["judge"]["judge_model"] == "judge-three" and summary["judge"]["status"] == "complete"
    assert all(m["mean"] == 3.0 for m in summary["metrics"] if m["n"])
    assert main(["summarize", str(a), "--scorer", "judge", "--judge-model", "nobody", "--data-dir",
                 str(data_dir)]) == 2
    assert "no records of judge model 'nobody' (judges here: judge-x, judge-three)" in capsys.readouterr().err
    # run.json keeps each judge's own settings and sessions.
    judges = run.manifest()["judge_scoring"]["judges"]
    assert set(judges) == {"judge-x", "judge-three"}
    assert judges["judge-three"]["judge_model"] == "judge-three" and len(judges["judge-x"]["sessions"]) == 2


def copy_run(source, target, parser=None, rows=None):
    """A copy of a judged run whose judge records of ``rows`` (all: None) are also re-graded
    under another parser: the same judge model, another configuration."""
    target.mkdir()
    for name in ("generations.jsonl", "rows.jsonl", "scores.jsonl", "run.json", "judge_scores.jsonl"):
        (target / name).write_bytes((source / name).read_bytes())
    records = artifacts.read_jsonl(target / "judge_scores.jsonl").records
    artifacts.write_jsonl_atomic(target / "judge_scores.jsonl",
                            records + [{**r, "parser": parser} for r in records[:rows]])
    return target


def test_mixed_judge_configurations_are_refused_per_scorer(judged, tmp_path):
    data_dir, _, _, b, _ = judged
    mixed = copy_run(b, tmp_path / "mixed", "strict", 2)
    settings = pipeline.ReportSettings(verify_data=False, n_boot=20)
    with pytest.raises(runs.MixedRunError, match=r"mix 2 scorer configurations \(judge judge-x mode=evals"):
        pipeline.report(mixed, settings, data_dir=str(data_dir))
    # The reward model's own summary does not look at the judge's records.
    assert pipeline.summarize(mixed, pipeline.SummarizeSettings(n_boot=20)).summary["scorer"] == "reward-model"
    # Two runs, each consistent, judged under different parsers: not comparable.
    strict = copy_run(b, tmp_path / "strict", "strict")
    with pytest.raises(runs.MixedRunError, match=r"different scorer configurations \(model-b: judge judge-x "
                                                 r"mode=evals; strict: judge judge-x mode=strict\)"):
        pipeline.compare([b, strict], tmp_path / "cmp", settings, data_dir=str(data_dir))


@pytest.mark.slow
def test_compare_shows_the_judge_beside_the_reward_model(judged, tmp_path):
    data_dir, _, a, b, _ = judged
    settings = pipeline.ReportSettings(verify_data=False, baselines=("GPT-4",), n_boot=50, judge_model="judge-x")
    outcome = pipeline.compare([a, b], tmp_path / "cmp", settings, data_dir=str(data_dir))
    assert cell_problems(outcome.notebook) == []
    html = outcome.html.read_text(encoding="utf-8")
    head = html.split("<h2", 1)[0]
    # Before the judge's scores are compared: each run's judge has no calibration.
    for name in ("model-a", "model-b"):
        assert f"{name}: Judge judge-x (shown beside the reward model): The judge judge-x has no recorded" in head
    parts = sections(html)
    both = parts["Reward model and LLM judge"]
    assert "the LLM judge judge-x" in both
    assert re.findall(r"<th[^>]*>([^<]*)</th>", both)[:3] == ["cell", "model-a", "model-b"]
    agreement = parts["Agreement of the two scorers"]
    assert re.findall(r"<th[^>]*>([^<]*)</th>", agreement)[:3] == ["run", "metric", "n"]
    assert agreement.count(">model-a<") == agreement.count(">model-b<") >= 2  # per metric and overall, per run
