"""`data convert-rm-train`: the reward model's training annotations become metaeval LABELS only
after every record passed the checks; any other shape is one line naming the file, the record
and what was expected, and nothing is written. The annotations file is not available here: the
tests build one in the validated shape from the real ids and metrics (replies invented)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from charactereval_lib import pipeline
from charactereval_lib.charactereval.metaeval import read_labels
from charactereval_lib.charactereval.protocol import COLON, METRIC_BY_EN
from charactereval_lib.cli import main


def annotations(data, count: int = 12) -> list[dict]:
    """``count`` records in the validated shape: real (id, metric) rows of id2metric, invented
    replies (every third without the role prefix), labels as the strings "1"-"5"."""
    samples = data.by_id()
    records = []
    for sample_id, metrics in data.id2metric.items():
        for metric_en, metric_zh in metrics:
            k = len(records)
            role = samples[int(sample_id)].role
            records.append({"id": int(sample_id), "role": role, "metric_en": metric_en, "metric_zh": metric_zh,
                            "model_output": f"{role}{COLON}回复{k}" if k % 3 else f"回复{k}", "label": str(k % 5 + 1)})
            if len(records) == count:
                return records
    return records


def write(path: Path, document) -> Path:
    path.write_text(json.dumps(document, ensure_ascii=False, indent=2), encoding="utf-8")
    return path


def test_a_valid_file_converts_to_labels_that_metaeval_reads(official_data, official_dir, tmp_path, capsys):
    records = annotations(official_data)
    source = write(tmp_path / "rm_train_data.json", records)
    out = tmp_path / "labels" / "rm_train.jsonl"
    assert main(["data", "convert-rm-train", "--file", str(source), "--out", str(out), "--dir", str(official_dir)]) == 0
    captured = capsys.readouterr()
    assert f"{out}: 12 label(s) of" in captured.out and "(8 replies start with their role's name)" in captured.out
    assert "in-sample" in captured.err
    labels = read_labels(out, official_data)
    assert [(lab["id"], lab["metric_en"], lab["reply"], lab["label"]) for lab in labels] == [
        (r["id"], r["metric_en"], r["model_output"], r["label"]) for r in records]
    # Only Chinese metric names, and other key names given with --field.
    renamed = [{"sample": r["id"], "metric_zh": r["metric_zh"], "response": r["model_output"], "score": r["label"]}
               for r in records]
    source = write(tmp_path / "renamed.json", renamed)
    assert main(["data", "convert-rm-train", "--file", str(source), "--out", str(out), "--dir", str(official_dir)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "record 0: missing id, model_output, label;" in err
    assert "(this record has keys: sample, metric_zh, response, score)" in err
    outcome = pipeline.convert_rm_train(out, source=source, data=official_data,
                                        keys={"id": "sample", "reply": "response", "label": "score"})
    assert outcome.records == 12 and [lab["metric_en"] for lab in read_labels(out, official_data)] == [
        r["metric_en"] for r in records]


def shapes(data):
    good = annotations(data, 3)
    other_metric = next(m for m in METRIC_BY_EN if m not in {x for x, _ in data.id2metric[str(good[0]["id"])]})
    unknown_id = max(s.id for s in data.samples) + 1
    return [
        ({"records": good}, "a JSON object, not an array"),
        ([good[0], "text"], "record 1: a JSON string, not an object"),
        ([good[0], {k: v for k, v in good[1].items() if k != "label"}], "record 1: missing label;"),
        ([{k: v for k, v in good[0].items() if k not in ("metric_en", "metric_zh")}], "record 0: missing metric_en or metric_zh;"),
        ([{**good[0], "label": 4}], "record 0: label 4 is not one of the strings 1, 2, 3, 4, 5"),
        ([{**good[0], "label": "6"}], "label '6' is not one of the strings"),
        ([{**good[0], "id": str(good[0]["id"])}], f"id '{good[0]['id']}' is not a test sample id"),
        ([{**good[0], "id": unknown_id}], f"id {unknown_id} is not a test sample id"),
        ([{**good[0], "metric_en": "Charm", "metric_zh": "魅力"}], "is not one metric of the protocol"),
        ([{**good[0], "metric_zh": METRIC_BY_EN[other_metric].metric_zh}], "is not one metric of the protocol"),
        ([{**good[0], "metric_en": other_metric, "metric_zh": METRIC_BY_EN[other_metric].metric_zh}],
         f"(id {good[0]['id']}, {other_metric}) is not a row of id2metric"),
        ([{**good[0], "model_output": None}], "model_output is a JSON null, not a string"),
        ([good[0], good[1], good[0]], "record 2: (id"),
        ([], "no records"),
    ]


@pytest.mark.slow
def test_every_wrong_shape_is_one_line_and_writes_nothing(official_data, official_dir, tmp_path, capsys):
    out = tmp_path / "labels.jsonl"
    for index, (document, message) in enumerate(shapes(official_data)):
        source = write(tmp_path / f"bad-{index}.json", document)
        code = main(["data", "convert-rm-train", "--file", str(source), "--out", str(out), "--dir", str(official_dir)])
        err = capsys.readouterr().err
        assert code == 2 and err.count("\n") == 1 and message in err, (message, err)
        assert err.startswith(f"error: {source}") and not out.exists()
        if document:
            assert 'expected a JSON array of objects, each with "id": <test sample id, integer>' in err
    assert main(["data", "convert-rm-train", "--file", str(tmp_path / "bad-0.json"), "--out", str(out),
                 "--field", "answer", "--dir", str(official_dir)]) == 2
    assert "--field 'answer': expected NAME=KEY" in capsys.readouterr().err


def test_the_default_file_is_checked_against_the_pinned_digests(official_dir, tmp_path, capsys):
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    for name in ("test_data.jsonl", "character_profiles.json", "id2metric.jsonl"):
        (data_dir / name).symlink_to(official_dir / name)
    out = tmp_path / "labels.jsonl"
    assert main(["data", "convert-rm-train", "--out", str(out), "--dir", str(data_dir)]) == 2
    assert "rm_train_data.json: missing (run `charactereval data fetch --with-rm-train`" in capsys.readouterr().err
    write(data_dir / "rm_train_data.json", [])
    assert main(["data", "convert-rm-train", "--out", str(out), "--dir", str(data_dir)]) == 2
    assert "rm_train_data.json: SHA-256 mismatch" in capsys.readouterr().err and not out.exists()


def test_unknown_field_names_are_refused(official_data, tmp_path):
    source = write(tmp_path / "a.json", annotations(official_data, 1))
    with pytest.raises(pipeline.runs.RunError, match=r"unknown rm_train field\(s\) \['grade'\]"):
        pipeline.convert_rm_train(tmp_path / "out.jsonl", source=source, keys={"grade": "x"}, data=official_data)
