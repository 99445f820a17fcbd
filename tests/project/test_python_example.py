"""The Python examples run as written: the Python API page's small pipeline without the CLI, and
the README's end-to-end example names only what the API has."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from charactereval_lib import pipeline

ROOT = Path(__file__).resolve().parents[2]


def python_example(page: Path) -> str:
    """The first Python block of ``page``."""
    return re.search(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), re.S).group(1)


@pytest.mark.slow
def test_the_python_api_pages_example_runs(official_dir, tiny_rm, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TQDM_DISABLE", "1")
    # The example's models/tiny-rm is the one `make demo` makes: the session's (conftest) stands in,
    # with the same tokenizer (trained on the data's text, it gives a third of the tokens to score).
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "tiny-rm").symlink_to(tiny_rm, target_is_directory=True)
    exec(compile(python_example(ROOT / "docs" / "python.md"), "docs/python.md", "exec"), {})
    printed = capsys.readouterr().out
    assert "'rows':" in printed and "report.html" in printed
    run = tmp_path / "outputs" / "py-demo"
    assert (run / "summary.json").exists() and (run / "report.html").exists()


def test_the_readmes_python_example_calls_the_api_with_settings_it_accepts():
    """It needs a server and a GPU, so it is not run: every ``pipeline.NAME`` it uses exists, and
    every settings object it builds is accepted as written."""
    tree = ast.parse(python_example(ROOT / "README.md"))
    used = {node.attr for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "pipeline"}
    assert {"generate", "transform", "score", "summarize", "report"} <= used
    assert [name for name in sorted(used) if not hasattr(pipeline, name)] == []
    settings = [node for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr.endswith("Settings")]
    assert len(settings) == 2
    for call in settings:
        getattr(pipeline, call.func.attr)(**{k.arg: ast.literal_eval(k.value) for k in call.keywords})
