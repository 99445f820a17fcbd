"""``score RUN --engine ray``: the scorer's work units on Ray actors, written by the driver only.

- One actor per worker loads the tokenizer and the checkpoint once (from the same path on its
  node; its identity must equal the driver's) and scores whole work units with the scorer's own
  ``score_rows``: the units are ``scorer.work_units`` (fast mode: exactly the single-process
  batches), so the scores are bitwise those of the single-process scorer in the same mode on the
  same device type, and fast mode's prefix reuse still applies within each sample.
- Only pending rows are sent (``score_run`` decides, as for a local run). Each finished unit's
  records come back to the driver, which alone appends them to the scores file: no shared
  filesystem between nodes, and a killed driver resumes exactly like a local run.
- The cluster, the workers and the re-sending of a dead worker's units are the engine's
  (``engine.ray_cluster``). A unit fails as a whole, so nothing is written twice.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from charactereval_lib.charactereval.reward.scorer import (
    RowInput,
    ScorerSettings,
    encode_rows,
    resolve_device,
    score_rows,
    work_units,
)
from charactereval_lib.engine.ray_cluster import AUTO_DEVICE, ActorPool, RaySettings, WorkerInfo
from charactereval_lib.engine.storage import runs


class ScoringWorker:
    """The actor: loads the model once, then scores work units (lists of rows)."""

    def __init__(self, rm_dir: str, settings: ScorerSettings, ckpt_sha: str) -> None:
        from charactereval_lib.charactereval.reward.checkpoint import checkpoint_identity, load_model
        from charactereval_lib.charactereval.reward.tokenizer import load_tokenizer

        device = resolve_device(None if settings.device == AUTO_DEVICE else settings.device)
        # No bar per worker: the driver shows the one progress bar.
        self.settings = replace(settings, device=device, progress=False)
        self.ckpt_sha = ckpt_sha
        found = checkpoint_identity(rm_dir)["sha256"]
        if found != ckpt_sha:
            raise runs.RunError(f"{socket.gethostname()}:{rm_dir}: checkpoint {found[:12]} differs from the driver's {ckpt_sha[:12]}")
        self.tokenizer = load_tokenizer(rm_dir)
        self.model = load_model(rm_dir, device)

    def info(self) -> WorkerInfo:
        return WorkerInfo.here(self.settings.device)

    def score(self, rows: list[RowInput]) -> list[dict[str, Any]]:
        records: list[dict[str, Any]] = []
        score_rows(rows, self.tokenizer, self.model, self.settings, self.ckpt_sha, records.append)
        return records


class RayEngine:
    """``scorer.score_run(..., engine=RayEngine(RaySettings(...)))``."""

    def __init__(self, settings: RaySettings, on_result: Callable[[list[WorkerInfo], int], None] | None = None) -> None:
        # Fails here, in one line, when Ray is not installed. ``on_result``: see ActorPool.
        self.pool = ActorPool(settings, what="scoring", on_result=on_result)
        self.settings = settings

    def describe(self) -> dict[str, Any]:
        return {"engine": "ray", "ray": self.pool.describe()}

    @contextlib.contextmanager
    def session(self, rm_dir: Path, settings: ScorerSettings, ckpt_sha: str) -> Iterator[Callable]:
        """Connects to (or starts) the cluster and starts the workers; yields the scoring function."""
        from charactereval_lib.charactereval.reward.tokenizer import load_tokenizer

        with self.pool.running(ScoringWorker, str(Path(rm_dir).resolve()), settings, ckpt_sha):
            tokenizer = load_tokenizer(rm_dir)
            yield lambda pending, emit: self._dispatch(pending, tokenizer, settings, emit)

    def _dispatch(
        self,
        pending: Sequence[RowInput],
        tokenizer: Any,
        settings: ScorerSettings,
        emit: Callable[[dict[str, Any]], None],
    ) -> tuple[int, int]:
        from tqdm.auto import tqdm

        encoded = encode_rows(pending, tokenizer)
        units = [[pending[i] for i in unit] for unit in work_units(pending, encoded, settings)]
        bar = tqdm(total=len(pending), unit="row", desc=f"scoring ({settings.mode}, ray x{self.settings.workers})",
                   disable=not settings.progress)
        try:
            for _, records in self.pool.results(units, "score"):
                for record in records:
                    emit(record)
                bar.update(len(records))
        finally:
            bar.close()
        return sum(len(ids) for ids, _, _ in encoded), sum(1 for _, _, t in encoded if t)
