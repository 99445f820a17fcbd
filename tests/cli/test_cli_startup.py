"""Every command imports what it uses when it runs: importing the CLI (what ``--help`` of any
command costs before it prints) pulls in none of the heavy libraries. How long start-up takes is
measured in ``benchmarks/bench_cli.py``, not here."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("numpy", "pandas", "scipy", "torch", "transformers", "matplotlib", "nltk", "openai", "aiohttp", "ray")


def test_importing_the_cli_and_building_its_parser_imports_no_heavy_library():
    code = ("import sys, json; from charactereval_lib import cli; cli.build_parser(); "
            f"print(json.dumps(sorted(m for m in {list(HEAVY)!r} if m in sys.modules)))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == []


def test_help_of_a_command_prints_without_them():
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "charactereval_lib.cli", "coser", "run", "--help"],
                          capture_output=True, text=True)
    assert done.returncode == 0 and "--actor-model" in done.stdout
    imported = {line.split("|")[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    assert not imported & set(HEAVY)


def test_rendering_and_ray_do_not_build_rfc3987_grammars():
    """nbformat (hence papermill and nbconvert) and Ray import jsonschema, which imports
    rfc3987-syntax when it is installed and builds its grammars there: 1.1 s of CPU in every
    process that renders a report or runs as a Ray worker. Only Jupyter Lab's server asks for it
    (jupyter-events: jsonschema[format-nongpl]), so Lab is the ``lab`` extra, not a dependency:
    no requirement of the package or its test extra leads to it, whatever else is installed."""
    from importlib import metadata

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    seen: set[tuple[str, tuple[str, ...]]] = set()
    reached: dict[str, str] = {}  # package -> the package that required it
    stack = [("charactereval-workbench", ("test",), "")]
    while stack:
        name, extras, parent = stack.pop()
        if (canonicalize_name(name), extras) in seen:
            continue
        seen.add((canonicalize_name(name), extras))
        reached.setdefault(canonicalize_name(name), parent)
        try:
            requires = metadata.distribution(name).requires or []
        except metadata.PackageNotFoundError:
            continue  # an optional dependency this platform does not install
        for line in requires:
            requirement = Requirement(line)
            marker = requirement.marker
            if marker is None or any(marker.evaluate({"extra": extra}) for extra in ("", *extras)):
                stack.append((requirement.name, tuple(sorted(requirement.extras)), name))
    assert "rfc3987-syntax" not in reached, f"rfc3987-syntax is required by {reached['rfc3987-syntax']}"
    assert "jupyterlab" not in reached, f"jupyterlab is required by {reached['jupyterlab']}"
