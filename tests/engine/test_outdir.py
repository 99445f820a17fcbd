"""``--out`` never destroys what the tool did not write (``engine.outdir``, issue 29 item 1): every
command with an output folder refuses, in one line and before any work, an existing file, a
non-empty folder without the tool's marker, an input or a folder above or inside one, ``.``,
``/`` and the home folder; it replaces (leaderboard, reproduce) or adds to (reports) only a
folder it wrote itself. Synthetic runs (invented text only, ``testing.leaderboard_runs``)."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest

from charactereval_lib import __version__, cli, pipeline
from charactereval_lib.apps import batch, reproduction
from charactereval_lib.charactereval.data import load_official_data
from charactereval_lib.engine import outdir
from charactereval_lib.testing.leaderboard_runs import charactereval_run, coser_run
from charactereval_lib.testing.synthetic import write_synthetic_data


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    root = tmp_path_factory.mktemp("outdir")
    data_dir = write_synthetic_data(root / "data", 40)
    data = load_official_data(data_dir, verify=False)
    runs = root / "runs"
    charactereval_run(runs / "ce-a", data, model="model-a", seed=1)
    charactereval_run(runs / "ce-b", data, model="model-b", seed=2)
    coser_run(runs / "co-a", actor="actor-a", scenes=20, repeats=1, seed=1)
    coser_run(runs / "co-b", actor="actor-b", scenes=20, repeats=1, seed=2)
    # The user's own work beside the runs.
    (root / "thesis").mkdir()
    (root / "thesis" / "thesis.tex").write_text("\\documentclass{article}", encoding="utf-8")
    (root / "notes.txt").write_text("mine", encoding="utf-8")
    return root, data_dir


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() if p.is_file() else b"<dir>" for p in sorted(root.rglob("*"))}


def refused(capsys, argv: list[str], *needles: str) -> str:
    assert cli.main(argv) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("error: ") and captured.err.count("\n") == 1, captured.err
    assert "Traceback" not in captured.err
    for needle in needles:
        assert needle in captured.err, captured.err
    return captured.err


# (name, --out relative to the workspace or a special value, the words of the refusal)
UNSAFE = [
    ("input", "runs", "is an input of this command"),
    ("above an input", ".", "holds the input"),
    ("inside an input", "runs/ce-a/site", "lies inside the input"),
    ("current folder", "CWD", "is the current folder"),
    ("home folder", "HOME", "is your home folder"),
    ("root", "/", "is the root folder"),
    ("existing file", "notes.txt", "is an existing file, not a folder"),
    ("folder of the user's", "thesis", "is not empty and holds no .charactereval-output.json"),
]


def out_path(ws_root: Path, given: str, monkeypatch) -> str:
    if given == "CWD":
        monkeypatch.chdir(ws_root / "thesis")
        return "."
    if given == "HOME":
        monkeypatch.setenv("HOME", str(ws_root / "thesis"))
        return str(ws_root / "thesis")
    return given if given == "/" else str(ws_root / given)


@pytest.mark.parametrize(("case", "given", "words"), UNSAFE, ids=[c[0] for c in UNSAFE])
def test_leaderboard_refuses_an_unsafe_out_before_building_and_touches_nothing(ws, capsys, monkeypatch, case, given,
                                                                              words):
    root, data_dir = ws
    before = snapshot(root)
    refused(capsys, ["leaderboard", str(root / "runs"), "--data-dir", str(data_dir), "--out",
                     out_path(root, given, monkeypatch)], words)
    assert snapshot(root) == before


def test_leaderboard_refuses_the_data_directory_and_a_folder_inside_it(ws, capsys):
    root, data_dir = ws
    before = snapshot(root)
    for out, words in ((data_dir, "is an input of this command"), (data_dir / "site", "lies inside the input")):
        refused(capsys, ["leaderboard", str(root / "runs" / "co-a"), "--data-dir", str(data_dir), "--out", str(out)],
                words)
    assert snapshot(root) == before


def test_a_site_replaces_only_an_earlier_site_and_names_its_version(ws, tmp_path, capsys):
    root, data_dir = ws
    site = tmp_path / "site"
    site.mkdir()  # an empty folder is fine
    assert cli.main(["leaderboard", str(root / "runs"), "--data-dir", str(data_dir), "--out", str(site)]) == 0
    marker = json.loads((site / outdir.MARKER).read_text(encoding="utf-8"))
    assert marker == {"written_by": "charactereval", "version": __version__, "kind": outdir.SITE}
    (site / "stale.html").write_text("from the earlier build", encoding="utf-8")
    assert cli.main(["leaderboard", str(root / "runs" / "co-a"), "--data-dir", str(data_dir), "--out", str(site)]) == 0
    assert (site / "index.html").is_file() and not (site / "stale.html").exists()
    # No staging or old copy left behind; beside the site only its per-run cache (engine.leaderboard.sitecache).
    assert sorted(p.name for p in tmp_path.iterdir()) == [".site.cache", "site"]
    capsys.readouterr()
    # A folder of another kind of output, or one whose marker is damaged, is not a site.
    report_dir = tmp_path / "reports"
    report_dir.mkdir()
    outdir.mark(report_dir, outdir.REPORTS)
    refused(capsys, ["leaderboard", str(root / "runs"), "--out", str(report_dir)], "holds charactereval's reports, not its leaderboard site")
    (site / outdir.MARKER).write_text("{not json", encoding="utf-8")
    refused(capsys, ["leaderboard", str(root / "runs"), "--out", str(site)], ".charactereval-output.json cannot be read")
    assert (site / "index.html").is_file()


@pytest.mark.parametrize(("case", "given", "words"), [c for c in UNSAFE if c[0] not in ("input", "inside an input")],
                         ids=[c[0] for c in UNSAFE if c[0] not in ("input", "inside an input")])
def test_reproduce_refuses_an_unsafe_out_in_one_line(ws, capsys, monkeypatch, case, given, words):
    root, _ = ws
    before = snapshot(root)
    # The data directory is reproduce's input: the workspace holds it.
    refused(capsys, ["reproduce", "--benchmark", "coser", "--data-dir", str(root / "data"), "--out",
                     out_path(root, given, monkeypatch)], words)
    assert snapshot(root) == before


def test_reproduce_refuses_its_data_directory_and_replaces_an_earlier_reproduction(ws, tmp_path, capsys, monkeypatch):
    root, _ = ws
    refused(capsys, ["reproduce", "--benchmark", "coser", "--data-dir", str(root / "data"), "--out",
                     str(root / "data" / "repro")], "lies inside the input")
    assert not (root / "data" / "repro").exists()
    from charactereval_lib.engine.reports import notebook as report

    made = []

    def prepare(**options):
        def make(staging):
            made.append(staging)
            (staging / "work.txt").write_text(str(len(made)), encoding="utf-8")
            return {"benchmark": "coser", "files": [], "rows": []}
        return make

    def render(name, notebook, html, parameters, **options):
        for path in (notebook, html):
            path.write_text("rendered", encoding="utf-8")
        return notebook, html

    # The work and the notebook stand in for the real ones: what is checked is where they land.
    declared = dataclasses.replace(reproduction._declared("coser"), prepare=prepare)
    monkeypatch.setattr(reproduction, "_declared", lambda benchmark: declared)
    monkeypatch.setattr(report, "render", render)
    out = tmp_path / "repro"
    reproduction.reproduce("coser", out, data_dir=root / "data")
    assert (out / "work.txt").read_text() == "1" and outdir.marked_kind(out) == outdir.REPRODUCTION
    reproduction.reproduce("coser", out, data_dir=root / "data")
    assert (out / "work.txt").read_text() == "2"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["repro"]


REPORT_COMMANDS = {
    "report": lambda root: ["report", str(root / "runs" / "ce-a")],
    "summarize": lambda root: ["summarize", str(root / "runs" / "ce-a")],
    "compare": lambda root: ["compare", str(root / "runs" / "ce-a"), str(root / "runs" / "ce-b")],
    "coser report": lambda root: ["coser", "report", str(root / "runs" / "co-a")],
    "coser compare": lambda root: ["coser", "compare", str(root / "runs" / "co-a"), str(root / "runs" / "co-b")],
    "export-official": lambda root: ["export-official", "--data-dir", str(root / "data"), str(root / "runs" / "ce-a")],
    "panel": lambda root: ["panel", "--judge-model", "j1", "--judge-model", "j2", str(root / "runs" / "ce-a")],
}
REPORT_UNSAFE = [c for c in UNSAFE if c[0] != "input"] + [("another run", "runs/ce-b", "")]


@pytest.mark.parametrize("command", list(REPORT_COMMANDS))
@pytest.mark.parametrize(("case", "given", "words"), REPORT_UNSAFE, ids=[c[0] for c in REPORT_UNSAFE])
def test_report_compare_and_summarize_refuse_an_unsafe_out_in_one_line(ws, capsys, monkeypatch, command, case, given,
                                                                       words):
    root, data_dir = ws
    argv = REPORT_COMMANDS[command](root)
    if case == "another run":
        words = "is an input of this command" if command == "compare" else "is not empty and holds no"
    elif case == "inside an input":
        given = str(Path(argv[-1]).relative_to(root) / "sub")
    before = snapshot(root)
    refused(capsys, [*argv, "--out", out_path(root, given, monkeypatch)], words)
    assert snapshot(root) == before


def test_summaries_and_reports_share_a_folder_of_their_own(ws, tmp_path, capsys):
    root, data_dir = ws
    mine = tmp_path / "mine"
    assert cli.main(["summarize", str(root / "runs" / "ce-a"), "--out", str(mine), "--n-boot", "10",
                     "--data-dir", str(data_dir)]) == 0
    assert outdir.marked_kind(mine) == outdir.REPORTS
    assert cli.main(["summarize", str(root / "runs" / "ce-b"), "--out", str(mine), "--n-boot", "10",
                     "--data-dir", str(data_dir)]) == 0
    pipeline.export_official(root / "runs" / "ce-a", out=mine, data=load_official_data(data_dir, verify=False))
    assert (mine / "generation.jsonl").is_file()
    # The run directory itself is the default, given or not; it gets no marker.
    assert cli.main(["summarize", str(root / "runs" / "ce-a"), "--out", str(root / "runs" / "ce-a"), "--n-boot",
                     "10", "--data-dir", str(data_dir)]) == 0
    assert not (root / "runs" / "ce-a" / outdir.MARKER).exists()


def test_a_batch_comparison_folder_is_checked_before_any_model_runs(tmp_path):
    (tmp_path / "thesis").mkdir()
    (tmp_path / "thesis" / "thesis.tex").write_text("mine", encoding="utf-8")
    entry = "{name: m1, backend: offline, model: m, rm: r}"
    for comparison, words in ((".", "holds the input"), ("../thesis", "is not empty and holds no")):
        path = tmp_path / "batch.yaml"
        path.write_text(f"output_dir: {tmp_path / 'out'}\ncomparison: {comparison}\nmodels:\n  - {entry}\n",
                        encoding="utf-8")
        problems = batch.preflight(batch.load_config(path))
        assert [p for p in problems if ": comparison: " in p and words in p], problems
    assert sorted(os.listdir(tmp_path)) == ["batch.yaml", "thesis"]


def test_a_comparison_whose_notebook_failed_may_be_rendered_again_into_its_folder(ws, tmp_path, capsys, monkeypatch):
    """The failed notebook is kept beside the marker, so the folder stays the tool's own."""
    from charactereval_lib.engine.reports import notebook as report

    root, _ = ws

    def fails(source, notebook, html, parameters, **options):
        notebook.with_name("comparison.failed.ipynb").write_text("{}", encoding="utf-8")
        raise report.ReportError(f"{notebook}: cell 3 of {source.name} failed")

    def renders(source, notebook, html, parameters, **options):
        for path in (notebook, html):
            path.write_text("rendered", encoding="utf-8")
        return notebook, html

    argv = [*REPORT_COMMANDS["coser compare"](root), "--out", str(tmp_path / "cmp"), "--allow-mixed"]
    monkeypatch.setattr(report, "render", fails)
    refused(capsys, argv, "cell 3 of coser_compare.ipynb failed")
    monkeypatch.setattr(report, "render", renders)
    assert cli.main(argv) == 0
    assert sorted(p.name for p in (tmp_path / "cmp").iterdir()) == [
        outdir.MARKER, "comparison.failed.ipynb", "comparison.html", "comparison.ipynb"]
