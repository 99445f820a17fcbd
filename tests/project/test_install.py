"""The package works installed from a wheel, away from the checkout (notebooks, the upstream
manifest and the paper table travel inside it), and its import graph keeps its layers."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "charactereval_lib"

ENGINE = "charactereval_lib.engine"
TESTING = "charactereval_lib.testing"


def benchmark_packages() -> list[str]:
    """Every benchmark package of the library: a subpackage that declares itself in the registry
    (its ``benchmark.py``)."""
    return sorted(f"charactereval_lib.{path.parent.name}" for path in PACKAGE.glob("*/benchmark.py"))


def layers() -> list[tuple[str, list[str]]]:
    """Bottom to top. A module may import only from its own layer or the layers below it;
    modules of the library's top level (pipeline, apps, ...) are one layer."""
    tops = sorted(f"charactereval_lib.{p.stem if p.is_file() else p.name}" for p in PACKAGE.iterdir()
                  if (p.suffix == ".py" and p.stem not in ("__init__", "cli")) or
                  (p.is_dir() and (p / "__init__.py").exists() and p.name not in ("cli", "engine", "testing") and
                   not (p / "benchmark.py").exists()))
    return [("engine", [ENGINE]), ("benchmark packages", benchmark_packages()), ("pipeline", tops),
            ("command line", ["charactereval_lib.cli"])]


LAYERS = layers()


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer_of(module: str) -> int | None:
    best = None
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (best is None or len(prefix) > best[1]):
                best = (index, len(prefix))
    return best[0] if best else None


def imports() -> dict[str, set[str]]:
    """Every package module and the package modules it imports (top level or inside functions)."""
    graph = {}
    for path in PACKAGE.rglob("*.py"):
        name = module_name(path)
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("charactereval_lib"):
                for alias in node.names:
                    candidate = f"{node.module}.{alias.name}"
                    exists = (ROOT / (candidate.replace(".", "/") + ".py")).exists() or \
                        (ROOT / candidate.replace(".", "/")).is_dir()
                    targets.add(candidate if exists else node.module)
            elif isinstance(node, ast.Import):
                targets |= {a.name for a in node.names if a.name.startswith("charactereval_lib")}
        graph[name] = targets - {name}
    return graph


def test_no_module_imports_a_higher_layer_and_the_product_never_imports_test_code():
    graph = imports()
    wrong = []
    for module, targets in graph.items():
        if module.startswith(TESTING):
            continue
        own = layer_of(module)
        for target in targets:
            if target.startswith(TESTING):
                wrong.append(f"{module} imports test scaffolding {target}")
            elif own is not None and layer_of(target) is not None and layer_of(target) > own:
                wrong.append(f"{module} ({LAYERS[own][0]}) imports {target} ({LAYERS[layer_of(target)][0]})")
    assert wrong == []


def test_the_layers_are_found_and_no_benchmark_imports_another():
    packages = benchmark_packages()
    assert {"charactereval_lib.charactereval", "charactereval_lib.coser"} <= set(packages)
    assert "charactereval_lib.pipeline" in LAYERS[2][1] and "charactereval_lib.apps" in LAYERS[2][1]
    graph = imports()
    wrong = []
    for module, targets in graph.items():
        own = next((p for p in packages if module == p or module.startswith(p + ".")), None)
        for target in targets:
            other = next((p for p in packages if target == p or target.startswith(p + ".")), None)
            if own is not None and other is not None and other != own:
                wrong.append(f"{module} (benchmark {own}) imports {target} (benchmark {other})")
            if module.startswith(ENGINE) and other is not None:
                wrong.append(f"{module} (engine) imports {target} (benchmark {other})")
    assert wrong == []


