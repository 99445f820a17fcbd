"""Protocol step S8: the BaichuanCharRM forward pass in plain PyTorch, eval mode.

One file, read top to bottom: config, ALiBi mask, RMSNorm, the attention functions, the
right-padded batch and its prefix cache, the modules (attention, MLP, decoder layer, backbone,
model), then the two ways to run them. There is one forward per module; the ways differ only in
the arguments they pass it:

- ``sigmoid_faithful``: batch 1, no padding, no cache, bf16: the same sequence of torch
  operations as the official eval path (see ``REWARD_MODEL.md``), its elementwise attention steps
  done in place (``inplace_attention``: the same operations on the same values), so it is
  bitwise identical to the official scorer on the same device. Published numbers use it.
- ``sigmoids_fast``: right-padded, length-bucketed batches (``RaggedBatch``), attention per row
  through a fast-mode attention function, the final layer at the last position only, plus
  optional reuse of the keys and values of a prefix shared by several rows (``PrefixCache``,
  the metrics of one sample). Every real token keeps its absolute position and sees exactly the
  keys it sees in batch 1; only the shapes of the matrix products and softmax rows change, so
  results differ at most in rare roundings. It must be measured against the faithful mode
  (``scorer.verify``).

State-dict names follow the official checkpoint: ``model.embed_tokens``, ``model.layers.N.
self_attn.W_pack`` (q, k, v stacked), ``...o_proj``, ``...mlp.{gate,up,down}_proj``,
``...{input,post_attention}_layernorm``, ``model.norm``, ``score`` (Linear H -> 1 with bias).
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable, Hashable, Iterator, Sequence
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


# --- RMSNorm --------------------------------------------------------------------------------


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


# --- attention functions --------------------------------------------------------------------
#
# An attention function maps queries (B, heads, n, head_dim) and keys and values (B, heads, end,
# head_dim) to an output shaped like the queries. The queries are always the LAST n of the end
# key positions (a whole sequence, or the tokens that continue a cached prefix), and ``mask``
# holds their rows of the ALiBi mask, (heads, n, end). ``eager_attention`` is the official core;
# the others compute the same operations on the same values, in place or in query blocks. The
# faithful mode uses ``inplace_attention``: the official core's three temporaries of the size of
# the score matrix per layer cost more in page faults (kernel time) than the arithmetic on CPU.

AttentionFunction = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]

# Multiple of every CPU/GPU reduction vector width in use (16/32 lanes).
CAUSAL_ALIGN = 64


def attention_probs(q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Scores, bias, clamp and softmax exactly as the official eval path: a bf16 matmul, then a
    division by a Python float, a bf16 add of the mask, a max against the dtype's lowest value
    (which turns -inf into a finite number) and a bf16 softmax without a dtype argument."""
    scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(q.shape[-1])
    scores = scores + mask
    scores = torch.max(scores, torch.tensor(torch.finfo(scores.dtype).min))
    return torch.softmax(scores, dim=-1)


