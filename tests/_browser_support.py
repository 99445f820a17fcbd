"""Debian's headless Chromium driven by Playwright (no browser is downloaded), for the tests that
open the site and the reports as a user would. Imported by ``test_leaderboard_browser``,
``test_coser_report`` and ``test_docs_site`` (pytest puts ``tests/`` on ``sys.path``)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]
# Generous: the machine may be busy; nothing here waits this long when it works.
WAIT_MS = 60_000


@contextlib.contextmanager
def chromium() -> Iterator[Any]:
    """A launched browser; the test is skipped where Chromium is missing, and fails in CI."""
    if not Path(CHROMIUM).exists():
        message = f"{CHROMIUM} is missing (apt-get install chromium; .ci/run installs it)"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            yield browser
        finally:
            browser.close()


def watched_page(browser: Any, **options: Any) -> Any:
    """A new page (``options`` as Playwright's ``new_page`` takes them) that keeps every console
    error and script error in ``page.problems`` and the URL of every request in ``page.requests``."""
    page = browser.new_page(**options)
    page.set_default_timeout(WAIT_MS)
    page.problems, page.requests = [], []
    page.on("console", lambda m: page.problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: page.problems.append(f"script error: {e}"))
    page.on("request", lambda r: page.requests.append(r.url))
    return page


def requests_leaving(browser: Any, page_file: Path, folder: Path) -> list[str]:
    """Open ``page_file`` from ``file://`` until the network is idle: the requests that left
    ``folder``, and any script error."""
    page = browser.new_page()
    page.set_default_timeout(WAIT_MS)
    seen: list[str] = []
    page.on("request", lambda r: seen.append(r.url))
    page.on("pageerror", lambda e: seen.append(f"script error: {e}"))
    try:
        page.goto(page_file.resolve().as_uri(), wait_until="networkidle")
    finally:
        page.close()
    inside = folder.resolve().as_uri() + "/"
    return [url for url in seen if not url.startswith(inside)]
