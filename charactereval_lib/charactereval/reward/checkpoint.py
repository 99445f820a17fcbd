"""The reward model's config and weights from a Hugging Face checkpoint directory.

Accepted layouts: sharded ``pytorch_model-*.bin`` with ``pytorch_model.bin.index.json`` (the
official one), a single ``pytorch_model.bin``, and the safetensors equivalents. Tensors are read
without executing pickled code (``torch.load(weights_only=True, mmap=True)`` or safetensors)
and go one at a time straight to bf16 on the target device into a model built on the meta
device: no float32 copy of the model and no second copy in RAM. On CPU a bf16 tensor keeps
using the memory-mapped file pages (zero copy). Every expected key and shape is checked, and a
missing, unexpected, mis-shaped or unreadable tensor is a one-line ``CheckpointError`` naming it.
``check_weights`` runs the same checks on the files' headers alone (safetensors headers, ``.bin``
pickles loaded onto the meta device), so ``rm check`` finds a bad tensor without reading weights.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import mmap
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from charactereval_lib.charactereval.reward.errors import CheckpointError
from charactereval_lib.charactereval.reward.model import DTYPE, BaichuanCharRM, RMConfig

CONFIG = "config.json"
BIN_INDEX = "pytorch_model.bin.index.json"
BIN_SINGLE = "pytorch_model.bin"
ST_INDEX = "model.safetensors.index.json"
ST_SINGLE = "model.safetensors"
TOKENIZER_FILES = ("tokenizer.model", "tokenizer_config.json", "special_tokens_map.json")


# --- config ---------------------------------------------------------------------------------


def load_config(model_dir: str | Path) -> RMConfig:
    """``config.json`` -> RMConfig, refusing what this implementation does not compute."""
    path = Path(model_dir) / CONFIG
    if not path.exists():
        raise CheckpointError(f"{path}: missing (not a reward-model checkpoint directory?)")
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{path}: malformed JSON at line {exc.lineno} column {exc.colno}") from None
    fields = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")
    for name in fields:
        if not isinstance(raw.get(name), int) or raw[name] <= 0:
            raise CheckpointError(f"{path}: {name} must be a positive integer, got {raw.get(name)!r}")
    if raw.get("hidden_act", "silu") != "silu":
        raise CheckpointError(f"{path}: hidden_act {raw['hidden_act']!r} is not supported (BaichuanCharRM uses silu)")
    if raw["hidden_size"] % raw["num_attention_heads"]:
        raise CheckpointError(f"{path}: hidden_size {raw['hidden_size']} is not a multiple of num_attention_heads")
    archs = raw.get("architectures") or ["BaichuanCharRM"]
    if "BaichuanCharRM" not in archs:
        raise CheckpointError(f"{path}: architectures {archs} do not include BaichuanCharRM")
    return RMConfig(
        **{name: raw[name] for name in fields},
        model_max_length=int(raw.get("model_max_length", 4096)),
        rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
    )


def expected_shapes(config: RMConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor of a BaichuanCharRM state dict and its shape (no lm_head)."""
    h, i = config.hidden_size, config.intermediate_size
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (config.vocab_size, h)}
    for n in range(config.num_hidden_layers):
        p = f"model.layers.{n}."
        shapes[p + "self_attn.W_pack.weight"] = (3 * h, h)
        shapes[p + "self_attn.o_proj.weight"] = (h, h)
        shapes[p + "mlp.gate_proj.weight"] = (i, h)
        shapes[p + "mlp.up_proj.weight"] = (i, h)
        shapes[p + "mlp.down_proj.weight"] = (h, i)
        shapes[p + "input_layernorm.weight"] = (h,)
        shapes[p + "post_attention_layernorm.weight"] = (h,)
    shapes["model.norm.weight"] = (h,)
    shapes["score.weight"] = (1, h)
    shapes["score.bias"] = (1,)
    return shapes


# --- layout ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    """Which weight files make up the checkpoint and, when indexed, which keys each holds."""

    kind: str  # "bin" or "safetensors"
    index: Path | None
    files: tuple[str, ...]
    # key -> file name, from the index; None for a single unindexed file.
    weight_map: dict[str, str] | None


