"""S8 forward: against an independent per-head-loop implementation written here, for tiny
configs with 8 (power of two) and 12 (not) heads, short inputs and inputs longer than
model_max_length; the ALiBi mask recipe; scores on the bf16 grid; fast vs faithful."""

from __future__ import annotations

import math
import random

import pytest
import torch

from charactereval_lib.charactereval.reward.checkpoint import expected_shapes
from charactereval_lib.charactereval.reward.model import (
    DTYPE,
    BaichuanCharRM,
    FastOptions,
    PrefixCache,
    RaggedBatch,
    RMConfig,
    Row,
    alibi_slopes,
    attention_probs,
    attention_probs_inplace,
    blocked_attention,
    build_alibi_mask,
    inplace_attention,
    sigmoid_faithful,
    sigmoids_fast,
    to_score,
)
from charactereval_lib.charactereval.reward.scorer import compare_modes
from charactereval_lib.charactereval.reward.tiny import random_state

BF16_MIN = torch.finfo(torch.bfloat16).min


def make_model(heads: int, *, hidden_per_head: int = 4, layers: int = 2, max_len: int = 64, seed: int = 0) -> BaichuanCharRM:
    config = RMConfig(
        vocab_size=300,
        hidden_size=heads * hidden_per_head,
        intermediate_size=3 * heads * hidden_per_head,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        model_max_length=max_len,
    )
    model = BaichuanCharRM(config)
    model.load_state_dict(random_state(config, seed=seed, std=0.3), strict=True, assign=True)
    return model.eval()


# --- an independent reference ----------------------------------------------------------------


def reference_slopes(n: int) -> list[float]:
    """ALiBi slopes from the closed form: 2^(-8(k+1)/n) for a power of two; otherwise those of
    the largest power of two c < n, then the even-indexed slopes of 2c, n - c of them."""
    if n & (n - 1) == 0:
        return [2.0 ** (-8.0 * (k + 1) / n) for k in range(n)]
    c = 1 << (n.bit_length() - 1)
    return reference_slopes(c) + reference_slopes(2 * c)[0::2][: n - c]


def reference_sigmoid(model: BaichuanCharRM, ids: list[int]) -> float:
    """The eval forward written as loops over layers and heads, from the spec: bf16 tensors,
    mask entries bf16(float32(slope) * j) for j <= i and -inf above the diagonal."""
    cfg = model.config
    sd = {k: v for k, v in model.state_dict().items()}
    n_heads, hd, L = cfg.num_attention_heads, cfg.head_dim, len(ids)

    def norm(x, w):
        var = x.float().pow(2).mean(-1, keepdim=True)
        return w * (x * torch.rsqrt(var + cfg.rms_norm_eps)).to(torch.bfloat16)

    slopes32 = torch.tensor(reference_slopes(n_heads), dtype=torch.float32)
    j = torch.arange(L, dtype=torch.float32)
    upper = torch.ones(L, L, dtype=torch.bool).triu(1)
    x = sd["model.embed_tokens.weight"][torch.tensor(ids)]  # (L, H)
    for n in range(cfg.num_hidden_layers):
        p = f"model.layers.{n}."
        h = norm(x, sd[p + "input_layernorm.weight"])
        qkv = h @ sd[p + "self_attn.W_pack.weight"].T
        heads_out = []
        for head in range(n_heads):
            q = qkv[:, head * hd : (head + 1) * hd]
            k = qkv[:, cfg.hidden_size + head * hd : cfg.hidden_size + (head + 1) * hd]
            v = qkv[:, 2 * cfg.hidden_size + head * hd : 2 * cfg.hidden_size + (head + 1) * hd]
            bias = (slopes32[head] * j).to(torch.bfloat16).expand(L, L).clone()
            bias[upper] = float("-inf")
            s = (q @ k.T) / math.sqrt(hd)
            s = s + bias
            s = torch.where(s < BF16_MIN, torch.tensor(BF16_MIN, dtype=torch.bfloat16), s)
            heads_out.append(torch.softmax(s, dim=-1) @ v)
        x = x + torch.cat(heads_out, dim=-1) @ sd[p + "self_attn.o_proj.weight"].T
        h = norm(x, sd[p + "post_attention_layernorm.weight"])
        gate = h @ sd[p + "mlp.gate_proj.weight"].T
        up = h @ sd[p + "mlp.up_proj.weight"].T
        x = x + (torch.nn.functional.silu(gate) * up) @ sd[p + "mlp.down_proj.weight"].T
    last = norm(x, sd["model.norm.weight"])[-1]
    z = last @ sd["score.weight"][0] + sd["score.bias"][0]
    return torch.sigmoid(z).item()


