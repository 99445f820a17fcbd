"""ROUGE-L computed with numpy returns the ``rouge`` package's value bit for bit: on random texts
against the package itself, and on the 700 released simulation texts of the paper-era result
files against the values the package gave (``golden/coser_rouge_l_released.json``)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from charactereval_lib.coser.data import load_test_set
from charactereval_lib.coser.judge import reference_str
from charactereval_lib.coser.metrics import rouge_l
from charactereval_lib.coser.official import CASES_KEYS, _model_section, _pick
from charactereval_lib.coser.versions import COSER_PAPER
from tests.coser_golden import data_dir

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "coser_rouge_l_released.json"
RELEASED = Path("upstream") / "rebuttal-d77a6d2" / "exp" / "evaluation"


def package_rouge_l(hypothesis: str, reference: str) -> float:
    from rouge import Rouge

    return float(Rouge(metrics=["rouge-l"]).get_scores(hypothesis, reference)[0]["rouge-l"]["f"])


def outcome(fn, hypothesis: str, reference: str) -> str:
    try:
        return repr(fn(hypothesis, reference))
    except ValueError as exc:
        return f"ValueError: {exc}"


def test_rouge_l_equals_the_package_on_random_texts():
    # Few distinct words, periods, runs of whitespace, whitespace-only sentences and empty texts:
    # ties in the LCS tables (which backtrace is taken), repeated words, the empty word.
    pieces = ["a", "b", "c", "the", "The", "x.", ".", "..", " ", "  ", "\n", "\t", "é", "y z", "a b a"]
    rng = random.Random(0)
    for _ in range(1500):
        hypothesis = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 40)))
        reference = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 40)))
        assert outcome(rouge_l, hypothesis, reference) == outcome(package_rouge_l, hypothesis, reference), \
            (hypothesis, reference)


def test_rouge_l_on_long_sentences_and_many_of_them_equals_the_package():
    rng = random.Random(1)
    words = [f"w{i}" for i in range(30)]
    text = lambda sentences, size: ". ".join(" ".join(rng.choice(words) for _ in range(size)) for _ in range(sentences))  # noqa: E731
    for hypothesis, reference in ((text(1, 300), text(1, 250)), (text(60, 8), text(45, 12)), (text(3, 120), text(90, 3))):
        assert repr(rouge_l(hypothesis, reference)) == repr(package_rouge_l(hypothesis, reference))


@pytest.mark.slow
def test_rouge_l_equals_the_packages_values_on_the_700_released_simulation_texts():
    folder = data_dir() / RELEASED
    if not folder.is_dir():
        pytest.skip(f"{folder}: CoSER's released result files are not in this data directory")
    expected = json.loads(GOLDEN.read_text(encoding="utf-8"))["values"]
    scenes = {s.key: s for s in load_test_set(data_dir())}
    count = 0
    for name, values in expected.items():
        document = json.loads((folder / name).read_text(encoding="utf-8"))
        _, cases = _pick(document, CASES_KEYS, name)
        _, section = _model_section(cases, None, name)
        got = [rouge_l(case["simulation_text"], reference_str(scenes[key].raw["dialogues"], COSER_PAPER))
               for key, case in section.items()]
        assert [repr(v) for v in got] == [repr(v) for v in values], name
        count += len(got)
    assert count == 700
