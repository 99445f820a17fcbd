"""The engine knows no benchmark by name (``engine.registry.benchmarks``): what a benchmark needs of it is
declared by the benchmark, so a third one needs no edit under ``engine/``.

What counts as naming a benchmark, in the source of ``charactereval_lib/engine/`` (docstrings
and comments aside, since prose may use a benchmark as an example):

- importing a benchmark's package: ``charactereval_lib.charactereval`` or
  ``charactereval_lib.coser`` (or a module in it), by an import statement or a string naming
  the module (``"charactereval_lib.coser.x:attr"``, ``importlib.import_module(...)``);
- a string literal (an f-string's text included) that is a benchmark's name, ``"charactereval"``
  or ``"coser"`` (any case), or that holds the word ``coser``.

Not benchmark names: the package name ``charactereval_lib``, the command-line program
``charactereval`` inside a command's text (``"charactereval report"``), the workspace file
``.charactereval.json`` and ``CHARACTEREVAL_*`` environment variables.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import charactereval_lib

ENGINE = Path(charactereval_lib.__file__).parent / "engine"
BENCHMARK_PACKAGES = ("charactereval_lib.charactereval", "charactereval_lib.coser")
BENCHMARK_NAMES = ("charactereval", "coser")
# A word of a string literal that names a benchmark wherever it stands (the other name is also
# the program's and the package's, so only the literal that is the name itself counts).
NAMED_WORD = re.compile(r"(?<![\w.])coser(?![\w])", re.IGNORECASE)
MODULE = re.compile(r"\bcharactereval_lib\.(charactereval|coser)\b")


def _is_benchmark_module(name: str) -> bool:
    return any(name == package or name.startswith(package + ".") for package in BENCHMARK_PACKAGES)


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the docstring nodes of the module, its classes and functions."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                found.add(id(first.value))
    return found


def benchmark_names(source: str, where: str) -> list[str]:
    """Where ``source`` names a benchmark, as ``where:line: what`` lines."""
    tree = ast.parse(source)
    skipped = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            modules = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        else:
            modules = []
        found += [(node.lineno, f"imports {name}") for name in modules if _is_benchmark_module(name)][:1]
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skipped:
            text = node.value
            if text.strip().lower() in BENCHMARK_NAMES or NAMED_WORD.search(text) or MODULE.search(text):
                found.append((node.lineno, f"string {text!r}"))
    return [f"{where}:{line}: {what}" for line, what in sorted(found)]


def test_no_engine_module_names_a_benchmark():
    found = [line for path in sorted(ENGINE.rglob("*.py"))
             for line in benchmark_names(path.read_text(encoding="utf-8"), str(path.relative_to(ENGINE.parent)))]
    assert found == [], "\n".join(found)


def test_the_rule_finds_imports_and_literals_but_not_prose_or_the_program_name():
    named = '''
"""A docstring may say charactereval or CoSER."""
import charactereval_lib.coser.run
from charactereval_lib.charactereval import layout
from charactereval_lib import coser
NAME = "charactereval"
DEFAULT = {"benchmark": "CoSER"}
HINT = f"run `charactereval coser report` on {NAME}"
REF = "charactereval_lib.charactereval.data:locate"
'''
    lines = [line.split(": ", 1)[1] for line in benchmark_names(named, "m.py")]
    assert lines == ["imports charactereval_lib.coser.run", "imports charactereval_lib.charactereval",
                     "imports charactereval_lib.coser", "string 'charactereval'", "string 'CoSER'",
                     "string 'run `charactereval coser report` on '",
                     "string 'charactereval_lib.charactereval.data:locate'"]
    neutral = '''
"""CoSER and CharacterEval in prose."""
# a comment on coser
from charactereval_lib.engine.storage import runs
import charactereval_lib
ENV = "CHARACTEREVAL_HOME"
FILE = ".charactereval.json"
HINT = "run `charactereval report` (charactereval_lib.engine.leaderboard.site)"
def f():
    """Say coser here too."""
'''
    assert benchmark_names(neutral, "m.py") == []


def test_the_command_line_reports_the_errors_each_benchmark_declares():
    """A benchmark's user-facing errors come from its declaration (``Benchmark.errors``), not
    from a list in the command line that names its modules."""
    from charactereval_lib import cli
    from charactereval_lib.charactereval.prompts import ProtocolError
    from charactereval_lib.charactereval.reward.errors import CheckpointError
    from charactereval_lib.engine.registry import benchmarks

    declared = benchmarks.user_errors()
    assert all(isinstance(error, type) and issubclass(error, BaseException) for error in declared)
    assert {ProtocolError, CheckpointError} <= set(declared) and ProtocolError not in cli.ENGINE_ERRORS
    assert cli.user_errors() == cli.ENGINE_ERRORS + declared
