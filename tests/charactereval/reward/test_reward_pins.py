"""The official checkpoint's side files are pinned (seed 000 §0, item 04): a directory that
claims the official architecture must carry them, checked at download (``check_rm_dir``, what
``rm download`` and ``rm check`` run) and at load (``checkpoint_identity``, what every scoring
session runs); a mismatch is one line naming the file. Test checkpoints are not held to them."""

from __future__ import annotations

import hashlib
import json
import shutil

import pytest

from _reward_support import tiny_checkpoint
from charactereval_lib import cli
from charactereval_lib.charactereval.reward import pins
from charactereval_lib.charactereval.reward.checkpoint import checkpoint_identity
from charactereval_lib.charactereval.reward.download import check_rm_dir
from charactereval_lib.charactereval.reward.errors import CheckpointError


def sha256(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def official_claim(tmp_path):
    """A copy of a tiny checkpoint whose config says it has the official architecture."""
    target = tmp_path / "claims-official"
    shutil.copytree(tiny_checkpoint(), target)
    config = json.loads((target / "config.json").read_text(encoding="utf-8"))
    (target / "config.json").write_text(json.dumps({**config, **pins.OFFICIAL_SHAPE}), encoding="utf-8")
    return target


def test_the_pins_are_seed_000s_digests_and_name_what_is_not_pinned_yet():
    assert pins.SIDE_FILE_PINS["config.json"] == "25ae0bd0…a0a489"
    assert pins.SIDE_FILE_PINS["tokenizer_config.json"] == "3d136a6d…5fb"
    assert pins.SIDE_FILE_PINS["special_tokens_map.json"] == "2f5a9116…cb26"
    assert pins.unpinned() == ["tokenizer.model", "pytorch_model.bin.index.json"]
    assert pins.matches("25ae0bd0" + "0" * 50 + "a0a489", "25ae0bd0…a0a489")
    assert not pins.matches("25ae0bd1" + "0" * 50 + "a0a489", "25ae0bd0…a0a489")
    assert pins.matches("ab" * 32, "ab" * 32) and not pins.matches("ab" * 32, "ba" * 32)


def test_a_test_checkpoint_is_not_held_to_the_official_pins():
    assert not pins.claims_official(tiny_checkpoint())
    assert checkpoint_identity(tiny_checkpoint())["sha256"]
    assert check_rm_dir(tiny_checkpoint()) == []


def test_a_directory_claiming_the_official_architecture_with_other_side_files_is_refused_naming_the_file(
        official_claim, capsys):
    with pytest.raises(CheckpointError) as error:
        checkpoint_identity(official_claim)
    message = str(error.value)
    assert message.startswith(f"{official_claim / 'config.json'}: SHA-256 ") and "\n" not in message
    assert "not the pinned 25ae0bd0…a0a489 of morecry/BaichuanCharRM@e953da5" in message
    problems = check_rm_dir(official_claim)
    assert [p.split(":")[0] for p in problems[:3]] == [
        str(official_claim / name) for name in ("config.json", "tokenizer_config.json", "special_tokens_map.json")]
    assert cli.main(["rm", "check", str(official_claim)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"error: {official_claim / 'config.json'}: SHA-256 ")


@pytest.mark.parametrize("altered", ["config.json", "tokenizer_config.json", "special_tokens_map.json",
                                     "tokenizer.model", "pytorch_model.bin.index.json"])
def test_with_matching_pins_it_loads_and_any_altered_side_file_is_named(official_claim, monkeypatch, altered, capsys):
    # The pins as they would be for this directory: abbreviated like the seed's for the JSON
    # files, whole for the tokenizer and the index.
    digests = {name: sha256(official_claim / name) for name in pins.SIDE_FILE_PINS}
    pinned = {name: (d if name in ("tokenizer.model", "pytorch_model.bin.index.json") else f"{d[:8]}…{d[-6:]}")
              for name, d in digests.items()}
    monkeypatch.setattr(pins, "SIDE_FILE_PINS", pinned)
    assert checkpoint_identity(official_claim)["files"]["config.json"] == digests["config.json"]
    assert not [p for p in check_rm_dir(official_claim) if "pinned" in p]
    path = official_claim / altered
    path.write_bytes(path.read_bytes() + b" ")
    with pytest.raises(CheckpointError, match=rf"^{path}: SHA-256 [0-9a-f]{{64}} is not the pinned "):
        checkpoint_identity(official_claim)
    # Without its config nothing claims to be official, and without its index there are no
    # weights: other one-line errors say so.
    if altered not in ("config.json", "pytorch_model.bin.index.json"):
        path.unlink()
        with pytest.raises(CheckpointError, match=rf"^{path}: missing; the official checkpoint"):
            checkpoint_identity(official_claim)
