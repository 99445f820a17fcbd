"""Interoperation with the official scripts' files (JSON arrays written with ``indent=4``).

Import understands three kinds, told apart by their fields:
- ``generation``: one record per sample with the raw ``model_output`` (before S5);
- ``generation_trans``: one record per (sample, metric) after S5 (``metric_en``, first line only),
  such as the five released ``results/generation_trans_*.jsonl``;
- ``evaluation``: like ``generation_trans`` with the score stored under the record's own
  ``metric_en`` key, as the official scorer writes it.
A subset of samples is fine. Every record is checked against the official test data (id, role,
context) before anything is written, so a failed import leaves nothing behind.

Rows of a ``generation_trans`` or ``evaluation`` file are taken as they are: S5 already ran on
them. In particular a stored reply that is exactly ``"ERROR"`` (the first line of a raw
``"ERROR\n..."``) is kept, and scored, as the official scorer did; every imported score is used.
"""

from __future__ import annotations

import hashlib
import json
import numbers
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from charactereval_lib.charactereval import layout
from charactereval_lib.charactereval.data import DataError, OfficialData, load_json_document
from charactereval_lib.charactereval.protocol import ERROR_OUTPUT, PROTOCOL_VERSION
from charactereval_lib.charactereval.transform import TransformResult, generation_outputs, transform
from charactereval_lib.engine.storage import artifacts, runs

GENERATION = "generation"
GENERATION_TRANS = "generation_trans"
EVALUATION = "evaluation"


class OfficialFormatError(DataError):
    """An official-format file that cannot be imported as it is."""


@dataclass
class ImportResult(TransformResult):
    """S5's result for the imported replies plus what the file held, so that nothing it carried
    goes unused without a count saying so."""

    kind: str = GENERATION
    records: int = 0
    # Samples whose stored reply is exactly "ERROR": dropped by S5 in a raw generation file,
    # kept (and scored by the official scorer) in an already transformed one.
    error_replies: int = 0
    scores_imported: int = 0
    scores_used: int = 0

    def import_counts(self) -> dict[str, int]:
        return {
            "records": self.records,
            "rows": len(self.rows),
            "error_replies": self.error_replies,
            "scores_imported": self.scores_imported,
            "scores_used": self.scores_used,
        }


def detect_kind(records: list[Any], path: Path) -> str:
    """The file's kind from all its records: per-metric rows have ``metric_en``; evaluation rows
    also a value under that name. A record that does not fit the rest is reported by
    ``_check_record``."""
    if not records:
        raise OfficialFormatError(f"{path}: empty array, nothing to import")
    objects = [r for r in records if isinstance(r, dict)]
    if not any("metric_en" in r for r in objects):
        return GENERATION
    if any(isinstance(r.get("metric_en"), str) and r["metric_en"] in r for r in objects):
        return EVALUATION
    return GENERATION_TRANS


def _check_record(record: Any, index: int, path: Path, data_by_id: dict, kind: str) -> None:
    where = f"{path}: record #{index}"
    if not isinstance(record, dict):
        raise OfficialFormatError(f"{where}: expected an object, got {type(record).__name__}")
    required = ["id", "role", "model_output"] + ([] if kind == GENERATION else ["metric_en", "metric_zh"])
    for key in required:
        if key not in record:
            raise OfficialFormatError(f"{where}: missing field {key!r} (a {kind} file needs {required})")
    sample = data_by_id.get(record["id"])
    if sample is None:
        raise OfficialFormatError(f"{where}: id {record['id']!r} is not a test sample")
    where = f"{path}: record #{index} (id {record['id']})"
    if record["role"] != sample.role:
        raise OfficialFormatError(f"{where}: unknown role {record['role']!r}; the test data has {sample.role!r}")
    if "context" in record and record["context"] != sample.context:
        raise OfficialFormatError(f"{where}: context differs from the official test data")
    output = record["model_output"]
    if output is None and kind != GENERATION:
        # S5 drops null replies before the official scorer, which could not score one.
        raise OfficialFormatError(f"{where}: model_output is null; a {kind} file holds only replies that passed S5")
    if output is not None and not isinstance(output, str):
        raise OfficialFormatError(f"{where}: model_output should be a string or null, got {type(output).__name__}")
    if kind == EVALUATION:
        score = record.get(record["metric_en"])
        if not isinstance(score, numbers.Real) or isinstance(score, bool):
            raise OfficialFormatError(f"{where}: no numeric score under {record['metric_en']!r}")


