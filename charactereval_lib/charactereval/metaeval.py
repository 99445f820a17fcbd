"""Meta-evaluation of a scorer against human labels (``metaeval LABELS``).

LABELS is JSON Lines, one labelled (sample, metric) reply per line::

    {"id": 5320, "metric_en": "Fluency", "reply": "佟湘玉：……", "human_score": 4}
    {"id": 5320, "metric_en": "Empathy", "reply": "佟湘玉：……", "human_choice": "3"}

``id`` is a test sample id, ``metric_en`` one of the 12 metrics, ``reply`` the reply that was
labelled (as the scorer will see it), and exactly one of ``human_score`` (a whole grade 1-5) or
``human_choice`` (a choice string of the scale, "1"-"5"). One label per (id, metric_en): several
annotators of the same row are not supported yet. A line that breaks the format is a one-line
error naming the line and what was expected.

The labels become the rows of a run directory (OUT/rows.jsonl), so either scorer scores them
exactly as it scores a run: the judge into OUT/judge_scores.jsonl (its parsed choice is the
prediction; an invalid answer stays ``__invalid__``), the reward model into OUT/scores.jsonl (its
score rounded half up to a grade is the prediction). Statistics (``label_agreement``): evals'
metascore (exact, case-sensitive agreement), Cohen's kappa, Krippendorff's alpha (ordinal) and
the confusion matrix, overall and per metric, with cluster-bootstrap intervals by sample.

The reward model's training annotations (``rm_train_data.json``, ``data fetch --with-rm-train``)
convert to LABELS (``rm_train_labels``), but only after every record passed the checks: the file
is one JSON array; each record an object whose id is a test sample id, whose metric is one of
that sample's metrics in id2metric (by English or Chinese name), whose reply is a string and whose
label is one of the strings "1"-"5"; one record per (id, metric). The key names could not be
inspected here: the defaults (``RM_TRAIN_KEYS``: the upstream row files' names, plus ``label``)
are checked on every record, the first record that lacks one stops the conversion with the keys
it has, and ``keys`` names them otherwise. Agreement on these rows is in-sample: the reward model
was trained on them.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from charactereval_lib.charactereval import layout
from charactereval_lib.charactereval.data import OfficialData
from charactereval_lib.charactereval.protocol import COLON, METRICS
from charactereval_lib.charactereval.summary import nan_to_none
from charactereval_lib.engine.grading.agreement import (
    DEFAULT_SCALE,
    OVERALL,
    label_agreement,
    round_half_up,
)
from charactereval_lib.engine.storage import artifacts, runs

SUMMARY = "metaeval_summary.json"
CHOICES = tuple(str(grade) for grade in DEFAULT_SCALE)
_METRIC_ZH = {m.metric_en: m.metric_zh for m in METRICS}
EXPECTED = ('expected {"id": <test sample id>, "metric_en": <metric>, "reply": <string>, and one of '
            '"human_score": <whole grade 1-5> or "human_choice": <"1"-"5">}')


class LabelsError(runs.RunError):
    """A labels file that does not follow the documented format (one line naming the problem)."""


# What each field of an rm_train record is called, by default (``rm_train_labels``); the metric
# is read from metric_en, else metric_zh, unless a key is named for it.
RM_TRAIN_KEYS = {"id": "id", "metric": None, "reply": "model_output", "label": "label"}
_METRIC_EN = {**{m.metric_en: m.metric_en for m in METRICS}, **{m.metric_zh: m.metric_en for m in METRICS}}


def rm_train_labels(document: Any, path: str | Path, data: OfficialData,
                    keys: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """The LABELS lines of the reward model's training annotations (``document``, the parsed
    file), after validating every record (module docstring); the first record that breaks the
    expected shape is a one-line ``LabelsError`` naming the file, its index, the expected fields
    and types, and the keys the record has."""
    unknown = sorted(set(keys or {}) - set(RM_TRAIN_KEYS))
    if unknown:
        raise LabelsError(f"unknown rm_train field(s) {unknown}; expected some of {', '.join(RM_TRAIN_KEYS)}")
    names = {**RM_TRAIN_KEYS, **(keys or {})}
    metric_keys = [names["metric"]] if names["metric"] else ["metric_en", "metric_zh"]
    metric_text = " or ".join(f'"{k}"' for k in metric_keys)
    expected = (f'expected a JSON array of objects, each with "{names["id"]}": <test sample id, integer>, '
                f'{metric_text}: <metric name, English or Chinese>, "{names["reply"]}": <string>, '
                f'"{names["label"]}": <"1"-"5", a string>')
    if not isinstance(document, list):
        raise LabelsError(f"{path}: a JSON {_json_type(document)}, not an array; {expected}")
    samples = data.by_id()
    labels: list[dict[str, Any]] = []
    seen: dict[tuple[int, str], int] = {}
    for index, record in enumerate(document):
        def bad(problem: str, index: int = index, record: Any = record) -> LabelsError:
            has = f" (this record has keys: {', '.join(map(str, record))})" if isinstance(record, dict) else ""
            return LabelsError(f"{path}: record {index}: {problem}; {expected}{has}")

        if not isinstance(record, dict):
            raise bad(f"a JSON {_json_type(record)}, not an object")
        missing = [names[f] for f in ("id", "reply", "label") if names[f] not in record]
        present = [k for k in metric_keys if k in record]
        if missing or not present:
            raise bad(f"missing {', '.join(missing + ([] if present else [' or '.join(metric_keys)]))}")
        sample_id, reply, label = record[names["id"]], record[names["reply"]], record[names["label"]]
        if not isinstance(sample_id, int) or isinstance(sample_id, bool) or sample_id not in samples:
            raise bad(f"{names['id']} {sample_id!r} is not a test sample id")
        metrics = {_METRIC_EN.get(record[k]) if isinstance(record[k], str) else None for k in present}
        if None in metrics or len(metrics) != 1:
            raise bad(f"metric {', '.join(repr(record[k]) for k in present)} is not one metric of the protocol")
        metric = metrics.pop()
        if metric not in {m for m, _ in data.id2metric.get(str(sample_id), ())}:
            raise bad(f"(id {sample_id}, {metric}) is not a row of id2metric")
        if not isinstance(reply, str):
            raise bad(f"{names['reply']} is a JSON {_json_type(reply)}, not a string")
        if not isinstance(label, str) or label not in CHOICES:
            raise bad(f"{names['label']} {label!r} is not one of the strings {', '.join(CHOICES)}")
        if (sample_id, metric) in seen:
            raise bad(f"(id {sample_id}, {metric}) is annotated again (first in record {seen[sample_id, metric]})")
        seen[sample_id, metric] = index
        labels.append({"id": sample_id, "metric_en": metric, "reply": reply, "human_choice": label})
    if not labels:
        raise LabelsError(f"{path}: no records; {expected}")
    return labels


def read_labels(path: str | Path, data: OfficialData) -> list[dict[str, Any]]:
    """The labels of ``path``, validated (see the module docstring), each with its human
    ``label`` as a choice string and its 1-based ``line``."""
    path = Path(path)
    samples = data.by_id()
    labels: list[dict[str, Any]] = []
    seen: dict[tuple[int, str], int] = {}
    if not path.is_file():
        raise LabelsError(f"{path}: no such file")
    try:
        # The one JSON Lines reader (a torn last line is named and skipped, as in every file).
        read = artifacts.read_jsonl(path)
    except OSError as exc:
        raise LabelsError(f"{path}: cannot read ({exc.strerror or exc})") from None
    except runs.RunError as exc:
        raise LabelsError(f"{exc}; {EXPECTED}") from None
    for number, record in zip(read.lines, read.records):
        where = f"{path}:{number}"
        if not isinstance(record, dict):
            raise LabelsError(f"{where}: not a JSON object; {EXPECTED}")
        label = _human_label(record, where)
        sample_id, metric = record.get("id"), record.get("metric_en")
        if not isinstance(sample_id, int) or isinstance(sample_id, bool) or sample_id not in samples:
            raise LabelsError(f"{where}: id {sample_id!r} is not a test sample id; {EXPECTED}")
        if metric not in _METRIC_ZH:
            raise LabelsError(f"{where}: metric_en {metric!r} is not one of {', '.join(_METRIC_ZH)}")
        if not isinstance(record.get("reply"), str):
            raise LabelsError(f"{where}: reply must be a string; {EXPECTED}")
        if (sample_id, metric) in seen:
            raise LabelsError(f"{where}: (id {sample_id}, {metric}) is labelled again (first on line "
                              f"{seen[sample_id, metric]}); one label per row is supported")
        seen[sample_id, metric] = number
        labels.append({"line": number, "id": sample_id, "metric_en": metric, "reply": record["reply"],
                       "label": label})
    if not labels:
        raise LabelsError(f"{path}: no labels; {EXPECTED}")
    return labels


def _human_label(record: dict[str, Any], where: str) -> str:
    has_score, has_choice = "human_score" in record, "human_choice" in record
    if has_score == has_choice:
        raise LabelsError(f"{where}: needs exactly one of human_score and human_choice; {EXPECTED}")
    if has_choice:
        choice = record["human_choice"]
        if choice not in CHOICES:
            raise LabelsError(f"{where}: human_choice {choice!r} is not one of {', '.join(CHOICES)}")
        return choice
    score = record["human_score"]
    if isinstance(score, bool) or not isinstance(score, (int, float)) or not float(score).is_integer() \
            or str(int(score)) not in CHOICES:
        raise LabelsError(f"{where}: human_score {score!r} is not a whole grade 1-5")
    return str(int(score))


def write_rows(out: layout.CharacterEvalRun, labels: Sequence[dict[str, Any]], data: OfficialData) -> None:
    """The labels as the rows of the run directory ``out``; a directory already holding other
    rows is refused (its scores would belong to other replies)."""
    samples = data.by_id()
    rows = [{"id": label["id"], "role": samples[label["id"]].role, "novel_name": samples[label["id"]].novel_name,
             "metric_en": label["metric_en"], "metric_zh": _METRIC_ZH[label["metric_en"]],
             "model_output": label["reply"]} for label in labels]
    existing = out.read_rows()
    if existing and existing != rows:
        raise runs.RunError(f"{out.rows}: holds rows of other labels; use another --out")
    if not existing:
        artifacts.write_jsonl_atomic(out.rows, rows)


def predictions(out: layout.CharacterEvalRun, labels: Sequence[dict[str, Any]], scorer: str,
                judge_model: str | None = None) -> list[str | None]:
    """Each label's predicted choice from ``scorer``'s latest records (the judge's: of
    ``judge_model``, as OUT may hold several judges) (None: not scored yet)."""
    latest = out.latest_scores(scorer=scorer, judge_model=judge_model)
    predicted: list[str | None] = []
    for label in labels:
        record = latest.get((label["id"], label["metric_en"]))
        if record is None:
            predicted.append(None)
        elif scorer == layout.JUDGE:
            predicted.append(record["choice"])
        else:
            grade = float(np.clip(round_half_up(np.array([record["score"]]))[0], min(DEFAULT_SCALE), max(DEFAULT_SCALE)))
            predicted.append(str(int(grade)))
    return predicted


def metaevaluate(labels: Sequence[dict[str, Any]], predicted: Sequence[str | None], *, n_boot: int = 1000,
                 seed: int = 0, confidence: float = 0.95) -> dict[str, Any]:
    """Agreement of the predictions with the human labels, overall and per metric; labels
    without a prediction (a failed call) are left out and counted as ``unscored``."""
    pairs = [(label, choice) for label, choice in zip(labels, predicted, strict=True) if choice is not None]
    groups = [(OVERALL, pairs)] + [(m.metric_en, [p for p in pairs if p[0]["metric_en"] == m.metric_en])
                                   for m in METRICS]
    result: dict[str, Any] = {"n_labels": len(labels), "unscored": len(labels) - len(pairs), "groups": {}}
    for name, group in groups:
        if not group:
            continue
        agreement = label_agreement([c for _, c in group], [label["label"] for label, _ in group],
                                    [label["id"] for label, _ in group], labels=list(CHOICES), n_boot=n_boot,
                                    seed=seed, confidence=confidence)
        result["groups"][name] = {
            "metascore": agreement.metascore.__dict__, "cohen_kappa": agreement.cohen_kappa.__dict__,
            "krippendorff_alpha": agreement.krippendorff_alpha.__dict__,
            "invalid": sum(1 for _, c in group if c not in CHOICES),
            "confusion": {str(h): {str(p): int(n) for p, n in row.items()}
                          for h, row in agreement.confusion.iterrows()},
        }
    return nan_to_none(result)


def _json_type(value: Any) -> str:
    names = {dict: "object", list: "array", str: "string", bool: "boolean", int: "number", float: "number"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


def role_prefixed(labels: Sequence[dict[str, Any]], data: OfficialData) -> int:
    """How many labelled replies start with their role's name and the full-width colon."""
    samples = data.by_id()
    return sum(label["reply"].startswith(f"{samples[label['id']].role}{COLON}") for label in labels)


def write_summary(out: layout.CharacterEvalRun, summary: dict[str, Any]) -> Path:
    """``OUT/metaeval_summary.json``."""
    path = out.artifact(SUMMARY)
    artifacts.write_json_atomic(path, summary)
    return path

