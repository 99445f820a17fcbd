"""Helpers shared by the generation tests: synthetic samples (never test-set text), request keys
as the mock server computes them, and a scan for leaked secrets."""

from __future__ import annotations

from pathlib import Path

import pytest

from charactereval_lib.charactereval.data import OfficialData, Sample
from charactereval_lib.charactereval.requests import make_requests
from charactereval_lib.engine.generation.base import DecodingParams, build_payload, request_sha256
from charactereval_lib.testing.mockserver import MockServer, request_key

ROLES = ("甲乙", "丙")
PROFILES = {"甲乙": {"姓名": "甲乙", "性格": "沉稳"}, "丙": {"姓名": "丙", "身份": "掌柜"}}
# A key no test writes anywhere on purpose: it must never show up in a run directory or output.
FAKE_KEY = "sk-test-DO-NOT-LEAK-7f3a9c2e41b8d605"


def synthetic_data(count: int) -> OfficialData:
    """``count`` samples whose contexts follow the official format and vary in length (so HF
    batches need padding); each has its own messages, hence its own request key."""
    samples = []
    for i in range(count):
        role, other = ROLES[i % 2], ROLES[(i + 1) % 2]
        lines = []
        for turn in range(1 + i % 4):
            lines.append(f"{other}：第{i}号样本的问题{turn}")
            lines.append(f"{role}：回答{turn}")
        lines.append(f"{other}：最后一句{i}")
        samples.append(Sample(1000 + i, role, "合成小说", "\n".join(lines)))
    id2metric = {str(s.id): (("Fluency", "对话流利度"),) for s in samples}
    return OfficialData(Path("synthetic"), samples, PROFILES, id2metric)


def keys_by_id(data: OfficialData) -> dict[int, str]:
    """The mock server's plan key of each sample's request."""
    return {r.id: request_key(r.messages) for r in make_requests(data.samples, data)}


def expected_sha(data: OfficialData, model: str, params: DecodingParams) -> dict[int, str]:
    return {r.id: request_sha256(build_payload(model, r.messages, params)) for r in make_requests(data.samples, data)}


def files_containing(root: Path, secret: str) -> list[Path]:
    """Every file under ``root`` whose bytes contain ``secret``."""
    needle = secret.encode()
    return [p for p in Path(root).rglob("*") if p.is_file() and needle in p.read_bytes()]


# Fixtures shared by the generation test files (imported there by name).
@pytest.fixture
def server():
    """The local OpenAI-compatible test server."""
    with MockServer(hang_s=3.0) as mock:
        yield mock


@pytest.fixture(autouse=True)
def fake_key(monkeypatch):
    """A recognisable API key, so tests can check it never lands in an artifact."""
    monkeypatch.setenv("OPENAI_API_KEY", FAKE_KEY)


def interruptible() -> None:
    """``preexec_fn`` of a child that a test interrupts: SIGINT back to its default, because a
    launcher that runs the suite as a background job (``cmd &``, nohup) ignores it, the child
    would inherit that, and neither Python's KeyboardInterrupt nor Ray's task cancellation
    would ever fire."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)
