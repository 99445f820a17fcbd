"""S5 on tricky outputs, on a synthetic data directory."""

from __future__ import annotations

import json

import pytest

from charactereval_lib.charactereval.transform import first_line, generation_outputs, is_failed_output, transform, transform_run
from charactereval_lib.engine.storage import runs


def test_first_line_keeps_empty_string_from_leading_newline():
    assert first_line("\n甲：嗯") == ""


def test_first_line_keeps_carriage_return_and_spaces():
    assert first_line(" 甲：嗯 \r\n第二行") == " 甲：嗯 \r"


@pytest.mark.parametrize("output, failed", [(None, True), ("ERROR", True), ("error", False), ("ERROR ", False), ("", False)])
def test_failure_filter_is_exact_and_case_sensitive(output, failed):
    assert is_failed_output(output) is failed


def test_transform_rows_in_file_and_metric_order(synthetic_data):
    result = transform({3: "甲乙：三\n多余", 1: "甲乙：一", 2: "丙：二", 4: "无指标"}, synthetic_data)
    assert [(r["id"], r["metric_en"]) for r in result.rows] == [
        (1, "Fluency"), (1, "Empathy"), (2, "Accuracy"), (3, "Exposure"), (3, "Diversity"), (3, "Coherence"),
    ]
    assert {r["model_output"] for r in result.rows if r["id"] == 3} == {"甲乙：三"}
    assert result.rows[0] == {
        "id": 1, "role": "甲乙", "novel_name": "书一", "metric_en": "Fluency", "metric_zh": "对话流利度",
        "model_output": "甲乙：一",
    }
    assert result.no_metric_ids == [4]
    assert result.counts() == {"rows": 6, "failed": 0, "no_metric": 1, "missing": 0}


def test_transform_drops_none_and_error_but_scores_empty_and_lowercase(synthetic_data):
    result = transform({1: None, 2: "ERROR", 3: "\n后面"}, synthetic_data)
    assert result.failed_ids == [1, 2]
    assert result.missing_ids == [4]
    assert [r["model_output"] for r in result.rows] == ["", "", ""]
    lower = transform({2: "error"}, synthetic_data)
    assert [r["model_output"] for r in lower.rows] == ["error"]


def test_transform_rejects_unknown_ids(synthetic_data):
    with pytest.raises(ValueError, match="not test samples"):
        transform({99: "x"}, synthetic_data)


def test_latest_generation_record_is_the_state():
    records = [
        {"id": 1, "status": "error", "model_output": None},
        {"id": 2, "status": "ok", "model_output": "a"},
        {"id": 1, "status": "ok", "model_output": "b"},
        {"id": 2, "status": "error", "model_output": None},
    ]
    assert generation_outputs(records) == {1: "b", 2: None}


def test_transform_of_real_data_gives_the_official_row_counts(official_data):
    outputs = {s.id: f"{s.role}：回复\n续写" for s in official_data.samples}
    result = transform(outputs, official_data)
    assert len(result.rows) == 8032
    assert len(result.no_metric_ids) == 33
    assert len({r["id"] for r in result.rows}) == 4531
    order = {s.id: i for i, s in enumerate(official_data.samples)}
    positions = [order[r["id"]] for r in result.rows]
    assert positions == sorted(positions)
    assert all("\n" not in r["model_output"] for r in result.rows)


def test_transform_run_reports_a_torn_last_line(synthetic_data, tmp_path):
    (tmp_path / runs.GENERATIONS).write_text(
        json.dumps({"id": 2, "model_output": "丙：好", "status": "ok"}) + '\n{"id": 3, "model_out', encoding="utf-8")
    result = transform_run(tmp_path, synthetic_data)
    assert len(result.rows) == 1
    assert len(result.warnings) == 1 and "torn last line" in result.warnings[0]
    assert runs.load_manifest(tmp_path)["transform"]["warnings"] == result.warnings
