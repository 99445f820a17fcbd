"""Files the workbench ships beside its code: notebooks, pinned upstream manifests, paper tables.

A checkout keeps them at the project root (``notebooks/``, ``data/``), where users see and edit
them; a built wheel carries the same files under ``charactereval_lib/_resources/`` (the build
backend copies them in), because an installed package has no project root.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[1]
PACKAGED = PACKAGE_DIR / "_resources"
CHECKOUT_ROOT = PACKAGE_DIR.parent


class ResourceError(FileNotFoundError):
    """A shipped file is missing: the installation is incomplete."""


def resource_path(relative: str) -> Path:
    """The shipped file or directory ``relative`` (e.g. ``"notebooks"``), from the wheel's copy
    if this is an installed package, else from the checkout."""
    for base in (PACKAGED, CHECKOUT_ROOT):
        path = base / relative
        if path.exists():
            return path
    raise ResourceError(
        f"{relative}: not found in {PACKAGED} or {CHECKOUT_ROOT} (an incomplete installation; reinstall the package)"
    )


def package_parent() -> Path:
    """The directory that holds the running ``charactereval_lib`` (put first on a kernel's
    PYTHONPATH so that it imports this very copy)."""
    return CHECKOUT_ROOT
