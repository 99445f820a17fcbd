"""Shared fixtures: the real official data (when configured) and synthetic data directories."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from charactereval_lib.charactereval.data import DATA_DIR_ENV, OfficialData, load_official_data, locate_data_dir
from charactereval_lib.coser.data import DATA_DIR_ENV as COSER_DATA_ENV
from charactereval_lib.coser.data import locate_data_dir as locate_coser_dir
from charactereval_lib.engine.storage.runs import WORKSPACE_ENV

NO_DATA_REASON = (
    f"official data not configured: run `charactereval data use DIR` (or set {DATA_DIR_ENV}) with a directory "
    "holding test_data.jsonl, character_profiles.json and id2metric.jsonl, or run `charactereval data fetch` "
    "(data/official/)"
)
NO_COSER_DATA_REASON = (
    f"CoSER data not configured: run `charactereval coser data use DIR` (or set {COSER_DATA_ENV}), or fetch it "
    "into data/coser/"
)

# The data each test is handed (``session_data_dir``): resolved once when the session starts
# (``pytest_configure``) and kept here for the xdist workers, which inherit the environment; an
# empty value means none is configured.
SESSION_DATA = {"charactereval": "CHARACTEREVAL_TESTS_DATA_DIR", "coser": "CHARACTEREVAL_TESTS_COSER_DIR"}
# The file that shows a folder holds the benchmark's data.
DATA_MARKERS = {"charactereval": "test_data.jsonl", "coser": "test_set.json"}
# What the tests must not inherit from the user (``hermetic``): the data settings, the workspace
# and the home directories' configuration.
DATA_VARS = {"charactereval": DATA_DIR_ENV, "coser": COSER_DATA_ENV}
HOME_VARS = ("XDG_CONFIG_HOME", "XDG_DATA_HOME", "XDG_STATE_HOME", "XDG_CACHE_HOME")


def real_data_dir() -> Path | None:
    """The official data where the CLI finds it without a flag (``locate_data_dir``): the
    environment variable, else the workspace's `charactereval data use DIR`, else ``data/official/``
    once `charactereval data fetch` filled it (None when none of them holds the data)."""
    path = locate_data_dir()
    if os.environ.get(DATA_DIR_ENV) or (path / DATA_MARKERS["charactereval"]).exists():
        return path.absolute()
    return None


def real_coser_dir() -> Path | None:
    """The CoSER data where the CLI finds it without a flag (None when it holds no test set)."""
    path = locate_coser_dir()
    return path.absolute() if (path / DATA_MARKERS["coser"]).exists() else None


def session_data_dir(benchmark: str) -> Path | None:
    """The data directory of ``benchmark`` that this session resolved when it started."""
    value = os.environ.get(SESSION_DATA[benchmark])
    return Path(value) if value else None


def pytest_configure(config) -> None:
    """The controller (the only process without xdist) names the folder its workers share for
    the session's Ray cluster (``_ray_support``) and its tiny reward model (``tiny_rm``), and splits the CPUs between its workers' math
    libraries; workers, and every process they start, inherit both with the environment."""
    import tempfile

    from _ray_support import SESSION_DIR_ENV

    if hasattr(config, "workerinput"):
        return
    # Where the data is, asked once as the CLI asks (the variable, else the workspace's `data
    # use`, else the default folder), before any test changes the environment or the directory.
    for benchmark, found in (("charactereval", real_data_dir()), ("coser", real_coser_dir())):
        os.environ.setdefault(SESSION_DATA[benchmark], str(found or ""))
    if not os.environ.get(SESSION_DIR_ENV):
        os.environ[SESSION_DIR_ENV] = tempfile.mkdtemp(prefix="charactereval-tests-")
    workers = config.getoption("numprocesses", None)
    if isinstance(workers, int) and workers > 1:
        # torch (OpenMP, MKL) and numpy's BLAS start one thread per core in each process, and
        # OpenMP's threads spin while they wait: two xdist workers on two cores each running
        # two threads wasted a sixth of the suite's CPU (make test 348 -> 310 s; the reward
        # model's golden tests 20.6 -> 5.8 s). A value set by whoever runs the suite stays.
        os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // workers)))


def pytest_unconfigure(config) -> None:
    """The controller ends the session's Ray cluster once every worker is done."""
    from _ray_support import SESSION_DIR_ENV, stop_shared_cluster

    if not hasattr(config, "workerinput") and os.environ.get(SESSION_DIR_ENV):
        stop_shared_cluster(Path(os.environ.pop(SESSION_DIR_ENV)))


