"""Golden vectors from the OFFICIAL reward-model code (tests/golden/official-rm-tiny/README.md):
a tiny checkpoint it saved (three .bin shards + index, 10 heads) and, for 58 synthetic cases,
its tokenizer's ids and its model's sigmoid and score. Loaded through the normal loaders, our
implementation must reproduce every value exactly (==) on CPU."""

from __future__ import annotations

import json

import pytest
import torch

from _reward_support import GOLDEN_DIR
from charactereval_lib.charactereval.reward.checkpoint import load_model
from charactereval_lib.charactereval.reward.model import FastOptions, sigmoid_faithful, sigmoids_fast, to_score
from charactereval_lib.charactereval.reward.scorer import compare_modes
from charactereval_lib.charactereval.reward.tokenizer import load_tokenizer

CASES = [json.loads(line) for line in (GOLDEN_DIR / "golden.jsonl").read_text(encoding="utf-8").splitlines()]
SCORED = [c for c in CASES if "sigmoid" in c]


def _case_id(case: dict) -> str:
    return f"{case['kind']}-{len(case['input_ids'])}tok-{case['text'][:12]!r}"


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(GOLDEN_DIR)


@pytest.fixture(scope="module")
def model():
    return load_model(GOLDEN_DIR, "cpu")


def test_golden_file_covers_the_documented_cases():
    kinds = {c["kind"] for c in CASES}
    assert len(CASES) == 58 and kinds == {"tokenizer-edge", "rm-input", "rm-input-long"}
    assert any(c["truncated"] for c in CASES) and len(SCORED) == 42


@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_tokenizer_matches_official_ids(tokenizer, case):
    assert tokenizer.encode_ids(case["text"]) == case["encode_ids"]
    ids, truncated = tokenizer.rm_input_ids(case["text"])
    assert ids == case["input_ids"]
    assert truncated == case["truncated"]


@pytest.mark.slow
def test_faithful_forward_matches_official_sigmoid_and_score(tokenizer, model):
    mismatches = []
    for case in SCORED:
        ids, _ = tokenizer.rm_input_ids(case["text"])
        sigmoid = sigmoid_faithful(model, ids)
        if sigmoid != case["sigmoid"] or to_score(sigmoid) != case["score"]:
            mismatches.append((_case_id(case), sigmoid, case["sigmoid"]))
    assert mismatches == [], f"{len(mismatches)}/{len(SCORED)} golden cases differ: {mismatches[:5]}"


def test_golden_scores_lie_on_the_bf16_grid():
    for case in SCORED:
        assert torch.tensor(case["sigmoid"], dtype=torch.bfloat16).item() == case["sigmoid"]
        assert case["score"] == case["sigmoid"] * 4 + 1


@pytest.mark.slow
def test_fast_mode_on_golden_inputs(tokenizer, model):
    """Fast mode over the golden inputs, batched, and again with each input expanded into
    three 'metrics' that share a prefix (reuse on): equality with the official numbers."""
    seqs = [tokenizer.rm_input_ids(c["text"])[0] for c in SCORED]
    fast = sigmoids_fast(model, seqs, None, FastOptions(token_budget=8192))
    stats = compare_modes([c["sigmoid"] for c in SCORED], fast)
    assert stats["exact_equal_fraction"] >= 0.99 and stats["max_diff_grid_steps"] <= 1, stats

    short = [c for c in SCORED if c["kind"] == "rm-input"][:12]
    grouped, groups = [], []
    for g, case in enumerate(short):
        head = case["text"].rsplit("<Dimension>\n\n", 1)[0] + "<Dimension>\n\n"
        for metric in ("对话流利度", "共情度", "知识准确率"):
            grouped.append(tokenizer.rm_input_ids(head + metric)[0])
            groups.append(g)
    faithful = [sigmoid_faithful(model, s) for s in grouped]
    fast = sigmoids_fast(model, grouped, groups, FastOptions(reuse_prefix=True, min_prefix=1))
    stats = compare_modes(faithful, fast)
    assert stats["exact_equal_fraction"] >= 0.99 and stats["max_diff_grid_steps"] <= 1, stats
