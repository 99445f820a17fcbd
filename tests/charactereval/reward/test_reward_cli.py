"""The ``rm`` commands: download failing offline with one clear line (never a real download),
``rm check`` and ``rm make-tiny``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from _reward_support import tiny_checkpoint
from charactereval_lib.charactereval.reward.checkpoint import load_model
from charactereval_lib.charactereval.reward.download import RM_FILES, RM_REPO, RM_REVISION, check_rm_dir
from charactereval_lib.charactereval.reward.model import sigmoid_faithful
from charactereval_lib.charactereval.reward.tiny import LABEL_KEY, TINY_LABEL, tiny_label
from charactereval_lib.charactereval.reward.tokenizer import load_tokenizer
from charactereval_lib.cli import main

REPO = Path(__file__).resolve().parents[3]


def run_cli(args: list[str], env_extra: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), **env_extra}
    return subprocess.run(
        [sys.executable, "-m", "charactereval_lib.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.slow
def test_download_offline_fails_with_one_line(tmp_path):
    # (An unreachable endpoint ends the same way, but only after the hub client's ~25 s of
    # retries, too slow for the suite.)
    hint = "HF_HUB_OFFLINE is set"
    env = {"HF_HOME": str(tmp_path / "hf"), "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_OFFLINE": "1"}
    result = run_cli(["rm", "download", "--dir", str(tmp_path / "rm")], env, tmp_path)
    assert result.returncode == 2, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    line = lines[0]
    assert line.startswith("error: ") and f"{RM_REPO}@{RM_REVISION[:7]}" in line
    assert "download into" in line and hint in line and "Traceback" not in result.stderr


def test_rm_check_reports_missing_files(tmp_path, capsys):
    rm = tiny_checkpoint(layers=1, hidden=16, heads=2)
    assert check_rm_dir(rm) == []
    assert main(["rm", "check", str(rm)]) == 0
    broken = tmp_path / "broken"
    broken.mkdir()
    for f in rm.iterdir():
        if f.name != "pytorch_model-00002-of-00003.bin":
            (broken / f.name).write_bytes(f.read_bytes())
    problems = check_rm_dir(broken)
    assert problems == [f"{broken / 'pytorch_model-00002-of-00003.bin'}: missing"]
    assert main(["rm", "check", str(broken)]) == 1
    assert "pytorch_model-00002-of-00003.bin: missing file" in capsys.readouterr().err
    assert RM_FILES[0] == "config.json"


def test_rm_check_reports_a_mis_shaped_tensor_from_the_headers(tmp_path, capsys):
    import shutil

    import torch

    broken = tmp_path / "broken"
    shutil.copytree(tiny_checkpoint(layers=1, hidden=16, heads=2), broken)
    index = json.loads((broken / "pytorch_model.bin.index.json").read_text())["weight_map"]
    key = "model.layers.0.mlp.up_proj.weight"
    shard = broken / index[key]
    state = torch.load(shard, weights_only=True)
    state[key] = torch.zeros(state[key].shape[0], state[key].shape[1] + 1, dtype=state[key].dtype)
    torch.save(state, shard)
    assert check_rm_dir(broken) == [f"{key}: shape {tuple(state[key].shape)} expected {tuple(state[key].shape[:1]) + (16,)} in {shard.name}"]
    assert main(["rm", "check", str(broken)]) == 1
    assert f"{key}: shape" in capsys.readouterr().err


def test_make_tiny_writes_a_labelled_official_layout(tmp_path, capsys):
    out = tmp_path / "tiny"
    assert main(["rm", "make-tiny", str(out), "--layers", "1", "--hidden", "16", "--heads", "2", "--vocab", "1200"]) == 0
    assert TINY_LABEL in capsys.readouterr().out
    names = {p.name for p in out.iterdir()}
    assert set(RM_FILES) <= names and "README.md" in names
    assert check_rm_dir(out) == []
    assert json.loads((out / "config.json").read_text())[LABEL_KEY] == TINY_LABEL == tiny_label(out)
    assert "meaningless" in (out / "README.md").read_text()
    special = json.loads((out / "special_tokens_map.json").read_text())
    assert special["eos_token"]["single_word"] is True and special["pad_token"] == "</s>"
    tok = load_tokenizer(out)
    ids, _ = tok.rm_input_ids("<RoleInfo>\n\n{'a': 'b'} </s> x")
    assert 2 in ids[:-1] and ids[-1] == 2
    assert 0 < sigmoid_faithful(load_model(out), ids) < 1


def test_make_tiny_too_small_vocabulary_is_one_line_and_leaves_nothing(tmp_path, capsys):
    assert main(["rm", "make-tiny", str(tmp_path / "new" / "t"), "--vocab", "300"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "sentencepiece training failed" in err and "vocab" in err.lower()
    assert f"{tmp_path / 'new' / 't' / 'tokenizer.model'}: " in err
    # Neither the directory nor the parent the command would have made.
    assert list(tmp_path.iterdir()) == []


def test_make_tiny_failing_half_way_leaves_the_directory_as_it_was(tmp_path, monkeypatch, capsys):
    from charactereval_lib.charactereval.reward import tiny

    def no_space(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(tiny, "save_checkpoint", no_space)
    existing = tmp_path / "existing"
    existing.mkdir()
    (existing / "notes.txt").write_text("mine")
    for out in (tmp_path / "fresh" / "tiny", existing):
        assert main(["rm", "make-tiny", str(out), "--layers", "1", "--hidden", "16", "--heads", "2"]) == 1
        assert "No space left on device" in capsys.readouterr().err
    # No half-written checkpoint, no staging folder, nothing made for the fresh path.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["existing"]
    assert [p.name for p in existing.iterdir()] == ["notes.txt"]


def test_score_requires_rm_and_reports_bad_checkpoints(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "rows.jsonl").write_text("", encoding="utf-8")
    data_dir = tmp_path / "nodata"
    assert main(["score", str(run), "--data-dir", str(data_dir), "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1
