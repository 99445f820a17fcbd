"""metaeval LABELS against the mock judge and the tiny reward model: the documented labels
format, its one-line errors, metascore as evals computes it (an invalid answer never matches)."""

from __future__ import annotations

import json

import pytest

from charactereval_lib import pipeline
from charactereval_lib.charactereval import metaeval
from charactereval_lib.cli import main
from charactereval_lib.testing.mockserver import MockServer


def labelled_rows(data, count: int) -> list[dict]:
    """``count`` labels on real (sample, metric) rows with made-up replies (no test text stored)."""
    rows = [(s.id, m) for s in data.samples for m, _ in data.id2metric.get(str(s.id), ())][:count]
    return [{"id": i, "metric_en": m, "reply": f"甲：reply {n}" + (" INVALIDME" if n == 0 else ""),
             **({"human_score": 4} if n % 2 else {"human_choice": str(1 + n % 5)})}
            for n, (i, m) in enumerate(rows)]


def write_labels(path, labels) -> str:
    path.write_text("".join(json.dumps(label, ensure_ascii=False) + "\n" for label in labels), encoding="utf-8")
    return str(path)


def test_metaeval_of_the_judge(official_data, official_dir, tmp_path, capsys):
    labels = labelled_rows(official_data, 20)
    path = write_labels(tmp_path / "labels.jsonl", labels)

    def judge(key, attempt, payload):
        if payload["model"] == "j2":
            return "judge:2"
        return "judge_invalid" if "INVALIDME" in payload["messages"][-1]["content"] else "judge:4"

    with MockServer(plan=judge) as server:
        # A second judge into the same directory first: each judge's predictions are its own.
        for model in ("j2", "j"):
            code = main(["metaeval", path, "--out", str(tmp_path / "meta"), "--scorer", "judge", "--judge-model",
                         model, "--base-url", server.base_url, "--no-api-key", "--n-boot", "200",
                         "--data-dir", str(official_dir)])
            assert code == 0
    summary = json.loads((tmp_path / "meta" / metaeval.SUMMARY).read_text())
    overall = summary["groups"]["overall"]
    human = [str(label.get("human_score", label.get("human_choice"))) for label in labels]
    # evals: exact agreement; the invalid answer (label 0) matches nothing.
    expected = sum(h == "4" for n, h in enumerate(human) if n != 0) / len(labels)
    assert overall["metascore"]["value"] == pytest.approx(expected) and overall["metascore"]["n"] == len(labels)
    assert overall["invalid"] == 1 and summary["unscored"] == 0
    assert overall["confusion"]["4"]["4"] == sum(h == "4" for n, h in enumerate(human) if n != 0)
    assert "__invalid__" in overall["confusion"][human[0]]
    assert overall["krippendorff_alpha"]["low"] is not None or overall["krippendorff_alpha"]["value"] is None
    assert "metascore" in capsys.readouterr().out


def test_metaeval_of_the_tiny_reward_model(official_data, tiny_rm, tmp_path):
    rm = tiny_rm
    labels = labelled_rows(official_data, 6)
    outcome = pipeline.metaeval(write_labels(tmp_path / "labels.jsonl", labels), tmp_path / "meta",
                                pipeline.ScoreSettings(rm=str(rm), device="cpu", mode="fast"), n_boot=100,
                                data=official_data)
    assert outcome.summary["scorer"] == "reward-model" and outcome.summary["unscored"] == 0
    overall = outcome.summary["groups"]["overall"]
    assert overall["metascore"]["n"] == 6 and overall["invalid"] == 0
    assert sum(sum(row.values()) for row in overall["confusion"].values()) == 6


@pytest.mark.parametrize("line, problem", [
    ({"id": 1, "metric_en": "Fluency", "reply": "x"}, "exactly one of human_score and human_choice"),
    ({"id": -5, "metric_en": "Fluency", "reply": "x", "human_score": 3}, "is not a test sample id"),
    ({"metric_en": "Nope", "reply": "x", "human_score": 3}, "metric_en 'Nope' is not one of"),
    ({"metric_en": "Fluency", "reply": 3, "human_score": 3}, "reply must be a string"),
    ({"metric_en": "Fluency", "reply": "x", "human_score": 3.5}, "not a whole grade 1-5"),
    ({"metric_en": "Fluency", "reply": "x", "human_choice": "A"}, "not one of 1, 2, 3, 4, 5"),
])
def test_labels_that_break_the_format_are_one_line_errors(official_data, official_dir, tmp_path, capsys, line,
                                                          problem):
    sample_id = next(s.id for s in official_data.samples if official_data.id2metric.get(str(s.id)))
    line = {"id": sample_id, **line} if "id" not in line else line
    path = write_labels(tmp_path / "labels.jsonl", [line])
    code = main(["metaeval", path, "--out", str(tmp_path / "meta"), "--scorer", "judge", "--judge-model", "j",
                 "--no-api-key", "--data-dir", str(official_dir)])
    err = capsys.readouterr().err
    assert code == 2 and problem in err and "labels.jsonl:1:" in err and len(err.strip().splitlines()) == 1


def test_a_row_labelled_twice_is_refused(official_data, tmp_path):
    label = labelled_rows(official_data, 1)[0]
    with pytest.raises(metaeval.LabelsError, match="labelled again"):
        metaeval.read_labels(write_labels(tmp_path / "labels.jsonl", [label, label]), official_data)