def find_layout(model_dir: str | Path) -> Layout:
    """Safetensors first (as transformers prefers it), then the official sharded ``.bin``."""
    model_dir = Path(model_dir)
    for kind, index_name, single in (("safetensors", ST_INDEX, ST_SINGLE), ("bin", BIN_INDEX, BIN_SINGLE)):
        index = model_dir / index_name
        if index.exists():
            weight_map = _read_index(index)
            # Shard names sort in shard order; read them in that order.
            files = tuple(sorted(set(weight_map.values())))
            return Layout(kind, index, files, weight_map)
        if (model_dir / single).exists():
            return Layout(kind, None, (single,), None)
    raise CheckpointError(
        f"{model_dir}: no weights ({BIN_INDEX}, {BIN_SINGLE}, {ST_INDEX} or {ST_SINGLE})"
    )


def _read_index(path: Path) -> dict[str, str]:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise CheckpointError(f"{path}: malformed JSON at line {exc.lineno} column {exc.colno}") from None
    weight_map = raw.get("weight_map") if isinstance(raw, dict) else None
    if not isinstance(weight_map, dict) or not all(isinstance(v, str) for v in weight_map.values()):
        raise CheckpointError(f"{path}: no weight_map object of key -> file name")
    return weight_map


def check_index(layout: Layout, expected: dict[str, tuple[int, ...]], model_dir: Path) -> None:
    """Before reading any tensor: the index must list exactly the expected keys, and every
    file it names must exist."""
    if layout.weight_map is None:
        return
    index_name = layout.index.name if layout.index else "index"
    missing = [k for k in expected if k not in layout.weight_map]
    unexpected = [k for k in layout.weight_map if k not in expected]
    problems = [f"{k}: missing from the checkpoint (not in {index_name})" for k in missing]
    problems += [f"{k}: unexpected tensor in {layout.weight_map[k]} (listed in {index_name})" for k in unexpected]
    for name in layout.files:
        if not (model_dir / name).exists():
            count = sum(1 for f in layout.weight_map.values() if f == name)
            problems.append(f"{name}: missing file ({index_name} puts {count} tensor(s) there)")
    _raise_first(problems)


def _raise_first(problems: list[str]) -> None:
    if problems:
        more = f" (and {len(problems) - 1} more problem(s))" if len(problems) > 1 else ""
        raise CheckpointError(problems[0] + more)


# --- reading tensors ------------------------------------------------------------------------


def _open_bin(path: Path, map_location: str = "cpu") -> tuple[dict[str, torch.Tensor], bool]:
    """The state dict of one ``.bin`` file and whether its tensors are views of a private
    memory map of the file (``mmap=True``; legacy non-zip files are read into memory). With
    ``map_location="meta"`` the tensors carry shapes and dtypes but no data is read."""
    try:
        try:
            obj, mapped = torch.load(path, map_location=map_location, weights_only=True, mmap=True), True
        except RuntimeError as exc:
            if "mmap" not in str(exc) and "zip" not in str(exc).lower():
                raise
            obj, mapped = torch.load(path, map_location=map_location, weights_only=True), False
    except Exception as exc:
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise CheckpointError(f"{path.name}: unreadable weights file ({detail[:200]})") from None
    if not isinstance(obj, dict) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise CheckpointError(f"{path.name}: not a state dict of tensors")
    return obj, mapped


def _iter_file(path: Path, kind: str) -> Iterator[tuple[str, torch.Tensor, bool]]:
    """(key, tensor, mapped) for one weight file; ``mapped`` marks views of a private file
    mapping, whose pages can be dropped once copied elsewhere."""
    if kind == "bin":
        state, mapped = _open_bin(path)
        while state:
            # Pop as we go so each source tensor can be released as soon as it is copied.
            key = next(iter(state))
            yield key, state.pop(key), mapped
        return
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="pt", device="cpu") as f:
            for key in f.keys():
                yield key, f.get_tensor(key), False
    except SafetensorError as exc:
        raise CheckpointError(f"{path.name}: unreadable safetensors file ({str(exc)[:200]})") from None


