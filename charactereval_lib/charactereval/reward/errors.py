"""Errors of the reward-model package, importable without torch (the CLI reports them:
``Benchmark.errors``)."""

from __future__ import annotations


class CheckpointError(ValueError):
    """A checkpoint directory, file or tensor that cannot be used as it is."""


class TokenizerError(ValueError):
    """A tokenizer directory that cannot be used as it is."""


class DownloadError(RuntimeError):
    """The checkpoint could not be fetched or is incomplete."""

