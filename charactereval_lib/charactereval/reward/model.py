"""Protocol step S8: the BaichuanCharRM forward pass in plain PyTorch, eval mode.

One file, read top to bottom: config, ALiBi mask, RMSNorm, attention, MLP, decoder layer, the
model, then the two ways to run it.

- ``sigmoid_faithful``: batch 1, no padding, no cache, bf16, the same sequence of torch
  operations as the official eval path (see ``REWARD_MODEL.md``), so it is bitwise identical to
  the official scorer on the same device. Published numbers use it.
- ``sigmoids_fast``: right-padded, length-bucketed batches, plus optional reuse of the keys and
  values of a prefix shared by several rows (the metrics of one sample). Every real token keeps
  its absolute position and sees exactly the keys it sees in batch 1; only the shapes of the
  matrix products and softmax rows change, so results differ at most in rare roundings. It must
  be measured against the faithful mode (``scorer.verify``).

State-dict names follow the official checkpoint: ``model.embed_tokens``, ``model.layers.N.
self_attn.W_pack`` (q, k, v stacked), ``...o_proj``, ``...mlp.{gate,up,down}_proj``,
``...{input,post_attention}_layernorm``, ``model.norm``, ``score`` (Linear H -> 1 with bias).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

DTYPE = torch.bfloat16


@dataclass(frozen=True)
class RMConfig:
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    # The official mask buffer is built at this length; longer inputs rebuild it larger.
    model_max_length: int = 4096
    rms_norm_eps: float = 1e-6

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads


# --- ALiBi ----------------------------------------------------------------------------------


def alibi_slopes(n_heads: int) -> list[float]:
    """Per-head ALiBi slopes as Python floats, computed with the official formula (the exact
    float expression matters: the values are later rounded to float32).

    For a power of two n the slopes are ``start * start**k`` with ``start = 2**(-8/n)``; else
    the slopes of the largest power of two c < n, then every other slope of 2c, first n - c."""

    def power_of_two(n: int) -> list[float]:
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start**k for k in range(n)]

    if math.log2(n_heads).is_integer():
        return power_of_two(n_heads)
    c = 2 ** math.floor(math.log2(n_heads))
    return power_of_two(c) + alibi_slopes(2 * c)[0::2][: n_heads - c]


def build_alibi_mask(n_heads: int, length: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """The (heads, length, length) bf16 attention bias of the official eval path.

    Entry [h, i, j] = bf16(float32(slope_h) * j) for j <= i (the ABSOLUTE key index, computed in
    float32, rounded to bf16 where values near 3,500 have spacing 16) and -inf for j > i. An
    entry does not depend on the buffer size, so any [:L, :L] block equals the official slice
    of its 4096-long buffer. Built head by head so the float32 step never needs a full
    (heads, L, L) float32 tensor."""
    slopes = torch.tensor(alibi_slopes(n_heads), dtype=torch.float32, device=device)
    positions = torch.arange(length, device=device)
    # float32 slope times int64 position promotes to float32, as in the official code.
    bias = (slopes[:, None] * positions[None, :]).to(DTYPE)
    causal = torch.full((length, length), float("-inf"), dtype=DTYPE, device=device).triu(1)
    # bf16 x + 0 == x and x + -inf == -inf exactly: the sum is the official mask value by value.
    return bias[:, None, :] + causal[None, :, :]


class AlibiMaskCache:
    """The mask, built once and sliced per input like the official buffer; grown on demand."""

    def __init__(self, n_heads: int, initial_length: int) -> None:
        self.n_heads = n_heads
        self.initial_length = initial_length
        self._mask: torch.Tensor | None = None

    def get(self, length: int, device: torch.device) -> torch.Tensor:
        mask = self._mask
        if mask is None or mask.shape[-1] < length or mask.device != device:
            have = 0 if mask is None or mask.device != device else mask.shape[-1]
            # Start small (tests use short inputs), double when needed, never beyond need or
            # the official buffer size unless an input is longer than that.
            size = max(length, min(max(2 * have, 256), max(self.initial_length, length)))
            self._mask = mask = build_alibi_mask(self.n_heads, size, device)
        return mask

    def clear(self) -> None:
        self._mask = None


# --- layers ---------------------------------------------------------------------------------


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """Official cast order: variance in float32; x (bf16) times rsqrt (float32) is a float32
    product; that is cast to bf16 and only then multiplied by the bf16 weight."""
    variance = x.to(torch.float32).pow(2).mean(-1, keepdim=True)
    normed = x * torch.rsqrt(variance + eps)
    return weight * normed.to(weight.dtype)


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, self.eps)


def split_heads(t: torch.Tensor, n_heads: int) -> torch.Tensor:
    """(B, L, H) -> (B, heads, L, head_dim), a view (no copy), as the official code does."""
    b, length, hidden = t.shape
    return t.view(b, length, n_heads, hidden // n_heads).transpose(1, 2)


def attention_probs(q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Scores, bias, clamp and softmax exactly as the official eval path: a bf16 matmul, then a
    division by a Python float, a bf16 add of the mask, a max against the dtype's lowest value
    (which turns -inf into a finite number) and a bf16 softmax without a dtype argument."""
    scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(q.shape[-1])
    scores = scores + mask
    scores = torch.max(scores, torch.tensor(torch.finfo(scores.dtype).min))
    return torch.softmax(scores, dim=-1)


