"""``charactereval rm make-tiny DIR``: a small, randomly initialised reward model in the official
checkpoint layout, for demos, tests and benchmarks. Its scores are MEANINGLESS.

The directory holds what the real one holds: ``config.json``, sharded ``pytorch_model-*.bin``
with ``pytorch_model.bin.index.json``, ``tokenizer.model`` (a sentencepiece BPE model trained
here, with the options of Baichuan's: byte fallback, no dummy prefix, identity normalization,
whitespace kept, unk/bos/eos = 0/1/2), ``tokenizer_config.json`` and ``special_tokens_map.json``
with Baichuan's AddedToken flags, plus a README saying what it is. The tokenizer is trained on
synthetic text, or on the official data's text when a data directory is given (the model file
then stays in DIR; nothing of the data goes anywhere else).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import torch

from charactereval_lib.charactereval.protocol import METRICS, RM_CONTEXT, RM_DIMENSION, RM_RESPONSE, RM_ROLEINFO
from charactereval_lib.charactereval.reward.checkpoint import CONFIG, expected_shapes, save_checkpoint
from charactereval_lib.charactereval.reward.errors import CheckpointError
from charactereval_lib.charactereval.reward.model import DTYPE, RMConfig

TINY_LABEL = "TINY RANDOM CHECKPOINT: its scores are meaningless (demos and tests only)"
LABEL_KEY = "charactereval_label"

# AddedToken flags of Baichuan2's special tokens, as its tokenizer files record them.
_ADDED_TOKEN = {"lstrip": False, "normalized": True, "rstrip": False, "single_word": True}

# A fixed pool of CJK characters so BPE finds recurring pairs to merge.
_CJK_POOL = [chr(0x4E00 + i * 7) for i in range(700)]
_PUNCT = "，。！？：；、“”（）《》…—"
_ASCII_WORDS = ["ok", "hello", "it's", "AI", "2024", "x", "role", "yes", "no", "the"]


def synthetic_lines(n_lines: int, seed: int = 0) -> list[str]:
    """Random CJK/ASCII/punctuation lines with the RM template's markers and the 12 metric
    names mixed in: enough variety for a small BPE vocabulary, no real text."""
    rng = random.Random(seed)
    markers = [RM_ROLEINFO.strip(), RM_CONTEXT.strip(), RM_RESPONSE.strip(), RM_DIMENSION.strip()]
    words = [rng.choice(_CJK_POOL) + rng.choice(_CJK_POOL) for _ in range(300)]
    lines = []
    for _ in range(n_lines):
        parts = []
        for _ in range(rng.randint(3, 40)):
            r = rng.random()
            if r < 0.55:
                parts.append(rng.choice(words))
            elif r < 0.7:
                parts.append(rng.choice(_CJK_POOL))
            elif r < 0.82:
                parts.append(rng.choice(_PUNCT))
            elif r < 0.9:
                parts.append(" " + rng.choice(_ASCII_WORDS) + " ")
            elif r < 0.95:
                parts.append(rng.choice(markers))
            else:
                parts.append(rng.choice(METRICS).metric_zh)
        lines.append("".join(parts))
    return lines


def data_lines(data_dir: str | Path) -> list[str]:
    """Training text from the official data (contexts line by line, profile reprs, metric
    names), read through the normal loader."""
    from charactereval_lib.charactereval.data import load_official_data
    from charactereval_lib.charactereval.prompts import profile_text

    data = load_official_data(data_dir)
    lines = [line for s in data.samples for line in s.context.split("\n") if line]
    lines += [profile_text(p) for p in data.profiles.values()]
    lines += [m.metric_zh for m in METRICS]
    return lines


def train_sentencepiece(lines: Iterable[str], out_path: str | Path, vocab_size: int, *, seed_sentences: int = 200_000) -> Path:
    """Train a BPE model with Baichuan's options and write it to ``out_path``. The vocabulary
    may come out smaller than asked when the text is small (hard_vocab_limit off)."""
    out_path = Path(out_path)
    model = _trained_model(lines, vocab_size, seed_sentences, out_path)
    # Created only once training worked: a failed one leaves no empty directory behind.
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_bytes(model)
    return out_path


def _trained_model(lines: Iterable[str], vocab_size: int, seed_sentences: int, shown_as: Path) -> bytes:
    """The trained model file's bytes; a failed training is a CheckpointError naming ``shown_as``,
    where the model was to be written."""
    import sentencepiece as spm

    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus.txt"
        with open(corpus, "w", encoding="utf-8") as f:
            for line in lines:
                f.write(line.replace("\n", " ") + "\n")
        prefix = Path(tmp) / "sp"
        try:
            _train(spm, corpus, prefix, vocab_size, seed_sentences)
        except RuntimeError as exc:
            detail = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
            raise CheckpointError(f"{shown_as}: sentencepiece training failed ({detail[:300]})") from None
        return (Path(tmp) / "sp.model").read_bytes()


def _train(spm, corpus: Path, prefix: Path, vocab_size: int, seed_sentences: int) -> None:
    """The trainer call with Baichuan's options (fixed here, not by the caller)."""
    spm.SentencePieceTrainer.train(
        input=str(corpus),
        model_prefix=str(prefix),
        model_type="bpe",
        vocab_size=vocab_size,
        byte_fallback=True,
        add_dummy_prefix=False,
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        split_digits=True,
        character_coverage=0.9995,
        hard_vocab_limit=False,
        max_sentence_length=1 << 16,
        input_sentence_size=seed_sentences,
        shuffle_input_sentence=True,
        unk_id=0,
        bos_id=1,
        eos_id=2,
        pad_id=-1,
        num_threads=2,
        minloglevel=2,
    )