# Test files that run on one xdist worker, one after the other: the Ray files, so that one driver
# at a time uses the shared cluster (their kill-and-resume tests time their signals against the
# workers' progress) and the other xdist worker never starts Ray workers of its own.
ONE_WORKER = {name: "ray" for name in ("tests/apps/test_batch_ray.py", "tests/engine/ray/test_ray_generation.py",
                                       "tests/engine/ray/test_ray_scorer.py", "tests/perf/test_perf_scripts_ray.py",
                                       "tests/engine/ray/test_ray_nodes.py")}


def work_unit(nodeid: str) -> str:
    """The xdist work unit of a test: its file (its module fixtures are built once), or the name
    of the group its file belongs to in ``ONE_WORKER``."""
    path = nodeid.split("::", 1)[0]
    return ONE_WORKER.get(path, path)


def pytest_xdist_make_scheduler(config, log):
    """``--dist loadfile`` with the files of ``ONE_WORKER`` as one unit. (pytest-xdist's own
    ``loadgroup`` marks the group in the node id, which pytest 9 no longer lets it change: every
    test became a unit of its own.)"""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class FileScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    return FileScheduling(config, log)


def pytest_collection_modifyitems(config, items) -> None:
    """The units go out in the order the items have here (``make test`` passes
    ``--no-loadscope-reorder``): those with the most slow tests first, so that no worker is left
    with a long file at the end while the other waits."""
    slow: dict[str, int] = {}
    first: dict[str, int] = {}
    for index, item in enumerate(items):
        unit = work_unit(item.nodeid)
        first.setdefault(unit, index)
        slow[unit] = slow.get(unit, 0) + (item.get_closest_marker("slow") is not None)
    items.sort(key=lambda item: (-slow[work_unit(item.nodeid)], first[work_unit(item.nodeid)]))


@pytest.fixture(scope="session")
def ray_address() -> str:
    """The session's one local Ray cluster, started by the first test that needs it."""
    from _ray_support import shared_cluster_address

    return shared_cluster_address()


@pytest.fixture(scope="session")
def hermetic_home(tmp_path_factory) -> Path:
    """A home directory of this session's own (one per xdist worker: caches such as matplotlib's
    font list are built once per worker, not once per test)."""
    return tmp_path_factory.mktemp("home")


@pytest.fixture(scope="session", autouse=True)
def hermetic(hermetic_home) -> Iterator[None]:
    """Every test, and every module and session fixture (this one comes first), runs without
    the user's settings: its own home and XDG directories, no workspace named by
    $CHARACTEREVAL_HOME, and the data variables set to the data this session resolved when it
    started (``session_data_dir``) or unset, so that the workspace file of the directory pytest
    started in is never read by a lookup. What a test changes with ``monkeypatch`` is undone
    after it, back to this. A test that needs the data asks for ``official_dir`` or
    ``coser_dir`` and skips without it."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HOME", str(hermetic_home))
        for name in HOME_VARS:
            patch.setenv(name, str(hermetic_home / name.lower()))
        patch.delenv(WORKSPACE_ENV, raising=False)
        for benchmark, variable in DATA_VARS.items():
            found = session_data_dir(benchmark)
            if found is None:
                patch.delenv(variable, raising=False)
            else:
                patch.setenv(variable, str(found))
        yield


@pytest.fixture(scope="session")
def official_dir() -> Path:
    path = session_data_dir("charactereval")
    if path is None:
        pytest.skip(NO_DATA_REASON)
    return path


@pytest.fixture(scope="session")
def coser_dir() -> Path:
    path = session_data_dir("coser")
    if path is None:
        pytest.skip(NO_COSER_DATA_REASON)
    return path


@pytest.fixture(scope="session")
def official_data(official_dir: Path) -> OfficialData:
    return load_official_data(official_dir)


@pytest.fixture(scope="session")
def tiny_rm(official_dir: Path, tmp_path_factory) -> Path:
    """The tiny random reward model of the tests that score official rows (read only, shared by
    the session), made as `make demo` makes its own: tokenizer trained on the official data's
    text. One trained on synthetic text splits those inputs into about three times as many
    tokens and truncates some at 4,096, and attention costs the square of that: scoring 12
    samples took 13 s of CPU with it and 6.6 s with this one, which costs no more to make.
    Narrower than `make demo`'s (hidden 16 in 2 heads, not 64 in 8; the same 2 layers, so fast
    mode still runs a full attention layer before the last-position one): what these tests
    prove does not depend on the width, and attention on the official contexts costs in
    proportion to it, four times more CPU on an AVX2 machine's bf16 kernels (22 rows in fast
    mode: 5.8 -> 1.6 s there, 0.7 -> 0.3 s on AVX-512). Made once per run of the suite, not once per xdist worker: in the folder the workers share
    (``pytest_configure``), by the first to need it, under a lock the other waits on."""
    import fcntl

    from _ray_support import SESSION_DIR_ENV
    from charactereval_lib.cli import main

    shared = os.environ.get(SESSION_DIR_ENV)
    root = Path(shared) if shared else tmp_path_factory.mktemp("tiny-rm")
    path, made = root / "tiny-rm", root / "tiny-rm.made"
    with open(root / "tiny-rm.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not made.exists():
            assert main(["rm", "make-tiny", str(path), "--from-data", "--vocab", "8000", "--layers", "2",
                         "--hidden", "16", "--heads", "2", "--data-dir", str(official_dir)]) == 0
            made.touch()
    return path


def write_data_dir(
    path: Path,
    samples: list[dict[str, Any]],
    profiles: dict[str, Any],
    id2metric: dict[str, Any],
) -> Path:
    """A synthetic data directory in the official file formats (whole JSON documents)."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "test_data.jsonl").write_text(json.dumps(samples, ensure_ascii=False, indent=4), encoding="utf-8")
    (path / "character_profiles.json").write_text(json.dumps(profiles, ensure_ascii=False, indent=4), encoding="utf-8")
    (path / "id2metric.jsonl").write_text(json.dumps(id2metric, ensure_ascii=False, indent=4), encoding="utf-8")
    return path