class Attention(nn.Module):
    def __init__(self, config: RMConfig) -> None:
        super().__init__()
        self.n_heads = config.num_attention_heads
        self.hidden_size = config.hidden_size
        self.W_pack = nn.Linear(config.hidden_size, 3 * config.hidden_size, bias=False)
        self.o_proj = nn.Linear(config.hidden_size, config.hidden_size, bias=False)

    def qkv(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """W_pack, split into q, k, v (in that order) along the last dim, each as head views."""
        q, k, v = self.W_pack(x).split(self.hidden_size, dim=-1)
        return split_heads(q, self.n_heads), split_heads(k, self.n_heads), split_heads(v, self.n_heads)

    def merge(self, out: torch.Tensor) -> torch.Tensor:
        """(B, heads, L, head_dim) -> o_proj((B, L, H))."""
        b, _, length, _ = out.shape
        return self.o_proj(out.transpose(1, 2).reshape(b, length, self.hidden_size))

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        q, k, v = self.qkv(x)
        return self.merge(torch.matmul(attention_probs(q, k, mask), v))


class MLP(nn.Module):
    def __init__(self, config: RMConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, config: RMConfig) -> None:
        super().__init__()
        self.self_attn = Attention(config)
        self.mlp = MLP(config)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), mask)
        return x + self.mlp(self.post_attention_layernorm(x))


class Backbone(nn.Module):
    def __init__(self, config: RMConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(config) for _ in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)


class BaichuanCharRM(nn.Module):
    """Backbone + ``score`` head. ``forward`` is the official ``BaichuanCharRM(input_ids)[1]``
    for one unpadded sequence: the bf16 sigmoid of the score head at the last position."""

    def __init__(self, config: RMConfig) -> None:
        super().__init__()
        self.config = config
        self.model = Backbone(config)
        self.score = nn.Linear(config.hidden_size, 1, bias=True)
        self.masks = AlibiMaskCache(config.num_attention_heads, config.model_max_length)

    def alibi(self, length: int) -> torch.Tensor:
        """Slice of the cached mask for inputs of ``length`` tokens (the official slice)."""
        return self.masks.get(length, self.score.weight.device)[:, :length, :length]

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        if input_ids.dim() != 2 or input_ids.shape[0] != 1:
            raise ValueError(f"faithful forward takes one unpadded sequence (1, L); got {tuple(input_ids.shape)}")
        x = self.model.embed_tokens(input_ids)
        mask = self.alibi(input_ids.shape[1])
        for layer in self.model.layers:
            x = layer(x, mask)
        x = self.model.norm(x)
        return torch.sigmoid(self.score(x[:, -1, :]).squeeze())


# --- numerics guard -------------------------------------------------------------------------


