"""Leaderboard site at platform scale: build time, rebuild time, size and explorer responsiveness.

Makes (untimed) full-size CharacterEval runs (4,564 samples, 8,032 rows each: the official data's
sample ids and contexts when its data directory loads, else synthetic data of the same shape;
invented replies and scores) and full CoSER runs (200 scenes x 3 repeats), then for each size
of ``--ce-runs`` (the runs are added to as the sizes grow), in the same process:
  (a) the floor: every artifact the build reads, parsed once (run.json, generations, rows, scores,
      CoSER scenes, judgements and turns, whose served models a rule checks), measured just before
      and just after (b), and their mean (a shared machine's speed drifts over minutes);
  (b) the first build of a new site (`pipeline.leaderboard`'s steps: runs read, boards with their
      bootstrap intervals and neighbour tie tests, explorer data, pages, the per-run cache
      written), as seconds and as a ratio to (a);
  (c) one more CharacterEval run added and the site rebuilt: the others reused from the cache,
      as a ratio to (b);
  (d) the site's size per run (the cache beside it not counted: it is not published);
  (e) at the largest size, with Debian's chromium and the playwright package present (else skipped,
      said in one line): in a headless browser,
      a CharacterEval run page until its table shows rows, the filter to one character, and
      opening a sample's detail (its context from the site's shared store).
Writes benchmarks/results/bench_leaderboard_<label>.json (or ``--out FILE``).

    python benchmarks/bench_leaderboard.py [--label cpu_2core] [--ce-runs 10 50 200] [--coser-runs 10]
        [--data-dir DIR | --synthetic] [--out FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from charactereval_lib.apps.leaderboard import read_runs, run_cache, write
from charactereval_lib.charactereval.data import load_official_data
from charactereval_lib.engine.storage import artifacts, runs
from charactereval_lib.testing.leaderboard_runs import charactereval_run, coser_run, full_size_data

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
        "--disable-component-update", "--disable-sync"]


def official_or_synthetic(root: Path, data_dir: str | None):
    """The official data in ``data_dir`` (real sample ids and contexts), else synthetic data of its shape."""
    if data_dir:
        return load_official_data(data_dir), "official"
    print("no --data-dir (nor CHARACTEREVAL_DATA_DIR): synthetic data of the official shape", flush=True)
    return load_official_data(full_size_data(root / "data"), verify=False), "synthetic"


def add_ce_runs(root: Path, data, start: int, stop: int) -> None:
    for k in range(start, stop):
        charactereval_run(root / "runs" / "ce" / f"model-{k:03d}", data, model=f"model-{k:03d}", shift=0.002 * k,
                          seed=k, failed_ids=[data.samples[k % len(data.samples)].id])


def read_everything(root: Path) -> int:
    records = 0
    for manifest in (root / "runs").rglob(runs.MANIFEST):
        json.loads(manifest.read_text(encoding="utf-8"))
        for name in ("generations.jsonl", "rows.jsonl", "scores.jsonl", "judge_scores.jsonl", "coser_scenes.jsonl",
                     "coser_judgements.jsonl", "coser_turns.jsonl"):
            path = manifest.parent / name
            if path.exists():
                records += len(artifacts.read_jsonl(path).records)
    return records


def read_once(root: Path) -> tuple[float, int]:
    """The floor: seconds to read every artifact once, and the records read."""
    started = time.perf_counter()
    records = read_everything(root)
    return time.perf_counter() - started, records


def build(root: Path, site: Path, data) -> tuple[float, int, int]:
    """One build as ``charactereval leaderboard`` makes it: seconds, runs reused, runs rebuilt."""
    context = {"charactereval": data}
    started = time.perf_counter()
    cache = run_cache(site, context)
    views, warnings = read_runs([root / "runs"], context, cache=cache, redact=False)
    write(views, warnings, site, context=context, cache=cache)
    seconds = time.perf_counter() - started
    assert not warnings, warnings
    return seconds, *cache.counts(views)


def browse(site: Path) -> dict[str, float]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.set_default_timeout(120_000)
        page.goto((site / "index.html").as_uri())
        link = page.locator("a", has_text="model-000").first
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
        page.wait_for_function("document.querySelector('#detail pre') !== null")
        detail = time.perf_counter() - started
        browser.close()
    return {"run_page_to_table_s": round(shown, 3), "explorer_rows": rows, "filter_one_character_s": round(filtered, 3),
            "open_detail_s": round(detail, 3)}


def browser_missing() -> str | None:
    """Why the browser part cannot run here (Debian's chromium or the playwright package is
    missing), or None."""
    import importlib.util

    if not Path(CHROMIUM).exists():
        return f"{CHROMIUM} is missing (apt-get install chromium)"
    if importlib.util.find_spec("playwright") is None:
        return "the playwright package is not installed (pip install playwright; no browser is downloaded)"
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--label", default="cpu_2core")
    parser.add_argument("--ce-runs", type=int, nargs="+", default=[10, 50, 200],
                        help="the numbers of CharacterEval runs to measure at, ascending")
    parser.add_argument("--coser-runs", type=int, default=10)
    parser.add_argument("--data-dir", default=os.environ.get("CHARACTEREVAL_DATA_DIR"),
                        help="the official CharacterEval data (default: $CHARACTEREVAL_DATA_DIR)")
    parser.add_argument("--synthetic", action="store_true", help="synthetic data of the official shape, not the official")
    parser.add_argument("--out", metavar="FILE", help="write the figures here instead of benchmarks/results/")
    args = parser.parse_args()
    sizes = sorted(args.ce_runs)
    out = Path(args.out) if args.out else Path(__file__).resolve().parent / "results" / f"bench_leaderboard_{args.label}.json"
    result = {"load_average": list(os.getloadavg()), "sizes": []}
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        data, result["charactereval_data"] = official_or_synthetic(root, None if args.synthetic else args.data_dir)
        started = time.perf_counter()
        for k in range(args.coser_runs):
            coser_run(root / "runs" / "coser" / f"actor-{k:02d}", actor=f"actor-{k:02d}", level=50 + k, seed=k,
                      failed_sessions=k % 3)
        made = 0
        for size in sizes:
            add_ce_runs(root, data, made, size)
            made = size
            print(f"{size} CharacterEval and {args.coser_runs} CoSER runs made ({time.perf_counter() - started:.0f} s "
                  "so far, not timed)", flush=True)
            floor_before, records = read_once(root)
            site = root / f"site-{size}"
            first, _, rebuilt = build(root, site, data)
            assert rebuilt == size + args.coser_runs
            # Read again at once: on a shared machine the speed drifts over minutes, so the build
            # is set against the floor measured on both sides of it.
            floor_after, _ = read_once(root)
            floor = (floor_before + floor_after) / 2
            site_bytes = sum(p.stat().st_size for p in site.rglob("*") if p.is_file())
            shared_bytes = sum(p.stat().st_size for p in (site / "shared").rglob("*") if p.is_file())
            ce_run = next(p for p in (site / "runs").iterdir() if p.name.startswith("charactereval-"))
            add_ce_runs(root, data, made, made + 1)
            made += 1
            again, reused, rebuilt = build(root, site, data)
            assert (reused, rebuilt) == (size + args.coser_runs, 1), (reused, rebuilt)
            entry = {"ce_runs": size, "coser_runs": args.coser_runs, "records_read": records,
                     "baseline_read_artifacts_s": round(floor, 3),
                     "baseline_before_and_after_s": [round(floor_before, 3), round(floor_after, 3)],
                     "build_site_s": round(first, 3),
                     "build_over_baseline": round(first / floor, 2), "rebuild_after_one_more_run_s": round(again, 3),
                     "rebuild_over_build": round(again / first, 3), "site_bytes": site_bytes,
                     "mb_per_run": round(site_bytes / (size + args.coser_runs) / 1e6, 3),
                     "shared_store_bytes": shared_bytes,
                     "ce_run_folder_bytes": sum(p.stat().st_size for p in ce_run.iterdir() if p.is_file()),
                     "largest_samples_js_bytes": max(p.stat().st_size for p in site.rglob("samples.js")),
                     "largest_detail_chunk_bytes": max(p.stat().st_size for p in site.rglob("detail-*.js")),
                     "index_html_bytes": (site / "index.html").stat().st_size}
            print(f"{size} CE + {args.coser_runs} CoSER runs: first build {first:.2f} s, floor {floor:.2f} s "
                  f"({floor_before:.2f} s before the build, {floor_after:.2f} s after), "
                  f"ratio {first / floor:.2f}x; rebuild after one more run {again:.2f} s = {again / first:.3f}x the "
                  f"first build; {entry['mb_per_run']:.2f} MB per run (shared store {shared_bytes / 1e6:.1f} MB, "
                  f"one CE run's folder {entry['ce_run_folder_bytes'] / 1e6:.2f} MB)", flush=True)
            if size == sizes[-1]:
                skipped = browser_missing()
                if skipped:
                    print(f"browser part skipped: {skipped}", flush=True)
                else:
                    entry.update(browse(site))
                    print(f"browser: table {entry['run_page_to_table_s']} s, one filter "
                          f"{entry['filter_one_character_s']} s, a detail {entry['open_detail_s']} s", flush=True)
            else:
                shutil.rmtree(site)
            result["sizes"].append(entry)
            # Written after each size: a long run cut short keeps the sizes it measured.
            out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
