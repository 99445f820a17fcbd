"""Notebooks executed by real papermill on a real python3 kernel, and the HTML reports."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import nbformat
import pytest

from charactereval_lib import pipeline
from charactereval_lib.charactereval import layout
from charactereval_lib.charactereval.data import load_official_data
from charactereval_lib.charactereval.official import export_official, import_official
from charactereval_lib.engine.reports import notebook as report
from charactereval_lib.engine.resources import resource_path
from charactereval_lib.engine.storage import artifacts, runs
from charactereval_lib.testing.synthetic import write_synthetic_data, write_synthetic_run

# Every shipped notebook: opened in Jupyter, a notebook keeps its outputs; `charactereval notebook` makes
# the copy that may.
NOTEBOOKS = sorted(p.name for p in resource_path("notebooks").glob("*.ipynb"))
PNG = "data:image/png;base64,"


@pytest.fixture(scope="module")
def synthetic_runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("reports")
    data_dir = write_synthetic_data(root / "data", 120, seed=7)
    data = load_official_data(data_dir, verify=False)
    a = write_synthetic_run(root / "model-a", data, seed=1, failed_ids=[data.samples[4].id])
    b = write_synthetic_run(root / "model-b", data, seed=2, shift=0.5, rm_label="BaichuanCharRM", backend="openai")
    return data_dir, a, b


def sections(html: str) -> dict[str, str]:
    """HTML split at each <h2>/<h3> heading: heading text -> the HTML up to the next heading."""
    parts = re.split(r"<h[23][^>]*>", html)
    result = {}
    for part in parts[1:]:
        heading = re.sub(r"<[^>]+>", "", part.split("</h", 1)[0]).replace("¶", "").strip()
        result[heading] = part
    return result


def cell_problems(notebook: Path) -> list[str]:
    """Errors and anything written to stderr by the executed notebook's cells."""
    node = nbformat.read(str(notebook), as_version=4)
    problems = []
    for cell in node.cells:
        for output in cell.get("outputs", []):
            if output.output_type == "error" or (output.output_type == "stream" and output.name == "stderr"):
                problems.append(str(output.get("text") or output.get("ename")))
    return problems