@contextlib.contextmanager
def strict_numerics(device: torch.device | str) -> Iterator[None]:
    """No autocast and no TF32 while scoring, restored afterwards. The model is bf16 end to end,
    so TF32 could only touch float32 matmuls; it is off anyway so nothing silently changes.
    (``allow_bf16_reduced_precision_reduction`` stays at torch's default, which is what the
    official run used.)"""
    device_type = torch.device(device).type
    saved = (
        torch.backends.cuda.matmul.allow_tf32,
        torch.backends.cudnn.allow_tf32,
        torch.get_float32_matmul_precision(),
    )
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    try:
        with torch.autocast(device_type=device_type, enabled=False), torch.inference_mode():
            yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved[:2]
        torch.set_float32_matmul_precision(saved[2])


def to_score(sigmoid: float) -> float:
    """The official score: the bf16 sigmoid as a Python float, times 4, plus 1 (unrounded)."""
    return sigmoid * 4 + 1


# --- faithful mode --------------------------------------------------------------------------


def check_ids(model: BaichuanCharRM, ids: Sequence[int]) -> None:
    if not ids:
        raise ValueError("empty input: an RM input always ends with the eos id")
    vocab = model.config.vocab_size
    bad = next((i for i in ids if not 0 <= i < vocab), None)
    if bad is not None:
        raise ValueError(f"token id {bad} is outside the model's vocabulary (size {vocab}); tokenizer and checkpoint do not match")


def sigmoid_faithful(model: BaichuanCharRM, ids: Sequence[int]) -> float:
    """S8 (faithful): one sequence, batch 1, no padding, the official arithmetic; returns the
    bf16 sigmoid as a Python float (``to_score`` turns it into the official score)."""
    check_ids(model, ids)
    device = model.score.weight.device
    with strict_numerics(device):
        input_ids = torch.tensor([list(ids)], dtype=torch.long, device=device)
        return model(input_ids).item()


# --- fast mode ------------------------------------------------------------------------------
#
# What may change and what may not. Right padding keeps every real token at its absolute
# position (the ALiBi bias uses absolute key positions; left padding would change how
# slope * j rounds in bf16), and under the causal mask no real token sees a pad, so no padding
# mask is needed. The linear layers then run on the padded batch at once. Attention, however,
# is computed per row at the row's OWN length: a bf16 softmax sums its row in an order that
# depends on the row length (vector chunks vs tail), so a row padded to the batch width can
# round differently; per row, the score, softmax and value products have exactly the faithful
# shapes. The final layer is only evaluated at each row's last position, where the score is
# read. Rows that share a token prefix (the metrics of one sample) can reuse the keys and values
# of that prefix from one full row of their group; their prefix was computed at the lead row's
# length. Optionally (on CPU by default) the scores and softmax skip the fully masked upper
# blocks: queries in blocks, each against keys up to its end rounded up to a multiple of
# CAUSAL_ALIGN, and the block holding the last partial chunk of rows against all keys; the
# value product still runs over all keys. A softmax row then differs from the faithful one only
# by exact zeros, all in whole vector chunks, which on the CPU kernels measured here gives
# identical sums; that is a property of the kernels, not a guarantee. Prefix reuse and causal
# blocks are why this mode must be verified on the device it runs on (``scorer.verify_run``).

# Multiple of every CPU/GPU reduction vector width in use (16/32 lanes).
CAUSAL_ALIGN = 64


@dataclass(frozen=True)
class FastOptions:
    # Upper bound on padded tokens per batch (rows x longest row); bounds activation memory.
    token_budget: int = 16384
    max_batch: int = 64
    # Reuse the keys/values of the token prefix shared by the rows of one group (the metrics
    # of one sample differ only in the dimension name at the very end).
    reuse_prefix: bool = True
    # A shared prefix shorter than this is not worth keeping keys/values for.
    min_prefix: int = 16
    # Query block size for skipping masked attention blocks; 0 = off, None = on CPU only.
    causal_block: int | None = None


@dataclass
class _Item:
    """Work for one row in a batch: ``tokens`` at absolute positions start, start + 1, ...
    after ``past`` (per layer (k, v) of positions [0, start)), or from position 0."""

    tokens: Sequence[int]
    start: int = 0
    past: list[tuple[torch.Tensor, torch.Tensor]] | None = None
    # Keep this row's keys/values of positions [0, keep) (for rows that lend their prefix).
    keep: int = 0