def write_tokenizer_files(out_dir: Path, model_max_length: int = 4096) -> None:
    """``tokenizer_config.json`` and ``special_tokens_map.json`` shaped like Baichuan2's."""
    special = {
        "bos_token": {"content": "<s>", **_ADDED_TOKEN},
        "eos_token": {"content": "</s>", **_ADDED_TOKEN},
        "unk_token": {"content": "<unk>", **_ADDED_TOKEN},
        "pad_token": "</s>",
    }
    config: dict[str, Any] = {
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": model_max_length,
        "sp_model_kwargs": {},
        "tokenizer_class": "BaichuanTokenizer",
        "pad_token": None,
    }
    for key in ("bos_token", "eos_token", "unk_token"):
        config[key] = {**special[key], "__type": "AddedToken"}
    (out_dir / "special_tokens_map.json").write_text(json.dumps(special, indent=2) + "\n", encoding="utf-8")
    (out_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")


def random_state(config: RMConfig, *, seed: int = 0, std: float = 0.2) -> dict[str, torch.Tensor]:
    """Every parameter drawn from N(0, std) in float32 and rounded to bf16 (like the official
    golden checkpoint); large enough that scores spread over many bf16 steps."""
    gen = torch.Generator().manual_seed(seed)
    return {
        key: (torch.randn(shape, generator=gen) * std).to(DTYPE)
        for key, shape in expected_shapes(config).items()
    }


def config_json(config: RMConfig) -> dict[str, Any]:
    return {
        "architectures": ["BaichuanCharRM"],
        LABEL_KEY: TINY_LABEL,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "hidden_act": "silu",
        "hidden_size": config.hidden_size,
        "intermediate_size": config.intermediate_size,
        "model_max_length": config.model_max_length,
        "model_type": "baichuan",
        "num_attention_heads": config.num_attention_heads,
        "num_hidden_layers": config.num_hidden_layers,
        "pad_token_id": 0,
        "rms_norm_eps": config.rms_norm_eps,
        "tie_word_embeddings": False,
        "torch_dtype": "bfloat16",
        "vocab_size": config.vocab_size,
    }


def make_tiny(
    out_dir: str | Path,
    *,
    data_dir: str | Path | None = None,
    layers: int = 2,
    hidden: int = 64,
    heads: int = 8,
    intermediate: int | None = None,
    vocab_size: int = 2000,
    model_max_length: int = 4096,
    shards: int = 3,
    seed: int = 0,
    tokenizer_lines: list[str] | None = None,
) -> Path:
    """Write a tiny random checkpoint to ``out_dir`` and return it."""
    sizes = {"layers": layers, "hidden": hidden, "heads": heads, "vocab": vocab_size, "shards": shards}
    for name, value in sizes.items():
        if value < 1:
            raise CheckpointError(f"--{name} must be at least 1, got {value}")
    if hidden % heads:
        raise CheckpointError(f"--hidden {hidden} must be a multiple of --heads {heads}")
    out_dir = Path(out_dir)
    if tokenizer_lines is not None:
        lines = tokenizer_lines
    elif data_dir is not None:
        lines = data_lines(data_dir)
    else:
        lines = synthetic_lines(4000, seed)
    # Trained before anything is created: the step that fails on bad options leaves no trace.
    tokenizer = _trained_model(lines, vocab_size, 200_000, out_dir / "tokenizer.model")
    # The checkpoint is built beside DIR and moved in file by file once complete, so that an
    # error half-way leaves DIR as it was (or absent, with any parents this call made).
    made = next((p for p in reversed([out_dir, *out_dir.parents]) if not p.exists()), None)
    source = "the official data's text" if data_dir is not None and tokenizer_lines is None else "synthetic text"
    try:
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.partial-", dir=out_dir.parent))
        try:
            _write_tiny(staging, tokenizer, layers=layers, hidden=hidden, heads=heads, intermediate=intermediate,
                        model_max_length=model_max_length, shards=shards, seed=seed, source=source)
            out_dir.mkdir(exist_ok=True)
            for path in staging.iterdir():
                os.replace(path, out_dir / path.name)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    except BaseException:
        if made is not None:
            shutil.rmtree(made, ignore_errors=True)
        raise
    return out_dir


def _write_tiny(out_dir: Path, tokenizer: bytes, *, layers: int, hidden: int, heads: int, intermediate: int | None,
                model_max_length: int, shards: int, seed: int, source: str) -> None:
    import sentencepiece as spm

    sp_path = out_dir / "tokenizer.model"
    sp_path.write_bytes(tokenizer)
    actual_vocab = spm.SentencePieceProcessor(model_file=str(sp_path)).get_piece_size()
    config = RMConfig(
        vocab_size=actual_vocab,
        hidden_size=hidden,
        intermediate_size=intermediate or (hidden * 8 // 3 + 7) // 8 * 8,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        model_max_length=model_max_length,
    )
    state = random_state(config, seed=seed)
    save_checkpoint(state, out_dir, kind="bin", shards=shards)
    (out_dir / CONFIG).write_text(json.dumps(config_json(config), indent=2) + "\n", encoding="utf-8")
    write_tokenizer_files(out_dir, model_max_length)
    (out_dir / "README.md").write_text(
        f"# {TINY_LABEL}\n\n"
        f"Made by `charactereval rm make-tiny`: BaichuanCharRM layout, {layers} layers, hidden {hidden}, "
        f"{heads} heads, vocabulary {actual_vocab}, random weights (seed {seed}); tokenizer trained on "
        f"{source}. Use it to try the scoring pipeline end to end, never to report results.\n",
        encoding="utf-8",
    )


def tiny_label(model_dir: str | Path) -> str | None:
    """The meaningless-checkpoint label if ``model_dir`` carries one."""
    try:
        raw = json.loads((Path(model_dir) / CONFIG).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    label = raw.get(LABEL_KEY) if isinstance(raw, dict) else None
    return label if isinstance(label, str) else None
