"""Shared builders for the reward-model tests: a sentencepiece model trained here on synthetic
text, tiny random checkpoints, and a synthetic data directory in the official file formats.

Imported by the ``test_reward_*`` modules (pytest puts ``tests/`` on ``sys.path``). Expensive
artifacts are built once per session and reused.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from charactereval_lib.charactereval.reward.tiny import make_tiny, synthetic_lines, train_sentencepiece, write_tokenizer_files

HERE = Path(__file__).resolve().parent
GOLDEN_DIR = HERE / "golden" / "official-rm-tiny"

# The official code's outputs differ by one bf16 step between machines: oneDNN picks its bf16
# matmul kernels by instruction set (measured here on an AVX-512 machine: ONEDNN_MAX_CPU_ISA=AVX2
# reproduces golden-cpu-avx2.jsonl bit for bit, every AVX-512 level reproduces golden.jsonl).
# A set is asserted bitwise only on the capability it is known to match.
GOLDEN_SETS = {"AVX512": "golden.jsonl", "AVX2": "golden-cpu-avx2.jsonl"}
FALLBACK_SET = "golden.jsonl"


def kernel_capability() -> str:
    """The instruction set the bf16 kernels run on: torch's CPU capability, lowered to AVX2 when
    oneDNN is capped below AVX-512 (ONEDNN_MAX_CPU_ISA), since oneDNN's kernels decide the bits."""
    import torch

    capability = torch.backends.cpu.get_cpu_capability()
    cap = os.environ.get("ONEDNN_MAX_CPU_ISA", "").upper()
    if capability == "AVX512" and cap and not cap.startswith(("AVX512", "AVX10", "ALL", "DEFAULT")):
        return "AVX2" if cap.startswith("AVX2") else cap
    return capability


@dataclass(frozen=True)
class GoldenSet:
    """The official outputs a test compares with, and whether they are this machine's."""

    name: str
    capability: str
    exact: bool

    @property
    def cases(self) -> list[dict[str, Any]]:
        lines = (GOLDEN_DIR / self.name).read_text(encoding="utf-8").splitlines()
        return [json.loads(line) for line in lines]

    def describe(self) -> str:
        how = "bitwise" if self.exact else f"no set made on {self.capability}: within one bf16 step"
        return f"reward-model golden set {self.name} (CPU capability {self.capability}, {how})"


def golden_set(capability: str | None = None) -> GoldenSet:
    """The golden set made on the running machine's CPU capability; otherwise golden.jsonl, held
    to one bf16 step (the spread of the official code itself across machines)."""
    capability = capability or kernel_capability()
    name = GOLDEN_SETS.get(capability)
    return GoldenSet(name or FALLBACK_SET, capability, exact=name is not None)

_SESSION_DIR: Path | None = None


def session_dir() -> Path:
    """One temporary directory for the whole test session (removed at interpreter exit)."""
    global _SESSION_DIR
    if _SESSION_DIR is None:
        import atexit

        _SESSION_DIR = Path(tempfile.mkdtemp(prefix="charactereval-reward-tests-"))
        atexit.register(shutil.rmtree, _SESSION_DIR, True)
    return _SESSION_DIR


@lru_cache(maxsize=None)
def trained_tokenizer_dir() -> Path:
    """A tokenizer directory (model + Baichuan's AddedToken files) trained on synthetic text
    with the options the brief fixes: BPE, byte fallback, no dummy prefix, identity
    normalization, unk/bos/eos = 0/1/2, no pad."""
    out = session_dir() / "tokenizer"
    train_sentencepiece(synthetic_lines(3000, seed=1), out / "tokenizer.model", vocab_size=1200)
    write_tokenizer_files(out)
    return out


@lru_cache(maxsize=None)
def tiny_checkpoint(layers: int = 2, hidden: int = 32, heads: int = 4, seed: int = 0, max_len: int = 4096) -> Path:
    """A tiny random checkpoint in the official layout (3 shards + index)."""
    out = session_dir() / f"tiny-{layers}-{hidden}-{heads}-{seed}-{max_len}"
    return make_tiny(
        out,
        layers=layers,
        hidden=hidden,
        heads=heads,
        vocab_size=1200,
        model_max_length=max_len,
        seed=seed,
        tokenizer_lines=synthetic_lines(3000, seed=1),
    )