def _outputs_from_rows(records: list[dict[str, Any]], path: Path, data: OfficialData) -> dict[int, str | None]:
    """One output per sample from per-metric rows; all rows of a sample must agree and carry
    exactly the sample's id2metric metrics, otherwise the file is not of this data version."""
    outputs: dict[int, str | None] = {}
    metrics: dict[int, list[tuple[str, str]]] = {}
    for record in records:
        sample_id = record["id"]
        if sample_id in outputs and outputs[sample_id] != record["model_output"]:
            raise OfficialFormatError(f"{path}: id {sample_id}: rows disagree on model_output")
        outputs[sample_id] = record["model_output"]
        metrics.setdefault(sample_id, []).append((record["metric_en"], record["metric_zh"]))
    for sample_id, got in metrics.items():
        expected = list(data.id2metric.get(str(sample_id), ()))
        if got != expected:
            raise OfficialFormatError(
                f"{path}: id {sample_id}: metrics {[m for m, _ in got]} differ from id2metric {[m for m, _ in expected]}"
            )
    return outputs


def import_official(path: Path, run_dir: Path, data: OfficialData) -> tuple[str, ImportResult]:
    """Make a run directory from an official-format file (see module docstring)."""
    path = Path(path)
    run_dir = Path(run_dir)
    if (run_dir / runs.GENERATIONS).exists():
        raise OfficialFormatError(f"{run_dir}: already has {runs.GENERATIONS}; import into a new run directory")
    raw = path.read_bytes() if path.exists() else None
    if raw is None:
        raise OfficialFormatError(f"{path}: missing")
    records = load_json_document(path, raw)
    if not isinstance(records, list):
        raise OfficialFormatError(f"{path}: wrong shape: expected a JSON array, got {type(records).__name__}")
    kind = detect_kind(records, path)
    by_id = data.by_id()
    for index, record in enumerate(records):
        _check_record(record, index, path, by_id, kind)
    if kind == GENERATION:
        outputs: dict[int, str | None] = {}
        for record in records:
            if record["id"] in outputs:
                raise OfficialFormatError(f"{path}: id {record['id']} appears twice")
            outputs[record["id"]] = record["model_output"]
    else:
        outputs = _outputs_from_rows(records, path, data)
        for sample_id, output in outputs.items():
            if "\n" in output:
                # The rows were already cut to their first line: importing them must not change them.
                raise OfficialFormatError(f"{path}: id {sample_id}: model_output has a newline; not a transformed file")
    already_transformed = kind != GENERATION
    transformed = transform(outputs, data, already_transformed=already_transformed)
    result = ImportResult(
        **vars(transformed),
        kind=kind,
        records=len(records),
        error_replies=sum(output == ERROR_OUTPUT for output in outputs.values()),
    )
    if already_transformed and result.error_replies:
        result.warnings.append(
            f'{result.error_replies} sample(s) with the stored reply "ERROR" kept as they are: '
            "the official scorer scores them"
        )

    scores = []
    if kind == EVALUATION:
        scores = [
            {
                "id": r["id"],
                "metric_en": r["metric_en"],
                "score": float(r[r["metric_en"]]),
                # The official file keeps only sigmoid*4+1; the raw sigmoid is not recoverable exactly.
                "sigmoid": None,
                "mode": "imported",
            }
            for r in records
        ]
        row_keys = {(row["id"], row["metric_en"]) for row in result.rows}
        result.scores_imported = len(scores)
        result.scores_used = sum((s["id"], s["metric_en"]) in row_keys for s in scores)

    source = {"file": str(path), "sha256": hashlib.sha256(raw).hexdigest(), "kind": kind}
    generations = [
        {
            "id": sample_id,
            "model_output": output,
            "status": "error" if output is None else "ok",
            "error": None if output is not None else {"class": "imported_null", "message": "null in imported file"},
            "source": "import-official",
        }
        for sample_id, output in outputs.items()
    ]
    run_dir.mkdir(parents=True, exist_ok=True)
    artifacts.write_jsonl_atomic(run_dir / runs.GENERATIONS, generations)
    artifacts.write_jsonl_atomic(run_dir / layout.ROWS, result.rows)
    if scores:
        artifacts.write_jsonl_atomic(run_dir / layout.SCORES, scores)
    runs.update_manifest(
        run_dir,
        protocol_version=PROTOCOL_VERSION,
        generation={
            "backend": "import-official",
            "model": path.stem,
            "source": source,
            # Tells a later `transform` to keep these replies as they are (see transform.py).
            "already_transformed": already_transformed,
        },
        transform={"counts": result.counts(), "failed_ids": result.failed_ids, "no_metric_ids": result.no_metric_ids},
        import_official={"counts": result.import_counts(), "warnings": result.warnings},
    )
    return kind, result


