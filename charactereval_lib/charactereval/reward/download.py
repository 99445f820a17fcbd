"""``charactereval rm download``: the official reward model at its pinned revision.

Only what scoring needs is fetched (config, weight shards and index, tokenizer files); the
repository's Python files are never downloaded or run. ``huggingface_hub`` resumes an
interrupted download from the partial files it keeps under ``DIR/.cache``.
"""

from __future__ import annotations

from pathlib import Path

from charactereval_lib.charactereval.reward import pins
from charactereval_lib.charactereval.reward.checkpoint import (
    CONFIG,
    CheckpointError,
    check_weights,
    expected_shapes,
    file_sha256,
    load_config,
)
from charactereval_lib.charactereval.reward.errors import DownloadError

RM_REPO = "morecry/BaichuanCharRM"
RM_REVISION = "e953da5f57b86db7adca3a2714b4c3720f5b96a2"
DEFAULT_RM_DIR = Path("models") / "BaichuanCharRM"
RM_FILES = (
    CONFIG,
    "pytorch_model.bin.index.json",
    "pytorch_model-00001-of-00003.bin",
    "pytorch_model-00002-of-00003.bin",
    "pytorch_model-00003-of-00003.bin",
    "tokenizer.model",
    "tokenizer_config.json",
    "special_tokens_map.json",
)


def check_rm_dir(model_dir: str | Path, required: tuple[str, ...] = RM_FILES) -> list[str]:
    """Problems that would stop scoring, one line each (empty: the directory is usable). Reads
    the config, the index and every tensor's header (key, shape, dtype), not the weights."""
    model_dir = Path(model_dir)
    problems = []
    for name in required:
        path = model_dir / name
        if not path.exists():
            problems.append(f"{path}: missing")
        elif path.stat().st_size == 0:
            problems.append(f"{path}: empty")
    if problems:
        return problems
    digests = {name: file_sha256(model_dir / name) for name in pins.SIDE_FILE_PINS if (model_dir / name).is_file()}
    problems += pins.problems(model_dir, digests)
    try:
        check_weights(model_dir, expected_shapes(load_config(model_dir)))
    except CheckpointError as exc:
        problems.append(str(exc))
    return problems


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip()
    first = text.splitlines()[0] if text else ""
    return f"{type(exc).__name__}: {first[:240]}" if first else type(exc).__name__


def download_rm(dest: str | Path = DEFAULT_RM_DIR, *, endpoint: str | None = None) -> Path:
    """Fetch ``morecry/BaichuanCharRM`` at the pinned revision into ``dest`` (resuming partial
    files), then check that everything scoring needs is there. Raises DownloadError with one
    line that says what failed and what to do."""
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.utils import logging as hub_logging

    dest = Path(dest)
    where = f"{RM_REPO}@{RM_REVISION[:7]}"
    # The client retries failed requests by itself; its per-retry warnings would bury the one
    # line that says what finally went wrong.
    verbosity = hub_logging.get_verbosity()
    hub_logging.set_verbosity_error()
    try:
        snapshot_download(
            RM_REPO,
            revision=RM_REVISION,
            local_dir=dest,
            allow_patterns=list(RM_FILES),
            endpoint=endpoint,
        )
    except Exception as exc:
        hint = (
            "HF_HUB_OFFLINE is set, so nothing can be fetched"
            if constants.HF_HUB_OFFLINE
            else "is the Hugging Face Hub reachable (HF_ENDPOINT, proxy)?"
        )
        raise DownloadError(
            f"{where}: download into {dest} failed ({_one_line(exc)}); {hint}; a partial download "
            f"resumes when re-run, or copy the files in by hand and run `charactereval rm check {dest}`"
        ) from None
    finally:
        hub_logging.set_verbosity(verbosity)
    problems = check_rm_dir(dest)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise DownloadError(f"{where}: downloaded into {dest} but incomplete: {problems[0]}{more}")
    return dest