class _TensorChecks:
    """The checks every tensor of a checkpoint passes, on a loaded tensor or on a file header:
    one place, so that ``rm check`` and loading refuse the same things with the same words."""

    def __init__(self, layout: Layout, expected: dict[str, tuple[int, ...]]) -> None:
        self.layout = layout
        self.expected = expected
        self.seen: set[str] = set()

    def tensor(self, name: str, key: str, shape: tuple[int, ...], dtype: object, is_float: bool) -> None:
        where = f"in {name}"
        weight_map = self.layout.weight_map
        if key not in self.expected:
            raise CheckpointError(f"{key}: unexpected tensor {where}")
        if weight_map is not None and weight_map.get(key) != name:
            raise CheckpointError(f"{key}: unexpected tensor {where} (the index puts it in {weight_map[key]})")
        if key in self.seen:
            raise CheckpointError(f"{key}: duplicate tensor {where}")
        if shape != self.expected[key]:
            raise CheckpointError(f"{key}: shape {shape} expected {self.expected[key]} {where}")
        if not is_float:
            raise CheckpointError(f"{key}: dtype {dtype} {where}, expected floating point")
        self.seen.add(key)

    def file_done(self, name: str) -> None:
        if self.layout.weight_map is not None:
            absent = [k for k, f in self.layout.weight_map.items() if f == name and k not in self.seen]
            _raise_first([f"{k}: missing from {name} (the index puts it there)" for k in absent])

    def all_done(self) -> None:
        missing = [k for k in self.expected if k not in self.seen]
        _raise_first([f"{k}: missing from the checkpoint ({', '.join(self.layout.files)})" for k in missing])


def iter_checkpoint(
    model_dir: str | Path, expected: dict[str, tuple[int, ...]]
) -> Iterator[tuple[str, str, torch.Tensor, bool]]:
    """(file, key, tensor, mapped) for every tensor, file by file, each checked against the index and
    the expected shapes; after the last one, checks that nothing expected was missing."""
    model_dir = Path(model_dir)
    layout = find_layout(model_dir)
    check_index(layout, expected, model_dir)
    checks = _TensorChecks(layout, expected)
    for name in layout.files:
        for key, tensor, mapped in _iter_file(model_dir / name, layout.kind):
            checks.tensor(name, key, tuple(tensor.shape), tensor.dtype, tensor.is_floating_point())
            yield name, key, tensor, mapped
        checks.file_done(name)
    checks.all_done()


def _safetensors_header(path: Path) -> dict[str, Any]:
    """The JSON header of a safetensors file (8-byte little-endian length, then the JSON), with
    every tensor's data range checked against the file size so a truncated file is caught."""
    size = path.stat().st_size
    try:
        with open(path, "rb") as f:
            length = int.from_bytes(f.read(8), "little")
            if size < 8 or length > size - 8:
                raise ValueError(f"header of {length} bytes does not fit a {size}-byte file")
            header = json.loads(f.read(length))
    except (ValueError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{path.name}: unreadable safetensors file ({str(exc)[:200]})") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{path.name}: unreadable safetensors file (header is not an object)")
    data_size = size - 8 - length
    tensors = {}
    for key, info in header.items():
        if key == "__metadata__":
            continue
        try:
            shape, dtype, (begin, end) = tuple(info["shape"]), info["dtype"], info["data_offsets"]
        except (TypeError, KeyError, ValueError):
            raise CheckpointError(f"{path.name}: unreadable safetensors file (bad header entry for {key})") from None
        if not 0 <= begin <= end <= data_size:
            raise CheckpointError(f"{path.name}: truncated or corrupt ({key} lies outside the file's data)")
        tensors[key] = {"shape": shape, "dtype": dtype}
    return tensors


# Safetensors header dtype names -> torch dtypes, so header errors read like loading errors.
_SAFETENSORS_DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
    "BOOL": torch.bool,
}


def _iter_headers(path: Path, kind: str) -> Iterator[tuple[str, tuple[int, ...], object, bool]]:
    """(key, shape, dtype, is floating point) of every tensor in one weight file, weights unread."""
    if kind == "bin":
        state, _ = _open_bin(path, map_location="meta")
        for key, tensor in state.items():
            yield key, tuple(tensor.shape), tensor.dtype, tensor.is_floating_point()
        return
    for key, info in _safetensors_header(path).items():
        dtype = _SAFETENSORS_DTYPES.get(info["dtype"])
        if dtype is None:
            # A name not in the table: safetensors spells float types F*/BF*, the rest I*, U*, BOOL.
            yield key, info["shape"], info["dtype"], info["dtype"].startswith(("F", "BF"))
        else:
            yield key, info["shape"], dtype, dtype.is_floating_point