@pytest.mark.parametrize("heads", [8, 12, 10])
def test_slopes_match_the_closed_form_in_float32(heads):
    ours = torch.tensor(alibi_slopes(heads), dtype=torch.float32)
    ref = torch.tensor(reference_slopes(heads), dtype=torch.float32)
    assert torch.equal(ours, ref)
    assert len(alibi_slopes(heads)) == heads


@pytest.mark.parametrize("heads", [8, 12])
@pytest.mark.parametrize("length", [1, 7, 40, 90])  # 90 > model_max_length = 64
def test_forward_matches_per_head_reference(heads, length):
    model = make_model(heads, seed=heads + length)
    rng = random.Random(length)
    ids = [rng.randrange(300) for _ in range(length - 1)] + [2]
    with torch.inference_mode():
        ref = reference_sigmoid(model, ids)
    ours = sigmoid_faithful(model, ids)
    assert ours == ref, (ours, ref)
    # The grid: a bf16 value, and the score is exactly 4x + 1 of it.
    assert torch.tensor(ours, dtype=torch.bfloat16).item() == ours
    assert (to_score(ours) - 1) / 4 == ours


def test_mask_equals_the_official_recipe_sliced():
    """Official recipe: float32 mask at the buffer length, cast to bf16 as a whole, sliced."""
    heads, buffer, length = 12, 300, 120
    slopes = torch.tensor(alibi_slopes(heads), dtype=torch.float32)
    positions = torch.arange(buffer) - buffer + 1
    positions = positions - positions[0]  # the absolute key index j
    alibi = slopes[:, None, None] * positions[None, None, :]
    future = torch.full((buffer, buffer), float("-inf")).triu(1)
    official = (future[None] + alibi).to(torch.bfloat16)[:, :length, :length]
    assert torch.equal(build_alibi_mask(heads, length), official)


def test_mask_uses_absolute_positions_with_coarse_bf16_rounding():
    mask = build_alibi_mask(8, 4096)
    # slope 0.5 for head 0 of 8: 0.5 * 4095 = 2047.5 rounds to 2048 in bf16 (spacing 16 there).
    assert mask[0, 4095, 4095].item() == 2048.0
    assert mask[0, 4095, 4093].item() == 2048.0  # 2046.5 -> 2048 as well
    assert mask[0, 10, 3].item() == 1.5  # the key index, not j - i
    assert mask[0, 3, 10].item() == float("-inf")


def test_inplace_attention_steps_equal_the_faithful_ones():
    gen = torch.Generator().manual_seed(3)
    q = (torch.randn(1, 12, 70, 16, generator=gen) * 3).to(DTYPE)
    k = (torch.randn(1, 12, 70, 16, generator=gen) * 3).to(DTYPE)
    mask = build_alibi_mask(12, 70)
    assert torch.equal(attention_probs_inplace(q, k, mask), attention_probs(q, k, mask))


def test_out_of_vocabulary_ids_are_refused():
    model = make_model(8)
    with pytest.raises(ValueError, match="token id 300 is outside the model's vocabulary"):
        sigmoid_faithful(model, [1, 300, 2])
    with pytest.raises(ValueError, match="empty input"):
        sigmoid_faithful(model, [])


