"""The leaderboard site in a real browser: Debian's headless Chromium driven by Playwright (no
browser is downloaded), on a site built from synthetic runs. The tests assert what a user sees,
that no page logs a console error or a script error, and that no request leaves the site's
folder (from ``file://``, and once from a static web server)."""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import subprocess
import threading
from pathlib import Path

import pytest
from _browser_support import chromium, watched_page

from charactereval_lib.apps.leaderboard import build
from charactereval_lib.charactereval import eligibility as charactereval_rules
from charactereval_lib.charactereval import layout
from charactereval_lib.charactereval.data import load_official_data
from charactereval_lib.coser import eligibility as coser_rules
from charactereval_lib.engine.reports.plots import CJK_FONTS, cjk_font
from charactereval_lib.engine.storage import artifacts
from charactereval_lib.testing.leaderboard_runs import charactereval_run, coser_run
from charactereval_lib.testing.synthetic import write_synthetic_data


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    root = tmp_path_factory.mktemp("browser")
    data = load_official_data(write_synthetic_data(root / "data", 120), verify=False)
    ce = charactereval_run(root / "runs" / "ce-small", data, model="small-model", seed=1,
                           failed_ids=[data.samples[3].id])
    # The first rows also judged, so the explorer has both scorers to set side by side.
    rows = artifacts.read_jsonl(ce / layout.ROWS).records[:10]
    artifacts.write_jsonl_atomic(ce / layout.JUDGE_SCORES, [
        {"id": r["id"], "metric_en": r["metric_en"], "scorer": "judge", "judge_model": "judge-x", "status": "ok",
         "score": 4.0, "choice": "4", "invalid": False, "reply": "invented reasoning\n4"} for r in rows])
    coser_run(root / "runs" / "coser-a", actor="actor-a", level=65, seed=1)
    coser_run(root / "runs" / "coser-b", actor="actor-b", level=60, seed=2, failed_sessions=2)
    coser_run(root / "runs" / "coser-sample", actor="actor-c", scenes=20, repeats=1, seed=3)
    content, _ = build([root / "runs"], root / "site", context={"charactereval": data})
    return root / "site", content, data


@pytest.fixture(scope="module")
def browser():
    with chromium() as launched:
        yield launched


@pytest.fixture()
def page(browser, site, tmp_path):
    """A page that records console errors, script errors and requests; each test ends by
    checking that there were no errors and that every request stayed inside the site."""
    page = watched_page(browser, viewport={"width": 1280, "height": 900})
    yield page
    page.close()
    assert page.problems == []
    allowed = (site[0].resolve().as_uri() + "/", "http://127.0.0.1:")
    assert [u for u in page.requests if not u.startswith(allowed)] == []


def shoot(page, name: str) -> None:
    target = os.environ.get("LEADERBOARD_SCREENSHOTS")
    if target:
        Path(target).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(target) / f"{name}.png"), full_page=True)


def open_index(page, site_dir: Path) -> None:
    page.goto((site_dir / "index.html").resolve().as_uri())


def choose(page, key: str, **option) -> None:
    """Pick a filter's option and wait until the table shows the filtered rows."""
    page.select_option(f"select[data-filter={key}]", **option)
    page.wait_for_function("document.querySelector('.dt-info').textContent.includes('filtered from')")


@pytest.mark.slow
def test_boards_show_the_pending_anchor_unranked_rows_and_an_ineligible_runs_reasons(page, site):
    open_index(page, site[0])
    boards = page.locator("section.board")
    titles = [t.strip() for t in boards.locator("h2").all_inner_texts()]
    assert titles == ["CharacterEval · protocol charactereval-1.0 · scorer BaichuanCharRM sha256:c0ffeec0ffee",
                      "CharacterEval · protocol charactereval-1.0 · scorer judge judge-x",
                      "CoSER GCA · protocol coser-paper · scorer judge gpt-4o-2024-08-06"]
    coser = boards.nth(2)
    assert coser.locator(".anchor.pending").inner_text().startswith("Anchor pending")
    assert "Nothing on this board is ranked" in coser.locator(".anchor").inner_text()
    ranked = coser.locator("table.rows tbody tr")
    assert ranked.count() == 2
    assert ranked.locator("td.rank").all_inner_texts() == ["–", "–"]
    assert sorted(ranked.locator("td:nth-child(2)").all_inner_texts()) == ["actor-a", "actor-b"]
    reasons = coser.locator("table.ineligible tr", has_text="coser-sample").locator("ul.reasons li").all_inner_texts()
    assert reasons == ["full-protocol: 20 of the 200 test scenes (preset sample)",
                       "full-protocol: 1 repeat(s), the protocol runs 3"]
    assert "all-rows-scored: 233 rows plus 4 rows of failed samples, not the protocol's 8032" in \
        boards.nth(0).locator("table.ineligible").inner_text()
    judged = boards.nth(1).locator("table.ineligible").inner_text()
    assert "official-rm: scored by the judge judge-x; the protocol's scorer is the reward model" in judged
    assert "all-rows-scored: 223 of 233 rows have no judge judge-x score" in judged
    # Every rule of both benchmarks is listed, each once (the rules live in the eligibility modules).
    listed = page.locator("#rules dt code").all_inner_texts()
    assert listed == [r.name for r in (*charactereval_rules.RULES, *coser_rules.RULES)]
    # Not ranked, but scored: the interval and n beside the reasons.
    sample = coser.locator("table.ineligible tr", has_text="coser-sample").inner_text()
    assert "[" in sample and "\t20\t0\t" in sample
    shoot(page, "index")
    coser.locator("a.compare").click()
    page.wait_for_selector("table.pairs")
    pairs = page.locator("table.pairs tbody tr")
    assert pairs.count() == 2 and "charactereval coser compare" in pairs.first.inner_text()