def _probs_inplace(q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``attention_probs`` with the elementwise steps done in place: the same operations on the
    same values (the tests check bitwise equality), without three large temporaries."""
    scores = torch.matmul(q, k.transpose(2, 3))
    scores.div_(math.sqrt(q.shape[-1]))
    scores.add_(mask)
    scores.clamp_min_(torch.finfo(scores.dtype).min)
    return torch.softmax(scores, dim=-1)


def _row_attention(
    q_row: torch.Tensor,
    k_row: torch.Tensor,
    v_row: torch.Tensor,
    mask: torch.Tensor,
    first: int,
    block: int,
) -> torch.Tensor:
    """Attention output (1, heads, queries, head_dim) for queries at absolute positions
    first, first + 1, ... over all keys of one row (faithful shapes when ``block`` is 0)."""
    end = k_row.shape[2]
    n = q_row.shape[2]
    if not block or n <= block:
        return torch.matmul(_probs_inplace(q_row, k_row, mask[:, first : first + n, :end]), v_row)
    aligned = end // CAUSAL_ALIGN * CAUSAL_ALIGN
    out = q_row.new_empty(q_row.shape)
    # The value product runs over ALL keys, the skipped ones with probability 0: a matrix
    # product's summation order can depend on its inner length, so that length stays the
    # faithful one. One zeroed buffer serves every block: widths only grow from block to
    # block, so the columns past a block's width were never written.
    padded = q_row.new_zeros((1, q_row.shape[1], min(block, n), end))
    for a in range(0, n, block):
        b = min(a + block, n)
        width = -(-(first + b) // CAUSAL_ALIGN) * CAUSAL_ALIGN
        if width > aligned:
            width = end  # rows in the last partial chunk: exactly the faithful width
        probs = _probs_inplace(q_row[:, :, a:b], k_row[:, :, :width], mask[:, first + a : first + b, :width])
        if width < end:
            padded[:, :, : b - a, :width] = probs
            probs = padded[:, :, : b - a]
        out[:, :, a:b] = torch.matmul(probs, v_row)
    return out


def _row_kv(item: _Item, layer: int, k: torch.Tensor, v: torch.Tensor, row: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Row ``row``'s keys/values over all its positions: cached prefix + its own new tokens."""
    n = len(item.tokens)
    k_row, v_row = k[row : row + 1, :, :n], v[row : row + 1, :, :n]
    if item.past is not None:
        k_row = torch.cat([item.past[layer][0], k_row], dim=2)
        v_row = torch.cat([item.past[layer][1], v_row], dim=2)
    return k_row, v_row


def _run_items(
    model: BaichuanCharRM, items: Sequence[_Item], block: int = 0
) -> tuple[list[float], list[list[tuple[torch.Tensor, torch.Tensor]]]]:
    """One right-padded batch: returns each row's sigmoid and, for rows with ``keep``, their
    per-layer keys/values of positions [0, keep)."""
    device = model.score.weight.device
    width = max(len(it.tokens) for it in items)
    ids = torch.zeros((len(items), width), dtype=torch.long)
    for row, it in enumerate(items):
        ids[row, : len(it.tokens)] = torch.tensor(list(it.tokens), dtype=torch.long)
    mask = model.alibi(max(it.start + len(it.tokens) for it in items))
    x = model.model.embed_tokens(ids.to(device))
    kept: list[list[tuple[torch.Tensor, torch.Tensor]]] = [[] for _ in items]
    layers = model.model.layers
    for index, layer in enumerate(layers):
        attn = layer.self_attn
        q, k, v = attn.qkv(layer.input_layernorm(x))
        final = index == len(layers) - 1
        out = q.new_zeros((len(items), q.shape[1], 1 if final else width, q.shape[3]))
        for row, it in enumerate(items):
            k_row, v_row = _row_kv(it, index, k, v, row)
            if it.keep:
                kept[row].append((k_row[:, :, : it.keep].clone(), v_row[:, :, : it.keep].clone()))
            # The final layer only matters at the last position: one query row there.
            first = len(it.tokens) - 1 if final else 0
            q_row = q[row : row + 1, :, first : len(it.tokens)]
            out[row : row + 1, :, : q_row.shape[2]] = _row_attention(q_row, k_row, v_row, mask, it.start + first, block)
        if final:
            rows = torch.arange(len(items), device=device)
            last = torch.tensor([len(it.tokens) - 1 for it in items], device=device)
            x = x[rows, last].unsqueeze(1)
        x = x + attn.merge(out)
        x = x + layer.mlp(layer.post_attention_layernorm(x))
    return _finish(model, x), kept


def _finish(model: BaichuanCharRM, h_last: torch.Tensor) -> list[float]:
    """Final norm, score head and sigmoid per row, on (1, H) slices: the exact shapes of the
    faithful path's tail."""
    out = []
    for row in h_last.reshape(-1, h_last.shape[-1]).split(1):
        out.append(torch.sigmoid(model.score(model.model.norm(row)).squeeze()).item())
    return out


def _common_prefix(seqs: Sequence[Sequence[int]]) -> int:
    first = seqs[0]
    n = min(len(s) for s in seqs)
    for s in seqs[1:]:
        i = 0
        while i < n and s[i] == first[i]:
            i += 1
        n = i
    return n


def _batches(items: list[_Item], options: FastOptions) -> Iterator[list[int]]:
    """Length-bucketed batches: indices sorted longest first, cut so that rows x longest row
    stays within the token budget."""
    order = sorted(range(len(items)), key=lambda i: -len(items[i].tokens))
    batch: list[int] = []
    for i in order:
        longest = len(items[batch[0]].tokens) if batch else 0
        if batch and ((len(batch) + 1) * longest > options.token_budget or len(batch) >= options.max_batch):
            yield batch
            batch = []
        batch.append(i)
    if batch:
        yield batch


def sigmoids_fast(
    model: BaichuanCharRM,
    seqs: Sequence[Sequence[int]],
    groups: Sequence[Hashable] | None = None,
    options: FastOptions = FastOptions(),
) -> list[float]:
    """S8 (fast): the sigmoid of every sequence, in right-padded, length-bucketed batches.
    With ``groups`` (and ``options.reuse_prefix``), the first row of each group is computed in
    full and the others only past their common token prefix, reusing its keys and values."""
    for seq in seqs:
        check_ids(model, seq)
    device = model.score.weight.device
    out: list[float | None] = [None] * len(seqs)
    # Lead rows (computed in full) and, per lead, the followers that reuse its prefix.
    leads: list[tuple[int, int, list[int]]] = []  # (row, prefix length, follower rows)
    if groups is not None and options.reuse_prefix:
        members: dict[Hashable, list[int]] = {}
        for i, key in enumerate(groups):
            members.setdefault(key, []).append(i)
        for idx in members.values():
            # Keep at least one token per follower after the prefix: its score is read there.
            prefix = min(_common_prefix([seqs[i] for i in idx]), min(len(seqs[i]) for i in idx) - 1)
            if len(idx) > 1 and prefix >= options.min_prefix:
                leads.append((idx[0], prefix, idx[1:]))
            else:
                leads.extend((i, 0, []) for i in idx)
    else:
        leads = [(i, 0, []) for i in range(len(seqs))]
    block = options.causal_block
    if block is None:
        block = 256 if device.type == "cpu" else 0
    with strict_numerics(device):
        first = [_Item(seqs[row], keep=prefix) for row, prefix, _ in leads]
        followers: list[tuple[int, _Item]] = []
        for batch in _batches(first, options):
            values, kept = _run_items(model, [first[j] for j in batch], block)
            for j, value, kv in zip(batch, values, kept):
                row, prefix, rest = leads[j]
                out[row] = value
                followers += [(i, _Item(seqs[i][prefix:], start=prefix, past=kv)) for i in rest]
            # Followers run as soon as their prefixes exist, so few caches are alive at once.
            items = [it for _, it in followers]
            for fbatch in _batches(items, options):
                values, _ = _run_items(model, [items[j] for j in fbatch], block)
                for j, value in zip(fbatch, values):
                    out[followers[j][0]] = value
            followers = []
    return [float(v) for v in out]  # type: ignore[arg-type]
