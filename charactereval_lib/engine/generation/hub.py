"""A Hugging Face Hub model id checked before transformers looks it up.

transformers asks the Hub for each file and, when a repository is missing (or private, or the
network is down), huggingface_hub retries with back-off and prints each try: about 49 s of
messages before the error. One request here, with a short timeout and no retry, answers the
question first: a model that is not there, or a Hub that cannot be reached for a model that is
not in the local cache, is one line within seconds.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from pathlib import Path

from charactereval_lib.engine.generation.base import ConfigError

DEFAULT_ENDPOINT = "https://huggingface.co"
# Seconds the one request may take; a Hub that answers needs well under one.
TIMEOUT_S = 4.0
OFFLINE_VARS = ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")


def hub_offline() -> bool:
    """Whether the user told huggingface_hub (or transformers) to stay offline."""
    return any(os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on") for name in OFFLINE_VARS)


def cached(model: str) -> bool:
    """Whether the local Hub cache holds the model's config.json (what loading it reads first)."""
    from huggingface_hub import try_to_load_from_cache

    try:
        found = try_to_load_from_cache(model, "config.json")
    except ValueError:  # not a valid repository id
        return False
    return isinstance(found, str)


def check_hub_model(model: str, *, timeout: float = TIMEOUT_S) -> None:
    """Raise ``ConfigError`` (one line) when ``model`` is neither a local directory nor a model
    the Hub has (or lets this user see), or when the Hub cannot be reached (or is switched off)
    and the model is not in the local cache. A model that is there returns at once."""
    if Path(model).expanduser().is_dir():
        return
    if hub_offline():
        if not cached(model):
            raise ConfigError(f"{model}: not a local directory, and not in the Hugging Face cache "
                              f"({'/'.join(v for v in OFFLINE_VARS if os.environ.get(v))} is set: the Hub is not asked)")
        return
    endpoint = os.environ.get("HF_ENDPOINT", DEFAULT_ENDPOINT).rstrip("/")
    url = f"{endpoint}/api/models/{model}"
    headers = {"User-Agent": "charactereval_lib"}
    from huggingface_hub import get_token

    token = get_token()
    if token:
        headers["Authorization"] = f"Bearer {token}"
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout) as response:
            json.load(response)
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403, 404):
            login = "" if token else "; a gated or private one needs `hf auth login` or $HF_TOKEN"
            raise ConfigError(f"{model}: no such model on the Hugging Face Hub ({endpoint} answered {exc.code}"
                              f"{login}), and not a local directory") from None
        raise ConfigError(f"{model}: the Hugging Face Hub ({endpoint}) answered {exc.code} {exc.reason}") from None
    except (OSError, ValueError) as exc:
        # Unreachable (no network, DNS, timeout) or not the Hub's API: a cached model still loads.
        if cached(model):
            return
        reason = getattr(exc, "reason", None) or exc
        raise ConfigError(f"{model}: cannot reach the Hugging Face Hub at {endpoint} ({reason}) and the model is "
                          "not in the local cache (download it where there is a network, or pass a local "
                          "directory)") from None
