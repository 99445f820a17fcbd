"""The site at scale: a rebuild reuses the per-run cache (``engine.leaderboard.sitecache``) byte for byte,
rebuilds exactly what a changed rule, version, data or run affects, says how many runs it
reused, and an interrupted rebuild leaves the previous site; shared texts are stored once."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from charactereval_lib import cli
from charactereval_lib.apps import leaderboard
from charactereval_lib.charactereval.data import load_official_data
from charactereval_lib.engine.leaderboard import site, sitecache
from charactereval_lib.testing.leaderboard_runs import charactereval_run, coser_run
from charactereval_lib.testing.synthetic import write_synthetic_data


@pytest.fixture
def runs(tmp_path):
    """Two small CharacterEval runs and two small CoSER runs, and the data the CE ones were made from."""
    data = load_official_data(write_synthetic_data(tmp_path / "data", 60), verify=False)
    for k in range(2):
        charactereval_run(tmp_path / "runs" / "ce" / f"m{k}", data, model=f"m{k}", shift=0.2 * k, seed=k)
        coser_run(tmp_path / "runs" / "coser" / f"a{k}", actor=f"a{k}", scenes=6, repeats=1, seed=k, level=50 + 10 * k)
    return tmp_path / "runs", data


def build(runs_dir: Path, out: Path, data, *, cache: bool = True) -> tuple[dict, tuple[int, int]]:
    """A build as ``pipeline.leaderboard`` makes it; returns the content and (reused, rebuilt)."""
    context = {"charactereval": data}
    store = leaderboard.run_cache(out if cache else None, context)
    views, warnings = leaderboard.read_runs([runs_dir], context, cache=store, redact=False)
    assert warnings == []
    return leaderboard.write(views, warnings, out, context=context, cache=store), store.counts(views)


def files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_rebuild_after_a_new_run_reuses_the_others_byte_for_byte_as_a_fresh_build_writes_them(runs, tmp_path):
    runs_dir, data = runs
    out = tmp_path / "site"
    assert build(runs_dir, out, data)[1] == (0, 4)
    charactereval_run(runs_dir / "ce" / "m9", data, model="m9", shift=0.5, seed=9)
    content, counts = build(runs_dir, out, data)
    assert counts == (4, 1)
    fresh_content, fresh_counts = build(runs_dir, tmp_path / "fresh", data, cache=False)
    assert fresh_counts == (0, 5) and not sitecache.default_folder(tmp_path / "fresh").exists()
    assert content == fresh_content
    rebuilt, fresh = files(out), files(tmp_path / "fresh")
    # Everything but the index's build time is the same, byte for byte.
    assert sorted(rebuilt) == sorted(fresh)
    assert {name for name in rebuilt if rebuilt[name] != fresh[name]} <= {"index.html"}
    # A context is stored once for the site, not in each run's data.
    context = data.samples[0].context
    encoded = json.dumps(context, ensure_ascii=False)[1:-1].encode()
    holding = [name for name, body in fresh.items() if encoded in body]
    assert len(holding) == 1 and holding[0].startswith(f"{site.SHARED}/")
    ce_page = next(r["page"] for b in content["boards"] for r in b["rows"] if r["run"] == "m0")
    _, details = site.read_run_data(out, ce_page)
    assert any(s["title"] == "Context" and s["text"] == context for d in details for s in d)


def test_a_changed_version_rule_data_or_run_rebuilds_exactly_what_it_affects(runs, tmp_path, monkeypatch):
    runs_dir, data = runs
    out = tmp_path / "site"
    build(runs_dir, out, data)
    assert build(runs_dir, out, data)[1] == (4, 0)
    # A run's file changed: that run only.
    scenes = runs_dir / "coser" / "a1" / "coser_scenes.jsonl"
    scenes.write_text(scenes.read_text(encoding="utf-8") + "\n", encoding="utf-8")
    assert build(runs_dir, out, data)[1] == (3, 1)
    # Other data: the CharacterEval runs, which read it.
    other = load_official_data(write_synthetic_data(tmp_path / "other-data", 60, seed=5), verify=False)
    assert build(runs_dir, out, other)[1] == (2, 2)
    # A CoSER rule's text: the CoSER runs.
    coser = leaderboard.spec("coser")
    changed = replace(coser, rules=(replace(coser.rules[0], text="a changed rule"), *coser.rules[1:]))
    real_spec = leaderboard.spec
    monkeypatch.setattr(leaderboard, "spec", lambda name: changed if name == "coser" else real_spec(name))
    assert build(runs_dir, out, other)[1] == (2, 2)
    # The build's own version: everything.
    monkeypatch.setattr(sitecache, "BUILD_VERSION", "another")
    assert build(runs_dir, out, other)[1] == (0, 4)
    # The cache holds what the site holds: one views entry per run, one data entry per page.
    cache = sitecache.default_folder(out)
    assert len(list((cache / "views").iterdir())) == 4 and len(list((cache / "runs").iterdir())) == 4


def test_the_cli_says_how_many_runs_it_reused_and_an_interrupted_rebuild_leaves_the_previous_site(
        runs, tmp_path, capsys, monkeypatch):
    runs_dir, _ = runs
    out = tmp_path / "site"
    command = ["leaderboard", str(runs_dir / "coser"), "--out", str(out), "--data-dir", str(tmp_path / "no-data"),
               "--quiet"]
    assert cli.main(command) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "0 runs reused, 2 rebuilt"
    assert cli.main(command) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "2 runs reused, 0 rebuilt"
    before = files(out)
    coser_run(runs_dir / "coser" / "a2", actor="a2", scenes=6, repeats=1, seed=2)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(site, "write_shared", interrupted)
    assert cli.main(command) == 130  # Ctrl-C while the new site is being written
    assert files(out) == before
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]
    assert leftovers == [sitecache.default_folder(out).name]
    monkeypatch.undo()
    assert cli.main([*command, "--no-cache"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "0 runs reused, 3 rebuilt"
