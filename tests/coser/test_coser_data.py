"""CoSER data: pinned files verified, one-line errors, critic prompts read with ast only."""

from __future__ import annotations

import json
import shutil

import pytest

from charactereval_lib.coser import data as D
from charactereval_lib.coser.metrics import BleuUnavailable, bleu, rouge_l
from charactereval_lib.coser.upstream import DIMENSIONS, load_critic_prompts, parse_critic_prompts
from charactereval_lib.engine.storage.pinned import DataError
from tests.coser_golden import data_dir


def copy_data(tmp_path):
    src = data_dir()
    for spec in D.manifest().files:
        if spec.group == D.GROUP:
            (tmp_path / spec.name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src / spec.name, tmp_path / spec.name)
    return tmp_path


def test_real_data_verifies_and_loads():
    assert D.verify(data_dir()) == []
    scenes = D.load_test_set(data_dir())
    assert len(scenes) == 200
    assert [s.tag for s in scenes] == ["id"] * 100 + ["ood"] * 100
    assert len({s.key for s in scenes}) == 200
    critic = load_critic_prompts(data_dir())
    assert set(critic.details) == set(DIMENSIONS) and "{dimension_criteria}" in critic.template


def test_lookup_order(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # a folder with no workspace file
    monkeypatch.setenv(D.DATA_DIR_ENV, str(tmp_path))
    assert D.locate_data_dir("explicit") == D.Path("explicit")
    assert D.locate_data_dir() == tmp_path
    monkeypatch.delenv(D.DATA_DIR_ENV)
    assert D.locate_data_dir() == D.DEFAULT_DATA_DIR


def test_missing_altered_malformed_are_one_line_errors(tmp_path):
    root = copy_data(tmp_path)
    (root / "test_set.json").unlink()
    problems = D.verify(root)
    assert len(problems) == 1 and "missing" in problems[0] and "\n" not in problems[0]
    with pytest.raises(DataError, match="missing"):
        D.load_test_set(root)
    (root / "test_set.json").write_text("[1, 2", encoding="utf-8")
    with pytest.raises(DataError, match="SHA-256 mismatch"):
        D.load_test_set(root)
    with pytest.raises(DataError, match="malformed JSON"):
        D.load_test_set(root, verify_digests=False)
    (root / "test_set.json").write_text(json.dumps([{"book": "B"}]), encoding="utf-8")
    with pytest.raises(DataError, match="missing field 'plot'"):
        D.load_test_set(root, verify_digests=False)


def test_prompt_file_is_parsed_never_executed(tmp_path):
    marker = tmp_path / "executed"
    source = f"open({str(marker)!r}, 'w').write('x')\ncritic_prompts = {{'self-play-deduct-template': 'T', 'dimension_details': {{}}}}\n"
    with pytest.raises(DataError, match="exactly the 4 dimensions"):
        parse_critic_prompts(source.encode(), tmp_path / "prompts.py")
    assert not marker.exists()
    with pytest.raises(DataError, match="not a literal"):
        parse_critic_prompts(b"critic_prompts = dict(a=1)\n", tmp_path / "prompts.py")


def test_altered_prompt_file_is_refused(tmp_path):
    root = copy_data(tmp_path)
    path = root / D.UPSTREAM_PROMPTS
    path.write_bytes(path.read_bytes() + b"\n")
    with pytest.raises(DataError, match="mismatch"):
        load_critic_prompts(root)


def test_rouge_l_and_bleu_availability():
    assert rouge_l("the cat sat on the mat", "the cat is on the mat") == pytest.approx(0.8, abs=1e-6)
    # Available with the pinned NLTK and the packaged Punkt parameters (the project's dependencies).
    assert bleu("the cat sat on the mat", "the cat sat on the mat") == pytest.approx(1.0)


def test_the_released_results_and_both_utils_py_verify_against_the_manifest():
    names = {spec.name for spec in D.manifest().files}
    assert set(D.UPSTREAM_UTILS.values()) <= names
    if not (data_dir() / D.RELEASED_EVALUATION_DIR).is_dir():
        pytest.skip("released evaluation files not in the data directory")
    assert D.verify(data_dir(), with_results=True) == []
    # Each file is fetched from its own commit: utils.py of both versions, results of the rebuttal branch.
    urls = {spec.name: D.manifest().url(spec) for spec in D.manifest().files}
    assert "/93c147462592e372dba03afbdf37f5d0d667f8cc/gca_evaluation/utils.py" in urls[D.UPSTREAM_UTILS["coser-paper"]]
    assert all("/d77a6d2795f73d467b5eedfb36cdd5350515878d/exp/evaluation/" in url
               for name, url in urls.items() if name.startswith(D.RELEASED_EVALUATION_DIR))


def test_bleu_is_unavailable_with_another_nltk_rather_than_approximated(monkeypatch):
    import nltk

    from charactereval_lib.coser import metrics

    metrics._word_tokenizer.cache_clear()
    monkeypatch.setattr(nltk, "__version__", "3.10.4")
    with pytest.raises(BleuUnavailable, match=r"NLTK 3\.10\.4 is installed.*nltk==3\.9\.1") as caught:
        bleu("the cat sat on the mat", "the cat sat on the mat")
    assert "\n" not in str(caught.value)
    monkeypatch.undo()
    metrics._word_tokenizer.cache_clear()
    assert bleu("the cat sat on the mat", "the cat sat on the mat") == pytest.approx(1.0)
