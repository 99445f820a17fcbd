"""Packaging stays consistent: conda environment = pyproject dependencies; CI calls make test."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml

from _ray_support import SESSION_DIR_ENV

ROOT = Path(__file__).resolve().parents[2]


def names(specs):
    return {re.split(r"[<>=!~ \[]", spec, maxsplit=1)[0].lower().replace("_", "-") for spec in specs}


def environment_pip() -> list[str]:
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    return next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))


def test_environment_yml_has_the_same_requirements_as_pyproject_with_the_test_and_lab_extras():
    """The conda route installs what an analyst needs, Jupyter Lab included, with pyproject's very
    version specifiers; torch alone is pinned, to the build `make setup` installs."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    declared = [*project["dependencies"], *extras["test"], *extras["lab"]]
    pip = environment_pip()
    torch_pin = re.search(r"^TORCH \?= (\S+)$", (ROOT / "Makefile").read_text(), re.M)[1]
    assert names(pip) == names(declared)
    assert {s for s in pip if not s.startswith("torch")} == {s for s in declared if not s.startswith("torch")}
    assert [s for s in pip if names([s]) == {"torch"}] == [torch_pin]
    assert "Jupyter Lab" in (ROOT / "environment.yml").read_text().split("name:")[0]


def extras(specs):
    """``{"name[extra]"}`` for every requirement that asks for extras (e.g. transformers[serving])."""
    found = set()
    for spec in specs:
        match = re.match(r"([A-Za-z0-9_.-]+)\[([^\]]+)\]", spec)
        if match:
            found |= {f"{match[1].lower()}[{extra.strip()}]" for extra in match[2].split(",")}
    return found


def test_environment_yml_asks_for_the_same_extras_as_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = extras(project["dependencies"]) | extras(project["optional-dependencies"]["test"])
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert "transformers[serving]" in declared  # the real-server test's server
    assert extras(pip) == declared


def test_ci_runs_the_readme_test_command():
    assert "make test" in (ROOT / ".ci" / "run").read_text()
    assert "make test" in (ROOT / "README.md").read_text()


def test_ci_lints_and_builds_the_docs_before_the_tests_and_the_test_extra_has_ruff():
    ci = (ROOT / ".ci" / "run").read_text()
    assert ci.index("make lint") < ci.index("make docs") < ci.index("make test") < ci.index("make bench-smoke")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "ruff" in names(project["project"]["optional-dependencies"]["test"])
    assert project["tool"]["ruff"]["lint"]["select"]


def test_both_make_targets_fail_when_no_test_is_collected():
    """pytest's exit status 5 (nothing collected or selected) must fail `make test`, `make
    test-fast` and `make bench-smoke`: run here in this process's environment, on one file, with a filter nothing matches."""
    # Not this session's Ray folder: the inner pytest would end that cluster when it finishes.
    env = {**{k: v for k, v in os.environ.items() if k != SESSION_DIR_ENV},
           "PYTEST_ADDOPTS": "-p no:cacheprovider -k no_test_is_named_like_this tests/project/test_packaging.py"}
    for target in ("test", "test-fast", "bench-smoke"):
        # -o: never (re)install the environment from here; XDIST=: one process is enough.
        done = subprocess.run(["make", "--no-print-directory", "-o", ".venv/.installed", target, "XDIST=",
                               f"BIN={Path(sys.executable).parent}"],
                              cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode != 0 and "Error 5" in done.stderr, (target, done.stdout[-1000:], done.stderr[-1000:])


def test_the_test_extra_installs_the_docs_extra_as_written():
    """tests/project/test_docs_site.py builds the site: the test extra carries the docs extra's
    very requirements."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert extras["docs"] and set(extras["docs"]) <= set(extras["test"])


def test_ci_names_the_data_with_data_use_and_sets_no_data_variable():
    """.ci/run runs the suite in the README's workspace (docs/hermetic-tests.md): the data named
    with `data use` and `coser data use`, no data variable set."""
    ci = (ROOT / ".ci" / "run").read_text()
    assert ci.index("charactereval data use") < ci.index("make test")
    assert ci.index("charactereval coser data use") < ci.index("make test")
    assert "unset CHARACTEREVAL_DATA_DIR COSER_DATA_DIR" in ci
    assert "export CHARACTEREVAL_DATA_DIR" not in ci and "export COSER_DATA_DIR" not in ci
