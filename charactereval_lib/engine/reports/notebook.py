"""Rendered reports: execute a parameterised notebook with papermill, convert it to standalone HTML.

A benchmark's pipeline gives the notebook (the file its declaration names, ``Benchmark.notebook_path``;
the workbench's own in ``notebooks/``, ``shipped``) and the parameters;
``render`` writes the executed notebook and its HTML only once the whole notebook ran, so a
failure never leaves a half-executed notebook beside an older HTML. The HTML hides code by
default and carries its figures inline (base64 PNG), so the one file can be shared.

The kernel is a separate process: it is started with this package's parent directory first on
PYTHONPATH, so it imports the very package that launched it (a checkout, a worktree or an
installed copy) rather than whichever copy its working directory or site-packages would give.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from charactereval_lib.engine import faults
from charactereval_lib.engine.resources import package_parent, resource_path
from charactereval_lib.engine.storage import artifacts, runs

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


def shipped(name: str) -> Path:
    """The workbench's own notebook ``name`` (not a benchmark's)."""
    path = resource_path("notebooks") / name
    if not path.exists():
        raise ReportError(f"{path}: notebook missing (reports need the workbench's notebooks/ directory)")
    return path


def parameterised_copy(source: Path, output: Path, parameters: Mapping[str, Any], *, force: bool = False) -> Path:
    """Notebook ``source`` with ``parameters`` injected after its parameters cell as papermill
    injects them, unexecuted, written to ``output`` (an existing file, maybe an analyst's work, only
    with ``force``): opened in Jupyter, its outputs go into this copy, never into the shipped file."""
    import nbformat
    from papermill.iorw import load_notebook_node
    from papermill.parameterize import parameterize_notebook

    output = Path(output)
    if output.exists() and not force:
        raise ReportError(f"{output}: already exists (it may hold your work: open it, or pass --force to replace it)")
    # papermill's loader gives every cell the metadata its parameterizer reads.
    notebook = parameterize_notebook(load_notebook_node(str(source)), dict(parameters),
                                     kernel_name=KERNEL_NAME, language="python")
    output.parent.mkdir(parents=True, exist_ok=True)
    artifacts.write_text_atomic(output, nbformat.writes(notebook))
    return output


def execute(source: Path, output: Path, parameters: Mapping[str, Any], *, failed: Path | None = None) -> Path:
    """Execute notebook ``source`` with papermill into ``output`` (kernel ``python3``). When a cell
    fails, the partly executed notebook is kept, at ``failed`` if given, and named in the error;
    a kernel that dies is one line too."""
    import papermill
    from nbclient.exceptions import DeadKernelError
    from papermill.exceptions import PapermillExecutionError
    from traitlets.config import Config

    source, output = Path(source), Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    # Curve keys for the kernel's sockets when the kernelspec supports them (ipykernel's does):
    # nothing sent in plain text on loopback, and no "running without encryption" warning.
    config = Config({"KernelManager": {"transport_encryption": "auto"}})
    try:
        with kernel_environment(), _kernel_death_said_here():
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
            f"{failed or output}: cell {exc.exec_count} of {source.name} failed: {exc.ename}: {exc.evalue} "
            "(the partly executed notebook is kept there)"
        ) from None
    except DeadKernelError:
        raise ReportError(f"{source}: the kernel running it died (killed from outside, or out of memory?); "
                          "nothing was written") from None
    return output


class _KernelDeathNote(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not record.getMessage().startswith("Kernel died")


@contextlib.contextmanager
def _kernel_death_said_here() -> Iterator[None]:
    """A kernel that dies mid-cell (killed, or shut down by Ctrl-C) is said once, by ``execute``
    (a ReportError, or the CLI's "interrupted"), not also by nbclient: neither its log line
    "Kernel died while waiting for execute reply." (through papermill's logger), nor the
    traceback asyncio prints when it collects one of nbclient's tasks that ended with
    DeadKernelError and that nothing awaits any more ("Task exception was never retrieved":
    that happens after ``execute`` returned, so the loop papermill runs on keeps the handler)."""
    from jupyter_core.utils import ensure_event_loop
    from nbclient.exceptions import DeadKernelError

    def handler(loop: Any, context: dict[str, Any]) -> None:
        if not isinstance(context.get("exception"), DeadKernelError):
            loop.default_exception_handler(context)

    ensure_event_loop().set_exception_handler(handler)
    note = _KernelDeathNote()
    papermill_log = logging.getLogger("papermill")
    papermill_log.addFilter(note)
    try:
        yield
    finally:
        papermill_log.removeFilter(note)


def render(source: Path, notebook: Path, html_path: Path, parameters: Mapping[str, Any], *, show_code: bool = False,
           title: str | None = None) -> tuple[Path, Path]:
    """Execute notebook ``source`` and convert it: ``notebook`` and ``html_path`` are replaced together
    once the notebook ran through. A failed execution is kept as ``*.failed.ipynb`` for
    inspection and leaves the previous notebook and HTML as they were."""
    notebook, html_path = Path(notebook), Path(html_path)
    # Before the notebook runs (for minutes), not when its results are saved.
    for directory in dict.fromkeys((notebook.parent, html_path.parent)):
        faults.check_writable(directory, "report directory")
    partial = notebook.with_name(f".{notebook.stem}.partial.ipynb")
    staged = html_path.with_name(f".{html_path.name}.partial")
    try:
        execute(source, partial, parameters, failed=notebook.with_name(f"{notebook.stem}.failed.ipynb"))
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


def to_html(notebook: Path, html_path: Path, *, show_code: bool = False, title: str | None = None) -> Path:
    """Convert an executed notebook to one standalone HTML file (code hidden unless asked), with
    a table of contents and the report's styles (the kit's template)."""
    import nbformat
    from nbconvert import HTMLExporter

    from charactereval_lib.engine.reports import kit

    # nbconvert warns about every figure without alt text, then gives it a generic one: that is
    # fine for these reports, so its warnings go to a quiet logger of our own.
    quiet = logging.getLogger("charactereval.nbconvert")
    quiet.setLevel(logging.ERROR)
    exporter = HTMLExporter(exclude_input=not show_code, exclude_input_prompt=True, exclude_output_prompt=True, log=quiet,
                            extra_template_basedirs=[str(kit.TEMPLATE_DIR.parent)],
                            template_name=kit.TEMPLATE_DIR.name,
                            filters={"contents_before": kit.contents_before})
    node = nbformat.read(str(notebook), as_version=4)
    body, _ = exporter.from_notebook_node(node, resources={"metadata": {"name": title or Path(notebook).stem}})
    artifacts.write_text_atomic(Path(html_path), body)
    return Path(html_path)