SYNTH_PROFILES: dict[str, dict[str, Any]] = {
    "甲乙": {"姓名": "甲乙", "性格": "it's \"quoted\"", "经历": ["一", {"嵌套": "值"}]},
    "丙": {"姓名": "丙", "身份": "掌柜", "口头禅": "</s>不是结束"},
}


def synthetic_samples(n: int) -> list[dict[str, Any]]:
    """n samples alternating the two roles, contexts of a few lines with full-width colons."""
    lines = synthetic_lines(4 * n, seed=5)
    samples = []
    for i in range(n):
        role = "甲乙" if i % 2 == 0 else "丙"
        other = "丙" if role == "甲乙" else "甲乙"
        context = "\n".join(
            f"{speaker}\uff1a{lines[4 * i + k]}" for k, speaker in enumerate([other, role, other][: 1 + i % 3])
        )
        samples.append({"id": 100 + i, "role": role, "novel_name": "书", "context": context})
    return samples


METRIC_CYCLE = [
    ["Fluency", "对话流利度"],
    ["Empathy", "共情度"],
    ["Accuracy", "知识准确率"],
    ["Humanlikeness", "类人程度"],
]


def write_data_dir(path: Path, n_samples: int) -> Path:
    """A synthetic data directory in the official formats (whole JSON documents); sample i
    gets 1 + i % 3 metrics, and the last sample none."""
    samples = synthetic_samples(n_samples)
    id2metric = {str(s["id"]): METRIC_CYCLE[: 1 + i % 3] for i, s in enumerate(samples[:-1])}
    path.mkdir(parents=True, exist_ok=True)
    (path / "test_data.jsonl").write_text(json.dumps(samples, ensure_ascii=False, indent=4), encoding="utf-8")
    (path / "character_profiles.json").write_text(json.dumps(SYNTH_PROFILES, ensure_ascii=False, indent=4), encoding="utf-8")
    (path / "id2metric.jsonl").write_text(json.dumps(id2metric, ensure_ascii=False, indent=4), encoding="utf-8")
    return path


def released_generations(tmp_path: Path, samples: int = 6) -> tuple[Any, dict[str, Path]]:
    """(data, files): a synthetic data directory and, for each of the five released models, a
    ``generation_trans_<key>.jsonl`` in the official transformed format with invented replies."""
    from charactereval_lib.charactereval.data import load_official_data
    from charactereval_lib.charactereval.reproduce import RELEASED_MODELS, released_file

    data = write_data_dir(tmp_path / "data", samples)
    records = json.loads((data / "test_data.jsonl").read_text(encoding="utf-8"))
    id2metric = json.loads((data / "id2metric.jsonl").read_text(encoding="utf-8"))
    files = {}
    for i, key in enumerate(RELEASED_MODELS):
        rows = [{**s, "model_output": f"{s['role']}：第{i}个回答{s['id']}", "metric_en": en, "metric_zh": zh}
                for s in records for en, zh in id2metric.get(str(s["id"]), [])]
        files[key] = tmp_path / released_file(key)
        files[key].write_text(json.dumps(rows, ensure_ascii=False, indent=4), encoding="utf-8")
    return load_official_data(data, verify=False), files


def write_rows(run_dir: Path, data_dir: Path, reply: str = "：嗯，好的。") -> list[dict[str, Any]]:
    """``rows.jsonl`` for every (sample, metric) of a synthetic data directory."""
    samples = json.loads((data_dir / "test_data.jsonl").read_text(encoding="utf-8"))
    id2metric = json.loads((data_dir / "id2metric.jsonl").read_text(encoding="utf-8"))
    rows = []
    for s in samples:
        for en, zh in id2metric.get(str(s["id"]), []):
            rows.append(
                {
                    "id": s["id"],
                    "role": s["role"],
                    "novel_name": s["novel_name"],
                    "metric_en": en,
                    "metric_zh": zh,
                    "model_output": s["role"] + reply + str(s["id"]),
                }
            )
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "rows.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return rows
