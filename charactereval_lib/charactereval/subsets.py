"""Deterministic, metric-stratified subsets of the test samples (for demos and quick checks).

A subset is a list of sample ids, computed from the official data alone: samples are ordered by
a salted SHA-256 of their id (stable across machines and library versions, unlike a seeded
RNG), then taken round-robin over the 12 metrics, scarcest metric first, each turn adding the
next sample that carries that metric. Every metric is therefore covered by at least
``size // 12`` samples, although Fluency has 2.4 times fewer rows than Empathy overall.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from pathlib import Path

from charactereval_lib.charactereval.data import DataError, OfficialData
from charactereval_lib.engine.storage import artifacts

DEFAULT_SALT = "charactereval-subset-v1"


def _order_key(sample_id: int, salt: str) -> str:
    return hashlib.sha256(f"{salt}:{sample_id}".encode()).hexdigest()


def stratified_subset(data: OfficialData, size: int, *, salt: str = DEFAULT_SALT) -> list[int]:
    """``size`` scored sample ids covering every metric, in test-file order (see module doc)."""
    scored = [s.id for s in data.samples if data.id2metric.get(str(s.id))]
    if not 1 <= size <= len(scored):
        raise DataError(f"subset size must be between 1 and {len(scored)} (scored samples), got {size}")
    metrics_of = {i: {m for m, _ in data.id2metric[str(i)]} for i in scored}
    rows_per_metric = Counter(m for i in scored for m in metrics_of[i])
    turn_order = sorted(rows_per_metric, key=lambda m: (rows_per_metric[m], m))
    queues = {m: [i for i in sorted(scored, key=lambda i: _order_key(i, salt)) if m in metrics_of[i]] for m in turn_order}
    chosen: set[int] = set()
    position = dict.fromkeys(turn_order, 0)
    while len(chosen) < size:
        for metric in turn_order:
            queue = queues[metric]
            while position[metric] < len(queue) and queue[position[metric]] in chosen:
                position[metric] += 1
            if position[metric] < len(queue):
                chosen.add(queue[position[metric]])
            if len(chosen) == size:
                break
    return [s.id for s in data.samples if s.id in chosen]


def write_ids(path: Path, ids: list[int], *, comment: str = "") -> Path:
    """An ids file as ``generate --ids`` reads it: one id per line, ``#`` comments allowed."""
    header = f"# {comment}\n" if comment else ""
    artifacts.write_text_atomic(Path(path), header + "".join(f"{i}\n" for i in ids))
    return Path(path)
