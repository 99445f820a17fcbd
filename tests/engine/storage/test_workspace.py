"""A workspace remembers its data directories (`data use DIR`): every command and notebook kernel
started in it or below it finds them with nothing exported; the variable and the flags still win."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from charactereval_lib.charactereval.data import locate_data_dir
from charactereval_lib.cli import main
from charactereval_lib.coser.data import locate_data_dir as locate_coser_dir
from charactereval_lib.engine.storage import runs


@pytest.fixture
def workspace(tmp_path, monkeypatch):
    """An empty workspace as the current directory, with no data variable set."""
    for name in ("CHARACTEREVAL_DATA_DIR", "COSER_DATA_DIR", runs.WORKSPACE_ENV):
        monkeypatch.delenv(name, raising=False)
    root = tmp_path / "ws"
    root.mkdir()
    monkeypatch.chdir(root)
    return root


def test_data_use_is_remembered_below_the_workspace_and_overridden_by_variable_and_flag(workspace, tmp_path,
                                                                                      monkeypatch, capsys):
    assert locate_data_dir() == Path("data/official")  # no workspace file: the default
    data = tmp_path / "copy"
    data.mkdir()
    assert main(["data", "use", str(data), "--force"]) == 0
    out, err = capsys.readouterr()
    assert str(workspace / ".charactereval.json") in out and str(data) in out
    assert "recorded with --force" in err and "problem(s)" in err  # an empty directory: said, not silent
    assert json.loads((workspace / ".charactereval.json").read_text()) == {"data_dirs": {"charactereval": str(data)}}

    # A kernel Jupyter starts beside a run's notebook works in the workspace above it.
    run_folder = workspace / "outputs" / "r1"
    run_folder.mkdir(parents=True)
    monkeypatch.chdir(run_folder)
    assert locate_data_dir() == data
    assert runs.resolve_run_dir("r1") == run_folder
    assert main(["data", "verify"]) == 1
    assert str(data) in capsys.readouterr().err

    monkeypatch.setenv("CHARACTEREVAL_DATA_DIR", str(tmp_path / "env"))
    assert locate_data_dir() == tmp_path / "env"
    assert locate_data_dir(tmp_path / "flag") == tmp_path / "flag"


def test_coser_data_use_keeps_the_other_benchmark(workspace, tmp_path, capsys):
    assert main(["data", "use", "official", "--force"]) == 0
    assert main(["coser", "data", "use", str(tmp_path / "not-yet"), "--force"]) == 0
    out, _ = capsys.readouterr()
    assert "CoSER data directory" in out
    assert locate_data_dir() == workspace / "official"
    assert locate_coser_dir() == tmp_path / "not-yet"


def test_a_malformed_workspace_file_is_one_line_and_a_file_is_not_a_data_directory(workspace, tmp_path, capsys):
    (workspace / ".charactereval.json").write_text('{"data_dirs": ')
    assert main(["data", "verify"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and ".charactereval.json: not a workspace file" in err
    (workspace / ".charactereval.json").write_text('{"data_dirs": {"charactereval": 3}}')
    assert main(["data", "verify"]) == 2
    assert "not a workspace file" in capsys.readouterr().err
    (workspace / ".charactereval.json").unlink()
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    assert main(["data", "use", str(not_a_dir)]) == 2
    assert "not a directory" in capsys.readouterr().err
    assert not (workspace / ".charactereval.json").exists()


@pytest.mark.parametrize("command", [["data", "use"], ["coser", "data", "use"]])
def test_data_use_refuses_a_folder_that_fails_verification_and_keeps_the_setting(workspace, tmp_path, capsys,
                                                                                 command):
    """A missing folder, or the other benchmark's files: exit 2, one line, the setting unchanged."""
    kept = tmp_path / "kept"
    kept.mkdir()
    assert main([*command, str(kept), "--force"]) == 0
    before = (workspace / ".charactereval.json").read_bytes()
    capsys.readouterr()
    wrong = tmp_path / "wrong"
    wrong.mkdir()
    (wrong / "test_data.jsonl").write_text("[]")  # CharacterEval's file name: right for neither digest
    for folder in (tmp_path / "nonexistent", wrong):
        assert main([*command, str(folder)]) == 2
        out, err = capsys.readouterr()
        assert out == "" and err.count("\n") == 1, err
        assert err.startswith(f"error: {folder}: not a verified ") and f"the workspace keeps {kept}" in err
        assert "--force" in err
        assert (workspace / ".charactereval.json").read_bytes() == before


def test_data_use_records_a_verified_folder_without_a_word_on_stderr(workspace, official_dir, capsys):
    assert main(["data", "use", str(official_dir)]) == 0
    out, err = capsys.readouterr()
    assert err == "" and str(official_dir.absolute()) in out
    assert locate_data_dir() == official_dir.absolute()


def test_every_test_runs_without_the_users_home_workspace_or_data_settings():
    """The autouse ``hermetic`` fixture (tests/conftest.py): a home and XDG directories of the
    session's own, no $CHARACTEREVAL_HOME, and the data variables set to what the session
    resolved when it started (or unset), so that no lookup reads a workspace file."""
    import os

    from conftest import HOME_VARS, session_data_dir

    home = Path(os.environ["HOME"])
    assert Path("~").expanduser() == home and home.name.startswith("home")
    assert all(Path(os.environ[name]).parent == home for name in HOME_VARS)
    assert runs.WORKSPACE_ENV not in os.environ
    for benchmark, variable in (("charactereval", "CHARACTEREVAL_DATA_DIR"), ("coser", "COSER_DATA_DIR")):
        found = session_data_dir(benchmark)
        assert os.environ.get(variable) == (str(found) if found else None)
