"""What the Ray test files share: one local cluster per module."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """One local cluster for the module: two CPUs (the machine's), no dashboard; workers import
    this checkout and keep checkpoint digests in a private cache."""
    ray = pytest.importorskip("ray")
    cache = tmp_path_factory.mktemp("ray-cache")
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": str(REPO), "XDG_CACHE_HOME": str(cache)}},
    )
    yield ray
    ray.shutdown()
