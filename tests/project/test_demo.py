"""`make demo` as shipped: the tiny reward model it builds gives realistic RM input lengths."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from charactereval_lib.apps import batch
from charactereval_lib.charactereval.subsets import stratified_subset, write_ids
from charactereval_lib.cli import main

ROOT = Path(__file__).resolve().parents[2]


def demo_recipe() -> list[str]:
    """The shell commands of the Makefile's ``demo`` target, continuation lines joined."""
    text = (ROOT / "Makefile").read_text(encoding="utf-8").replace("\\\n", " ")
    lines = text.split("\ndemo:", 1)[1].splitlines()[1:]
    recipe = []
    for line in lines:
        if not line.startswith("\t"):
            break
        recipe.append(line.strip())
    return recipe


@pytest.mark.conformance
def test_demo_builds_its_tiny_model_from_the_data(official_data, official_dir, tmp_path, capsys):
    command = next(c for c in demo_recipe() if "rm make-tiny" in c)
    guard, build = command.split("||")
    words = shlex.split(build)
    args = words[words.index("make-tiny") + 1:]
    demo = batch.load_config(ROOT / "configs" / "demo.yaml")
    assert args[0] == demo.models[0].score.rm and "--from-data" in args

    rm = tmp_path / "tiny-rm"
    assert main(["rm", "make-tiny", str(rm), *args[1:], "--data-dir", str(official_dir)]) == 0
    # The Makefile's guard recognises the model it built, so a second `make demo` keeps it.
    marker = shlex.split(guard)[2]
    assert marker in (rm / "README.md").read_text(encoding="utf-8")

    ids = tmp_path / "ids.txt"
    write_ids(ids, stratified_subset(official_data, demo.models[0].subset))
    run = tmp_path / "run"
    flags = ["--data-dir", str(official_dir)]
    assert main(["generate", str(run), "--backend", "offline", "--model", demo.models[0].generate.model, "--ids", str(ids), *flags]) == 0
    assert main(["transform", str(run), *flags]) == 0
    assert main(["score", str(run), "--rm", str(rm), "--dry-run", *flags]) == 0
    capsys.readouterr()
    inputs = [json.loads(line) for line in (run / "rm_inputs.jsonl").read_text(encoding="utf-8").splitlines()]
    truncated = sum(r["truncated"] for r in inputs)
    # A tokenizer trained on synthetic text truncated 45 of these 358 inputs (12.6%); trained on
    # the data it truncates none, as expected of the real one (at most 16 of 8,032 inputs of
    # each released model even exceed 4,096 characters).
    assert len(inputs) == 358
    assert truncated / len(inputs) < 0.01, f"{truncated} of {len(inputs)} RM inputs truncated"