def test_explorer_filters_to_one_character_and_opens_a_samples_detail(page, site):
    site_dir, content, data = site
    open_index(page, site_dir)
    page.click("text=ce-small")
    page.wait_for_selector("#samples tbody tr")
    role = sorted({s.role for s in data.samples})[2]
    choose(page, "character", value=role)
    characters = page.locator("#samples tbody tr td:nth-child(2)").all_inner_texts()
    assert characters and set(characters) == {role}
    assert "filtered from" in page.locator(".dt-info").inner_text()
    page.locator("#samples tbody tr").first.click()
    detail = page.locator("#detail")
    detail.wait_for(state="visible")
    sample_id = int(page.locator("#samples tbody tr td").first.inner_text())
    text = detail.inner_text()
    assert f"sample {sample_id}" in text and f"character {role}" in text
    for heading in ("Context", "The model's full reply", "First line (what was scored)", "Reward model"):
        assert heading in text
    assert data.by_id()[sample_id].context.split("\n")[0] in text
    shoot(page, "explorer-charactereval")


def test_explorer_columns_sort_as_their_declared_types(page, site):
    """The explorer names each column's type instead of letting DataTables detect it (detection
    renders every cell): scores sort as numbers, a text column with non-ASCII values by locale."""
    site_dir, _, data = site
    open_index(page, site_dir)
    page.click("text=ce-small")
    page.wait_for_selector("#samples tbody tr")
    types = page.evaluate("window.LBTables.default.tables({api: true}).settings()[0].aoColumns.map((c) => c.sType)")
    non_ascii = any(not s.role.isascii() for s in data.samples)
    assert types == ["num", "string-utf8" if non_ascii else "string", "string-utf8", "string", "string",
                     "num", "num", "num", "string"]
    header = page.locator("#samples thead th", has_text="RM score")
    header.click()
    header.click()  # descending
    page.wait_for_function("document.querySelector('#samples thead th.dt-ordering-desc') !== null")
    shown = [float(v) for v in page.locator("#samples tbody tr td:nth-child(6)").all_inner_texts()[:5]]
    scores = page.evaluate("window.LB_SAMPLES.rows.map((r) => r[5]).filter((v) => v != null)")
    assert shown == sorted(shown, reverse=True) and shown[0] == round(max(scores), 3)


def test_a_judged_sample_shows_both_scorers_and_their_disagreement(page, site):
    open_index(page, site[0])
    page.click("text=ce-small")
    page.wait_for_selector("#samples tbody tr")
    header = page.locator("#samples thead th", has_text="judge score")
    header.click()
    page.wait_for_selector("#samples thead th.dt-ordering-asc")
    header.click()  # descending: the judged rows first
    # DataTables may redraw after the click returns: read the row once the order is applied.
    page.wait_for_selector("#samples thead th.dt-ordering-desc")
    page.wait_for_function("document.querySelector('#samples tbody tr td:nth-child(7)').textContent === '4.000'")
    first = page.locator("#samples tbody tr").first
    cells = first.inner_text().split("\t")
    rm, judge, gap = (float(cells[k]) for k in (5, 6, 7))
    assert judge == 4.0 and gap == pytest.approx(abs(rm - judge), abs=2e-3)
    first.click()
    detail = page.locator("#detail")
    detail.wait_for(state="visible")
    text = detail.inner_text()
    assert "Judge judge-x" in text and "parsed choice" in text and "invented reasoning" in text


def test_a_failed_sample_is_a_row_with_its_reason(page, site):
    site_dir, _, data = site
    open_index(page, site_dir)
    page.click("text=ce-small")
    page.wait_for_selector("#samples tbody tr")
    options = page.locator("select[data-filter=failure] option").all_inner_texts()
    assert options[0] == "failure: all" and any("synthetic timeout" in o for o in options[1:])
    choose(page, "failure", index=1)
    ids = set(page.locator("#samples tbody tr td:first-child").all_inner_texts())
    assert ids == {str(data.samples[3].id)}
    page.locator("#samples tbody tr").first.click()
    page.locator("#detail").wait_for(state="visible")
    assert "None: APITimeoutError synthetic timeout after 3 attempt(s)" in page.locator("#detail").inner_text()


