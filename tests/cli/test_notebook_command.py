"""`charactereval notebook NAME RUN`: a shipped notebook copied into the run with its parameters
filled, unexecuted; the shipped file is never written, an analyst's copy never replaced silently."""

from __future__ import annotations

import dataclasses
import json

import nbformat
import pytest

from charactereval_lib.charactereval.data import load_official_data
from charactereval_lib.cli import main
from charactereval_lib.engine.reports import notebook
from charactereval_lib.engine.resources import resource_path
from charactereval_lib.engine.storage import runs
from charactereval_lib.testing.synthetic import write_synthetic_data, write_synthetic_run


@pytest.fixture
def workspace(tmp_path, monkeypatch):
    for name in ("CHARACTEREVAL_DATA_DIR", runs.WORKSPACE_ENV):
        monkeypatch.delenv(name, raising=False)
    root = tmp_path / "ws"
    (root / "outputs").mkdir(parents=True)
    monkeypatch.chdir(root)
    return root


def injected(path):
    node = nbformat.read(str(path), as_version=4)
    cells = [c for c in node.cells if "injected-parameters" in c.metadata.get("tags", [])]
    assert len(cells) == 1
    return node, cells[0].source


def test_notebook_copies_with_the_parameters_filled_and_never_replaces_a_copy(workspace, tmp_path, capsys):
    data_dir = write_synthetic_data(tmp_path / "data", 30, seed=3)
    write_synthetic_run(workspace / "outputs" / "m1", load_official_data(data_dir, verify=False), seed=1)
    shipped = resource_path("notebooks") / "analyse.ipynb"
    before = shipped.read_bytes()
    assert main(["data", "use", str(data_dir), "--force"]) == 0  # synthetic data: no pinned digests
    capsys.readouterr()

    assert main(["notebook", "analyse", "m1"]) == 0
    out = capsys.readouterr().out
    copy = workspace / "outputs" / "m1" / "analyse.ipynb"
    assert "outputs/m1/analyse.ipynb" in out and "jupyter lab" in out
    node, source = injected(copy)
    assert f'run_dir = "{workspace / "outputs" / "m1"}"' in source and f'data_dir = "{data_dir}"' in source
    assert all(c.outputs == [] for c in node.cells if c.cell_type == "code")
    assert shipped.read_bytes() == before

    copy.write_text(copy.read_text().replace("Parameters", "Parameters (edited)"))
    edited = copy.read_bytes()
    assert main(["notebook", "analyse", "m1"]) == 2
    assert "already exists" in capsys.readouterr().err and copy.read_bytes() == edited
    assert main(["notebook", "analyse", "m1", "--force"]) == 0
    assert copy.read_bytes() != edited

    assert main(["notebook", "compare", "m1", "m1", "--out", "cmp", "--dir", "elsewhere"]) == 0
    _, source = injected(workspace / "cmp" / "compare.ipynb")
    assert json.dumps([str(workspace / "outputs" / "m1")] * 2) in source and str(workspace / "elsewhere") in source
    assert main(["notebook", "coser-report", "m1"]) == 0
    assert "data_dir" not in injected(workspace / "outputs" / "m1" / "coser_report.ipynb")[1]


@pytest.mark.parametrize("argv, message", [
    (["notebook", "analyse", "absent"], "no such run directory"),
    (["notebook", "analyse", "a", "b"], "takes one run, got 2"),
])
def test_notebook_refuses_in_one_line(workspace, capsys, argv, message):
    (workspace / "outputs" / "a").mkdir()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


@pytest.mark.slow
def test_the_copy_runs_top_to_bottom_in_its_own_folder(workspace, official_dir, capsys):
    """As Jupyter runs it: the kernel's working directory is the run's folder, and nothing is
    exported; the official data views are shown, not skipped. Where the Lab environment exists
    (CI makes it), tests/project/test_lab.py runs this same copy through a real Lab server and
    proves all of it, so this kernel run (15 s) is left to machines without Lab."""
    from nbclient import NotebookClient

    from tests.project.test_lab import lab_python_or_skip

    try:
        lab_python_or_skip()
    except pytest.skip.Exception:
        pass
    else:
        pytest.skip("proved through a real Lab server by tests/project/test_lab.py (.venv-lab exists)")
    data = load_official_data(official_dir)
    run = write_synthetic_run(workspace / "outputs" / "m1", dataclasses.replace(data, samples=data.samples[:60]), seed=1)
    assert main(["data", "use", str(official_dir)]) == 0
    assert main(["notebook", "analyse", "m1"]) == 0
    node = nbformat.read(str(run / "analyse.ipynb"), as_version=4)
    with notebook.kernel_environment():
        NotebookClient(node, kernel_name=notebook.KERNEL_NAME, timeout=600,
                       resources={"metadata": {"path": str(run)}}).execute()
    text = json.dumps([c.get("outputs", []) for c in node.cells])
    assert f"Official data: {official_dir}" in text and "Official data not available" not in text
