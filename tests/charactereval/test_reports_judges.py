"""A run with two judges and the reward model (issue 19, "done when"): the reward-model report
lists both judges beside it, each judge gets its own report, and a batch over such a run passes
and says which judge it names the run does not hold.

Real pieces throughout: offline generation on the official data, the tiny reward model, two
judges through the local mock server, papermill reports and the batch command.
"""

from __future__ import annotations

import re

import pytest
from test_reports_notebooks import PNG, cell_problems, sections

from charactereval_lib import pipeline
from charactereval_lib.charactereval import judge_figures, layout
from charactereval_lib.charactereval.judge_report import common_judge, report_names
from charactereval_lib.cli import main
from charactereval_lib.engine.storage import artifacts, runs
from charactereval_lib.testing.mockserver import MockServer


def judge(run, server, model, data_dir):
    settings = pipeline.JudgeSettings(judge_model=model, base_url=server.base_url, api_key_env="", concurrency=4,
                                      max_attempts=2, retry_base_delay=0.01, timeout=30.0)
    return pipeline.judge_score(run, settings, data_dir=data_dir)


@pytest.mark.slow
def test_two_judges_and_the_reward_model_render_three_reports_and_a_batch_passes(official_dir, tiny_rm, tmp_path,
                                                                                  capsys):
    out = tmp_path / "out"
    run = out / "model-a"
    pipeline.generate(run, pipeline.GenerateSettings(backend="offline", model="offline-a", limit=3),
                      data_dir=official_dir)
    pipeline.transform(run, data_dir=official_dir)
    pipeline.score(run, pipeline.ScoreSettings(rm=str(tiny_rm), device="cpu", mode="fast"), data_dir=official_dir)

    def plan(key, attempt, payload):
        return "judge:3" if payload["model"] == "judge-three" else "judge"

    with MockServer(plan=plan) as server:
        for model in ("judge-x", "judge-three"):
            judge(out / "model-a", server, model, official_dir)
    assert layout.CharacterEvalRun(out / "model-a").judge_models() == ["judge-x", "judge-three"]

    config = tmp_path / "batch.yaml"
    config.write_text(f"""
output_dir: {out}
data_dir: {official_dir}
baselines: [GPT-4]
n_boot: 40
judges: [judge-x, judge-three, judge-absent]
defaults: {{backend: offline, rm: {tiny_rm}, device: cpu, mode: fast, limit: 3}}
models:
  - {{name: model-a, model: offline-a}}
""", encoding="utf-8")
    assert main(["batch", str(config)]) == 0
    printed = capsys.readouterr().out
    # A judge the config names that the run does not hold is said, and gets no report.
    assert "model-a: no scores of judge(s) judge-absent; the report shows judge-x, judge-three" in printed
    assert not (out / "model-a" / "report-judge-judge-absent.html").exists()

    a = out / "model-a"
    reports = {"reward model": a / "report.html", "judge-x": a / "report-judge-judge-x.html",
               "judge-three": a / "report-judge-judge-three.html"}
    for path in reports.values():
        assert cell_problems(path.with_suffix(".ipynb")) == []
    # The reward model's report lists both judges, each with its own section and grid.
    parts = sections(reports["reward model"].read_text(encoding="utf-8"))
    for model in ("judge-x", "judge-three"):
        assert f"judge {model} mean" in parts[f"Reward model and LLM judge: {model}"]
        assert parts[f"Agreement of the two scorers: {model}"].count(PNG) == 1
        assert (a / "figures" / f"agreement-judge-{model}.png").read_bytes().startswith(b"\x89PNG")
    assert "Score grid (bf16)" in parts
    # Each judge's report shows its own grades, with the tiny reward model's warning (its
    # numbers are shown beside the judge's), in its own files.
    for model in ("judge-x", "judge-three"):
        html = reports[model].read_text(encoding="utf-8")
        head = html.split("<h2", 1)[0]
        assert f"scores of the LLM judge <strong>{model}</strong>" in head
        assert "Reward model (shown beside the judge)" in head and "tiny, randomly initialised" in head
        judge_parts = sections(html)
        assert "Grades" in judge_parts and "Score grid (bf16)" not in judge_parts
        assert (a / report_names(layout.JUDGE, model).figures / "grades.png").exists()
    three = sections(reports["judge-three"].read_text(encoding="utf-8"))["Grades"]
    overall = re.search(r"<tr>\s*<td[^>]*>all metrics</td>(.*?)</tr>", three, re.DOTALL).group(1)
    cells = re.findall(r"<td[^>]*>([^<]*)</td>", overall)
    rows = len(layout.CharacterEvalRun(a).read_rows())
    assert cells == [str(rows), "0", "0", str(rows), "0", "0", "0"]  # judge-three always answers 3