def test_coser_detail_shows_the_dialogue_critiques_and_the_score_computation(page, site):
    open_index(page, site[0])
    page.click("text=coser-b")
    page.wait_for_selector("#samples tbody tr")
    choose(page, "book", value="Book 3")
    books = page.locator("#samples tbody tr td:nth-child(2)").all_inner_texts()
    assert set(books) == {"Book 3"}
    first = page.locator("#samples tbody tr").first
    storyline = first.locator("td:nth-child(5)").inner_text()
    first.click()
    detail = page.locator("#detail")
    detail.wait_for(state="visible")
    text = detail.inner_text()
    assert "Simulated dialogue" in text and "Storyline Consistency" in text
    # The recorded message starts with its speaker's name ("Alice: ..."): printed once.
    lines = detail.locator("ol.dialogue li").all_inner_texts()
    assert lines and all(line.startswith(("Alice: ", "Bob: ", "Environment: ")) for line in lines)
    assert not any(line.startswith(("Alice: Alice:", "Bob: Bob:", "Environment: Environment:")) for line in lines)
    computation = detail.locator("p.computation").first.inner_text()
    # The formula, then the same with this dimension's S and n in place.
    s, n = computation.split("S = ")[1].split(" ")[0], computation.split("n = ")[1].split(" ")[0]
    assert f"max(0, 100 - (S - 0.3 * n) * 5) = max(0, 100 - ({s} - 0.3 * {n}) * 5) = " in computation
    assert "no upper clip" in computation
    # The table's score is the one the computation ends in.
    assert float(computation.rsplit("score ", 1)[1]) == pytest.approx(float(storyline), abs=5e-4)
    shoot(page, "explorer-coser")


def test_the_site_works_from_a_static_web_server(page, site, tmp_path):
    served = tmp_path / "served"
    shutil.copytree(site[0], served)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        page.goto(f"http://127.0.0.1:{server.server_address[1]}/index.html")
        page.click("text=coser-a")
        page.wait_for_selector("#samples tbody tr")
        page.locator("#samples tbody tr").first.click()
        page.locator("#detail").wait_for(state="visible")
        assert "Simulated dialogue" in page.locator("#detail").inner_text()
    finally:
        server.shutdown()
        server.server_close()


def system_has_cjk_font() -> bool:
    """What fontconfig (Chromium's font source on Linux) says: any font covering Chinese; without
    its fc-list, whether the reports find one of theirs."""
    if shutil.which("fc-list") is None:
        return cjk_font() is not None
    listed = subprocess.run(["fc-list", ":lang=zh", "family"], capture_output=True, text=True)
    return bool(listed.stdout.strip())


@pytest.mark.slow
def test_the_site_says_when_the_browser_has_no_cjk_font(page, site):
    """Without a CJK font the character names are boxes: the page says so, as the reports do,
    and only then; the CSS names the fonts the reports' figures look for."""
    css = (site[0] / "assets" / "site.css").read_text(encoding="utf-8")
    body_fonts = css.split("body {", 1)[1].split(";", 1)[0]
    assert all(f'"{name}"' in body_fonts for name in CJK_FONTS)
    for url in ((site[0] / "index.html").resolve().as_uri(),
                (site[0] / "runs" / sorted(p.name for p in (site[0] / "runs").iterdir())[0] / "index.html")
                .resolve().as_uri()):
        page.goto(url)
        page.wait_for_load_state("load")
        notice = page.locator("#no-cjk-font")
        assert notice.is_visible() is not system_has_cjk_font(), url
        if notice.is_visible():
            assert "no CJK font" in notice.inner_text() and "fonts-noto-cjk" in notice.inner_text()
    shoot(page, "no-cjk-font")


@pytest.fixture(scope="module")
def redacted(site):
    """The same runs published with --redact, inside the site's folder (so the page fixture's
    check that every request stays inside the site holds)."""
    site_dir, _, data = site
    out = site_dir / "redacted"
    build([site_dir.parent / "runs"], out, context={"charactereval": data}, redact=True)
    return out


def test_a_redacted_sites_details_show_scores_and_severities_and_no_text(page, redacted, site):
    open_index(page, redacted)
    assert "Redacted:" in page.locator("header").inner_text()
    page.click("text=coser-b")
    page.wait_for_selector("#samples tbody tr")
    page.locator("#samples tbody tr").first.click()
    detail = page.locator("#detail")
    detail.wait_for(state="visible")
    text = detail.inner_text()
    assert "not published (redacted site)" in text and "invented flaw" not in text
    assert "max(0, 100 - (" in detail.locator("p.computation").first.inner_text()
    assert detail.locator("table.cells tr").count() > 1  # one row per flaw, its severity shown
    open_index(page, redacted)
    page.click("text=ce-small")
    page.wait_for_selector("#samples tbody tr")
    page.locator("#samples tbody tr").first.click()
    detail.wait_for(state="visible")
    text = detail.inner_text()
    assert "not published (redacted site)" in text and "Reward model" in text and "The model's full reply" not in text
    assert not any(s.context in text for s in site[2].samples)
