"""Rendered reports: execute a parameterised notebook with papermill, convert it to standalone HTML.

A benchmark's pipeline names the notebook (shipped in ``notebooks/``) and the parameters;
``render`` writes the executed notebook and its HTML only once the whole notebook ran, so a
failure never leaves a half-executed notebook beside an older HTML. The HTML hides code by
default and carries its figures inline (base64 PNG), so the one file can be shared.

The kernel is a separate process: it is started with this package's parent directory first on
PYTHONPATH, so it imports the very package that launched it (a checkout, a worktree or an
installed copy) rather than whichever copy its working directory or site-packages would give.
"""

from __future__ import annotations

import contextlib
import html
import logging
import os
import re
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from charactereval_lib.engine import faults, runs
from charactereval_lib.engine.resources import package_parent, resource_path

KERNEL_NAME = "python3"


class ReportError(runs.RunError):
    """A report that could not be rendered; the message names the notebook and the reason."""


@contextlib.contextmanager
def kernel_environment() -> Iterator[None]:
    """Environment inherited by the kernel: this package first on PYTHONPATH, and no progress
    bars (tqdm reads TQDM_DISABLE when imported, so it must be set before the kernel starts)."""
    saved = {key: os.environ.get(key) for key in ("PYTHONPATH", "TQDM_DISABLE")}
    paths = [str(package_parent())] + ([saved["PYTHONPATH"]] if saved["PYTHONPATH"] else [])
    os.environ["PYTHONPATH"] = os.pathsep.join(paths)
    os.environ["TQDM_DISABLE"] = "1"
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def notebook_path(name: str, notebooks_dir: Path | None = None) -> Path:
    path = Path(notebooks_dir or resource_path("notebooks")) / name
    if not path.exists():
        raise ReportError(f"{path}: notebook missing (reports need the workbench's notebooks/ directory)")
    return path


def execute(name: str, output: Path, parameters: Mapping[str, Any], *, notebooks_dir: Path | None = None,
            failed: Path | None = None) -> Path:
    """Execute notebook ``name`` with papermill into ``output`` (kernel ``python3``). When a cell
    fails, the partly executed notebook is kept, at ``failed`` if given, and named in the error."""
    import papermill
    from papermill.exceptions import PapermillExecutionError
    from traitlets.config import Config

    source = notebook_path(name, notebooks_dir)
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    # Curve keys for the kernel's sockets when the kernelspec supports them (ipykernel's does):
    # nothing sent in plain text on loopback, and no "running without encryption" warning.
    config = Config({"KernelManager": {"transport_encryption": "auto"}})
    try:
        with kernel_environment():
            papermill.execute_notebook(
                str(source), str(output), parameters=dict(parameters), kernel_name=KERNEL_NAME,
                progress_bar=False, log_output=False, request_save_on_cell_execute=False, config=config,
                # The kernel logs to our stderr; shutdown always interrupts it first, which it
                # may report as a spurious "KeyboardInterrupt caught in kernel". Cell errors
                # still surface through papermill.
                extra_arguments=["--IPKernelApp.log_level=CRITICAL"],
            )
    except PapermillExecutionError as exc:
        if failed is not None:
            os.replace(output, failed)
        raise ReportError(
            f"{failed or output}: cell {exc.exec_count} of {name} failed: {exc.ename}: {exc.evalue} "
            "(the partly executed notebook is kept there)"
        ) from None
    return output


def render(name: str, notebook: Path, html_path: Path, parameters: Mapping[str, Any], *, show_code: bool = False,
           title: str | None = None) -> tuple[Path, Path]:
    """Execute notebook ``name`` and convert it: ``notebook`` and ``html_path`` are replaced together
    once the notebook ran through. A failed execution is kept as ``*.failed.ipynb`` for
    inspection and leaves the previous notebook and HTML as they were."""
    notebook, html_path = Path(notebook), Path(html_path)
    # Before the notebook runs (for minutes), not when its results are saved.
    for directory in dict.fromkeys((notebook.parent, html_path.parent)):
        faults.check_writable(directory, "report directory")
    partial = notebook.with_name(f".{notebook.stem}.partial.ipynb")
    staged = html_path.with_name(f".{html_path.name}.partial")
    try:
        execute(name, partial, parameters, failed=notebook.with_name(f"{notebook.stem}.failed.ipynb"))
        to_html(partial, staged, show_code=show_code, title=title)
    except KeyboardInterrupt:
        # Ctrl-C or SIGTERM: nothing half-written stays behind (a failed cell's notebook is kept
        # on purpose, by execute).
        for path in (partial, staged):
            path.unlink(missing_ok=True)
        raise
    os.replace(partial, notebook)
    os.replace(staged, html_path)
    return notebook, html_path