def test_the_comparison_shows_the_one_judge_every_run_holds():
    assert common_judge([["x", "three"], ["x"]]) == ("x", None)
    assert common_judge([["x", "three"], ["three", "x"]]) == (
        "x", "the comparison shows the judge x; the runs also share three (choose with --judge-model)")
    assert common_judge([["x"], ["y"]]) == (None, None)
    assert common_judge([["x"], ["y"]], "y") == ("y", None)


def test_report_file_names_per_scorer():
    assert report_names(layout.REWARD_MODEL) == ("report.ipynb", "report.html", "figures")
    assert report_names(layout.JUDGE, "org/gpt-4o mini") == (
        "report-judge-org_gpt-4o_mini.ipynb", "report-judge-org_gpt-4o_mini.html", "figures-judge-org_gpt-4o_mini")


def test_grade_counts_count_each_grade_per_metric():
    import pandas as pd

    scores = pd.DataFrame({"metric_en": ["Fluency", "Fluency", "Fluency", "Empathy"], "score": [5.0, 5.0, 2.5, 1.0]})
    counts = judge_figures.grade_counts(scores).set_index("metric_en")
    assert counts.loc["Fluency"].tolist() == [3, 0, 0, 0, 0, 2, 1]
    assert counts.loc["Empathy"].tolist() == [1, 1, 0, 0, 0, 0, 0]
    assert counts.loc["all metrics"].tolist() == [4, 1, 0, 0, 0, 2, 1]
    assert counts.loc["Coherence"].tolist() == [0] * 7
    fig = judge_figures.grade_figure(counts.reset_index())
    bars = [p.get_height() for p in fig.axes[0].patches]
    assert len(bars) == 5


def test_agreement_labels_are_readable_and_dots_keep_clear_of_them():
    import pandas as pd

    counts = pd.DataFrame([[0, 1], [40, 100]], index=[1, 2], columns=[1, 2])
    colours = judge_figures.label_colours(counts)
    assert colours.loc[2, 2] == "white" and colours.loc[1, 2] == "black" and colours.loc[1, 1] == "black"
    offsets = judge_figures.dot_offsets(5000, seed=1)
    assert (abs(offsets) >= judge_figures.LABEL_BAND).all() and (abs(offsets) <= judge_figures.DOT_REACH).all()
    assert (offsets > 0).any() and (offsets < 0).any()


def test_which_judges_a_report_shows(tmp_path):
    from charactereval_lib.charactereval.judge_report import shown_judges

    run = layout.CharacterEvalRun(tmp_path / "run")
    run.path.mkdir()
    artifacts.write_jsonl_atomic(run.judge_scores, [{"id": 1, "metric_en": "Fluency", "judge_model": m, "status": "ok"}
                                               for m in ("judge-x", "judge-three")])
    # The reward model's report: every judge by default, else the ones named.
    assert shown_judges(run, layout.REWARD_MODEL) == ["judge-x", "judge-three"]
    assert shown_judges(run, layout.REWARD_MODEL, judges=["judge-three"]) == ["judge-three"]
    assert shown_judges(run, layout.REWARD_MODEL, "judge-x") == ["judge-x"]
    with pytest.raises(runs.RunError, match="no records of judge model 'nobody'"):
        shown_judges(run, layout.REWARD_MODEL, judges=["nobody"])
    # A judge's report is one judge's: with several, it must be named.
    assert shown_judges(run, layout.JUDGE, "judge-three") == ["judge-three"]
    with pytest.raises(runs.RunError, match="choose one with --judge-model"):
        shown_judges(run, layout.JUDGE)
    empty = layout.CharacterEvalRun(tmp_path / "empty")
    empty.path.mkdir()
    assert shown_judges(empty, layout.REWARD_MODEL) == [] and shown_judges(empty, layout.JUDGE) == []
