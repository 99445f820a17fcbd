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