@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebooks_are_clean_and_thin(name):
    node = nbformat.read(str(resource_path("notebooks") / name), as_version=4)
    nbformat.validate(node)
    assert node.metadata.kernelspec.name == "python3"
    tagged = [c for c in node.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1 and tagged[0].cell_type == "code"
    for cell in node.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, f"{name}: committed outputs"
            # Logic lives in the library: notebooks define no functions or classes.
            assert not re.search(r"^\s*(def|class) ", cell.source, re.M), f"{name}: defines code"


@pytest.mark.slow
def test_report_renders_a_standalone_html(synthetic_runs, tmp_path, monkeypatch):
    data_dir, run_a, _ = synthetic_runs
    # From another directory, the kernel must still import this package (not another install).
    monkeypatch.chdir(tmp_path)
    outcome = pipeline.report(run_a, pipeline.ReportSettings(verify_data=False, n_boot=200), data_dir=str(data_dir))
    notebook, html_path = outcome.notebook, outcome.html
    assert notebook == run_a / "report.ipynb" and html_path == run_a / "report.html"
    assert cell_problems(notebook) == []
    html = html_path.read_text(encoding="utf-8")
    parts = sections(html)
    assert parts["Radar charts"].count(PNG) == 1
    assert parts["Score grid (bf16)"].count(PNG) == 1 and "off grid" in parts["Score grid (bf16)"]
    sample_size = parts["Sample size"]
    assert "<table" in sample_size and "CI half-width" in sample_size and "MDD" in sample_size
    assert parts["Characters"].count(PNG) == 1 and "95% CI (pooled)" in parts["Characters"]
    assert parts["Novels"].count(PNG) == 1
    assert sample_size.count(PNG) == 1
    assert parts["Score vs context length"].count(PNG) == 1
    assert parts["Failures and warning signs"].count(PNG) == 1 and "APITimeoutError" in html
    # Plain caveats for the offline backend and the tiny reward model, and MBTI not as a number.
    assert "offline backend" in html and "tiny, randomly initialised reward model" in html
    assert "not reproduced: the MBTI questionnaire" in html
    # Code is hidden, figures are inline, and the kernel imported this very package.
    assert "load_run(" not in html and "<img src=\"http" not in html and 'src="/' not in html
    assert f"at commit <code>{runs.git_commit()}</code>" in html
    assert "<title>CharacterEval report: model-a</title>" in html
    # Every figure also lands beside the report as a PNG.
    assert sorted(p.name for p in (run_a / "figures").iterdir()) == [
        "characters.png", "context_length.png", "failures.png", "novels.png", "radars.png", "sample_size.png",
        "score_grid.png"]
    assert all((run_a / "figures" / n).read_bytes().startswith(b"\x89PNG") for n in ("score_grid.png", "failures.png"))


@pytest.mark.slow
def test_report_reads_like_a_paper(synthetic_runs):
    data_dir, run_a, _ = synthetic_runs
    html_path = run_a / "report.html"
    if not html_path.exists():
        pipeline.report(run_a, pipeline.ReportSettings(verify_data=False, n_boot=50), data_dir=str(data_dir))
    html = html_path.read_text(encoding="utf-8")
    head, first_section = html.split("<h2", 1)
    # Warnings first, as a bulleted box, then the table of contents linking every section.
    assert 'class="ce-warnings"' in head and head.count("<li>") >= 2 and "offline backend" in head
    assert '<nav class="ce-toc">' in head
    for heading in ("Scores", "Radar charts", "Characters and novels", "Run settings"):
        assert re.search(rf'<a href="#([^"]+)">{heading}</a>', head), heading
    ids = re.findall(r'<a href="#([^"]+)">', head.split('<nav class="ce-toc">', 1)[1].split("</nav>", 1)[0])
    assert all(f'id="{i}"' in html for i in ids)
    # Tables: no pandas index column, no underscores in names, the role marker spelt one way.
    assert 'class="row_heading' not in html and 'class="blank' not in html
    assert "Communication_skills" not in html and "Communication skills" in html
    assert "ci_half_width" not in html and "mean_centred" not in html
    assert "role\uff1a" in html and "role:" not in html
    # Run settings as a readable three-column table.
    assert re.search(r"<th[^>]*>section</th>\s*<th[^>]*>setting</th>\s*<th[^>]*>value</th>", sections(html)["Run settings"])


def test_report_of_an_imported_evaluation_says_its_scorer_is_unknown(synthetic_runs, tmp_path):
    """The report's warning box is ``warnings_html`` of the run's warnings (the notebook's first
    output, rendered by the tests above): an imported evaluation's says its scorer is unknown."""
    from charactereval_lib.charactereval import analysis

    data_dir, run_a, _ = synthetic_runs
    data = load_official_data(data_dir, verify=False)
    evaluation = [p for p in export_official(run_a, data, tmp_path / "official") if p.name == "evaluation.jsonl"][0]
    imported = tmp_path / "imported"
    import_official(evaluation, imported, data)
    run = analysis.load_run(imported, data=data, n_boot=20)
    box = analysis.warnings_html(run.warnings(), run.evidence)
    assert "ce-warnings" in box and "the scorer is unknown" in box


@pytest.mark.slow
def test_report_can_show_code(synthetic_runs, tmp_path):
    data_dir, run_a, _ = synthetic_runs
    notebook = run_a / "report.ipynb"
    if not notebook.exists():
        pipeline.report(run_a, pipeline.ReportSettings(verify_data=False, n_boot=50), data_dir=str(data_dir))
    html = report.to_html(notebook, tmp_path / "with-code.html", show_code=True).read_text(encoding="utf-8")
    assert "load_run" in html


@pytest.mark.slow
def test_compare_renders_paired_differences(synthetic_runs, tmp_path):
    data_dir, run_a, run_b = synthetic_runs
    outcome = pipeline.compare([run_a, run_b], tmp_path / "cmp",
                               pipeline.ReportSettings(verify_data=False, baselines=("GPT-4",), n_boot=200),
                               data_dir=str(data_dir))
    notebook, html_path = outcome.notebook, outcome.html
    assert cell_problems(notebook) == []
    html = html_path.read_text(encoding="utf-8")
    parts = sections(html)
    assert parts["Radar charts"].count(PNG) == 1
    paired = parts["model-b − model-a"]
    assert "Wilcoxon p" in paired and "Holm p" in paired
    # Columns named by run, in the order the runs were given.
    headers = re.findall(r"<th[^>]*>([^<]*)</th>", paired)
    assert headers[:5] == ["cell", "shared n", "model-a", "model-b", "model-b − model-a"]
    assert re.findall(r"<th[^>]*>([^<]*)</th>", parts["Scores side by side"])[:3] == ["cell", "model-a", "model-b"]
    assert parts["Paired differences"].count(PNG) + parts["model-b − model-a"].count(PNG) == 1
    assert "<table" in parts["vs GPT-4"] and "Δ model-b" in parts["vs GPT-4"]
    assert sorted(p.name for p in (tmp_path / "cmp" / "figures").iterdir()) == ["paired_differences.png", "radars.png"]
    # Run A's offline warning is shown, named by run, in the box at the top; run B (a real backend
    # and reward model) has none of its own.
    head = html.split("<h2", 1)[0]
    assert html.count("offline backend") == 1 and "model-a: The replies come from the offline backend" in head
    assert "not reproduced" in html


@pytest.mark.slow
def test_report_of_a_run_not_scored_yet(synthetic_runs, tmp_path):
    data_dir, _, _ = synthetic_runs
    data = load_official_data(data_dir, verify=False)
    run = write_synthetic_run(tmp_path / "unscored", data, unscored=10**6)
    assert artifacts.read_jsonl(run / layout.SCORES).records == []
    outcome = pipeline.report(run, pipeline.ReportSettings(verify_data=False, n_boot=20), data_dir=str(data_dir))
    notebook, html_path = outcome.notebook, outcome.html
    assert cell_problems(notebook) == []
    html = html_path.read_text(encoding="utf-8")
    rows = len(artifacts.read_jsonl(run / layout.ROWS).records)
    assert f"Scoring is incomplete: {rows} row(s)" in html and f"0 scored rows of {rows}" in html
    # Every section still renders: figures say there is nothing to show instead of failing.
    assert sections(html)["Score grid (bf16)"].count(PNG) == 1


def test_compare_needs_two_different_runs(synthetic_runs, tmp_path):
    _, run_a, _ = synthetic_runs
    with pytest.raises(runs.RunError, match="at least two runs"):
        pipeline.compare([run_a], tmp_path / "cmp")
    with pytest.raises(runs.MixedRunError, match="the same run is given more than once"):
        pipeline.compare([run_a, run_a], tmp_path / "cmp")
    assert not (tmp_path / "cmp").exists()


def test_report_errors_name_the_run(tmp_path):
    with pytest.raises(runs.RunError, match=r"missing: no such run directory"):
        pipeline.report(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(runs.RunError, match=r"empty: no rows\.jsonl"):
        pipeline.report(tmp_path / "empty")


def test_unknown_baseline_is_refused_before_anything_runs(synthetic_runs):
    _, run_a, _ = synthetic_runs
    with pytest.raises(pipeline.SettingsError, match=r"unknown baseline model\(s\) \['GPT-9'\]"):
        pipeline.ReportSettings(baselines=("GPT-9",))


@pytest.mark.slow
def test_failed_cell_is_reported_in_one_line_and_replaces_nothing(synthetic_runs, tmp_path):
    data_dir, run_a, _ = synthetic_runs
    notebook, html = tmp_path / "report.ipynb", tmp_path / "report.html"
    html.write_text("the previous report")
    parameters = {"run_dir": str(tmp_path / "no-such-run"), "data_dir": str(data_dir), "verify_data": False}
    with pytest.raises(report.ReportError, match=r"report\.failed\.ipynb: cell \d+ of analyse\.ipynb failed: RunError: "):
        report.render(report.shipped("analyse.ipynb"), notebook, html, parameters)
    assert html.read_text() == "the previous report" and not notebook.exists()
    assert (tmp_path / "report.failed.ipynb").exists()
    assert not [p.name for p in tmp_path.iterdir() if ".partial" in p.name]


@pytest.mark.slow
def test_a_kernel_that_dies_is_one_line_and_writes_nothing(tmp_path, capfd):
    notebooks = tmp_path / "notebooks"
    notebooks.mkdir()
    cell = nbformat.v4.new_code_cell("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)")
    nbformat.write(nbformat.v4.new_notebook(cells=[cell]), str(notebooks / "dies.ipynb"))
    out = tmp_path / "out"
    with pytest.raises(report.ReportError, match=r"dies\.ipynb: the kernel running it died \(killed from outside, "
                                                 r"or out of memory\?\); nothing was written$"):
        report.execute(notebooks / "dies.ipynb", out / "dies.ipynb", {})
    assert not list(out.iterdir())
    # nbclient's own "Kernel died ..." line is not printed beside the error.
    assert "Kernel died" not in capfd.readouterr().err


def test_a_kernel_task_that_nothing_awaits_prints_no_traceback(caplog):
    """Ctrl-C mid-cell: the kernel's shutdown ends nbclient's task still waiting for the cell's
    reply with DeadKernelError. Nothing awaits it, and asyncio would print its traceback when the
    task is collected, after the CLI's one-line "interrupted"."""
    import asyncio
    import gc

    from jupyter_core.utils import ensure_event_loop
    from nbclient.exceptions import DeadKernelError

    async def waiting_for_the_reply():
        raise DeadKernelError("Kernel died")

    def left_behind() -> None:
        loop = ensure_event_loop()
        task = loop.create_task(waiting_for_the_reply())
        loop.run_until_complete(asyncio.sleep(0))
        assert task.done()

    loop = ensure_event_loop()
    previous = loop.get_exception_handler()
    loop.set_exception_handler(None)  # as before any report ran in this process
    try:
        with caplog.at_level(logging.ERROR, logger="asyncio"):
            left_behind()
            gc.collect()
            assert "Task exception was never retrieved" in caplog.text  # what the CLI printed
            caplog.clear()
            with report._kernel_death_said_here():
                left_behind()
            gc.collect()
            assert caplog.text == ""
    finally:
        loop.set_exception_handler(previous)


@pytest.mark.slow
def test_generate_notebook_dry_run_on_the_official_data(official_dir, tmp_path):
    run = tmp_path / "dry"
    output = tmp_path / "generate.ipynb"
    report.execute(report.shipped("generate.ipynb"), output, {"run_dir": str(run), "backend": "offline", "model": "demo",
                                              "limit": 3, "dry_run": True, "data_dir": str(official_dir)})
    assert cell_problems(output) == []
    assert len(artifacts.read_jsonl(run / runs.REQUESTS).records) == 3
    text = nbformat.read(str(output), as_version=4).cells[-1].outputs[-1]["data"]["text/plain"]
    assert re.search(r"requests\.jsonl \(dry run payloads\)\s+3", text)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["offline", "openai"])
def test_generate_notebook_generates_under_papermill(backend, official_dir, tmp_path, monkeypatch):
    """A kernel already runs an event loop; generation must work there all the same, with the
    offline backend and over real HTTP to the local OpenAI-compatible server."""
    from charactereval_lib.testing.mockserver import MockServer

    run = tmp_path / "gen"
    output = tmp_path / "generate.ipynb"
    parameters = {"run_dir": str(run), "backend": backend, "model": "demo", "limit": 4, "dry_run": False,
                  "data_dir": str(official_dir)}
    with MockServer() as server:
        if backend == "openai":
            # The kernel inherits the environment: the key variable is all it needs.
            monkeypatch.setenv("OPENAI_API_KEY", "sk-notebook-test")
            parameters["base_url"] = server.base_url
        report.execute(report.shipped("generate.ipynb"), output, parameters)
    assert cell_problems(output) == []
    records = artifacts.read_jsonl(run / runs.GENERATIONS).records
    assert len(records) == 4 and all(r["status"] == "ok" for r in records)
    assert (run / layout.ROWS).exists()
