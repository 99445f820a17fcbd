"""Leaderboard site build time and explorer responsiveness at full size.

Makes (untimed) 10 synthetic CharacterEval runs of the real size (4,564 samples, 8,032 rows) and
10 synthetic full CoSER runs (200 scenes x 3 repeats), then in the same process:
  (a) baseline: every artifact the build reads, parsed once (run.json, generations, rows, scores,
      CoSER scenes and judgements): the floor any build pays;
  (b) ours: the whole site built (`leaderboard.build`: rules, bootstrap intervals, paired tie
      tests, explorer data, pages), reported as seconds and as a ratio to (a);
  (c) with Debian's chromium and the playwright package present (else skipped, said in one
      line): in a headless browser, a CharacterEval run page until its
      table shows rows, the filter to one character, and opening a sample's detail.
Writes benchmarks/results/bench_leaderboard_<label>.json (or ``--out FILE``).

    python benchmarks/bench_leaderboard.py [--label cpu_2core] [--ce-runs 10] [--coser-runs 10] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from charactereval_lib.apps.leaderboard import build
from charactereval_lib.charactereval.data import load_official_data
from charactereval_lib.engine import artifacts, runs
from charactereval_lib.testing.leaderboard_runs import charactereval_run, coser_run, full_size_data

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]


def make_runs(root: Path, ce: int, coser: int):
    data = load_official_data(full_size_data(root / "data"), verify=False)
    for k in range(ce):
        charactereval_run(root / "runs" / "ce" / f"model-{k:02d}", data, model=f"model-{k:02d}", shift=0.05 * k,
                          seed=k, failed_ids=[data.samples[k].id])
    for k in range(coser):
        coser_run(root / "runs" / "coser" / f"actor-{k:02d}", actor=f"actor-{k:02d}", level=50 + k, seed=k,
                  failed_sessions=k % 3)
    return data


def read_everything(root: Path) -> int:
    records = 0
    for manifest in (root / "runs").rglob(runs.MANIFEST):
        json.loads(manifest.read_text(encoding="utf-8"))
        for name in ("generations.jsonl", "rows.jsonl", "scores.jsonl", "coser_scenes.jsonl", "coser_judgements.jsonl"):
            path = manifest.parent / name
            if path.exists():
                records += len(artifacts.read_jsonl(path).records)
    return records


def browser_missing() -> str | None:
    """Why the browser part cannot run here (Debian's chromium or the playwright package is
    missing), or None."""
    import importlib.util

    if not Path(CHROMIUM).exists():
        return f"{CHROMIUM} is missing (apt-get install chromium)"
    if importlib.util.find_spec("playwright") is None:
        return "the playwright package is not installed (pip install playwright; no browser is downloaded)"
    return None


def browse(site: Path) -> dict[str, float]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.set_default_timeout(120_000)
        page.goto((site / "index.html").as_uri())
        link = page.locator("a", has_text="model-00").first
        started = time.perf_counter()
        link.click()
        page.wait_for_selector("#samples tbody tr")
        shown = time.perf_counter() - started
        rows = page.evaluate("window.LB_SAMPLES.rows.length")
        value = page.locator("select[data-filter=character] option").nth(1).get_attribute("value")
        started = time.perf_counter()
        page.select_option("select[data-filter=character]", value)
        page.wait_for_function("document.querySelector('.dt-info').textContent.includes('filtered')")
        filtered = time.perf_counter() - started
        started = time.perf_counter()
        page.locator("#samples tbody tr").first.click()
        page.locator("#detail").wait_for(state="visible")
        detail = time.perf_counter() - started
        browser.close()
    return {"run_page_to_table_s": round(shown, 3), "explorer_rows": rows, "filter_one_character_s": round(filtered, 3),
            "open_detail_s": round(detail, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--label", default="cpu_2core")
    parser.add_argument("--ce-runs", type=int, default=10)
    parser.add_argument("--coser-runs", type=int, default=10)
    parser.add_argument("--out", metavar="FILE", help="write the figures here instead of benchmarks/results/")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        started = time.perf_counter()
        data = make_runs(root, args.ce_runs, args.coser_runs)
        print(f"made {args.ce_runs} CharacterEval and {args.coser_runs} CoSER runs in "
              f"{time.perf_counter() - started:.1f} s (not timed below)", flush=True)
        started = time.perf_counter()
        records = read_everything(root)
        baseline = time.perf_counter() - started
        started = time.perf_counter()
        content, warnings = build([root / "runs"], root / "site", context={"charactereval": data})
        ours = time.perf_counter() - started
        assert not warnings, warnings
        site = root / "site"
        sizes = {"index_html_bytes": (site / "index.html").stat().st_size,
                 "largest_samples_js_bytes": max(p.stat().st_size for p in site.rglob("samples.js")),
                 "largest_detail_chunk_bytes": max(p.stat().st_size for p in site.rglob("detail-*.js")),
                 "largest_run_page_bytes": max(p.stat().st_size for p in (site / "runs").rglob("index.html")),
                 "site_bytes": sum(p.stat().st_size for p in site.rglob("*") if p.is_file())}
        result = {"ce_runs": args.ce_runs, "coser_runs": args.coser_runs, "records_read": records,
                  "baseline_read_artifacts_s": round(baseline, 3), "build_site_s": round(ours, 3),
                  "build_over_baseline": round(ours / baseline, 2), "boards": len(content["boards"]), **sizes}
        skipped = browser_missing()
        if skipped:
            print(f"browser part skipped: {skipped}", flush=True)
        else:
            result.update(browse(site))
    print(json.dumps(result, indent=2))
    out = Path(args.out) if args.out else Path(__file__).resolve().parent / "results" / f"bench_leaderboard_{args.label}.json"
    out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