def _dump_official(path: Path, records: list[dict[str, Any]]) -> None:
    artifacts.write_text_atomic(path, json.dumps(records, ensure_ascii=False, indent=4))


def export_official(run_dir: Path, data: OfficialData, out_dir: Path | None = None) -> list[Path]:
    """Write a run as the official scripts' files: ``generation.jsonl`` (raw replies per sample),
    ``generation_trans.jsonl`` (S5 rows) and, when scores exist, ``evaluation.jsonl``."""
    run_dir = Path(run_dir)
    out_dir = Path(out_dir) if out_dir else run_dir / "official"
    # Checked before the output directory exists: a missing or empty run leaves nothing behind.
    generations = artifacts.read_jsonl(run_dir / runs.GENERATIONS).records
    if not generations:
        raise runs.RunError(f"{run_dir / runs.GENERATIONS}: no generations to export")
    out_dir.mkdir(parents=True, exist_ok=True)
    by_id = data.by_id()
    written = []
    outputs = generation_outputs(generations)
    generation_records = [
        {"id": sample.id, "role": sample.role, "novel_name": sample.novel_name, "context": sample.context,
         "model_output": outputs[sample.id]}
        for sample in data.samples
        if sample.id in outputs
    ]
    _dump_official(out_dir / "generation.jsonl", generation_records)
    written.append(out_dir / "generation.jsonl")

    rows = artifacts.read_jsonl(run_dir / layout.ROWS).records
    if rows:
        trans = [_official_row(row, by_id) for row in rows]
        _dump_official(out_dir / "generation_trans.jsonl", trans)
        written.append(out_dir / "generation_trans.jsonl")
        scores = artifacts.latest_by_key(artifacts.read_jsonl(run_dir / layout.SCORES).records, "id", "metric_en")
        if scores:
            evaluation = []
            for row, record in zip(rows, trans):
                score = scores.get((row["id"], row["metric_en"]))
                if score is not None:
                    evaluation.append({**record, row["metric_en"]: score["score"]})
            _dump_official(out_dir / "evaluation.jsonl", evaluation)
            written.append(out_dir / "evaluation.jsonl")
    return written


def _official_row(row: dict[str, Any], by_id: dict) -> dict[str, Any]:
    sample = by_id[row["id"]]
    return {
        "id": sample.id,
        "role": sample.role,
        "novel_name": sample.novel_name,
        "context": sample.context,
        "model_output": row["model_output"],
        "metric_en": row["metric_en"],
        "metric_zh": row["metric_zh"],
    }
