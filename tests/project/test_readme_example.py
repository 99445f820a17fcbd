"""The README's "From Python" example runs as written: a small pipeline without the CLI."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def readme_python_example() -> str:
    section = (ROOT / "README.md").read_text(encoding="utf-8").split("## From Python", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.mark.slow
def test_the_readme_python_example_runs(official_dir, tiny_rm, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("TQDM_DISABLE", "1")
    # The example's models/tiny-rm is the one `make demo` makes: the session's (conftest), whose
    # tokenizer, trained on the data's text, gives a third of the tokens to score.
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "tiny-rm").symlink_to(tiny_rm, target_is_directory=True)
    exec(compile(readme_python_example(), "README.md", "exec"), {})
    printed = capsys.readouterr().out
    assert "'rows':" in printed and "report.html" in printed
    run = tmp_path / "outputs" / "py-demo"
    assert (run / "summary.json").exists() and (run / "report.html").exists()
