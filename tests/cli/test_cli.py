"""The `charactereval` command end to end on the real data, and its one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys

import pandas as pd
import pytest

from charactereval_lib.charactereval.prompts import build_messages
from charactereval_lib.cli import main
from charactereval_lib.engine.storage import artifacts, runs


def run_cli(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def synthetic_evaluation(data, *, every=1):
    """An official-format evaluation file for the real test set with made-up replies and scores
    (generated here, never stored in the repo)."""
    records = []
    for k, sample in enumerate(data.samples[::every]):
        for j, (metric_en, metric_zh) in enumerate(data.id2metric.get(str(sample.id), ())):
            records.append({
                "id": sample.id, "role": sample.role, "novel_name": sample.novel_name, "context": sample.context,
                "model_output": f"{sample.role}：回复{k}", "metric_en": metric_en, "metric_zh": metric_zh,
                metric_en: 1 + ((k * 7 + j * 3) % 256) / 64,
            })
    return records


def test_doctor_passes_on_real_data(official_dir, capsys):
    code, out, _ = run_cli(capsys, "doctor", "--data-dir", str(official_dir))
    assert code == 0, out
    assert "29/29 checks passed" in out
    # Seed 000 §2's further facts are printed, each with its value.
    for line in ("ok   single-line contexts (3-message requests): 529", "ok   lines with several full-width colons: 174",
                 "ok   lines per context (fewest, most, mean): (1, 50, 6.87)", "ok   longest context (characters): 1684",
                 "ok   metrics per scored id (ids with 1, 2, ... metrics): {1: 2801, 2: 962,"):
        assert line in out


def test_doctor_fails_on_a_protocol_breaking_context(tmp_path, capsys):
    from tests.conftest import SYNTHETIC_ID2METRIC, SYNTHETIC_PROFILES, write_data_dir

    samples = [{"id": 5, "role": "丙", "novel_name": "书", "context": "甲乙：一\n丙：二"}]
    write_data_dir(tmp_path, samples, SYNTHETIC_PROFILES, SYNTHETIC_ID2METRIC)
    # An unverified synthetic directory fails the self-check with one line before any check runs
    # (exit 1, as `data verify` reports the same file).
    code, _, err = run_cli(capsys, "doctor", "--data-dir", str(tmp_path))
    assert code == 1 and err.count("\n") == 1 and "SHA-256 mismatch" in err


def test_dry_run_writes_every_request_in_file_order(official_data, official_dir, tmp_path, capsys):
    run = tmp_path / "dry"
    code, out, _ = run_cli(capsys, "generate", str(run), "--backend", "openai", "--model", "m",
                           "--temperature", "0.7", "--dry-run", "--data-dir", str(official_dir))
    assert code == 0 and "4564 request(s) written; nothing was sent" in out
    requests = [json.loads(line) for line in (run / "requests.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [r["id"] for r in requests] == [s.id for s in official_data.samples]
    sample = official_data.samples[100]
    assert requests[100]["messages"] == build_messages(sample.id, sample.role, sample.context,
                                                       official_data.profiles[sample.role]).messages
    manifest = runs.load_manifest(run)
    assert manifest["dry_run"]["parameters"]["temperature"] == 0.7
    assert manifest["dry_run"]["data_sha256"]["test_data.jsonl"].startswith("6d9723a1")


def test_dry_run_with_ids_and_limit(official_data, official_dir, tmp_path, capsys):
    wanted = [official_data.samples[i].id for i in (40, 3, 7)]
    ids_file = tmp_path / "ids.txt"
    ids_file.write_text("# picked\n" + "\n".join(map(str, wanted)) + "\n\n")
    run = tmp_path / "dry"
    code, _, _ = run_cli(capsys, "generate", str(run), "--backend", "offline", "--model", "m", "--dry-run",
                         "--ids", str(ids_file), "--limit", "2", "--data-dir", str(official_dir))
    assert code == 0
    got = [json.loads(line)["id"] for line in (run / "requests.jsonl").read_text().splitlines()]
    assert got == [official_data.samples[3].id, official_data.samples[7].id]


def test_import_transform_summarize_export_round_trip(official_data, official_dir, tmp_path, capsys):
    records = synthetic_evaluation(official_data)
    source = tmp_path / "evaluation.jsonl"
    source.write_text(json.dumps(records, ensure_ascii=False, indent=4), encoding="utf-8")
    run = tmp_path / "run"
    code, out, err = run_cli(capsys, "import-official", str(source), str(run), "--data-dir", str(official_dir))
    assert code == 0, err
    assert "imported an official evaluation file: 8032 rows" in out

    code, out, _ = run_cli(capsys, "transform", str(run), "--data-dir", str(official_dir))
    assert code == 0 and "8032 rows" in out and "33 sample(s) not generated yet" in out

    code, out, _ = run_cli(capsys, "summarize", str(run))
    assert code == 0
    expected = pd.DataFrame(records).assign(score=lambda f: [r[r["metric_en"]] for r in records])
    expected_means = expected.groupby("metric_en")["score"].mean()
    summary = json.loads((run / "summary.json").read_text())
    got = {m["metric_en"]: (m["n"], m["mean"]) for m in summary["metrics"]}
    for metric_en, mean in expected_means.items():
        assert got[metric_en][1] == pytest.approx(mean, rel=1e-12)
    assert got["Fluency"][0] == 308
    assert summary["counts"]["scored_rows"] == 8032 and summary["counts"]["generation_failures"] == 0
    assert "not reproduced" in summary["mbti"]
    assert (run / "metrics.csv").read_text().count("\n") == 16

    code, out, _ = run_cli(capsys, "export-official", str(run), "--data-dir", str(official_dir))
    assert code == 0
    exported = json.loads((run / "official" / "evaluation.jsonl").read_text(encoding="utf-8"))
    assert exported == records
    assert (run / "official" / "evaluation.jsonl").read_text(encoding="utf-8") == json.dumps(
        records, ensure_ascii=False, indent=4)


def test_import_of_a_raw_generation_subset_with_failures(official_data, official_dir, tmp_path, capsys):
    samples = official_data.samples[:50]
    records = [{"id": s.id, "role": s.role, "novel_name": s.novel_name, "context": s.context,
                "model_output": None if k == 0 else ("ERROR" if k == 1 else f"\n{s.role}：第二行")}
               for k, s in enumerate(samples)]
    source = tmp_path / "generation.jsonl"
    source.write_text(json.dumps(records, ensure_ascii=False, indent=4), encoding="utf-8")
    run = tmp_path / "run"
    code, out, _ = run_cli(capsys, "import-official", str(source), str(run), "--data-dir", str(official_dir))
    assert code == 0 and "2 failed generation(s)" in out
    rows = artifacts.read_jsonl(run / "rows.jsonl").records
    assert rows and all(r["model_output"] == "" for r in rows)
    manifest = runs.load_manifest(run)
    assert manifest["transform"]["counts"]["missing"] == 4564 - 50


@pytest.mark.parametrize(
    "mutate, message",
    [
        (lambda r: r[0].update(role="无名"), "record #0 (id {id}): unknown role '无名'"),
        (lambda r: r[0].update(context="改过"), "record #0 (id {id}): context differs"),
        (lambda r: r[0].update(id=-5), "record #0: id -5 is not a test sample"),
        (lambda r: r[0].pop(r[0]["metric_en"]), "record #0 (id {id}): no numeric score"),
    ],
)
def test_import_errors_name_the_record_and_write_nothing(official_data, official_dir, tmp_path, capsys, mutate, message):
    records = synthetic_evaluation(official_data, every=500)
    first_id = records[0]["id"]
    mutate(records)
    source = tmp_path / "bad.jsonl"
    source.write_text(json.dumps(records, ensure_ascii=False), encoding="utf-8")
    run = tmp_path / "run"
    code, _, err = run_cli(capsys, "import-official", str(source), str(run), "--data-dir", str(official_dir))
    assert code == 2
    assert err.startswith("error: ") and err.count("\n") == 1
    assert message.format(id=first_id) in err
    assert not run.exists()


def test_import_of_malformed_json_names_line_and_column(official_dir, tmp_path, capsys):
    source = tmp_path / "bad.jsonl"
    source.write_text('[\n  {"id": 1,\n  }\n]', encoding="utf-8")
    code, _, err = run_cli(capsys, "import-official", str(source), str(tmp_path / "run"), "--data-dir", str(official_dir))
    assert code == 2 and "bad.jsonl: malformed JSON at line 3 column 3" in err


def test_transform_of_a_torn_generations_file(official_data, official_dir, tmp_path, capsys):
    run = tmp_path / "run"
    sample = official_data.samples[0]
    run.mkdir()
    (run / "generations.jsonl").write_text(
        json.dumps({"id": sample.id, "model_output": "x", "status": "ok"}) + '\n{"id": 12, "model_out', encoding="utf-8")
    code, out, err = run_cli(capsys, "transform", str(run), "--data-dir", str(official_dir))
    assert code == 0
    assert "4563 sample(s) not generated yet" in out
    assert runs.load_manifest(run)["transform"]["torn_lines_ignored"] == 1


def test_missing_data_is_one_line(tmp_path, capsys):
    code, _, err = run_cli(capsys, "doctor", "--data-dir", str(tmp_path / "nowhere"))
    assert code == 1
    assert err == (f"error: {tmp_path / 'nowhere' / 'test_data.jsonl'}: missing (run `charactereval data fetch`, "
                   "pass --dir, set CHARACTEREVAL_DATA_DIR, or run `charactereval data use DIR`)\n")


def test_console_script_runs(tmp_path):
    result = subprocess.run([sys.executable, "-m", "charactereval_lib.cli", "--version"], capture_output=True, text=True)
    assert result.returncode == 0 and "charactereval-1.0" in result.stdout
    result = subprocess.run([sys.executable, "-m", "charactereval_lib.cli", "data", "verify", "--dir", str(tmp_path)],
                            capture_output=True, text=True)
    assert result.returncode == 1
    assert "test_data.jsonl: missing" in result.stderr


def test_import_of_a_generation_trans_file_keeps_rows_exactly(official_data, official_dir, tmp_path, capsys):
    records = synthetic_evaluation(official_data, every=3)
    for record in records:
        del record[record["metric_en"]]
    for record in records:
        if record["id"] == records[0]["id"]:
            record["model_output"] = ""  # an empty first line is a valid, scored reply
    source = tmp_path / "generation_trans_x.jsonl"
    source.write_text(json.dumps(records, ensure_ascii=False, indent=4), encoding="utf-8")
    run = tmp_path / "run"
    code, out, _ = run_cli(capsys, "import-official", str(source), str(run), "--data-dir", str(official_dir))
    assert code == 0 and f"imported an official generation_trans file: {len(records)} rows" in out
    rows = artifacts.read_jsonl(run / "rows.jsonl").records
    assert [(r["id"], r["metric_en"], r["model_output"]) for r in rows] == [
        (r["id"], r["metric_en"], r["model_output"]) for r in records]
    assert not (run / "scores.jsonl").exists()
    run_cli(capsys, "export-official", str(run), "--data-dir", str(official_dir))
    assert json.loads((run / "official" / "generation_trans.jsonl").read_text(encoding="utf-8")) == records


def test_import_of_rows_with_a_newline_or_partial_metrics_is_refused(official_data, official_dir, tmp_path, capsys):
    records = synthetic_evaluation(official_data, every=400)
    many = next(r["id"] for r in records if len(official_data.id2metric[str(r["id"])]) > 1)
    partial = [r for r in records if not (r["id"] == many and r["metric_en"] == official_data.id2metric[str(many)][0][0])]
    source = tmp_path / "partial.jsonl"
    source.write_text(json.dumps(partial, ensure_ascii=False), encoding="utf-8")
    code, _, err = run_cli(capsys, "import-official", str(source), str(tmp_path / "a"), "--data-dir", str(official_dir))
    assert code == 2 and f"id {many}: metrics" in err and "differ from id2metric" in err
    for record in records:
        record["model_output"] += "\n续"
    source.write_text(json.dumps(records, ensure_ascii=False), encoding="utf-8")
    code, _, err = run_cli(capsys, "import-official", str(source), str(tmp_path / "b"), "--data-dir", str(official_dir))
    assert code == 2 and "model_output has a newline; not a transformed file" in err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_summarize_names_the_scorer_and_refuses_a_mix(official_data, official_dir, tmp_path, capsys):
    records = synthetic_evaluation(official_data, every=300)
    source = tmp_path / "evaluation.jsonl"
    source.write_text(json.dumps(records, ensure_ascii=False), encoding="utf-8")
    run = tmp_path / "run"
    run_cli(capsys, "import-official", str(source), str(run), "--data-dir", str(official_dir))
    code, out, err = run_cli(capsys, "summarize", str(run))
    assert code == 0 and f"scorers: imported unknown checkpoint mode=imported ({len(records)} rows)" in out
    assert "mix" not in err
    first = records[0]
    with artifacts.JsonlAppender(run / "scores.jsonl") as out_file:
        out_file.write({"id": first["id"], "metric_en": first["metric_en"], "score": 3.0, "mode": "fast",
                        "checkpoint_sha256": "ab" * 32})
    code, out, err = run_cli(capsys, "summarize", str(run))
    assert code == 2 and out == "" and err.count("\n") == 1
    assert "the scores mix 2 scorer configurations" in err and "reward-model abababababab mode=fast: 1 rows" in err
    code, out, err = run_cli(capsys, "summarize", str(run), "--allow-mixed")
    assert code == 0 and "warning: MIXED SCORERS:" in err
    assert "scorer modes" not in err  # said once, by the line above
