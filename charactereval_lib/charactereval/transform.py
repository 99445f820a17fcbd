"""Protocol step S5: from one reply per sample to one scored row per (sample, metric).

Follows the official format conversion: a reply that is ``None`` or exactly ``"ERROR"`` is
dropped (it neither scores nor counts in any denominator); the rest is cut at the first
``'\\n'`` with no strip (a reply that starts with a newline becomes ``""`` and is scored);
samples without metrics are dropped; each remaining sample gives one row per metric in
``id2metric`` order, samples in test-file order.

Replies that already went through S5 (a run imported from an official ``generation_trans`` or
``evaluation`` file) are taken as they are: S5 ran once upstream, and a first line that is
exactly ``"ERROR"`` (from a raw ``"ERROR\n..."``) survived it and was scored by the official
scorer, so filtering again would drop rows the official pipeline scored.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from charactereval_lib.charactereval import layout
from charactereval_lib.charactereval.data import OfficialData
from charactereval_lib.charactereval.protocol import ERROR_OUTPUT, PROTOCOL_VERSION
from charactereval_lib.engine import thinking
from charactereval_lib.engine.storage import artifacts, runs


@dataclass
class TransformResult:
    rows: list[dict[str, Any]]
    # Samples whose reply was None or "ERROR" (failed generations), by id.
    failed_ids: list[int] = field(default_factory=list)
    # Samples that had a reply but no metric in id2metric (the official code drops them too).
    no_metric_ids: list[int] = field(default_factory=list)
    # Test samples with no generation record at all (an unfinished run).
    missing_ids: list[int] = field(default_factory=list)
    # What the caller should show the user (e.g. a torn last line that was skipped).
    warnings: list[str] = field(default_factory=list)
    # Scored replies whose leading thinking block was removed before the cut.
    thinking_blocks_removed: int = 0

    def counts(self) -> dict[str, int]:
        return {
            "rows": len(self.rows),
            "failed": len(self.failed_ids),
            "no_metric": len(self.no_metric_ids),
            "missing": len(self.missing_ids),
        }


def is_failed_output(output: str | None) -> bool:
    """The official filter: ``None`` or exactly ``"ERROR"`` (case-sensitive) is a failure."""
    return output is None or output == ERROR_OUTPUT


def first_line(output: str) -> str:
    """S5 truncation: everything before the first ``'\\n'``; ``'\\r'`` and spaces are kept."""
    return output.split("\n")[0]


def transform(
    outputs: Mapping[int, str | None], data: OfficialData, *, already_transformed: bool = False,
    thinking_rule: str = thinking.KEPT,
) -> TransformResult:
    """S5: expand replies (sample id -> raw model output) into (id, metric) rows.

    With ``already_transformed`` the replies are S5 output already (see the module docstring):
    only ``None`` counts as failed and the first-line cut changes nothing. ``thinking_rule``
    (``engine.thinking``): with ``REMOVED`` a leading thinking block is removed before the cut,
    so the reward model scores the answer's first line, not the block's. Ids of ``outputs``
    that are not test samples are an error: they cannot be scored faithfully.
    """
    known = {s.id for s in data.samples}
    unknown = sorted(set(outputs) - known)
    if unknown:
        raise ValueError(f"{len(unknown)} generation id(s) are not test samples, e.g. {unknown[:5]}")
    result = TransformResult(rows=[])
    for sample in data.samples:
        if sample.id not in outputs:
            result.missing_ids.append(sample.id)
            continue
        output = outputs[sample.id]
        if output is None or (not already_transformed and is_failed_output(output)):
            result.failed_ids.append(sample.id)
            continue
        metrics = data.id2metric.get(str(sample.id))
        if not metrics:
            result.no_metric_ids.append(sample.id)
            continue
        answer = thinking.apply(output, thinking_rule)
        result.thinking_blocks_removed += answer != output
        reply = first_line(answer)
        for metric_en, metric_zh in metrics:
            result.rows.append(
                {
                    "id": sample.id,
                    "role": sample.role,
                    "novel_name": sample.novel_name,
                    "metric_en": metric_en,
                    "metric_zh": metric_zh,
                    "model_output": reply,
                }
            )
    return result


def generation_outputs(generations: Iterable[Mapping[str, Any]]) -> dict[int, str | None]:
    """The reply each sample ends with: its latest record's output, ``None`` unless status ok."""
    latest: dict[int, str | None] = {}
    for record in generations:
        latest[record["id"]] = record.get("model_output") if record.get("status", "ok") == "ok" else None
    return latest


def transform_run(run_dir: Path, data: OfficialData) -> TransformResult:
    """S5 for a run directory: ``generations.jsonl`` -> ``rows.jsonl`` (rewritten atomically).

    A torn last line of ``generations.jsonl`` is skipped and reported in ``warnings``. A run
    imported from an already transformed official file keeps its replies as they are."""
    run_dir = Path(run_dir)
    generations = artifacts.read_jsonl(run_dir / runs.GENERATIONS)
    if not generations.records:
        raise runs.RunError(f"{run_dir / runs.GENERATIONS}: no generations to transform")
    generation = runs.load_manifest(run_dir).get("generation") or {}
    already = bool(generation.get("already_transformed", False))
    rule = thinking.recorded(generation.get("identity"))
    result = transform(generation_outputs(generations.records), data, already_transformed=already,
                       thinking_rule=rule)
    result.warnings.extend(generations.warnings)
    artifacts.write_jsonl_atomic(run_dir / layout.ROWS, result.rows)
    runs.update_manifest(
        run_dir,
        protocol_version=PROTOCOL_VERSION,
        transform={
            "counts": result.counts(),
            "failed_ids": result.failed_ids,
            "no_metric_ids": result.no_metric_ids,
            "torn_lines_ignored": len(generations.warnings),
            "thinking": rule,
            "thinking_blocks_removed": result.thinking_blocks_removed,
            "warnings": result.warnings,
            "finished_at": runs.utc_now(),
        },
    )
    return result
