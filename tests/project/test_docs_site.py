"""The documentation site (mkdocs.yml, docs/), built strictly once for this file as `make docs`
builds it, then read in Debian's headless Chromium as a reader would: from ``file://`` every entry
of the navigation is followed and search finds a page; from a static web server the same; and no
page asks for anything outside the site (no fonts, scripts or styles from the network) or logs an
error."""

from __future__ import annotations

import functools
import http.server
import os
import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from _browser_support import chromium, watched_page

ROOT = Path(__file__).resolve().parents[2]
# What a page may load besides the site's own files: inline images and the search frame.
INLINE = ("data:", "blob:", "about:")


def nav_pages(entries: list[Any]) -> dict[str, str]:
    """The navigation of mkdocs.yml as {page file: title}, sections flattened."""
    pages: dict[str, str] = {}
    for entry in entries:
        for title, target in entry.items():
            if isinstance(target, list):
                pages |= nav_pages(target)
            else:
                pages[target] = title
    return pages


NAV = nav_pages(yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))["nav"])


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("docs") / "site"
    built = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(ROOT / "mkdocs.yml"),
                            "--site-dir", str(out)], cwd=ROOT, capture_output=True, text=True,
                           env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert built.returncode == 0, built.stderr[-4000:]
    return out


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as launched:
        yield launched


@pytest.fixture()
def page(browser, site) -> Iterator[Any]:
    """A page that records errors and requests; each test ends by checking that there were no
    errors and that every request stayed inside the site (its folder, or the local server)."""
    page = watched_page(browser, viewport={"width": 1280, "height": 900})
    yield page
    page.close()
    assert page.problems == []
    inside = (site.resolve().as_uri() + "/", "http://127.0.0.1:", *INLINE)
    assert [url for url in page.requests if not url.startswith(inside)] == []


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    """A static web server that does not log every request to the test's output."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


def search(page, words: str) -> list[str]:
    """The pages search lists for ``words``, typed into the search box (each result's page)."""
    page.click("input.md-search__input")
    page.keyboard.type(words)
    results = page.locator(".md-search-result__item > a.md-search-result__link")
    results.first.wait_for()
    links = results.evaluate_all("links => links.map(a => new URL(a.href).pathname)")
    return [link.rsplit("/", 1)[-1] for link in links]


# Pages a reader follows the navigation through in the browser, one of each kind: prose, the
# gallery's pictures, a module docstring rendered into a page, the generated API reference. Every
# page shares one template, and each load costs a third of a second of CPU: the other pages are
# checked in the built files.
WALK = ("quickstart.md", "reports.md", "batch.md", "api/charactereval.md")


def test_the_navigation_leads_to_every_page_and_each_kind_opens_from_disk(page, site):
    assert set(WALK) <= set(NAV)
    for name in NAV:
        built = (site / name.replace(".md", ".html")).read_text(encoding="utf-8")
        assert re.search(r"<h1[^>]*>", built), name
    page.goto((site / "index.html").resolve().as_uri())
    links = page.locator("nav.md-nav--primary a.md-nav__link[href$='.html']")
    hrefs = links.evaluate_all("links => links.map(a => a.getAttribute('href'))")
    assert sorted(set(hrefs)) == sorted(name.replace(".md", ".html") for name in NAV)
    for name in WALK:
        href = name.replace(".md", ".html")
        link = page.locator(f"nav.md-nav--primary a.md-nav__link[href='{href}']")
        if not link.is_visible():
            # A page of a folded section (the API reference's): open the section first.
            link.locator("xpath=ancestor::li[contains(@class, 'md-nav__item--nested')][1]/label").click()
        link.click()
        page.wait_for_url(f"**/{href}")
        assert page.locator("article h1").first.inner_text().strip()
        assert page.locator("nav.md-nav--primary a.md-nav__link--active").first.inner_text().strip() == NAV[name]
        assert page.evaluate("[...document.images].every(i => i.complete && i.naturalWidth > 0)"), name
    # The API reference, generated from the docstrings of the typed pipeline API.
    assert "charactereval_lib.pipeline.charactereval" in page.locator("article h1").first.inner_text()
    article = page.locator("article").inner_text()
    assert "generate(" in article and "ScoreOutcome" in article and "the typed settings" not in article


def test_search_works_from_disk(page, site):
    page.goto((site / "quickstart.html").resolve().as_uri())
    assert "publishing.html" in search(page, "redact")


def test_the_site_works_from_a_static_web_server(page, site):
    handler = functools.partial(QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        page.goto(f"http://127.0.0.1:{server.server_address[1]}/index.html")
        page.click("nav.md-nav--primary a.md-nav__link[href='reports.html']")
        page.locator("img[src^='gallery/']").first.wait_for()
        assert page.evaluate("[...document.images].every(i => i.complete && i.naturalWidth > 0)")
        assert "judging.html" in search(page, "battle")
    finally:
        server.shutdown()
        server.server_close()


def test_the_gallery_shows_a_small_screenshot_of_each_report_kind():
    text = (ROOT / "docs" / "reports.md").read_text(encoding="utf-8")
    shots = sorted((ROOT / "docs" / "gallery").glob("*.png"))
    assert len(shots) >= 6
    for shot in shots:
        assert f"(gallery/{shot.name})" in text, shot.name
        assert shot.stat().st_size < 250_000, shot.name
