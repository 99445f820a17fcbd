"""S1: locating, verifying, fetching and parsing the official files, and every error path."""

from __future__ import annotations

import functools
import http.server
import json
import os
import shutil
import socket
import threading
from pathlib import Path

import pytest

from charactereval_lib.charactereval import data as data_mod
from charactereval_lib.charactereval.data import DataError, digests, fetch, load_official_data, locate_data_dir, verify_files
from charactereval_lib.engine.resources import resource_path
from tests.conftest import SYNTHETIC_ID2METRIC, SYNTHETIC_PROFILES, SYNTHETIC_SAMPLES, write_data_dir


def test_locate_prefers_flag_then_env_then_default(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # a folder with no workspace file: the default is the default
    monkeypatch.setenv("CHARACTEREVAL_DATA_DIR", str(tmp_path / "env"))
    assert locate_data_dir(tmp_path / "flag") == tmp_path / "flag"
    assert locate_data_dir(None) == tmp_path / "env"
    monkeypatch.delenv("CHARACTEREVAL_DATA_DIR")
    assert locate_data_dir(None) == data_mod.DEFAULT_DATA_DIR


def test_tests_find_the_data_where_the_cli_does(monkeypatch, tmp_path):
    from tests.conftest import real_data_dir

    monkeypatch.delenv("CHARACTEREVAL_DATA_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    assert real_data_dir() is None
    # What `charactereval data fetch` fills without --dir: found with no variable set.
    fetched = tmp_path / data_mod.DEFAULT_DATA_DIR
    fetched.mkdir(parents=True)
    (fetched / "test_data.jsonl").write_text("[]", encoding="utf-8")
    assert real_data_dir() == locate_data_dir().absolute() == tmp_path / data_mod.DEFAULT_DATA_DIR
    # The workspace's `data use DIR` comes before it.
    used = tmp_path / "used"
    used.mkdir()
    (used / "test_data.jsonl").write_text("[]", encoding="utf-8")
    (tmp_path / ".charactereval.json").write_text(json.dumps({"data_dirs": {"charactereval": str(used)}}))
    assert real_data_dir() == locate_data_dir() == used
    # The variable comes first, as for the CLI.
    monkeypatch.setenv("CHARACTEREVAL_DATA_DIR", str(tmp_path / "env"))
    assert real_data_dir() == locate_data_dir() == tmp_path / "env"


def test_git_blob_digest_matches_git():
    # `printf 'hello\n' | git hash-object --stdin`
    assert digests(b"hello\n")[1] == "ce013625030ba8dba906f756967f9e9ca394464a"


def test_synthetic_data_parses_into_typed_records(synthetic_data):
    assert [s.id for s in synthetic_data.samples] == [1, 2, 3, 4]
    assert synthetic_data.samples[0].context.endswith("再见 ")
    assert synthetic_data.id2metric["3"][2] == ("Coherence", "对话连贯性")


def test_unverified_synthetic_data_is_refused_by_default(synthetic_dir):
    with pytest.raises(DataError, match=r"test_data.jsonl: SHA-256 mismatch: expected 6d9723a1.*, got "):
        load_official_data(synthetic_dir)


def test_missing_file_names_the_file_and_the_fix(synthetic_dir):
    (synthetic_dir / "id2metric.jsonl").unlink()
    with pytest.raises(DataError, match=r"id2metric.jsonl: missing \(run `charactereval data fetch`"):
        load_official_data(synthetic_dir, verify=False)


def test_malformed_json_gives_line_and_column(synthetic_dir):
    (synthetic_dir / "character_profiles.json").write_text('{\n  "甲": {"a": 1},\n  oops\n}', encoding="utf-8")
    with pytest.raises(DataError, match=r"character_profiles.json: malformed JSON at line 3 column 3"):
        load_official_data(synthetic_dir, verify=False)


def test_json_lines_instead_of_one_document_is_malformed(tmp_path):
    path = tmp_path / "test_data.jsonl"
    path.write_text('{"id": 1}\n{"id": 2}\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"malformed JSON at line 2 column 1: Extra data"):
        data_mod.load_json_document(path)


@pytest.mark.parametrize(
    "samples, message",
    [
        ({"id": 1}, "expected a JSON array of samples, got dict"),
        ([{"id": 1, "role": "丙", "novel_name": "书"}], r"sample #0: wrong shape: missing field 'context'"),
        ([{"id": "1", "role": "丙", "novel_name": "书", "context": "x"}], "field 'id' should be int, got str"),
        ([{"id": 1, "role": "丙", "novel_name": "书", "context": "x"}] * 2, "sample #1: duplicate id 1"),
    ],
)
def test_wrong_shape_of_test_data(tmp_path, samples, message):
    write_data_dir(tmp_path, samples, SYNTHETIC_PROFILES, SYNTHETIC_ID2METRIC)
    with pytest.raises(DataError, match=message):
        load_official_data(tmp_path, verify=False)


@pytest.mark.parametrize(
    "id2metric, message",
    [
        ({"1": [["Fluency"]]}, r"id 1: wrong shape: \['Fluency'\] is not \[metric_en, metric_zh\]"),
        ({"1": [["Fluent", "对话流利度"]]}, "id 1: unknown metric 'Fluent'"),
        ({"1": [["Fluency", "流利度"]]}, "id 1: metric 'Fluency' has Chinese name '流利度', expected '对话流利度'"),
    ],
)
def test_wrong_shape_of_id2metric(tmp_path, id2metric, message):
    write_data_dir(tmp_path, SYNTHETIC_SAMPLES, SYNTHETIC_PROFILES, id2metric)
    with pytest.raises(DataError, match=message):
        load_official_data(tmp_path, verify=False)


def test_unknown_role_names_the_sample(tmp_path):
    samples = SYNTHETIC_SAMPLES + [{"id": 9, "role": "无名", "novel_name": "书", "context": "丙：x"}]
    write_data_dir(tmp_path, samples, SYNTHETIC_PROFILES, SYNTHETIC_ID2METRIC)
    with pytest.raises(DataError, match=r"sample id 9: unknown role '无名' \(no profile in character_profiles.json\)"):
        load_official_data(tmp_path, verify=False)


# --- real files ------------------------------------------------------------------------------


@pytest.fixture
def real_copy(official_dir, tmp_path) -> Path:
    copy = tmp_path / "official"
    copy.mkdir()
    for name in ("test_data.jsonl", "character_profiles.json", "id2metric.jsonl", "annotation_guide.pdf"):
        shutil.copy(official_dir / name, copy / name)
    return copy


def test_real_files_verify(official_dir):
    assert verify_files(official_dir, ["required", "guide"]) == []


def test_altered_real_file_is_refused(real_copy):
    path = real_copy / "id2metric.jsonl"
    data = path.read_bytes()
    path.write_bytes(data.replace("共情度".encode(), "共情性".encode(), 1))
    problems = verify_files(real_copy)
    assert len(problems) == 1 and "id2metric.jsonl: SHA-256 mismatch: expected df80ee71" in problems[0]
    with pytest.raises(DataError, match="id2metric.jsonl: SHA-256 mismatch"):
        load_official_data(real_copy)


@pytest.fixture
def mirror(real_copy):
    """A local HTTP server laid out like the upstream repository at the pinned commit."""
    root = real_copy.parent / "mirror"
    upstream = data_mod.load_upstream()
    for spec in upstream.files:
        source = real_copy / spec.name
        if source.exists():
            target = root / spec.path
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(source, target)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", root
    server.shutdown()


def test_fetch_downloads_verifies_and_keeps_valid_files(mirror, tmp_path):
    url, _ = mirror
    target = tmp_path / "fetched"
    fetched = fetch(target, ["required", "guide"], mirror=url, progress=False)
    assert sorted(p.name for p in fetched) == sorted(
        ["test_data.jsonl", "character_profiles.json", "id2metric.jsonl", "annotation_guide.pdf"]
    )
    assert verify_files(target, ["required", "guide"]) == []
    assert fetch(target, ["required", "guide"], mirror=url, progress=False) == []
    assert sorted(os.listdir(target)) == sorted(p.name for p in fetched)


def test_fetch_of_altered_upstream_file_writes_nothing(mirror, tmp_path):
    url, root = mirror
    (root / "data" / "test_data.jsonl").write_bytes(b"[]")
    target = tmp_path / "fetched"
    with pytest.raises(DataError, match=r"test_data.jsonl: SHA-256 mismatch"):
        fetch(target, ["required"], mirror=url, progress=False)
    assert not (target / "test_data.jsonl").exists()
    assert os.listdir(target) == []


def test_fetch_offline_fails_with_one_clear_line(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(DataError) as info:
        fetch(tmp_path, ["required"], mirror=f"http://127.0.0.1:{port}", progress=False, timeout=5)
    message = str(info.value)
    assert "\n" not in message and "download failed" in message and "offline" in message
    # The line names both ways around it, which the README's section explains.
    assert "CHARACTEREVAL_DATA_DIR" in message and "--mirror URL" in message
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    section = readme.split("### When `data fetch` cannot reach GitHub", 1)[1].split("\n## ", 1)[0]
    assert "CHARACTEREVAL_DATA_DIR" in section and "--mirror" in section and "data verify" in section


def test_fetch_from_a_local_checkout_as_the_readme_shows(mirror, tmp_path):
    _, root = mirror
    target = tmp_path / "fetched"
    fetch(target, ["required", "guide"], mirror=root.as_uri(), progress=False)
    assert verify_files(target, ["required", "guide"]) == []


def test_fetch_http_error_names_the_url(mirror, tmp_path):
    url, root = mirror
    (root / "data" / "id2metric.jsonl").unlink()
    with pytest.raises(DataError, match=r"id2metric.jsonl: download failed: HTTP 404"):
        fetch(tmp_path / "x", ["required"], mirror=url, progress=False)


def test_upstream_manifest_pins_commit_and_all_files():
    upstream = data_mod.load_upstream()
    assert upstream.repository == "morecry/CharacterEval"
    assert upstream.commit == "fa232e6a9c3ec5d074240333fbffdf015b79533f"
    groups = {f.group for f in upstream.files}
    assert groups == {"required", "guide", "results", "rm_train"}
    assert sum(f.group == "results" for f in upstream.files) == 5
    assert all(len(f.git_blob_sha1) == 40 for f in upstream.files)
    raw = json.loads(resource_path(data_mod.UPSTREAM_MANIFEST).read_text())
    assert raw["files"][0]["sha256"] == "6d9723a1484f1d2739bcf388c7960abe1933b7a5a1fddae0170cc9ea7c66dcd8"
    url = upstream.url(upstream.file("annotation_guide.pdf"))
    assert url.endswith("/fa232e6a9c3ec5d074240333fbffdf015b79533f/Predefined%20Annotated%20Examples%20of%20CharacterEval.pdf")
