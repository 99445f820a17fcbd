"""Jupyter Lab on the workspace's run notebooks (``make lab``).

The server runs from an environment of its own (``.venv-lab``: the ``lab`` extra and nothing
else) and starts its kernels from the project's environment (its ``python3`` kernelspec, found
first on ``JUPYTER_PATH``). Jupyter Lab brings jupyter-events and with it rfc3987-syntax, whose
grammars jsonschema builds in every process that imports nbformat, papermill or Ray (1.1 s of
CPU each): kept out of the project's environment, it never reaches a report or a Ray worker.

Lab serves the workspace's ``outputs/`` folder, where ``charactereval notebook`` puts the runs'
notebooks (the tracked ``notebooks/`` stay output-free), and its kernels work in the workspace
(``$CHARACTEREVAL_HOME``): they find its data directory (``data use``) and its runs by name.
Nothing here imports Jupyter.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from charactereval_lib.engine.storage.runs import OUTPUTS_DIR, WORKSPACE_ENV, workspace_root

DISTRIBUTION = "charactereval-workbench"
EXTRA = "lab"
# The run notebook `make lab` opens (made by `charactereval notebook analyse RUN` when missing).
NOTEBOOK = "analyse"


def requirements() -> list[str]:
    """The ``lab`` extra's requirements, as the installed package declares them."""
    from importlib import metadata

    from packaging.requirements import Requirement

    found = []
    for line in metadata.requires(DISTRIBUTION) or []:
        requirement = Requirement(line)
        if requirement.marker is not None and requirement.marker.evaluate({"extra": EXTRA}) \
                and not requirement.marker.evaluate({"extra": ""}):
            requirement.marker = None
            found.append(str(requirement))
    return found


def server_command(lab_python: str | os.PathLike[str], root: Path, notebook: Path | None = None, *,
                   port: int | None = None, token: str | None = None) -> list[str]:
    """The server's command line: Lab on ``root``, opening ``notebook`` when given; with ``port``
    it runs headless on loopback (no browser) with ``token``, as the tests start it."""
    argv = [os.fspath(lab_python), "-m", "jupyterlab", f"--ServerApp.root_dir={root}"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        # Jupyter refuses root unless told; containers and CI run as root, where it is the only user.
        argv.append("--allow-root")
    if port is not None:
        argv += ["--no-browser", "--ServerApp.ip=127.0.0.1", f"--ServerApp.port={port}", "--ServerApp.port_retries=0",
                 f"--IdentityProvider.token={token or ''}"]
    if notebook is not None:
        argv.append(str(notebook))
    return argv


def server_environment(workspace: Path, kernel_prefix: Path | None = None) -> dict[str, str]:
    """The server's environment (its kernels inherit it): the workspace, and the project
    environment's kernelspecs first (``kernel_prefix``: this interpreter's environment)."""
    env = dict(os.environ)
    env[WORKSPACE_ENV] = str(workspace)
    kernels = Path(kernel_prefix or sys.prefix) / "share" / "jupyter"
    env["JUPYTER_PATH"] = os.pathsep.join([str(kernels), *filter(None, [os.environ.get("JUPYTER_PATH")])])
    return env


def run_notebook(run: str) -> Path | None:
    """The run's analysis notebook, made when missing; None (said on stderr) when there is no such run."""
    from charactereval_lib.engine.storage import runs
    from charactereval_lib.pipeline.notebooks import available, notebook

    folder = runs.resolve_run_dir(run)
    if not folder.is_dir():
        print(f"note: {folder}: no such run: Lab opens {runs.outputs_dir()} (`make demo` makes demo-offline-a; "
              f"`charactereval notebook {NOTEBOOK} RUN` makes a run's notebook)", file=sys.stderr)
        return None
    path = folder / available()[NOTEBOOK].notebooks[NOTEBOOK].file
    if not path.exists():
        notebook(NOTEBOOK, [run])
        print(f"made {path} (`charactereval notebook {NOTEBOOK} {run}`)")
    return path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m charactereval_lib.cli.lab", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="action", required=True)
    sub.add_parser("requirements", help="print the lab extra's requirements, one a line (for pip install -r)")
    p = sub.add_parser("open", help="start Jupyter Lab on the workspace's run notebooks")
    p.add_argument("--lab-python", required=True, help="the Lab environment's python (make lab: .venv-lab/bin/python)")
    p.add_argument("--run", help="open this run's analysis notebook (made when missing)")
    args = parser.parse_args(argv)
    if args.action == "requirements":
        print("\n".join(requirements()))
        return 0
    if not Path(args.lab_python).is_file():
        print(f"error: {args.lab_python}: no Lab environment (`make lab` makes it)", file=sys.stderr)
        return 2
    from charactereval_lib.cli import user_errors

    workspace = workspace_root().absolute()
    root = workspace / OUTPUTS_DIR
    root.mkdir(exist_ok=True)
    errors = user_errors()
    try:
        path = run_notebook(args.run) if args.run else None
    except errors as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    command = server_command(args.lab_python, root, path.absolute() if path else None)
    # exec keeps nothing of this process: what was printed must be out first.
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(command[0], command, server_environment(workspace))


if __name__ == "__main__":
    sys.exit(main())
