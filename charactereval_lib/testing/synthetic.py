"""Synthetic, official-shaped data and runs for tests and benchmarks.

Everything here is made up (invented roles, novels and dialogue) so tests and benchmarks can
exercise the full pipeline without the official test set, and nothing from the test set ever
lands in the repository. The files have the official shapes: whole JSON documents named
``.jsonl``, ids as integers, id2metric keyed by ``str(id)``. Load the data with
``load_official_data(directory, verify=False)``: it cannot match the pinned digests.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from charactereval_lib.charactereval import layout
from charactereval_lib.charactereval.data import ID2METRIC, PROFILES, TEST_DATA, OfficialData, Sample
from charactereval_lib.charactereval.protocol import COLON, METRICS
from charactereval_lib.charactereval.transform import transform_run
from charactereval_lib.engine.storage import artifacts, runs

# Invented names (no relation to the benchmark's characters).
_ROLES = ("林远舟", "苏晚晴", "顾北辰", "沈清秋", "陆星河", "白若溪", "秦墨白", "叶知秋")
_NOVELS = ("星河旧梦", "山海行记", "长夜灯火")
_PARTNER = "路人"
_WORDS = ("今天", "天气", "不错", "我们", "出发", "吧", "你", "怎么", "看", "这件", "事情", "真的", "好", "走")


def _utterance(rng: np.random.Generator, words: int) -> str:
    return "".join(rng.choice(_WORDS, size=words))


def synthetic_documents(
    n_samples: int = 120,
    *,
    seed: int = 0,
    metric_rows: Mapping[str, int] | None = None,
    no_metric_share: float = 0.02,
) -> dict[str, Any]:
    """The three official documents (test data, profiles, id2metric) as Python objects.

    Without ``metric_rows`` each scored sample gets 1-3 distinct metrics; with it, metric m is
    given to exactly ``metric_rows[m]`` distinct scored samples (e.g. the real per-metric counts,
    to reproduce the real table size)."""
    rng = np.random.default_rng(seed)
    ids = [1000 + 7 * i for i in range(n_samples)]
    samples = []
    for i, sample_id in enumerate(ids):
        role = _ROLES[i % len(_ROLES)]
        lines = [f"{_PARTNER}{COLON}{_utterance(rng, 3)}" if k % 2 == 0 else f"{role}{COLON}{_utterance(rng, 4)}"
                 for k in range(int(rng.integers(1, 12)) * 2 - 1)]
        samples.append({"id": sample_id, "role": role, "novel_name": _NOVELS[i % len(_NOVELS)],
                        "context": "\n".join(lines)})
    profiles = {role: {"姓名": role, "性别": "未知", "经历": _utterance(rng, 6)} for role in _ROLES}
    n_without = int(round(n_samples * no_metric_share))
    scored = [i for i in ids if i not in set(rng.choice(ids, size=n_without, replace=False).tolist())]
    assigned: dict[int, list[Any]] = {i: [] for i in scored}
    if metric_rows is None:
        for sample_id in scored:
            for m in rng.choice(len(METRICS), size=int(rng.integers(1, 4)), replace=False):
                assigned[sample_id].append(METRICS[int(m)])
        # Make sure every metric appears at least once, whatever the seed.
        for k, metric in enumerate(METRICS):
            holder = scored[k % len(scored)]
            if metric not in assigned[holder]:
                assigned[holder].append(metric)
    else:
        by_name = {m.metric_en: m for m in METRICS}
        for name, count in metric_rows.items():
            for sample_id in rng.choice(scored, size=count, replace=False):
                assigned[int(sample_id)].append(by_name[name])
    id2metric = {str(i): [[m.metric_en, m.metric_zh] for m in metrics] for i, metrics in assigned.items() if metrics}
    return {TEST_DATA: samples, PROFILES: profiles, ID2METRIC: id2metric}


def write_synthetic_data(directory: Path, n_samples: int = 120, **kwargs: Any) -> Path:
    """Write the synthetic documents into ``directory`` (see ``synthetic_documents``)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    for name, document in synthetic_documents(n_samples, **kwargs).items():
        (directory / name).write_text(json.dumps(document, ensure_ascii=False, indent=4), encoding="utf-8")
    return directory