def attention_probs_inplace(q: torch.Tensor, k: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``attention_probs`` with the elementwise steps done in place: the same operations on the
    same values (the tests check bitwise equality), without three large temporaries."""
    scores = torch.matmul(q, k.transpose(2, 3))
    scores.div_(math.sqrt(q.shape[-1]))
    scores.add_(mask)
    scores.clamp_min_(torch.finfo(scores.dtype).min)
    return torch.softmax(scores, dim=-1)


def eager_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """S8 attention core, the official op sequence: ``softmax(q k^T / sqrt(d) + mask) v``."""
    return torch.matmul(attention_probs(q, k, mask), v)


def inplace_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """S8 attention core (faithful and fast modes): ``eager_attention`` with its elementwise steps
    in place."""
    return torch.matmul(attention_probs_inplace(q, k, mask), v)


def blocked_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, block: int = 256
) -> torch.Tensor:
    """S8 attention core (fast mode) that skips the fully masked upper blocks: queries in blocks
    of ``block`` (> 0), each against the keys up to its end rounded up to a multiple of
    CAUSAL_ALIGN, and the block holding the last partial chunk of keys against all of them.

    A softmax row then differs from the eager one only by exact zeros, all in whole vector
    chunks, which on the CPU kernels measured here gives identical sums; that is a property of
    the kernels, not a guarantee, hence ``scorer.verify_run``."""
    n, end = q.shape[2], k.shape[2]
    if n <= block:
        return inplace_attention(q, k, v, mask)
    first = end - n  # absolute position of the first query
    aligned = end // CAUSAL_ALIGN * CAUSAL_ALIGN
    out = q.new_empty(q.shape)
    # The value product runs over ALL keys, the skipped ones with probability 0: a matrix
    # product's summation order can depend on its inner length, so that length stays the
    # eager one. One zeroed buffer serves every block: widths only grow from block to block,
    # so the columns past a block's width were never written.
    padded = q.new_zeros((q.shape[0], q.shape[1], block, end))
    for a in range(0, n, block):
        b = min(a + block, n)
        width = -(-(first + b) // CAUSAL_ALIGN) * CAUSAL_ALIGN
        if width > aligned:
            width = end  # queries in the last partial chunk: exactly the eager width
        probs = attention_probs_inplace(q[:, :, a:b], k[:, :, :width], mask[:, a:b, :width])
        if width < end:
            padded[:, :, : b - a, :width] = probs
            probs = padded[:, :, : b - a]
        out[:, :, a:b] = torch.matmul(probs, v)
    return out


# Name -> attention function; parameters such as ``block`` are bound with functools.partial.
ATTENTION_FUNCTIONS: dict[str, Callable[..., torch.Tensor]] = {
    "eager": eager_attention,
    "inplace": inplace_attention,
    "blocked": blocked_attention,
}


# --- right-padded batches and the shared-prefix cache (fast mode) ---------------------------
#
# Right padding keeps every real token at its absolute position (the ALiBi bias uses absolute
# key positions; left padding would change how slope * j rounds in bf16), and under the causal
# mask no real token sees a pad, so no padding mask is needed: the linear layers run on the
# padded batch at once, attention runs per row (``Attention.forward``).


class PrefixCache:
    """Per-layer keys and values of the first ``length`` positions of one row: filled while the
    row that lends them runs, then read, never changed, by every row that continues that prefix
    (the metrics of one sample differ only in the dimension name at the very end)."""

    def __init__(self, length: int) -> None:
        self.length = length
        self.layers: list[tuple[torch.Tensor, torch.Tensor]] = []

    def store(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Keep positions [0, length) of the lending row's keys and values of ``layer``."""
        if layer != len(self.layers):
            raise RuntimeError(f"prefix cache filled out of order: layer {layer} after {len(self.layers)} layer(s)")
        self.layers.append((k[:, :, : self.length].clone(), v[:, :, : self.length].clone()))

    def prepend(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The cached prefix of ``layer`` followed by a continuing row's own keys and values."""
        past_k, past_v = self.layers[layer]
        return torch.cat([past_k, k], dim=2), torch.cat([past_v, v], dim=2)


@dataclass
class Row:
    """One row of a right-padded batch: ``tokens`` at absolute positions start, start + 1, ...
    after the cached prefix ``past`` (start = its length), or from position 0. ``lend``, if
    given, is filled with this row's keys and values of its first ``lend.length`` positions."""

    tokens: Sequence[int]
    past: PrefixCache | None = None
    lend: PrefixCache | None = None

    @property
    def start(self) -> int:
        return 0 if self.past is None else self.past.length

    @property
    def end(self) -> int:
        return self.start + len(self.tokens)

    def keys_values(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The row's keys and values over all its positions, from its own (``k``, ``v``)."""
        if self.past is not None:
            k, v = self.past.prepend(layer, k, v)
        if self.lend is not None:
            self.lend.store(layer, k, v)
        return k, v


@dataclass
class RaggedBatch:
    """Rows of different lengths, right-padded to the longest with token id 0."""

    rows: Sequence[Row]

    def input_ids(self, device: torch.device) -> torch.Tensor:
        ids = torch.zeros((len(self.rows), max(len(row.tokens) for row in self.rows)), dtype=torch.long)
        for i, row in enumerate(self.rows):
            ids[i, : len(row.tokens)] = torch.tensor(list(row.tokens), dtype=torch.long)
        return ids.to(device)

    @property
    def span(self) -> int:
        """Positions the mask must cover: the furthest absolute position reached, plus one."""
        return max(row.end for row in self.rows)

    def last_positions(self, x: torch.Tensor) -> torch.Tensor:
        """(B, L, H) -> (B, 1, H): each row at its last real token."""
        last = torch.tensor([len(row.tokens) - 1 for row in self.rows], device=x.device)
        return x[torch.arange(len(self.rows), device=x.device), last].unsqueeze(1)


# --- modules --------------------------------------------------------------------------------


def split_heads(t: torch.Tensor, n_heads: int) -> torch.Tensor:
    """(B, L, H) -> (B, heads, L, head_dim), a view (no copy), as the official code does."""
    b, length, hidden = t.shape
    return t.view(b, length, n_heads, hidden // n_heads).transpose(1, 2)


class Attention(nn.Module):
    def __init__(self, config: RMConfig, layer_index: int) -> None:
        super().__init__()
        self.n_heads = config.num_attention_heads
        self.hidden_size = config.hidden_size
        self.layer_index = layer_index  # which layer of a PrefixCache is this one's
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

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor,
        attention: AttentionFunction = eager_attention,
        batch: RaggedBatch | None = None,
        last_only: bool = False,
    ) -> torch.Tensor:
        """S8 self-attention. Without ``batch``: unpadded sequences, every position (with
        ``eager_attention``, the official op sequence). With ``batch``: each row against its own
        keys (cached prefix first), at every real position or, with ``last_only``, at its last
        one; pad positions get zeros."""
        q, k, v = self.qkv(x)
        if batch is None:
            return self.merge(attention(q, k, v, mask))
        # Row by row at the row's OWN length: a bf16 softmax sums its row in an order that
        # depends on the row length (vector chunks vs tail), so a row padded to the batch width
        # could round differently. Per row, the shapes are exactly those of batch 1.
        out = q.new_zeros((q.shape[0], self.n_heads, 1 if last_only else q.shape[2], q.shape[3]))
        for i, row in enumerate(batch.rows):
            n = len(row.tokens)
            k_row, v_row = row.keys_values(self.layer_index, k[i : i + 1, :, :n], v[i : i + 1, :, :n])
            first = n - 1 if last_only else 0
            queries = mask[:, row.start + first : row.end, : row.end]
            out[i : i + 1, :, : n - first] = attention(q[i : i + 1, :, first:n], k_row, v_row, queries)
        return self.merge(out)


class MLP(nn.Module):
    def __init__(self, config: RMConfig) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.up_proj = nn.Linear(config.hidden_size, config.intermediate_size, bias=False)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    def __init__(self, config: RMConfig, layer_index: int) -> None:
        super().__init__()
        self.self_attn = Attention(config, layer_index)
        self.mlp = MLP(config)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor,
        attention: AttentionFunction = eager_attention,
        batch: RaggedBatch | None = None,
        last_only: bool = False,
    ) -> torch.Tensor:
        """One pre-norm S8 layer: a residual around attention, then one around the MLP. With
        ``last_only`` (batches only) the layer continues at each row's last position alone."""
        attended = self.self_attn(self.input_layernorm(x), mask, attention, batch, last_only)
        if last_only:
            x = batch.last_positions(x)  # type: ignore[union-attr]
        x = x + attended
        return x + self.mlp(self.post_attention_layernorm(x))


class Backbone(nn.Module):
    def __init__(self, config: RMConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(config, index) for index in range(config.num_hidden_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.masks = AlibiMaskCache(config.num_attention_heads, config.model_max_length)

    def alibi(self, length: int) -> torch.Tensor:
        """Slice of the cached mask for inputs of ``length`` tokens (the official slice)."""
        return self.masks.get(length, self.embed_tokens.weight.device)[:, :length, :length]

    def forward(
        self,
        input_ids: torch.Tensor,
        attention: AttentionFunction = eager_attention,
        batch: RaggedBatch | None = None,
        last_position_only: bool = False,
    ) -> torch.Tensor:
        """S8 up to the final norm: embeddings, the layers, the norm. Returns (B, L, H), or
        (B, 1, H) at each row's last token with ``last_position_only``."""
        x = self.embed_tokens(input_ids)
        mask = self.alibi(input_ids.shape[1] if batch is None else batch.span)
        final = len(self.layers) - 1
        for index, layer in enumerate(self.layers):
            # Only the last position reaches the score head, and in the final layer nothing
            # else depends on the other positions.
            x = layer(x, mask, attention, batch, last_only=last_position_only and index == final)
        return self.norm(x)


class BaichuanCharRM(nn.Module):
    """Backbone + ``score`` head (Linear H -> 1 with bias)."""

    def __init__(self, config: RMConfig) -> None:
        super().__init__()
        self.config = config
        self.model = Backbone(config)
        self.score = nn.Linear(config.hidden_size, 1, bias=True)

    def forward(
        self,
        input_ids: torch.Tensor,
        attention: AttentionFunction = eager_attention,
        batch: RaggedBatch | None = None,
        last_position_only: bool = False,
    ) -> torch.Tensor:
        """S8: the bf16 sigmoid of the score head at each row's last token, shape (rows,).

        By default one unpadded sequence (1, L) with the official op sequence: the official
        ``BaichuanCharRM(input_ids)[1]``. ``batch`` describes the rows of a right-padded
        ``input_ids`` (their lengths and cached prefixes); ``last_position_only`` (batches
        only) computes the final layer at each row's last token alone."""
        if batch is None and (input_ids.dim() != 2 or input_ids.shape[0] != 1):
            raise ValueError(f"without a batch, forward takes one unpadded sequence (1, L); got {tuple(input_ids.shape)}")
        if batch is None and last_position_only:
            raise ValueError("last_position_only needs a RaggedBatch (it reads each row's last real token)")
        hidden = self.model(input_ids, attention, batch, last_position_only)
        if batch is not None and not last_position_only:
            hidden = batch.last_positions(hidden)
        last = hidden[:, -1, :]
        # Row by row: the head's matrix product keeps the official (1, H) shape, whose summation
        # order a batched product need not share.
        return torch.stack([torch.sigmoid(self.score(row).squeeze()) for row in last.split(1)])


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
        return model(input_ids, inplace_attention).item()


# --- fast mode ------------------------------------------------------------------------------
#
# The same modules as the faithful mode, called on right-padded, length-bucketed batches
# (``RaggedBatch``): every real token keeps its absolute position and sees exactly the keys it
# sees in batch 1, and attention runs per row at the row's own length. The final layer runs
# only at each row's last position, where the score is read. Rows that share a token prefix
# (the metrics of one sample) can reuse the keys and values of that prefix from one full row of
# their group (``PrefixCache``); their prefix was computed at the lead row's length. On CPU the
# attention skips fully masked blocks by default (``blocked_attention``). Prefix reuse and
# causal blocks are why this mode must be verified on the device it runs on
# (``scorer.verify_run``).


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

    def attention(self, device: torch.device) -> AttentionFunction:
        """The attention function these options select on ``device``."""
        block = self.causal_block
        if block is None:
            block = 256 if device.type == "cpu" else 0
        if block:
            return functools.partial(ATTENTION_FUNCTIONS["blocked"], block=block)
        return ATTENTION_FUNCTIONS["inplace"]


def _common_prefix(seqs: Sequence[Sequence[int]]) -> int:
    first = seqs[0]
    n = min(len(s) for s in seqs)
    for s in seqs[1:]:
        i = 0
        while i < n and s[i] == first[i]:
            i += 1
        n = i
    return n


def _lead_rows(
    seqs: Sequence[Sequence[int]], groups: Sequence[Hashable] | None, options: FastOptions
) -> list[tuple[int, int, list[int]]]:
    """(row, prefix length, follower rows) for each row computed in full; its followers are
    computed only past its first ``prefix`` tokens, which they share."""
    if groups is None or not options.reuse_prefix:
        return [(i, 0, []) for i in range(len(seqs))]
    members: dict[Hashable, list[int]] = {}
    for i, key in enumerate(groups):
        members.setdefault(key, []).append(i)
    leads: list[tuple[int, int, list[int]]] = []
    for idx in members.values():
        # Keep at least one token per follower after the prefix: its score is read there.
        prefix = min(_common_prefix([seqs[i] for i in idx]), min(len(seqs[i]) for i in idx) - 1)
        if len(idx) > 1 and prefix >= options.min_prefix:
            leads.append((idx[0], prefix, idx[1:]))
        else:
            leads.extend((i, 0, []) for i in idx)
    return leads


def _batches(lengths: Sequence[int], options: FastOptions) -> Iterator[list[int]]:
    """Length-bucketed batches: indices sorted longest first, cut so that rows x longest row
    stays within the token budget."""
    order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
    batch: list[int] = []
    for i in order:
        longest = lengths[batch[0]] if batch else 0
        if batch and ((len(batch) + 1) * longest > options.token_budget or len(batch) >= options.max_batch):
            yield batch
            batch = []
        batch.append(i)
    if batch:
        yield batch


def _run_batch(model: BaichuanCharRM, rows: Sequence[Row], attention: AttentionFunction) -> list[float]:
    batch = RaggedBatch(rows)
    ids = batch.input_ids(model.score.weight.device)
    return model(ids, attention, batch, last_position_only=True).tolist()


def _run_leads_then_followers(
    model: BaichuanCharRM,
    seqs: Sequence[Sequence[int]],
    leads: Sequence[tuple[int, int, list[int]]],
    attention: AttentionFunction,
    options: FastOptions,
) -> list[tuple[int, float]]:
    """(row, sigmoid) for one batch of lead rows and then, in batches, every row that continues
    their prefixes. Followers run as soon as their prefixes exist, and the prefix caches die
    with this call, so few are alive at once."""
    rows = [Row(seqs[row], lend=PrefixCache(prefix) if prefix else None) for row, prefix, _ in leads]
    scored = list(zip([row for row, _, _ in leads], _run_batch(model, rows, attention)))
    followers = [
        (i, Row(seqs[i][prefix:], past=lead.lend)) for (_, prefix, rest), lead in zip(leads, rows) for i in rest
    ]
    for batch in _batches([len(row.tokens) for _, row in followers], options):
        values = _run_batch(model, [followers[j][1] for j in batch], attention)
        scored += [(followers[j][0], value) for j, value in zip(batch, values)]
    return scored


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
    leads = _lead_rows(seqs, groups, options)
    attention = options.attention(device)
    with strict_numerics(device):
        for batch in _batches([len(seqs[row]) for row, _, _ in leads], options):
            for row, value in _run_leads_then_followers(model, seqs, [leads[j] for j in batch], attention, options):
                out[row] = value
    return [float(v) for v in out]  # type: ignore[arg-type]