SYNTHETIC_PROFILES = {
    "甲乙": {"姓名": "甲乙", "性格": "it's \"quoted\"", "经历": ["一", {"嵌套": "值"}]},
    "丙": {"姓名": "丙", "身份": "掌柜"},
}
SYNTHETIC_SAMPLES = [
    {"id": 1, "role": "甲乙", "novel_name": "书一", "context": "丙：你好\n甲乙：嗯：好\n丙：再见 "},
    {"id": 2, "role": "丙", "novel_name": "书二", "context": "丙：我先说\n甲乙：请讲"},
    {"id": 3, "role": "甲乙", "novel_name": "书一", "context": "丙：只有一行"},
    {"id": 4, "role": "丙", "novel_name": "书二", "context": "甲乙：没有指标"},
]
SYNTHETIC_ID2METRIC = {
    "1": [["Fluency", "对话流利度"], ["Empathy", "共情度"]],
    "2": [["Accuracy", "知识准确率"]],
    "3": [["Exposure", "知识曝光度"], ["Diversity", "表现多样性"], ["Coherence", "对话连贯性"]],
}


@pytest.fixture
def synthetic_dir(tmp_path: Path) -> Path:
    return write_data_dir(tmp_path / "data", SYNTHETIC_SAMPLES, SYNTHETIC_PROFILES, SYNTHETIC_ID2METRIC)


@pytest.fixture
def synthetic_data(synthetic_dir: Path) -> OfficialData:
    return load_official_data(synthetic_dir, verify=False)


# Fixtures of the support modules' helpers, named by the test files that use them. The two that
# change the environment are not autouse here: a test file asks for them with
# ``pytestmark = pytest.mark.usefixtures(...)``.
@pytest.fixture(scope="module")
def cluster(ray_address, tmp_path_factory):
    """This module's connection to the session's Ray cluster; workers import this checkout and
    keep checkpoint digests in a private cache."""
    import ray

    from _ray_support import REPO

    cache = tmp_path_factory.mktemp("ray-cache")
    ray.init(address=ray_address, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": str(REPO), "XDG_CACHE_HOME": str(cache)}})
    yield ray
    ray.shutdown()


@pytest.fixture
def private_digest_cache(tmp_path, monkeypatch):
    """Checkpoint digests are cached per user: each test gets its own cache."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def rm_dir() -> Path:
    """The scorer tests' tiny checkpoint (built once per session)."""
    from _reward_support import tiny_checkpoint

    return tiny_checkpoint(layers=2, hidden=32, heads=4)


@pytest.fixture
def setup(tmp_path):
    """(data, data_dir, run_dir, rows): 24 synthetic samples and their transformed rows."""
    from _reward_support import write_data_dir as write_synthetic_dir
    from _reward_support import write_rows

    data_dir = write_synthetic_dir(tmp_path / "data", 24)
    run_dir = tmp_path / "run"
    rows = write_rows(run_dir, data_dir)
    return load_official_data(data_dir, verify=False), data_dir, run_dir, rows


@pytest.fixture
def server():
    """The local OpenAI-compatible test server."""
    from charactereval_lib.testing.mockserver import MockServer

    with MockServer(hang_s=3.0) as mock:
        yield mock


@pytest.fixture
def fake_key(monkeypatch):
    """A recognisable API key, so tests can check it never lands in an artifact."""
    from tests.generation_support import FAKE_KEY

    monkeypatch.setenv("OPENAI_API_KEY", FAKE_KEY)
