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


def sigmoid_faithful(model: BaichuanCharRM, ids: Sequence[int]) -> float:
    """S8 (faithful): one sequence, batch 1, the official arithmetic; returns the sigmoid."""
    device = model.score.weight.device
    with strict_numerics(device):
        input_ids = torch.tensor([list(ids)], dtype=torch.long, device=device)
        return model(input_ids).item()