def check_weights(model_dir: str | Path, expected: dict[str, tuple[int, ...]]) -> None:
    """Every check of loading (index, keys, files, shapes, dtypes) from the weight index and the
    tensor headers, without reading the weights; raises CheckpointError for the first problem."""
    model_dir = Path(model_dir)
    layout = find_layout(model_dir)
    check_index(layout, expected, model_dir)
    checks = _TensorChecks(layout, expected)
    for name in layout.files:
        for key, shape, dtype, is_float in _iter_headers(model_dir / name, layout.kind):
            checks.tensor(name, key, shape, dtype, is_float)
        checks.file_done(name)
    checks.all_done()


def _release_pages(tensor: torch.Tensor) -> None:
    """Drop the pages of a source tensor that has been copied elsewhere from this process's
    resident set. Only for views of a private file mapping that is only read (torch.load with
    mmap=True): such pages are unmodified, so dropping them loses nothing (the kernel would
    re-read them from the file). Only pages wholly inside the tensor are dropped. Keeps the
    resident set near one copy of the weights while they move to a GPU or change dtype.
    Best effort: nothing happens where madvise is unavailable."""
    if not hasattr(mmap, "MADV_DONTNEED"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return
    page = mmap.PAGESIZE
    begin = tensor.data_ptr()
    start = -(-begin // page) * page
    end = (begin + tensor.numel() * tensor.element_size()) // page * page
    if end > start:
        libc.madvise(ctypes.c_void_p(start), ctypes.c_size_t(end - start), mmap.MADV_DONTNEED)


def _set_parameter(model: nn.Module, key: str, tensor: torch.Tensor) -> None:
    module_name, _, attr = key.rpartition(".")
    module = model.get_submodule(module_name)
    setattr(module, attr, nn.Parameter(tensor, requires_grad=False))


def load_model(model_dir: str | Path, device: str | torch.device = "cpu") -> BaichuanCharRM:
    """The reward model with its weights, in bf16 on ``device``, ready for eval."""
    model_dir = Path(model_dir)
    config = load_config(model_dir)
    device = torch.device(device)
    with torch.device("meta"):
        model = BaichuanCharRM(config)
    for _name, key, tensor, mapped in iter_checkpoint(model_dir, expected_shapes(config)):
        # Same rounding as from_pretrained(torch_dtype=bfloat16) for a non-bf16 file; a bf16
        # tensor bound for the CPU is used in place (still backed by the mapped file).
        moved = tensor.to(device=device, dtype=DTYPE)
        if mapped and moved.data_ptr() != tensor.data_ptr():
            _release_pages(tensor)
        _set_parameter(model, key, moved)
    return model.eval()


# --- writing (tiny checkpoints, tests, conversions) -----------------------------------------


def _split_evenly(sizes: list[int], n: int) -> list[int]:
    """Shard index of each tensor (in order) for exactly ``n`` non-empty shards of about equal
    bytes."""
    if not 1 <= n <= len(sizes):
        raise ValueError(f"cannot split {len(sizes)} tensors into {n} shards")
    total = sum(sizes)
    out, shard, done = [], 0, 0
    for i, size in enumerate(sizes):
        left = len(sizes) - i
        # Move on when this shard reached its share, or when the remaining tensors are just
        # enough to give every remaining shard one; never leave a shard empty.
        if out and out[-1] == shard and shard < n - 1 and (done >= total * (shard + 1) / n or left == n - 1 - shard):
            shard += 1
        out.append(shard)
        done += size
    return out


def save_checkpoint(
    state: dict[str, torch.Tensor],
    out_dir: str | Path,
    *,
    kind: str = "bin",
    max_shard_bytes: int | None = None,
    shards: int | None = None,
) -> list[Path]:
    """Write a state dict in the Hugging Face layout: one file, shards of at most
    ``max_shard_bytes`` (a larger tensor gets a shard of its own), or exactly ``shards``
    shards; with an index whenever there is more than one file."""
    if kind not in ("bin", "safetensors"):
        raise ValueError(f"kind must be 'bin' or 'safetensors', got {kind!r}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    sizes = [t.numel() * t.element_size() for t in state.values()]
    if shards is not None:
        assignment = _split_evenly(sizes, shards)
    else:
        assignment, size, current = [], 0, 0
        for nbytes in sizes:
            if max_shard_bytes is not None and assignment and size + nbytes > max_shard_bytes:
                current, size = current + 1, 0
            assignment.append(current)
            size += nbytes
    shards_out: list[dict[str, torch.Tensor]] = [{} for _ in range(max(assignment, default=0) + 1)]
    for (key, tensor), index in zip(state.items(), assignment):
        shards_out[index][key] = tensor.detach().contiguous()
    n = len(shards_out)
    stem, ext = ("pytorch_model", "bin") if kind == "bin" else ("model", "safetensors")
    if n == 1:
        names = [f"{stem}.{ext}"]
    else:
        names = [f"{stem}-{i + 1:05d}-of-{n:05d}.{ext}" for i in range(n)]
    paths = []
    for name, shard in zip(names, shards_out):
        path = out_dir / name
        if kind == "bin":
            torch.save(shard, path)
        else:
            from safetensors.torch import save_file

            save_file(shard, str(path), metadata={"format": "pt"})
        paths.append(path)
    if n > 1:
        total = sum(t.numel() * t.element_size() for t in state.values())
        index = {
            "metadata": {"total_size": total},
            "weight_map": {k: name for name, shard in zip(names, shards_out) for k in sorted(shard)},
        }
        index_path = out_dir / (BIN_INDEX if kind == "bin" else ST_INDEX)
        index_path.write_text(json.dumps(index, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        paths.append(index_path)
    return paths


# --- identity -------------------------------------------------------------------------------


def _digest_cache_path() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "charactereval" / "file-sha256.json"


def file_sha256(path: Path, *, cache: dict[str, Any] | None = None) -> str:
    """SHA-256 of a file, remembered by (real path, size, mtime) so a 26 GB checkpoint is
    hashed once per machine rather than once per scoring run."""
    stat = path.stat()
    key = f"{path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}"
    if cache is not None and key in cache:
        return cache[key]
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 24):
            h.update(chunk)
    digest = h.hexdigest()
    if cache is not None:
        cache[key] = digest
    return digest


def checkpoint_identity(model_dir: str | Path) -> dict[str, Any]:
    """What makes two checkpoints score alike: the config, tokenizer files and weight files,
    by content. ``sha256`` is a digest over those files' names and SHA-256 digests. A directory
    that claims to be the official checkpoint must carry its pinned side files
    (``reward.pins``; CheckpointError naming the first that differs)."""
    from charactereval_lib.charactereval.reward import pins

    model_dir = Path(model_dir)
    layout = find_layout(model_dir)
    names = [CONFIG, *TOKENIZER_FILES]
    if layout.index is not None:
        names.append(layout.index.name)
    names += list(layout.files)
    cache_path = _digest_cache_path()
    try:
        cache = json.loads(cache_path.read_text(encoding="utf-8"))
        if not isinstance(cache, dict):
            cache = {}
    except (OSError, json.JSONDecodeError):
        cache = {}
    before = len(cache)
    files = {}
    for name in names:
        path = model_dir / name
        if path.exists():
            files[name] = file_sha256(path, cache=cache)
    if len(cache) != before:
        try:
            cache_path.parent.mkdir(parents=True, exist_ok=True)
            tmp = cache_path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(cache, indent=0, sort_keys=True), encoding="utf-8")
            os.replace(tmp, cache_path)
        except OSError:
            pass  # a read-only home only costs re-hashing next time
    pins.verify(model_dir, files)
    canonical = json.dumps(files, sort_keys=True, separators=(",", ":"))
    return {
        "sha256": hashlib.sha256(canonical.encode("utf-8")).hexdigest(),
        "format": layout.kind + ("-sharded" if layout.weight_map is not None else ""),
        "files": files,
    }
