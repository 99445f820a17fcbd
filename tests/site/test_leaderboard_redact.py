"""`leaderboard --redact` (seed 004 H34, seed 000's licence notes): a site without test-set text.
Both data sets are read from their data directories at run time; nothing of them is in the repo."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest

from charactereval_lib import cli
from charactereval_lib.charactereval.data import load_official_data
from charactereval_lib.charactereval.explorer import SHOWS as CHARACTEREVAL_SHOWS
from charactereval_lib.charactereval.prompts import profile_text
from charactereval_lib.coser.data import load_test_set
from charactereval_lib.coser.explorer import SHOWS as COSER_SHOWS
from charactereval_lib.engine.leaderboard.details import REDACTED
from charactereval_lib.engine.leaderboard.site import LICENCE_WARNING, REDACTED_NOTICE, read_run_data
from charactereval_lib.testing.coser_script import role_of, scripted_reply
from charactereval_lib.testing.mockserver import MockServer
from tests.coser_golden import data_dir as coser_data_dir

# A field value this short (a gender, an age, a name) is no test-set text of its own and may occur
# anywhere (a character's name is the explorer's filter); every longer one is searched for.
MIN_FIELD = 8
_JS_DATA = re.compile(r"=\s*(\{.*\}|\[.*\]);\s*$", re.S)


def _strings(value, out: list[str]) -> None:
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, dict):
        for v in value.values():
            _strings(v, out)
    elif isinstance(value, list):
        for v in value:
            _strings(v, out)


def site_text(site: Path) -> str:
    """Everything the site shows, decoded: the strings of its JSON and JavaScript data, its HTML
    unescaped, its CSV."""
    parts: list[str] = []
    for path in sorted(p for p in site.rglob("*") if p.is_file() and "assets" not in p.parts):
        text = path.read_text(encoding="utf-8")
        if path.suffix == ".js":
            for chunk in text.split("\nwindow."):
                match = _JS_DATA.search(chunk)
                if match:
                    _strings(json.loads(match.group(1)), parts)
        elif path.suffix == ".json":
            _strings(json.loads(text), parts)
        elif path.suffix == ".html":
            parts.append(html.unescape(text))
        else:
            parts.append(text)
    return "\n\0".join(parts)


def data_set_strings() -> tuple[list[str], list[str]]:
    """Every context and profile of CharacterEval and every profile, scenario, plot summary and
    original line of CoSER, from the data directories."""
    data = load_official_data()
    charactereval = [s.context for s in data.samples]
    for profile in data.profiles.values():
        charactereval.append(profile_text(profile))
        charactereval += [str(v) for v in profile.values() if len(str(v)) >= MIN_FIELD]
    coser = []
    for scene in load_test_set(coser_data_dir()):
        raw = scene.raw
        coser += [p for p in raw["character_profiles"].values() if p]
        coser += [raw["scenario"], raw["plot"]["summary"]]
        coser += [c["description"] for c in raw["plot"].get("key_characters", []) if c.get("description")]
        coser += [line["message"] for line in raw["dialogues"] if len(line["message"]) >= MIN_FIELD]
    return charactereval, [s for s in coser if s]


def _quoting_actor(payload: dict) -> str:
    """The actor repeats its whole system prompt (the character's profile and the scene): a full
    site then holds CoSER test-set text, which the redacted one must not."""
    if role_of(payload) == "actor":
        return payload["messages"][0]["content"]
    return scripted_reply(payload)


@pytest.fixture(scope="module")
def sites(official_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("redact")
    runs_dir = root / "runs"
    assert cli.main(["generate", str(runs_dir / "ce"), "--backend", "offline", "--model", "m", "--limit", "40",
                     "--data-dir", str(official_dir), "--quiet"]) == 0
    assert cli.main(["transform", str(runs_dir / "ce"), "--data-dir", str(official_dir)]) == 0
    with MockServer(reply=_quoting_actor) as server:
        assert cli.main(["coser", "run", str(runs_dir / "coser"), "--preset", "smoke", "--actor-model", "mock-actor",
                         "--base-url", server.base_url, "--no-api-key", "--data-dir", str(coser_data_dir()),
                         "--retry-base-delay", "0.01", "--timeout", "5", "--no-progress"]) == 0
    (runs_dir / "coser" / "report.html").write_text("<html><body>a report</body></html>", encoding="utf-8")
    for name, extra in (("full", []), ("redacted", ["--redact"])):
        assert cli.main(["leaderboard", str(runs_dir), "--out", str(root / name), "--data-dir", str(official_dir),
                         *extra]) == 0
    return root / "full", root / "redacted"


def test_a_redacted_site_holds_no_context_or_profile_of_either_data_set(sites):
    full, redacted = sites
    charactereval, coser = data_set_strings()
    full_text, redacted_text = site_text(full), site_text(redacted)
    # The scan can see test-set text: the full site shows contexts and the quoting actor's profiles.
    assert any(s in full_text for s in charactereval) and any(s in full_text for s in coser)
    found = [s[:30] for s in (*charactereval, *coser) if s in redacted_text]
    assert not found, f"{len(found)} test-set string(s) in the redacted site"


def test_the_redacted_site_keeps_ranks_scores_ids_and_severities_and_says_what_it_leaves_out(sites):
    full, redacted = sites
    full_board, redacted_board = (json.loads((s / "leaderboard.json").read_text(encoding="utf-8")) for s in sites)
    assert redacted_board["redacted"] is True and full_board["redacted"] is False
    assert [b["rows"] for b in redacted_board["boards"]] == [b["rows"] for b in full_board["boards"]]
    full_index = html.unescape((full / "index.html").read_text(encoding="utf-8"))
    # The warning says what each explorer shows: CharacterEval's shows no profile.
    assert LICENCE_WARNING in full_index and CHARACTEREVAL_SHOWS in full_index and COSER_SHOWS in full_index
    assert "(no character profiles)" in CHARACTEREVAL_SHOWS
    index = html.unescape((redacted / "index.html").read_text(encoding="utf-8"))
    assert REDACTED_NOTICE in index and LICENCE_WARNING not in index
    [coser_page] = [p for p in (redacted / "runs").iterdir() if p.name.startswith("coser-")]
    assert not (coser_page / "report.html").exists() and (full / "runs" / coser_page.name / "report.html").exists()
    rows, detail = read_run_data(redacted, coser_page.name)
    assert rows == read_run_data(full, coser_page.name)[0]  # scene ids and per-dimension scores
    flaws = [s for d in detail for s in d if s["kind"] == "table"]
    assert flaws and all(s["columns"] == ["severity"] for s in flaws)  # each flaw's severity, not its words
    assert all(s["kind"] != "dialogue" for d in detail for s in d)
    assert all({"kind": "note", "title": "Test-set text", "text": REDACTED, "failure": False} in d for d in detail)
