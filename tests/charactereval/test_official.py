"""Import and export of the official scripts' files, on a synthetic data directory."""

from __future__ import annotations

import json

import pytest

from charactereval_lib.charactereval import layout
from charactereval_lib.charactereval.official import OfficialFormatError, export_official, import_official
from charactereval_lib.charactereval.summary import summarize_run
from charactereval_lib.charactereval.transform import transform_run
from charactereval_lib.engine.storage import artifacts, runs
from tests.conftest import SYNTHETIC_ID2METRIC, SYNTHETIC_SAMPLES


def evaluation_records(replies: dict[int, str]) -> list[dict]:
    """An official evaluation file (the scorer's output) for the synthetic samples in ``replies``."""
    records = []
    for sample in SYNTHETIC_SAMPLES:
        if sample["id"] not in replies:
            continue
        for j, (metric_en, metric_zh) in enumerate(SYNTHETIC_ID2METRIC[str(sample["id"])]):
            records.append({**sample, "model_output": replies[sample["id"]], "metric_en": metric_en,
                            "metric_zh": metric_zh, metric_en: 2.0 + j / 4})
    return records


def write(path, records):
    path.write_text(json.dumps(records, ensure_ascii=False, indent=4), encoding="utf-8")
    return path


@pytest.mark.parametrize("kind", ["evaluation", "generation_trans"])
def test_transformed_file_keeps_error_replies_and_uses_every_score(synthetic_data, tmp_path, kind):
    # The official S5 keeps a raw "ERROR\n..." as its first line "ERROR", and the official scorer
    # scores that row; re-applying S5 on import dropped it.
    records = evaluation_records({1: "ERROR", 2: "丙：好", 3: "甲乙：嗯"})
    if kind == "generation_trans":
        for record in records:
            del record[record["metric_en"]]
    run = tmp_path / "run"
    got_kind, result = import_official(write(tmp_path / f"{kind}.jsonl", records), run, synthetic_data)
    assert got_kind == kind
    rows = artifacts.read_jsonl(run / layout.ROWS).records
    assert [(r["id"], r["metric_en"], r["model_output"]) for r in rows] == [
        (r["id"], r["metric_en"], r["model_output"]) for r in records]
    assert result.failed_ids == []
    scored = len(records) if kind == "evaluation" else 0
    assert result.import_counts() == {"records": 6, "rows": 6, "error_replies": 1,
                                      "scores_imported": scored, "scores_used": scored}
    assert any('"ERROR" kept as they are' in w for w in result.warnings)
    assert runs.load_manifest(run)["import_official"]["counts"]["rows"] == 6

    # A later `transform` of the run keeps the rows as they are too.
    again = transform_run(run, synthetic_data)
    assert again.rows == rows and again.failed_ids == []
    if kind == "evaluation":
        summary = summarize_run(run, n_boot=10)
        assert summary["counts"]["scored_rows"] == 6 and summary["counts"]["unscored_rows"] == 0
        fluency = next(m for m in summary["metrics"] if m["metric_en"] == "Fluency")
        assert fluency["n"] == 1 and fluency["mean"] == 2.0


def test_raw_generation_file_still_drops_error_replies(synthetic_data, tmp_path):
    records = [{**s, "model_output": out} for s, out in zip(SYNTHETIC_SAMPLES, ["ERROR", "ERROR\n丙：好", None, "x"])]
    kind, result = import_official(write(tmp_path / "generation.jsonl", records), tmp_path / "run", synthetic_data)
    assert kind == "generation"
    # "ERROR" and None are failures; "ERROR\n..." becomes the scored first line "ERROR".
    assert result.failed_ids == [1, 3]
    assert [r["model_output"] for r in result.rows] == ["ERROR"]
    assert result.import_counts()["error_replies"] == 1 and result.warnings == []
    assert transform_run(tmp_path / "run", synthetic_data).rows == result.rows


def test_transformed_file_with_a_null_reply_is_refused(synthetic_data, tmp_path):
    records = evaluation_records({2: "丙：好"})
    records[0]["model_output"] = None
    with pytest.raises(OfficialFormatError, match="record #0 \\(id 2\\): model_output is null"):
        import_official(write(tmp_path / "e.jsonl", records), tmp_path / "run", synthetic_data)
    assert not (tmp_path / "run").exists()


def test_export_of_a_missing_run_leaves_nothing_behind(synthetic_data, tmp_path):
    run = tmp_path / "nothing"
    with pytest.raises(runs.RunError, match="no generations to export"):
        export_official(run, synthetic_data)
    assert not run.exists()
    out = tmp_path / "out"
    with pytest.raises(runs.RunError):
        export_official(run, synthetic_data, out)
    assert not out.exists()