def test_the_import_graph_has_no_cycle():
    """No circle of imports, counting those inside functions: a deferred import keeps a start-up
    cheap, not two modules apart (apps.batch and apps.batch_ray imported each other so, the one
    lazily, until their shared parts moved below both into apps.batch_stages)."""
    graph = imports()
    edges = {module: {t for t in targets if t in graph} for module, targets in graph.items()}
    state: dict[str, int] = {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(edges[node]):
            if state.get(nxt) == 1:
                pytest.fail("import cycle: " + " -> ".join([*trail, node, nxt]))
            if nxt not in state:
                visit(nxt, [*trail, node])
        state[node] = 2

    for module in sorted(edges):
        if module not in state:
            visit(module, [])


@pytest.mark.slow
# Builds a wheel, installs it into a fresh virtual environment and renders a report: about half a
# minute alone, over the suite's 300 s per-test limit with two suites running on two cores.
@pytest.mark.timeout(1200)
def test_a_wheel_installed_elsewhere_verifies_data_and_renders_a_report(official_dir, tiny_rm, tmp_path):
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
                    "-w", str(dist), str(ROOT)], check=True, capture_output=True, text=True)
    (wheel,) = dist.glob("charactereval_workbench-*.whl")
    env_dir = tmp_path / "fresh"
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    # Third-party dependencies come from this environment (nothing is downloaded); the package
    # itself only from the wheel: a plain path entry does not run this environment's .pth files,
    # so the checkout's editable install stays out.
    Path(site, "_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-deps",
                    "--no-index", str(wheel)], check=True, capture_output=True, text=True)
    work = tmp_path / "elsewhere"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "CHARACTEREVAL_DATA_DIR")}
    env["TQDM_DISABLE"] = "1"
    # Shared dependencies keep their data files (nbconvert's templates) under this prefix.
    env["JUPYTER_PATH"] = str(Path(sys.prefix) / "share" / "jupyter")
    tool = env_dir / "bin" / "charactereval"

    def run(*args: str) -> str:
        done = subprocess.run([str(tool), *args], cwd=work, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"{args}: {done.stderr[-2000:]}"
        return done.stdout

    where = subprocess.run([python, "-c", "import charactereval_lib; print(charactereval_lib.__file__)"], cwd=work,
                           env=env, check=True, capture_output=True, text=True).stdout
    assert where.startswith(site), where
    # Package data beside the code: the judge specs and CoSER's pinned manifest; the top-level
    # notebooks, upstream manifest and reference tables, copied whole (the report below renders
    # one of those notebooks; the checkout's tests render the others).
    installed = Path(site, "charactereval_lib")
    assert len(list((installed / "charactereval" / "judge_specs").glob("*.yaml"))) == 12
    assert (installed / "coser" / "manifest.json").exists()
    for top, copy in (("notebooks", "notebooks"), ("data/reference", "data/reference"),
                      ("data/upstream.json", "data/upstream.json")):
        files = [top] if (ROOT / top).is_file() else [str(p.relative_to(ROOT)) for p in (ROOT / top).rglob("*")
                                                      if p.is_file()]
        assert files
        for name in files:
            shipped = installed / "_resources" / copy / Path(name).relative_to(top)
            assert shipped.read_bytes() == (ROOT / name).read_bytes(), name
    assert "all files match the pinned digests" in run("data", "verify", "--dir", str(official_dir))
    assert "29/29 checks passed" in run("doctor", "--data-dir", str(official_dir))
    # The session's tiny checkpoint (`rm make-tiny` has its own tests): each command here is a
    # process of its own, and one more that imports torch costs seconds of the suite.
    run("generate", "a", "--backend", "offline", "--model", "offline-a", "--limit", "4", "--data-dir", str(official_dir))
    run("transform", "a", "--data-dir", str(official_dir))
    run("score", "a", "--rm", str(tiny_rm), "--device", "cpu", "--mode", "fast", "--quiet", "--data-dir", str(official_dir))
    run("summarize", "a", "--n-boot", "50", "--data-dir", str(official_dir))
    run("report", "a", "--n-boot", "50", "--data-dir", str(official_dir))
    assert (work / "outputs" / "a" / "report.html").read_text(encoding="utf-8").count("<img") >= 2
