"""One conformance check over every registered benchmark (the two built-ins and ``tests/toybench``):
what its declaration promises holds. Its stages and settings load; its board is a ``BoardSpec``
of its own name whose rules are named once, and it reads a small run of the benchmark; its
explorer gives one row and one detail of typed sections (``engine.leaderboard.details``) per sample, and
the redaction leaves no part marked as test-set text; its notebooks are found through the
declaration and carry a parameters cell. A benchmark registered without a small run here fails
the first test, so a new benchmark is checked as soon as it is added."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nbformat
import pytest

from charactereval_lib.apps import leaderboard
from charactereval_lib.charactereval.data import load_official_data
from charactereval_lib.engine.leaderboard import details
from charactereval_lib.engine.leaderboard.board import AnchorCheck, BoardSpec, build_boards
from charactereval_lib.engine.leaderboard.site import Explorer
from charactereval_lib.engine.registry import benchmarks
from charactereval_lib.testing.leaderboard_runs import charactereval_run, coser_run
from charactereval_lib.testing.synthetic import write_synthetic_data

ROOT = Path(__file__).resolve().parents[2]
TOYBENCH = "tests.toybench:BENCHMARK"


def _charactereval(root: Path) -> tuple[Path, Any]:
    data = load_official_data(write_synthetic_data(root / "data", 30), verify=False)
    return charactereval_run(root / "run", data, model="m", failed_ids=[data.samples[0].id]), data


def _coser(root: Path) -> tuple[Path, Any]:
    return coser_run(root / "run", actor="a", scenes=4, repeats=1, failed_sessions=1), None


def _toybench(root: Path) -> tuple[Path, Any]:
    from tests.toybench import PROTOCOL_VERSION

    run = root / "run"
    run.mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"benchmark": "toybench", "protocol_version": PROTOCOL_VERSION,
                                              "model": "m"}), encoding="utf-8")
    answers = [{"id": 0, "status": "ok", "reply": "a", "correct": True},
               {"id": 1, "status": "error", "reply": None, "correct": False}]
    (run / "answers.jsonl").write_text("".join(json.dumps(a) + "\n" for a in answers), encoding="utf-8")
    return run, None


# A small run of each registered benchmark, and what its board inputs would give its board.
SAMPLE_RUNS: dict[str, Callable[[Path], tuple[Path, Any]]] = {
    "charactereval": _charactereval, "coser": _coser, "toybench": _toybench}


@pytest.fixture(scope="module")
def registered():
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(benchmarks.ENV, TOYBENCH)
        yield benchmarks.registry()


@pytest.fixture(scope="module")
def samples(registered, tmp_path_factory):
    """name -> (the benchmark's views of its small run, the leaderboard context)."""
    out = {}
    for name in registered:
        run, value = SAMPLE_RUNS[name](tmp_path_factory.mktemp(name))
        context = {name: value}
        spec = registered[name].hook("board")
        out[name] = (spec.read(run, json.loads((run / "run.json").read_text(encoding="utf-8")), context), context)
    return out


def test_every_registered_benchmark_has_a_small_run_here(registered):
    assert set(registered) == set(SAMPLE_RUNS)


@pytest.mark.parametrize("name", sorted(SAMPLE_RUNS))
def test_its_stages_and_settings_load(registered, name):
    declared = registered[name]
    assert declared.protocol_versions and set(declared.stages) <= set(benchmarks.STAGES)
    for stage in declared.stages:
        assert callable(declared.stage(stage)) and hasattr(declared.settings_class(stage), "from_mapping")
    command = leaderboard.report_command(declared)
    assert command is None if "report" not in declared.stages else command.endswith(" report")


@pytest.mark.parametrize("name", sorted(SAMPLE_RUNS))
def test_its_board_is_its_own_and_reads_its_runs(registered, samples, name):
    declared = registered[name]
    spec = declared.hook("board")
    assert isinstance(spec, BoardSpec) and spec.benchmark == name
    assert set(spec.current_versions) <= set(declared.protocol_versions)
    names = [rule.name for rule in spec.rules]
    assert names and len(names) == len(set(names)) and all(rule.text for rule in spec.rules)
    assert spec.anchor_text and spec.headline and spec.cluster
    if declared.board_inputs is not None:
        assert callable(declared.hook("board_inputs")) and "locate" in declared.data
    views, _ = samples[name]
    assert views and all(v.benchmark == name for v in views)
    assert all(isinstance(spec.anchor(v), AnchorCheck | None) for v in views)
    content = build_boards({name: spec}, views)
    assert content["boards"] and all(row["n"] for b in content["boards"] for row in b["rows"])


@pytest.mark.parametrize("name", sorted(SAMPLE_RUNS))
def test_its_explorer_gives_typed_sections_and_the_redaction_leaves_no_test_set_text(registered, samples, name):
    views, context = samples[name]
    explorer = registered[name].hook("explorer")(views[0], context)
    assert isinstance(explorer, Explorer) and explorer.rows and len(explorer.rows) == len(explorer.details)
    keys = [key for key, _, _ in explorer.columns]
    assert all(len(row) == len(keys) for row in explorer.rows) and set(explorer.filters) <= set(keys)
    details.check(explorer.details, name)
    redacted = [details.redact(d) for d in explorer.details]
    details.check(redacted, f"{name}, redacted")
    fields = [s.as_dict() for d in redacted for s in d]
    assert not [s for s in fields if s.get("private") or s.get("private_keys") or s.get("private_columns")]
    assert any(s.kind == "note" and s.value == details.REDACTED for d in explorer.details for s in details.redact(d))


@pytest.mark.parametrize("name", sorted(SAMPLE_RUNS))
def test_its_notebooks_are_found_through_its_declaration(registered, name):
    declared = registered[name]
    for notebook, spec in declared.notebooks.items():
        path = declared.notebook_path(notebook)
        assert path.name == spec.file
        cells = nbformat.read(str(path), as_version=4).cells
        assert any("parameters" in cell.metadata.get("tags", []) for cell in cells), path
        assert not spec.data or "locate" in declared.data
    with pytest.raises(benchmarks.BenchmarkError, match=f"benchmark {name!r} declares no notebook 'nothing'"):
        declared.notebook_path("nothing")


def test_a_detail_that_is_not_typed_sections_is_refused_naming_where():
    with pytest.raises(ValueError, match=r"^here sample 0: a sample's detail is a list of sections, not a dict$"):
        details.check([{"dialogue": []}], "here")
    with pytest.raises(ValueError, match=r"^here sample 1, section 1: a dict, not a section made by "
                                         r"engine.leaderboard.details$"):
        details.check([[details.note("n", "fine")], [details.note("n", "fine"), {"kind": "note", "title": "x"}]],
                      "here")
    with pytest.raises(ValueError, match=r"^here sample 0, section 0: kind 'chart' is not one of kv, text, "):
        details.check([[details.Section((("kind", "chart"), ("title", "x")), None)]], "here")
    with pytest.raises(ValueError, match=r"^here sample 0, section 0 \(table\): missing columns$"):
        details.check([[details.Section((("kind", "table"), ("title", "x")), [])]], "here")


def test_the_redaction_keeps_the_public_parts_of_each_section():
    sections = [details.kv("k", [("score", 1.0), ("critique", "words")], private=["critique"]),
                details.text("reply", "words"), details.dialogue("d", [{"role": "a", "content": "words"}]),
                details.table("flaws", ["flaw", "severity"], [["words", 2]], private=["flaw"]),
                details.computation("c", "1 + 1 = 2"), details.note("n", "a failure", failure=True)]
    redacted = [s.as_dict() for s in details.redact(sections)]
    assert "words" not in json.dumps(redacted)
    assert [s["kind"] for s in redacted] == ["kv", "note", "table", "computation", "note"]
    assert redacted[0]["items"] == [["score", 1.0]] and redacted[2]["rows"] == [[2]]
    assert redacted[1]["text"] == details.REDACTED


def test_the_renderer_and_the_site_name_no_benchmark():
    """One renderer draws every benchmark's details; the site takes a run's report command from
    its benchmark's declaration."""
    import charactereval_lib.engine.leaderboard.site as site

    script = (Path(site.__file__).parent / "assets" / "explorer.js").read_text(encoding="utf-8").lower()
    source = Path(site.__file__).read_text(encoding="utf-8")
    for name in ("charactereval", "coser", "toybench"):
        assert name not in script
        assert f"{name} report" not in source and f"charactereval {name}" not in source


def test_the_leaderboard_reads_the_registry_when_it_builds_not_when_imported():
    """A broken registration breaks the leaderboard's commands, not every import of the module;
    and the module declares no second class named Benchmark."""
    env = {**os.environ, benchmarks.ENV: "tests.no_such_benchmark:BENCHMARK"}
    done = subprocess.run([sys.executable, "-c", "import charactereval_lib.apps.leaderboard"], cwd=ROOT, env=env,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert not hasattr(leaderboard, "Benchmark")