# Added to nbconvert's page: the warning box, the table of contents, plain tables that fit the
# page, and figures no wider than the text.
REPORT_CSS = """
.ce-warnings { border: 2px solid #c0392b; background: #fdf0ee; border-radius: 6px; padding: 0.6em 1em;
  margin: 0.8em 0; }
.ce-warnings ul { margin: 0.3em 0 0 0; padding-left: 1.4em; }
.ce-warnings li { margin: 0.25em 0; }
.ce-warnings.ce-none { border-color: #7f8c8d; background: #f4f6f6; }
nav.ce-toc { border: 1px solid #d0d7de; border-radius: 6px; padding: 0.5em 1em; margin: 1em 0;
  display: inline-block; font-family: var(--jp-ui-font-family, system-ui, sans-serif); font-size: 0.9em; }
nav.ce-toc ol { margin: 0.2em 0; padding-left: 1.4em; }
nav.ce-toc .ce-toc-title { font-weight: bold; }
.jp-RenderedHTMLCommon table { border-collapse: collapse; font-size: 0.85em; margin: 0.5em 0 1em 0; }
.jp-RenderedHTMLCommon th, .jp-RenderedHTMLCommon td { padding: 0.25em 0.6em; border-bottom: 1px solid #e1e4e8;
  text-align: right; }
.jp-RenderedHTMLCommon th { background: #f6f8fa; white-space: nowrap; }
.jp-RenderedHTMLCommon td:first-child, .jp-RenderedHTMLCommon th:first-child { text-align: left; }
.jp-RenderedImage img, .jp-OutputArea-output img { max-width: 100%; height: auto; }
"""
def inline_code(text: str) -> str:
    """Markdown's `code` spans of an already escaped warning as HTML ``<code>``."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", text)


_HEADING = re.compile(r"<h([23])(\s[^>]*)?>(.*?)</h\1>", re.S)


def table_of_contents(body: str) -> str:
    """Insert a table of contents of the page's h2/h3 headings before the first h2 (headings
    without an id get one). Returns the page unchanged when it has no h2."""
    entries: list[tuple[int, str, str]] = []
    used: set[str] = set()

    def anchor(match: re.Match[str]) -> str:
        level, attrs, inner = int(match.group(1)), match.group(2) or "", match.group(3)
        text = html.unescape(re.sub(r"<[^>]+>", "", inner)).replace("¶", "").strip()
        found = re.search(r'\bid="([^"]+)"', attrs)
        ident = found.group(1) if found else re.sub(r"\W+", "-", text).strip("-") or "section"
        while ident in used and not found:
            ident += "-"
        used.add(ident)
        entries.append((level, ident, text))
        return match.group(0) if found else f'<h{level} id="{ident}"{attrs}>{inner}</h{level}>'

    body = _HEADING.sub(anchor, body)
    if not any(level == 2 for level, _, _ in entries):
        return body
    items, open_sub = [], False
    for level, ident, text in entries:
        link = f'<a href="#{html.escape(ident, quote=True)}">{html.escape(text)}</a>'
        if level == 3 and items:
            items.append(("" if open_sub else "<ol>") + f"<li>{link}</li>")
            open_sub = True
        else:
            items.append(("</ol></li>" if open_sub else "</li>" if items else "") + f"<li>{link}")
            open_sub = False
    items.append("</ol></li>" if open_sub else "</li>")
    toc = f'<nav class="ce-toc"><span class="ce-toc-title">Contents</span><ol>{"".join(items)}</ol></nav>'
    first = re.search(r"<h2[\s>]", body)
    # The TOC opens the first h2's cell's output: insert it before that cell's wrapper when known.
    cell = body.rfind('<div class="jp-Cell', 0, first.start())
    at = cell if cell != -1 else first.start()
    return body[:at] + toc + body[at:]


def to_html(notebook: Path, html_path: Path, *, show_code: bool = False, title: str | None = None) -> Path:
    """Convert an executed notebook to one standalone HTML file (code hidden unless asked), with
    a table of contents and the report's styles."""
    import nbformat
    from nbconvert import HTMLExporter

    # nbconvert warns about every figure without alt text, then gives it a generic one: that is
    # fine for these reports, so its warnings go to a quiet logger of our own.
    quiet = logging.getLogger("charactereval.nbconvert")
    quiet.setLevel(logging.ERROR)
    exporter = HTMLExporter(exclude_input=not show_code, exclude_input_prompt=True, exclude_output_prompt=True, log=quiet)
    node = nbformat.read(str(notebook), as_version=4)
    body, _ = exporter.from_notebook_node(node, resources={"metadata": {"name": title or Path(notebook).stem}})
    body = table_of_contents(body).replace("</head>", f"<style>{REPORT_CSS}</style>\n</head>", 1)
    runs.write_text_atomic(Path(html_path), body)
    return Path(html_path)
