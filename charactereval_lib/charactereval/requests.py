"""CharacterEval's generation requests: which samples, and the exact S3 messages for each."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from charactereval_lib.charactereval.data import DataError, OfficialData, Sample
from charactereval_lib.charactereval.prompts import build_messages
from charactereval_lib.charactereval.protocol import PROTOCOL_VERSION
from charactereval_lib.engine import thinking
from charactereval_lib.engine.generation.base import GenerationRequest
from charactereval_lib.engine.generation.engine import GenerationTask


def read_ids_file(path: Path) -> list[int]:
    """Sample ids, one per line (blank lines and ``#`` comments ignored)."""
    ids = []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        text = line.split("#", 1)[0].strip()
        if not text:
            continue
        try:
            ids.append(int(text))
        except ValueError:
            raise DataError(f"{path}:{number}: not a sample id: {text!r}") from None
    if not ids:
        raise DataError(f"{path}: no sample ids (one per line expected)")
    return ids


def check_limit(limit: int | None) -> int | None:
    """``limit`` as given, if it is a positive count (or None: no limit). A negative one would
    slice from the end (``-5`` = all but five) and 0 would make an empty run: both are mistakes."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise DataError(f"--limit must be a positive number of samples, got {limit!r}")
    return limit


def select_samples(data: OfficialData, *, limit: int | None = None, ids: list[int] | None = None) -> list[Sample]:
    """The samples to generate for, in test-file order: all, those in ``ids``, or the first ``limit``."""
    check_limit(limit)
    samples = data.samples
    if ids is not None:
        by_id = data.by_id()
        unknown = [i for i in ids if i not in by_id]
        if unknown:
            raise DataError(f"{len(unknown)} requested id(s) are not test samples, e.g. {unknown[:5]}")
        wanted = set(ids)
        samples = [s for s in samples if s.id in wanted]
    if limit is not None:
        samples = samples[:limit]
    return samples


def build_request(sample: Sample, data: OfficialData) -> dict[str, Any]:
    """``{"id", "messages"}`` for one sample, messages exactly as they are sent (S3)."""
    built = build_messages(sample.id, sample.role, sample.context, data.profiles[sample.role])
    return {"id": sample.id, "messages": built.messages}


def make_requests(samples: Sequence[Sample], data: OfficialData) -> list[GenerationRequest]:
    """The S3 request of each sample (messages exactly as sent)."""
    return [GenerationRequest(s.id, s.role, build_request(s, data)["messages"]) for s in samples]


def generation_task(data: OfficialData, *, keep_thinking: bool = False) -> GenerationTask:
    """What the generation engine needs to know of CharacterEval: protocol, data, all test ids,
    and whether S5 removes a leading thinking block (``engine.thinking``; recorded in the run's
    identity, read back by the transform)."""
    return GenerationTask(PROTOCOL_VERSION, data.sha256, frozenset(s.id for s in data.samples),
                          thinking=thinking.rule(keep_thinking))
