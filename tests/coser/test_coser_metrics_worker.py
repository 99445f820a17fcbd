"""The BLEU/ROUGE-L child process gives exactly what ``surface_metrics`` gives in this process,
says why when a computation fails, and fails (never hangs) the computations of a child that dies,
then starts a new one."""

from __future__ import annotations

import struct

import pytest

from charactereval_lib.coser.metrics import surface_metrics
from charactereval_lib.coser.metrics_worker import MetricsWorker, MetricsWorkerError

# Generous: the child imports NLTK (about a second of CPU) and the machine may be busy.
WAIT_S = 120

TEXTS = [
    ("Tom: [I must stay calm] (looks up) The river is high today. We should wait.",
     "Tom: The river is high. Huck: Then we wait for the morning, as you said."),
    ("Anne: \u201cWhat a lovely morning!\u201d\n\nMarilla: It is. Eat your breakfast.",
     "Marilla: Eat your breakfast, Anne. Anne: What a lovely, lovely morning it is!"),
    ("...", "A reference. With two sentences."),  # no ROUGE-L sentence in the hypothesis: None
]


def bits(value):
    return value if value is None else struct.pack("<d", value)


@pytest.fixture(scope="module")
def worker():
    worker = MetricsWorker()
    yield worker
    worker.close()


def test_same_values_bit_for_bit(worker):
    futures = [worker.submit(text, reference) for text, reference in TEXTS]
    for (text, reference), future in zip(TEXTS, futures):
        here = surface_metrics(text, reference)
        there = future.result(WAIT_S)
        assert list(there) == list(here)  # the same keys in the same order: records stay byte-identical
        assert {k: bits(v) if not isinstance(v, str) else v for k, v in there.items()} == \
            {k: bits(v) if not isinstance(v, str) else v for k, v in here.items()}
    assert worker.cpu_s > 0


def test_a_failed_computation_says_why(worker):
    with pytest.raises(MetricsWorkerError, match="BLEU/ROUGE-L failed: AttributeError"):
        worker.submit(None, "a reference").result(WAIT_S)
    # The child is still there for the next one.
    assert worker.submit(*TEXTS[0]).result(WAIT_S) == surface_metrics(*TEXTS[0])


def test_a_dead_child_fails_what_it_had_and_is_replaced(worker):
    worker.submit(*TEXTS[0]).result(WAIT_S)
    child = worker._child
    pending = worker.submit(*TEXTS[1])
    child.process.kill()
    try:
        pending.result(WAIT_S)  # answered before the kill landed
    except MetricsWorkerError as exc:
        assert "process ended" in str(exc)
    child.process.wait(WAIT_S)
    assert worker.submit(*TEXTS[1]).result(WAIT_S) == surface_metrics(*TEXTS[1])
    assert worker._child is not child