@pytest.mark.slow
def test_fast_mode_equals_faithful_on_grouped_rows():
    """Rows of a 'sample' share a long prefix and differ at the end (like the metrics of one
    sample); fast mode with and without prefix reuse against faithful."""
    model = make_model(12, hidden_per_head=8, layers=3, max_len=128)
    rng = random.Random(0)
    seqs, groups = [], []
    for g in range(10):
        prefix = [rng.randrange(3, 300) for _ in range(rng.randrange(20, 150))]
        for _ in range(rng.randrange(1, 4)):
            seqs.append(prefix + [rng.randrange(3, 300) for _ in range(rng.randrange(1, 4))] + [2])
            groups.append(g)
    faithful = [sigmoid_faithful(model, s) for s in seqs]
    for options in (
        FastOptions(reuse_prefix=False, token_budget=600, causal_block=0),
        FastOptions(reuse_prefix=True, min_prefix=4, causal_block=0),
        FastOptions(reuse_prefix=True, min_prefix=4, causal_block=16),
    ):
        fast = sigmoids_fast(model, seqs, groups, options)
        stats = compare_modes(faithful, fast)
        assert stats["exact_equal_fraction"] >= 0.99 and stats["max_diff_grid_steps"] <= 1, (options, stats)


@pytest.mark.slow
def test_one_forward_serves_ragged_batches_with_and_without_last_position_only():
    """The modules of the faithful path on a right-padded batch whose last two rows continue
    the cached prefix of the first: the head reads each row's last real token whether the final
    layer runs at every position or at the last one only."""
    model = make_model(12, hidden_per_head=8, layers=3, max_len=128)
    rng = random.Random(1)
    prefix = [rng.randrange(3, 300) for _ in range(60)]
    seqs = [prefix + [rng.randrange(3, 300) for _ in range(n)] + [2] for n in (9, 1, 4)]
    seqs += [[rng.randrange(3, 300) for _ in range(n)] + [2] for n in (30, 75)]
    faithful = [sigmoid_faithful(model, s) for s in seqs]
    for last_position_only in (False, True):
        with torch.inference_mode():
            cache = PrefixCache(len(prefix))
            lead = RaggedBatch([Row(seqs[0], lend=cache), Row(seqs[3]), Row(seqs[4])])
            first = model(lead.input_ids(torch.device("cpu")), inplace_attention, lead, last_position_only).tolist()
            rest = RaggedBatch([Row(s[len(prefix) :], past=cache) for s in seqs[1:3]])
            second = model(rest.input_ids(torch.device("cpu")), inplace_attention, rest, last_position_only).tolist()
        fast = [first[0], *second, *first[1:]]
        stats = compare_modes(faithful, fast)
        assert stats["exact_equal_fraction"] >= 0.99 and stats["max_diff_grid_steps"] <= 1, (last_position_only, stats)
    with pytest.raises(ValueError, match="last_position_only needs a RaggedBatch"):
        model(torch.tensor([seqs[0]]), last_position_only=True)


@pytest.mark.parametrize("length", [70, 300, 1300])
def test_causal_blocks_give_the_faithful_attention_on_cpu(length):
    """Queries in blocks against keys up to the (aligned) block end, softmax over that width,
    value product over all keys: equal to the faithful attention on this CPU (a property of
    its kernels that the fast mode relies on and therefore checks here)."""
    gen = torch.Generator().manual_seed(length)
    q, k, v = ((torch.randn(1, 8, length, 32, generator=gen) * 2).to(DTYPE) for _ in range(3))
    mask = build_alibi_mask(8, length)
    faithful = torch.matmul(attention_probs(q, k, mask), v)
    assert torch.equal(blocked_attention(q, k, v, mask, block=64), faithful)
    # Queries that continue a prefix (absolute positions start at 100).
    tail = blocked_attention(q[:, :, 100:], k, v, mask[:, 100:], block=64)
    assert torch.equal(tail, faithful[:, :, 100:])


def test_fast_mode_handles_duplicates_and_single_rows():
    model = make_model(8)
    seqs = [[5, 6, 7, 2], [5, 6, 7, 2], [9, 2], [2]]
    fast = sigmoids_fast(model, seqs, [0, 0, 1, 2], FastOptions(min_prefix=1))
    assert fast == [sigmoid_faithful(model, s) for s in seqs]


def test_state_dict_names_are_the_official_ones():
    model = make_model(8)
    assert {k: tuple(v.shape) for k, v in model.state_dict().items()} == expected_shapes(model.config)
