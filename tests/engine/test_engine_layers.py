"""The engine's floors: each part of ``charactereval_lib/engine/`` (a loose module or a subpackage)
imports only parts on its own floor or below, no import circle joins its modules or its parts, and
the engine imports no benchmark package, ``pipeline``, ``apps`` or ``cli``. Imports inside
functions count: a deferred import keeps start-up cheap, not two parts apart. Read from the source
(ast), nothing imported."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import charactereval_lib

PACKAGE = Path(charactereval_lib.__file__).resolve().parent
ROOT = PACKAGE.parent
ENGINE = "charactereval_lib.engine"
# Bottom (0) to top; the floors docs/architecture.md names and each subpackage's docstring states.
LAYERS = {
    "validation": 0,
    "stats": 0,
    "anchor": 0,
    "thinking": 0,
    "progress": 0,
    "resources": 0,
    "storage": 1,
    "faults": 2,
    "outdir": 2,
    "ray_cluster": 2,
    "generation": 3,
    "grading": 4,
    "registry": 4,
    "reports": 5,
    "leaderboard": 6,
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _exists(module: str) -> bool:
    path = ROOT / module.replace(".", "/")
    return path.with_suffix(".py").exists() or (path / "__init__.py").exists()


def engine_imports() -> dict[str, set[str]]:
    """Every engine module and the library modules it imports, relative imports resolved."""
    graph = {}
    for path in sorted((PACKAGE / "engine").rglob("*.py")):
        name = module_name(path)
        here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                base = ".".join(here[:len(here) - node.level + 1] + ([node.module] if node.module else [])) \
                    if node.level else node.module
                if base and base.split(".")[0] == "charactereval_lib":
                    targets |= {f"{base}.{a.name}" if _exists(f"{base}.{a.name}") else base for a in node.names}
            elif isinstance(node, ast.Import):
                targets |= {a.name for a in node.names if a.name.split(".")[0] == "charactereval_lib"}
        graph[name] = targets - {name}
    return graph


def part(module: str) -> str | None:
    """The engine part a module belongs to: its loose module or its subpackage (None: the engine itself)."""
    parts = module.split(".")
    return parts[2] if len(parts) > 2 and module.startswith(ENGINE + ".") else None


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return [*trail, node, nxt]
            if nxt not in state and (found := visit(nxt, [*trail, node])):
                return found
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state and (found := visit(node, [])):
            return found
    return None


GRAPH = engine_imports()


def test_every_part_of_the_engine_has_a_floor():
    on_disk = {p.stem if p.suffix == ".py" else p.name for p in (PACKAGE / "engine").iterdir()
               if (p.suffix == ".py" and p.name != "__init__.py") or (p / "__init__.py").exists()}
    assert sorted(on_disk - set(LAYERS)) == [], "a new part of engine/: give it a floor in LAYERS"
    assert sorted(set(LAYERS) - on_disk) == []


def test_no_part_imports_a_higher_floor():
    wrong = [f"{module} (floor {LAYERS[part(module)]}) imports {target} (floor {LAYERS[part(target)]})"
             for module, targets in GRAPH.items() for target in targets
             if part(module) in LAYERS and part(target) in LAYERS and LAYERS[part(target)] > LAYERS[part(module)]]
    assert wrong == []


def test_the_engine_imports_no_benchmark_pipeline_apps_or_cli():
    wrong = [f"{module} imports {target}" for module, targets in GRAPH.items() for target in targets
             if target != "charactereval_lib" and not target.startswith(ENGINE + ".") and target != ENGINE]
    assert wrong == []


@pytest.mark.parametrize("level", ["modules", "parts"])
def test_no_import_circle_in_the_engine(level):
    if level == "modules":
        edges = {m: {t for t in targets if t in GRAPH} for m, targets in GRAPH.items()}
    else:
        edges: dict[str, set[str]] = {}
        for module, targets in GRAPH.items():
            if part(module) is not None:
                edges.setdefault(part(module), set()).update(part(t) for t in targets if part(t) not in (None, part(module)))
    cycle = find_cycle(edges)
    assert cycle is None, "import circle: " + " -> ".join(cycle)


def test_each_subpackage_says_what_it_holds_and_what_it_may_import():
    for name in LAYERS:
        init = PACKAGE / "engine" / name / "__init__.py"
        if init.exists():
            doc = ast.get_docstring(ast.parse(init.read_text(encoding="utf-8"))) or ""
            assert f"Floor {LAYERS[name]} of the engine" in doc and "May import" in doc, name
