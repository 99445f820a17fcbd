"""``charactereval leaderboard``: find runs of every registered benchmark, put them on boards and
write the static site (``engine.leaderboard.board`` ranks, ``engine.leaderboard.site`` writes; each benchmark declares
its rules and its explorer in its own package).

Runs are found by their ``run.json`` alone: the benchmark registry (``engine.registry.benchmarks``: every
benchmark that declares a board, read when a site is built, not when this module is imported)
says which benchmark a manifest belongs to and where that benchmark's board and explorer live.
"""

from __future__ import annotations

import contextlib
import gc
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from charactereval_lib.engine import outdir
from charactereval_lib.engine.leaderboard import board, details, site, sitecache
from charactereval_lib.engine.leaderboard.board import BoardSpec, RunView
from charactereval_lib.engine.registry import benchmarks
from charactereval_lib.engine.storage import runs


def boarded() -> dict[str, benchmarks.Benchmark]:
    """The registered benchmarks that declare a board, by name."""
    return {name: b for name, b in benchmarks.registry().items() if b.board is not None}


def spec(name: str) -> BoardSpec:
    return boarded()[name].hook("board")


def report_command(declared: benchmarks.Benchmark) -> str | None:
    """The command that renders a run's report, as its benchmark declares its commands (None:
    it has no report stage)."""
    if "report" not in declared.stages:
        return None
    return " ".join(["charactereval", *([declared.command] if declared.command else []), "report"])


class LeaderboardError(runs.RunError):
    """A path that is not a run or a folder of runs (a one-line message naming it)."""


def benchmark_of(manifest: dict[str, Any], known: Mapping[str, benchmarks.Benchmark] | None = None) -> str | None:
    """The boarded benchmark a manifest belongs to (``known``: ``boarded()``, read once by a caller
    that asks for many runs: each read scans the installed entry points)."""
    return next((name for name, b in (boarded() if known is None else known).items()
                 if b.recognises_manifest(manifest)), None)


def discover(paths: Sequence[str | os.PathLike[str]]) -> tuple[list[tuple[Path, dict[str, Any], str]], list[str]]:
    """Runs under ``paths``: a run directory itself, or every run directory below a folder.
    Returns (path, manifest, benchmark) per run and one line per run.json no benchmark claims."""
    found: dict[Path, tuple[Path, dict[str, Any], str]] = {}
    skipped = []
    known = boarded()
    for given in paths:
        path = runs.resolve_run_dir(given)
        if not path.exists():
            raise LeaderboardError(f"{path}: no such run or folder")
        manifests = [path / runs.MANIFEST] if (path / runs.MANIFEST).is_file() else sorted(path.rglob(runs.MANIFEST))
        # A run whose run.json is gone still has its records: said, never passed over in silence.
        orphans = [line for line in map(no_manifest, _record_folders(path)) if line]
        if not manifests:
            raise LeaderboardError(f"{path}: no run.json in it or below it"
                                   + (f" ({'; '.join(orphans)})" if orphans else ""))
        skipped += orphans
        manifests = [m for m in manifests if not in_site(m.parent)]
        if not manifests:
            raise LeaderboardError(f"{path}: holds only a leaderboard site's copies of run.json, no run")
        for manifest_path in manifests:
            try:
                manifest = runs.load_manifest(manifest_path.parent)
            except runs.RunError as exc:
                skipped.append(f"{exc}; left out")
                continue
            name = benchmark_of(manifest, known)
            if name is None:
                skipped.append(f"{manifest_path.parent}: run.json names no registered benchmark "
                               f"(protocol {manifest.get('protocol_version')!r}); left out")
                continue
            found.setdefault(manifest_path.parent.resolve(), (manifest_path.parent, manifest, name))
    return list(found.values()), skipped


def _record_folders(path: Path) -> list[Path]:
    """The folders at or below ``path`` that hold a generation record file."""
    direct = path / runs.GENERATIONS
    return [direct.parent] if direct.is_file() else sorted(p.parent for p in path.rglob(runs.GENERATIONS))


