"""Packaging stays consistent: conda environment = pyproject dependencies; CI calls make test."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def names(specs):
    return {re.split(r"[<>=!~ \[]", spec, maxsplit=1)[0].lower().replace("_", "-") for spec in specs}


def test_environment_yml_has_the_same_dependencies_as_pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = names(project["dependencies"]) | names(project["optional-dependencies"]["test"])
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert names(pip) == declared


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