def to_bf16(values: np.ndarray) -> np.ndarray:
    """Round float values to the nearest bfloat16 (ties to even), returned as float64."""
    bits = np.asarray(values, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return rounded.astype(np.uint32).view(np.float32).astype(np.float64)


def write_synthetic_run(
    run_dir: Path,
    data: OfficialData,
    *,
    seed: int = 0,
    shift: float = 0.0,
    model: str = "synthetic",
    backend: str = "offline",
    rm_label: str = "tiny-random",
    failed_ids: Collection[int] = (),
    unscored: int = 0,
) -> Path:
    """A complete run directory: generations (some failed, one empty reply, a few without the
    role prefix), S5 rows via the real transform, and scores on the bf16 grid
    (``float(bf16 sigmoid) * 4 + 1``, as the official scorer computes them). ``shift`` moves
    every sigmoid logit, so two runs with different shifts differ on the same rows; the last
    ``unscored`` rows get no score."""
    run_dir = Path(run_dir)
    rng = np.random.default_rng(seed)
    records = []
    for k, sample in enumerate(data.samples):
        if sample.id in failed_ids:
            records.append({"id": sample.id, "model_output": None, "status": "error",
                            "error": {"class": "APITimeoutError", "message": "synthetic timeout"}, "attempts": 3})
            continue
        reply = f"{sample.role}{COLON}{_utterance(rng, 5)}"
        if k % 17 == 5:
            reply = _utterance(rng, 5)  # no role prefix
        if k % 29 == 7:
            reply = "\n" + reply  # S5 keeps an empty first line
        records.append({"id": sample.id, "model_output": reply, "status": "ok", "error": None, "attempts": 1,
                        "finish_reason": "stop", "latency_s": 0.01, "model": model})
    run_dir.mkdir(parents=True, exist_ok=True)
    artifacts.write_jsonl_atomic(run_dir / runs.GENERATIONS, records)
    runs.update_manifest(run_dir, generation={"backend": backend, "model": model, "seed": seed})
    rows = transform_run(run_dir, data).rows
    # A sample's difficulty is the same in every run (seeded by its id), as for real models
    # answering the same prompt, so paired comparisons between runs have something to gain.
    sample_effect = {i: np.random.default_rng(i).normal(0, 0.6) for i in {r["id"] for r in rows}}
    metric_effect = {m.metric_en: 0.15 * (k % 5) - 0.3 for k, m in enumerate(METRICS)}
    scored = rows[: len(rows) - unscored] if unscored else rows
    logits = np.array([0.3 + shift + sample_effect[r["id"]] + metric_effect[r["metric_en"]] + rng.normal(0, 0.5)
                       for r in scored])
    sigmoid = to_bf16(1 / (1 + np.exp(-logits)))
    n_tokens = rng.integers(300, 4200, size=len(scored))
    scores = [
        {"id": r["id"], "metric_en": r["metric_en"], "score": float(s) * 4 + 1, "sigmoid": float(s),
         "n_tokens": int(min(t, 4096)), "truncated": bool(t > 4096), "mode": "faithful"}
        for r, s, t in zip(scored, sigmoid, n_tokens)
    ]
    artifacts.write_jsonl_atomic(run_dir / layout.SCORES, scores)
    runs.update_manifest(run_dir, scoring={"rm_label": rm_label, "mode": "faithful", "device": "cpu"})
    return run_dir


# --- chat samples for the generation tests and benchmarks -------------------------------------------

_CHAT_ROLES = ("甲乙", "丙")
_CHAT_PROFILES = {"甲乙": {"姓名": "甲乙", "性格": "沉稳"}, "丙": {"姓名": "丙", "身份": "掌柜"}}


def synthetic_chat_data(count: int) -> OfficialData:
    """``count`` samples whose contexts follow the official format and vary in length (so HF
    batches need padding); each has its own messages, hence its own request key."""
    samples = []
    for i in range(count):
        role, other = _CHAT_ROLES[i % 2], _CHAT_ROLES[(i + 1) % 2]
        lines = []
        for turn in range(1 + i % 4):
            lines.append(f"{other}：第{i}号样本的问题{turn}")
            lines.append(f"{role}：回答{turn}")
        lines.append(f"{other}：最后一句{i}")
        samples.append(Sample(1000 + i, role, "合成小说", "\n".join(lines)))
    id2metric = {str(s.id): (("Fluency", "对话流利度"),) for s in samples}
    return OfficialData(Path("synthetic"), samples, _CHAT_PROFILES, id2metric)