def no_manifest(folder: Path) -> str | None:
    """The board's line for a folder of run records without its run.json (None: it has one, or
    it is a site's page)."""
    if (folder / runs.MANIFEST).exists() or in_site(folder):
        return None
    return (f"{folder}: no run.json (its record files are there, not the record of how the run was made: model, "
            "backend and settings unknown); left out of every board")


def in_site(folder: Path) -> bool:
    """Whether ``folder`` is a run page of a site this command wrote (``SITE/runs/PAGE`` with the
    explorer's ``samples.js``, beside ``SITE/leaderboard.json``): its run.json is a copy for the
    page, not a run, so a site built inside an input folder is passed over by the next build."""
    return (folder.parent.name == "runs" and (folder / "samples.js").is_file()
            and (folder.parent.parent / "leaderboard.json").is_file())


def read_runs(paths: Sequence[str | os.PathLike[str]], context: Mapping[str, Any], *,
              cache: sitecache.RunCache | None = None, bar: Any = None,
              redact: bool | None = None) -> tuple[list[RunView], list[str]]:
    """Every run under ``paths`` read by its benchmark (one view per board it belongs to), and
    the warnings: runs left out, and why. ``cache``: views of unchanged runs are taken from it
    (``engine.leaderboard.sitecache``); ``bar``: a progress bar ticked once per run. ``redact`` (given with
    ``cache``): each run's explorer data is made (or found in the cache) as soon as the run is
    read, so that what its reader parsed is freed at once rather than held for every run until
    the pages are written (a build's memory, and the garbage collector's work, stay those of one
    run)."""
    found, warnings = discover(paths)
    views: list[RunView] = []
    specs: dict[str, BoardSpec] = {}
    known = boarded()
    if bar is not None:
        bar.reset(total=len(found))
        bar.set_description("leaderboard: runs")
    for path, manifest, name in found:
        with _collector_paused():
            try:
                cached = cache.views(path, name) if cache else None
                if cached is None:
                    if name not in specs:
                        specs[name] = spec(name)
                    cached = specs[name].read(path, manifest, context)
                    if cache:
                        cache.put_views(path, name, cached)
            except (runs.RunError, ValueError, KeyError) as exc:
                warnings.append(f"{path}: cannot be read ({exc}); left out")
                cached = []
            # Outside the ``try``: a malformed explorer fails the build, as when the pages are written,
            # rather than leaving the run out.
            if cache and redact is not None:
                for view in cached:
                    explorer_data(view, context, redact, cache, known)
        views += cached
        if bar is not None:
            bar.update()
    return views, warnings


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused while one run is read and its explorer data made,
    then run once over what that made. A full-size run parses and builds a few hundred thousand
    records and sections that reference counting frees; with the collector on, their number sets
    off collections that walk every object the process holds, again and again (measured: about
    a third of the explorer's time, more as the process grows)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
            gc.collect(0)


def run_cache(out: str | os.PathLike[str] | None, context: Mapping[str, Any]) -> sitecache.RunCache:
    """The per-run cache of the site ``out`` (``engine.leaderboard.sitecache``; None: none, every run built)."""
    names = list(boarded())
    rules = {name: spec(name).rules for name in names}
    inputs = {name: sitecache.inputs_digest(context.get(name)) for name in names}
    return sitecache.RunCache(None if out is None else sitecache.default_folder(out), rules=rules, inputs=inputs)


def boards(views: Sequence[RunView]) -> dict[str, Any]:
    """The ``leaderboard.json`` boards and archive of ``views`` (see ``engine.leaderboard.board``)."""
    return board.build_boards({name: spec(name) for name in boarded()}, views)


def build(paths: Sequence[str | os.PathLike[str]], out: str | os.PathLike[str], *,
          context: Mapping[str, Any], redact: bool = False, cache: bool = True,
          progress: bool = False) -> tuple[dict[str, Any], list[str]]:
    """Read every run, build the boards, write the site into ``out``; returns the
    ``leaderboard.json`` content and the warnings (runs left out, and why). ``out`` is checked
    first (``engine.outdir``: the paths are inputs; ``pipeline.leaderboard`` adds the data
    directories). ``cache``: keep and reuse the per-run
    cache beside ``out`` (``engine.leaderboard.sitecache``); ``progress``: a progress bar on stderr."""
    outdir.check(out, outdir.SITE, inputs=[runs.resolve_run_dir(p) for p in paths])
    store = run_cache(out if cache else None, context)
    with progress_bar(progress) as bar:
        views, warnings = read_runs(paths, context, cache=store, bar=bar, redact=redact)
        content = write(views, warnings, out, context=context, redact=redact, cache=store, bar=bar)
    return content, warnings


def progress_bar(enabled: bool) -> Any:
    """The build's bar (stderr): one tick per run (read, and its explorer data made)."""
    from tqdm import tqdm

    return tqdm(total=0, disable=not enabled, unit="run", dynamic_ncols=True, mininterval=0.5)


def write(views: Sequence[RunView], warnings: Sequence[str], out: str | os.PathLike[str], *,
          context: Mapping[str, Any], redact: bool = False, cache: sitecache.RunCache | None = None,
          bar: Any = None) -> dict[str, Any]:
    """The site of already read runs written into ``out``; returns the ``leaderboard.json`` content.
    ``redact``: a site without test-set text (seed 004 H34): ranks, scores, intervals, per-sample
    ids, scores and flaw severities, but no context, profile, scene, dialogue, reply or critique
    (``engine.leaderboard.details.redact`` drops the test-set text the explorers' sections mark; rendered
    reports are left out)."""
    outdir.check(out, outdir.SITE, inputs=[v.path for v in views])
    content = boards(views)
    content["runs"] = len({v.path for v in views})
    content["warnings"] = list(warnings)
    content["redacted"] = redact
    cache = cache or run_cache(None, context)
    if bar is not None:
        bar.set_description("leaderboard: writing the site")
    pages = list(_pages(content, views, context, redact, cache))
    rules = {s.title: s.rules for s in (spec(name) for name in boarded())}
    site.write_site(Path(out), content, board.boards_csv(content), pages, rules, runs.utc_now())
    cache.finish(d for p in pages for d in p.data.shared)
    return content


def explorer_data(view: RunView, context: Mapping[str, Any], redact: bool, cache: sitecache.RunCache,
                  known: Mapping[str, benchmarks.Benchmark]) -> site.RunData:
    """A view's explorer data (``site.run_data``, redacted when ``redact``): from the cache when
    its run is unchanged, else made by its benchmark's explorer and kept. The view's parsed
    artifacts are freed."""
    page = board.page_name(view)
    data = cache.data(view, page, redact)
    if data is None:
        declared = known[view.benchmark]
        explorer = declared.hook("explorer")(view, context)
        details.check(explorer.details, f"{view.path}: the {declared.title} explorer's")
        if redact:
            explorer = replace(explorer, details=[details.redact(d) for d in explorer.details])
        data = cache.put_data(view, page, redact, site.run_data(explorer))
    view.parsed = {}
    return data


def _pages(content: Mapping[str, Any], views: Iterable[RunView], context: Mapping[str, Any],
           redact: bool, cache: sitecache.RunCache) -> Iterable[site.RunPage]:
    by_page = {board.page_name(v): v for v in views}
    known = boarded()
    titles = {name: declared.hook("board").title for name, declared in known.items()}

    for section in ("boards", "archived"):
        for entry in content[section]:
            label = f'{entry["protocol_version"]} · {entry["scorer"]}'
            for row in entry["rows"]:
                view = by_page[row["page"]]
                declared = known[view.benchmark]
                report = view.path / declared.report if declared.report else None
                data = explorer_data(view, context, redact, cache, known)
                yield site.RunPage(row["page"], titles[view.benchmark], label, row, view.manifest,
                                   report if report and report.is_file() and not redact else None, data, redact,
                                   report_command(declared))
