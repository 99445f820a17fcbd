"""Checkpoint loading: round trips through every accepted layout, and one-line errors that name
the tensor and file for corrupted, missing, unexpected and mis-shaped tensors."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import torch

from _reward_support import GOLDEN_DIR
from charactereval_lib.charactereval.reward import checkpoint as checkpoint_mod
from charactereval_lib.charactereval.reward.checkpoint import (
    BIN_INDEX,
    check_weights,
    checkpoint_identity,
    expected_shapes,
    find_layout,
    load_config,
    load_model,
    save_checkpoint,
)
from charactereval_lib.charactereval.reward.errors import CheckpointError
from charactereval_lib.charactereval.reward.model import RMConfig, sigmoid_faithful
from charactereval_lib.charactereval.reward.tiny import config_json, random_state

CONFIG = RMConfig(vocab_size=64, hidden_size=16, intermediate_size=24, num_hidden_layers=2, num_attention_heads=4)


@pytest.fixture(autouse=True)
def _private_digest_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def write_checkpoint(path: Path, *, kind: str = "bin", shards: int = 3, state=None, dtype=torch.bfloat16) -> Path:
    state = state if state is not None else {k: v.to(dtype) for k, v in random_state(CONFIG, seed=1).items()}
    save_checkpoint(state, path, kind=kind, shards=shards)
    (path / "config.json").write_text(json.dumps(config_json(CONFIG)), encoding="utf-8")
    return path


def one_line(exc: pytest.ExceptionInfo) -> str:
    text = str(exc.value)
    assert "\n" not in text
    return text


@pytest.mark.parametrize("kind", ["bin", "safetensors"])
@pytest.mark.parametrize("shards", [1, 3])
def test_round_trip(tmp_path, kind, shards):
    state = random_state(CONFIG, seed=2)
    write_checkpoint(tmp_path, kind=kind, shards=shards, state=state)
    layout = find_layout(tmp_path)
    assert layout.kind == kind and len(layout.files) == shards
    model = load_model(tmp_path)
    loaded = model.state_dict()
    assert set(loaded) == set(state)
    for key, tensor in state.items():
        assert loaded[key].dtype == torch.bfloat16 and torch.equal(loaded[key], tensor), key
    assert not any(p.requires_grad for p in model.parameters())
    assert 0 < sigmoid_faithful(model, [1, 5, 2]) < 1


def test_float32_checkpoint_is_rounded_to_bf16_like_from_pretrained(tmp_path):
    state32 = {k: torch.randn(s) for k, s in expected_shapes(CONFIG).items()}
    write_checkpoint(tmp_path, state=state32)
    loaded = load_model(tmp_path).state_dict()
    for key, tensor in state32.items():
        assert torch.equal(loaded[key], tensor.to(torch.bfloat16)), key


def test_bf16_weights_on_cpu_stay_memory_mapped(tmp_path):
    """Zero copy: every parameter lies inside a mapping of its own shard file."""
    import psutil

    write_checkpoint(tmp_path)
    model = load_model(tmp_path)
    regions = []
    for m in psutil.Process().memory_maps(grouped=False):
        if Path(m.path).parent == tmp_path:
            lo, hi = (int(x, 16) for x in m.addr.split("-"))
            regions.append((lo, hi, Path(m.path).name))
    weight_map = json.loads((tmp_path / BIN_INDEX).read_text())["weight_map"]
    for key, param in model.state_dict().items():
        inside = [name for lo, hi, name in regions if lo <= param.data_ptr() < hi]
        assert inside == [weight_map[key]], key


def test_size_capped_shards(tmp_path):
    state = random_state(CONFIG, seed=4)
    paths = save_checkpoint(state, tmp_path, max_shard_bytes=2000)
    (tmp_path / "config.json").write_text(json.dumps(config_json(CONFIG)), encoding="utf-8")
    weights = [p for p in paths if p.suffix == ".bin"]
    # Only a tensor larger than the cap may exceed it, alone in its shard.
    for p in weights:
        shard = torch.load(p, weights_only=True)
        assert len(shard) == 1 or sum(t.numel() * 2 for t in shard.values()) <= 2000
    assert len(weights) > 3
    assert all(torch.equal(load_model(tmp_path).state_dict()[k], v) for k, v in state.items())


def test_golden_official_layout_loads():
    layout = find_layout(GOLDEN_DIR)
    assert layout.index is not None and layout.index.name == BIN_INDEX and len(layout.files) == 3
    assert load_config(GOLDEN_DIR).num_attention_heads == 10
    load_model(GOLDEN_DIR)


def _edit_shard(path: Path, edit) -> None:
    state = torch.load(path, weights_only=True)
    edit(state)
    torch.save(state, path)


def _edit_index(path: Path, edit) -> None:
    index_path = path / BIN_INDEX
    index = json.loads(index_path.read_text())
    edit(index["weight_map"])
    index_path.write_text(json.dumps(index))


def _shard_of(path: Path, key: str) -> str:
    return json.loads((path / BIN_INDEX).read_text())["weight_map"][key]


def test_mis_shaped_tensor(tmp_path):
    write_checkpoint(tmp_path)
    key = "model.layers.1.mlp.up_proj.weight"
    shard = _shard_of(tmp_path, key)
    _edit_shard(tmp_path / shard, lambda s: s.__setitem__(key, torch.zeros(24, 20, dtype=torch.bfloat16)))
    with pytest.raises(CheckpointError) as exc:
        load_model(tmp_path)
    assert one_line(exc) == f"{key}: shape (24, 20) expected (24, 16) in {shard}"


def test_tensor_missing_from_index_and_file(tmp_path):
    write_checkpoint(tmp_path)
    key = "model.layers.0.self_attn.o_proj.weight"
    shard = _shard_of(tmp_path, key)
    _edit_shard(tmp_path / shard, lambda s: s.pop(key))
    _edit_index(tmp_path, lambda m: m.pop(key))
    with pytest.raises(CheckpointError) as exc:
        load_model(tmp_path)
    assert one_line(exc) == f"{key}: missing from the checkpoint (not in {BIN_INDEX})"


def test_tensor_missing_from_its_shard(tmp_path):
    write_checkpoint(tmp_path)
    key = "score.bias"
    shard = _shard_of(tmp_path, key)
    _edit_shard(tmp_path / shard, lambda s: s.pop(key))
    with pytest.raises(CheckpointError) as exc:
        load_model(tmp_path)
    assert one_line(exc) == f"{key}: missing from {shard} (the index puts it there)"


def test_tensor_missing_from_single_file(tmp_path):
    write_checkpoint(tmp_path, shards=1)
    _edit_shard(tmp_path / "pytorch_model.bin", lambda s: s.pop("model.norm.weight"))
    with pytest.raises(CheckpointError) as exc:
        load_model(tmp_path)
    assert one_line(exc) == "model.norm.weight: missing from the checkpoint (pytorch_model.bin)"


def test_unexpected_tensor(tmp_path):
    write_checkpoint(tmp_path)
    shard = _shard_of(tmp_path, "score.weight")
    _edit_shard(tmp_path / shard, lambda s: s.__setitem__("lm_head.weight", torch.zeros(64, 16)))
    with pytest.raises(CheckpointError) as exc:
        load_model(tmp_path)
    assert one_line(exc) == f"lm_head.weight: unexpected tensor in {shard}"
    _edit_index(tmp_path, lambda m: m.__setitem__("lm_head.weight", shard))
    with pytest.raises(CheckpointError) as exc:
        load_model(tmp_path)
    assert one_line(exc) == f"lm_head.weight: unexpected tensor in {shard} (listed in {BIN_INDEX})"


def test_several_problems_report_the_first_and_a_count(tmp_path):
    write_checkpoint(tmp_path)
    _edit_index(tmp_path, lambda m: [m.pop(k) for k in ("score.bias", "score.weight")])
    with pytest.raises(CheckpointError, match=r"^score.weight: missing .* \(and 1 more problem\(s\)\)$"):
        load_model(tmp_path)


def test_tensor_in_the_wrong_shard(tmp_path):
    write_checkpoint(tmp_path)
    key = "model.layers.0.input_layernorm.weight"
    first = _shard_of(tmp_path, key)
    other = _shard_of(tmp_path, "score.weight")
    # The key's own shard still holds other tensors, so it is read and the stray key is seen.
    assert first != other
    assert list(json.loads((tmp_path / BIN_INDEX).read_text())["weight_map"].values()).count(first) > 1
    _edit_index(tmp_path, lambda m: m.__setitem__(key, other))
    with pytest.raises(CheckpointError) as exc:
        load_model(tmp_path)
    assert one_line(exc) == f"{key}: unexpected tensor in {first} (the index puts it in {other})"


@pytest.mark.parametrize("damage", ["truncate", "garbage"])
def test_corrupted_shard(tmp_path, damage):
    write_checkpoint(tmp_path)
    shard = _shard_of(tmp_path, "model.layers.1.mlp.down_proj.weight")
    path = tmp_path / shard
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2] if damage == "truncate" else b"\x00garbage" * 100)
    with pytest.raises(CheckpointError) as exc:
        load_model(tmp_path)
    assert re.fullmatch(rf"{re.escape(shard)}: unreadable weights file \(.+\)", one_line(exc))


def test_corrupted_safetensors(tmp_path):
    write_checkpoint(tmp_path, kind="safetensors", shards=1)
    path = tmp_path / "model.safetensors"
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(CheckpointError, match=r"^model.safetensors: unreadable safetensors file"):
        load_model(tmp_path)


def test_missing_shard_file_and_missing_weights(tmp_path):
    write_checkpoint(tmp_path)
    shard = _shard_of(tmp_path, "score.weight")
    (tmp_path / shard).unlink()
    with pytest.raises(CheckpointError, match=rf"^{re.escape(shard)}: missing file \({BIN_INDEX} puts \d+ tensor\(s\) there\)$"):
        load_model(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    shutil.copy(tmp_path / "config.json", empty)
    with pytest.raises(CheckpointError, match="no weights"):
        load_model(empty)


def test_config_errors(tmp_path):
    with pytest.raises(CheckpointError, match=r"config.json: missing"):
        load_config(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({**config_json(CONFIG), "hidden_act": "gelu"}))
    with pytest.raises(CheckpointError, match="hidden_act 'gelu' is not supported"):
        load_config(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({**config_json(CONFIG), "num_attention_heads": 5}))
    with pytest.raises(CheckpointError, match="not a multiple of num_attention_heads"):
        load_config(tmp_path)


def test_non_float_tensor(tmp_path):
    write_checkpoint(tmp_path)
    key = "score.bias"
    shard = _shard_of(tmp_path, key)
    _edit_shard(tmp_path / shard, lambda s: s.__setitem__(key, torch.zeros(1, dtype=torch.int64)))
    with pytest.raises(CheckpointError) as exc:
        load_model(tmp_path)
    assert one_line(exc) == f"{key}: dtype torch.int64 in {shard}, expected floating point"


def test_pickled_code_is_not_executed(tmp_path):
    write_checkpoint(tmp_path)
    shard = _shard_of(tmp_path, "score.weight")

    class Payload:
        def __reduce__(self):
            return (exec, ("raise SystemExit('code ran')",))

    state = torch.load(tmp_path / shard, weights_only=True)
    torch.save({**state, "evil": Payload()}, tmp_path / shard)
    with pytest.raises(CheckpointError, match=rf"^{re.escape(shard)}: unreadable weights file"):
        load_model(tmp_path)


def test_identity_follows_content(tmp_path):
    a = write_checkpoint(tmp_path / "a")
    b = tmp_path / "b"
    shutil.copytree(a, b)
    assert checkpoint_identity(a)["sha256"] == checkpoint_identity(b)["sha256"]
    shard = _shard_of(b, "score.weight")
    _edit_shard(b / shard, lambda s: s["score.weight"].add_(1))
    assert checkpoint_identity(a)["sha256"] != checkpoint_identity(b)["sha256"]


def _mis_shape(state):
    state["model.layers.1.mlp.up_proj.weight"] = torch.zeros(24, 20, dtype=torch.bfloat16)


def _int_bias(state):
    state["score.bias"] = torch.zeros(1, dtype=torch.int64)


def _extra(state):
    state["lm_head.weight"] = torch.zeros(64, 16, dtype=torch.bfloat16)


def _drop_norm(state):
    state.pop("model.norm.weight")


@pytest.mark.parametrize("kind", ["bin", "safetensors"])
@pytest.mark.parametrize("shards", [1, 3])
@pytest.mark.parametrize("edit", [_mis_shape, _int_bias, _extra, _drop_norm])
def test_header_check_refuses_what_loading_refuses_without_reading_weights(tmp_path, monkeypatch, kind, shards, edit):
    state = {k: v.to(torch.bfloat16) for k, v in random_state(CONFIG, seed=1).items()}
    edit(state)
    write_checkpoint(tmp_path, kind=kind, shards=shards, state=state)
    expected = expected_shapes(CONFIG)
    with pytest.raises(CheckpointError) as loading:
        load_model(tmp_path)
    # The header check must not touch the weights: reading a tensor's data fails the test.
    monkeypatch.setattr(checkpoint_mod, "_iter_file", lambda *a: pytest.fail("weights were read"))
    with pytest.raises(CheckpointError) as header:
        check_weights(tmp_path, expected)
    assert one_line(header) == one_line(loading)


@pytest.mark.parametrize("kind", ["bin", "safetensors"])
def test_header_check_passes_a_good_checkpoint_and_catches_a_truncated_one(tmp_path, kind):
    write_checkpoint(tmp_path, kind=kind, shards=3)
    check_weights(tmp_path, expected_shapes(CONFIG))
    shard = sorted(tmp_path.glob("*.safetensors" if kind == "safetensors" else "*.bin"))[1]
    shard.write_bytes(shard.read_bytes()[:-10])
    with pytest.raises(CheckpointError, match=rf"^{re.escape(shard.name)}: (unreadable|truncated)"):
        check_weights(tmp_path, expected_shapes(CONFIG))
