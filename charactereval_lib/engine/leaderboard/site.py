"""The leaderboard's static site: boards, a page per run and its sample explorer.

The site opens from ``file://`` and from any static server, and loads nothing from the network.
Browsers refuse ``fetch()`` of ``file://`` URLs, so per-run data is written as JavaScript files
(``samples.js``, ``detail-K.js``) that the explorer loads with script tags: the table data when
the page opens, a chunk of sample details when one of its samples is opened. The table library
is DataTables as the ``itables`` package ships it (its ES-module bundle, exposed to plain
scripts by ``vendor_bundle``); the only JavaScript written here is the explorer's glue.

The whole site is built in a temporary folder beside ``out`` and moved into place at the end,
so an interrupted build leaves the previous site (or nothing), never half of one. It carries the
marker of ``engine.outdir``, whose rule says which ``out`` a site may replace.
"""

from __future__ import annotations

import functools
import hashlib
import html
import json
import math
import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from charactereval_lib.engine import outdir
from charactereval_lib.engine.leaderboard.details import Section, Template
from charactereval_lib.engine.reports.texttable import fmt
from charactereval_lib.engine.stats import TOO_FEW, TOO_FEW_REASON

ASSETS = "assets"
DETAIL_CHUNK = 250
_EXPORTS = re.compile(r"export\s*\{([^}]*)\}\s*;?")
_COMMENTS = re.compile(r"/\*.*?\*/", re.S)


@dataclass(frozen=True)
class Explorer:
    """A run's samples: ``columns`` (key, title, "num" (a score)|"int"|"text"), the keys offered as filters,
    one table row per sample (values in column order), one detail per row (a list of the typed
    sections of ``engine.leaderboard.details``), a note on what is missing (None: nothing), and what test-set
    text its details show, as the site's index says it ("the X explorer shows ...")."""

    columns: Sequence[tuple[str, str, str]]
    filters: Sequence[str]
    rows: list[list[Any]]
    details: list[list[Section]]
    note: str | None
    shows: str = ""


@dataclass(frozen=True)
class RunPage:
    folder: str
    benchmark: str
    board: str
    row: Mapping[str, Any]
    manifest: Mapping[str, Any]
    report: Path | None  # the run's rendered report, copied beside the page
    data: RunData  # its explorer's (``run_data``)
    redacted: bool = False  # a site without test-set text: the explorer's details are redacted
    # The command that renders the run's report (None: its benchmark has none).
    report_command: str | None = None


def vendor_bundle() -> tuple[str, str, str]:
    """(script, stylesheet, licence) of DataTables from the installed ``itables`` package. Its
    bundle is an ES module, which browsers do not load from ``file://``; wrapped in a function
    with its exports assigned to ``window.LBTables`` it is a plain script, byte for byte the
    package's code otherwise. A bundle without the one trailing export statement is refused."""
    root = resources.files("itables")
    script = (root / "html" / "dt_bundle.js").read_text(encoding="utf-8")
    matches = list(_EXPORTS.finditer(script))
    # Only the licence comments may follow the one export statement.
    if len(matches) != 1 or _COMMENTS.sub("", script[matches[0].end():]).strip():
        raise RuntimeError("itables' dt_bundle.js does not end in one export statement: unsupported itables version")
    match = matches[0]
    pairs = [part.strip().split(" as ") for part in match.group(1).split(",") if part.strip()]
    exports = ", ".join(f"{json.dumps(name)}: {local}" for local, name in pairs)
    wrapped = (f"(function () {{\n{script[:match.start()]}\nwindow.LBTables = {{{exports}}};\n}})();\n"
               f"{script[match.end():]}")
    licence = next((p for p in _dist_files("itables") if p.name == "LICENSE"), None)
    return wrapped, (root / "html" / "dt_bundle.css").read_text(encoding="utf-8"), (
        licence.read_text(encoding="utf-8") if licence else "itables: MIT License")


def _dist_files(name: str) -> list[Path]:
    from importlib.metadata import distribution

    dist = distribution(name)
    return [Path(str(dist.locate_file(f))) for f in (dist.files or [])]


def _asset(name: str) -> str:
    return (resources.files("charactereval_lib.engine.leaderboard") / "assets" / name).read_text(encoding="utf-8")


def _js_data(variable: str, value: Any) -> str:
    # "</" never appears inside a script's data, whatever the text holds.
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":")).replace("</", "<\\/")
    return f"{variable} = {text};\n"


def esc(value: Any) -> str:
    return html.escape("" if value is None else str(value))


# Shown by assets/fonts.js when the browser has no font for Chinese text (site.css names the CJK
# fonts the reports' figures look for, plots.CJK_FONTS).
NO_CJK_FONT = ('<p id="no-cjk-font" class="font-warning" hidden>This browser has no CJK font, so Chinese text on '
               'this page (character and novel names, contexts, replies) shows as empty boxes. Install one '
               '(Debian/Ubuntu: <code>apt-get install fonts-noto-cjk</code>) and reload the page.</p>')


def page(title: str, body: str, *, depth: int, scripts: Sequence[str] = ()) -> str:
    up = "../" * depth
    tags = "".join(f'<script src="{esc(s)}"></script>' for s in (f"{up}{ASSETS}/fonts.js", *scripts))
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f'<meta name="viewport" content="width=device-width, initial-scale=1">'
            f'<title>{esc(title)}</title><link rel="icon" href="data:,"><link rel="stylesheet" href="{up}{ASSETS}/dt_bundle.css">'
            f'<link rel="stylesheet" href="{up}{ASSETS}/site.css"></head>\n<body>\n{NO_CJK_FONT}\n{body}\n{tags}'
            '</body></html>\n')


def _interval(row: Mapping[str, Any]) -> str:
    """A board row's interval: [low, high], or why it has none (a score over too few clusters:
    ``stats.TOO_FEW`` with its reason on hover); – without a score."""
    low, high = row["ci"] or [None, None]
    if low is None and row["score"] is not None:
        return f'<span title="{esc(TOO_FEW_REASON)}">{TOO_FEW}</span>'
    return f"[{fmt(low)}, {fmt(high)}]" if low is not None else "–"


# --- the index -------------------------------------------------------------------------------


LICENCE_WARNING = ("Publish it only where the benchmarks' licences allow (a benchmark's repository may carry none: "
                   "docs/leaderboard.md). `charactereval leaderboard --redact` writes a site without any test-set "
                   "text.")
REDACTED_NOTICE = ("Redacted: ranks, scores, intervals, per-sample ids, scores and flaw severities only; no test-set "
                   "text (no context, profile, scene, dialogue, reply or critique), and no rendered reports.")


def licence_warning(shows: Iterable[str]) -> str:
    """The index's warning: what test-set text the site holds, as each benchmark's explorer
    says it shows it (``Explorer.shows``), then ``LICENCE_WARNING``."""
    held = "; ".join(dict.fromkeys(phrase for phrase in shows if phrase))
    return f"This site holds test-set text: {held}. {LICENCE_WARNING}" if held else LICENCE_WARNING


def index_html(content: Mapping[str, Any], rules: Mapping[str, Sequence[Any]], built: str,
               shows: Iterable[str] = ()) -> str:
    notice = (f'<p class="redacted">{esc(REDACTED_NOTICE)}</p>' if content.get("redacted")
              else f'<p class="licence warning">{esc(licence_warning(shows))}</p>')
    parts = ['<header><h1>Leaderboard</h1>',
             f'<p class="meta">Built {esc(built)} from {content["runs"]} run(s). Machine-readable: '
             '<a href="leaderboard.json">leaderboard.json</a>, <a href="leaderboard.csv">leaderboard.csv</a>. '
             'Scores from different scorers never share a board.</p>', notice, '</header>']
    if content.get("warnings"):
        parts.append('<section id="left-out"><h2>Left out</h2><ul class="reasons">'
                     + "".join(f"<li>{esc(w)}</li>" for w in content["warnings"]) + "</ul></section>")
    if not content["boards"]:
        parts.append('<p class="empty">No run of a current protocol version was found.</p>')
    for board in content["boards"]:
        parts.append(_board_html(board))
    parts.append('<section id="archive"><h2>Archive: older protocol versions</h2>')
    if not content["archived"]:
        parts.append('<p class="empty">None.</p>')
    for board in content["archived"]:
        parts.append(_board_html(board))
    parts.append("</section>")
    parts.append('<section id="rules"><h2>Eligibility rules</h2>')
    for benchmark, items in rules.items():
        parts.append(f"<h3>{esc(benchmark)}</h3><dl>")
        parts += [f"<dt><code>{esc(r.name)}</code></dt><dd>{esc(r.text)}</dd>" for r in items]
        parts.append("</dl>")
    parts.append("</section>")
    return page("Leaderboard", "\n".join(parts), depth=0)


def _decoding(row: Mapping[str, Any]) -> str:
    """What the model cell says under the label: how the replies were decoded, and the row's caveats."""
    text = f'<br><small class="decoding">{esc(row["decoding"])}</small>' if row.get("decoding") else ""
    return text + "".join(f'<br><small class="caveat">{esc(c)}</small>' for c in row.get("caveats") or ())


def _board_html(board: Mapping[str, Any]) -> str:
    anchor = board.get("anchor")
    key = f'{board["benchmark"]}|{board["protocol_version"]}|{board["scorer"]}'
    out = [f'<section class="board" data-board="{esc(key)}"><h2>{esc(board["title"])} · '
           f'protocol {esc(board["protocol_version"])} · scorer {esc(board["scorer"])}</h2>']
    if anchor is None:
        out.append('<p class="anchor archived">Archived: this protocol version is not current; nothing is ranked.</p>')
    else:
        label = {"reproduced": "Anchor reproduced", "pending": "Anchor pending", "failed": "Anchor failed"}
        text = f'{label[anchor["status"]]}' + (f' (run {esc(anchor["run"])})' if anchor.get("run") else "")
        extra = ("" if anchor["status"] == "reproduced"
                 else " Nothing on this board is ranked until its anchor reproduces the paper.")
        deltas = ", ".join(f"{name} {value:+.4f}" for name, value in anchor["deltas"].items())
        out.append(f'<div class="anchor {esc(anchor["status"])}"><strong>{esc(text)}</strong>{esc(extra)}<ul>'
                   + "".join(f"<li>{esc(r)}</li>" for r in anchor["reasons"]) + "</ul>"
                   + (f'<p class="deltas">Run minus paper: {esc(deltas)}</p>' if deltas else "") + "</div>")
    out.append(f'<p class="meta">Score: {esc(board["headline"])}; 95% studentized cluster-bootstrap interval '
               f'(1,000 resamples of whole {esc(board["cluster"])}s; none below 4). Ties: {esc(board["tie_test"])}.</p>')
    eligible = [r for r in board["rows"] if r["eligible"]]
    others = [r for r in board["rows"] if not r["eligible"]]
    out.append('<table class="rows"><thead><tr><th>rank</th><th>model</th><th>run</th><th>score</th>'
               '<th>95% CI</th><th>n</th><th>failed</th></tr></thead><tbody>')
    if not eligible:
        out.append('<tr><td colspan="7" class="empty">No eligible run.</td></tr>')
    for row in eligible:
        rank = "–" if row["rank"] is None else str(row["rank"])
        if row.get("tie_test") and row["tie_test"]["tied_with_above"]:
            rank += ' <span class="tie" title="not separated from the row above">(tied)</span>'
        out.append(f'<tr class="eligible"><td class="rank">{rank}</td><td>{esc(row["model"])}{_decoding(row)}</td>'
                   f'<td><a href="runs/{esc(row["page"])}/index.html">{esc(row["run"])}</a></td>'
                   f'<td>{fmt(row["score"])}</td><td>{_interval(row)}</td><td>{row["n"]}</td>'
                   f'<td>{row["failures"]}</td></tr>')
    out.append("</tbody></table>")
    if others:
        out.append('<h3>Not ranked: not eligible</h3><p class="meta">These runs fail an eligibility rule (the '
                   'reasons beside each), so they are never ranked; their scores, by the same method, are shown for '
                   'analysis, best first.</p><table class="ineligible"><thead><tr><th>model</th><th>run</th>'
                   '<th>score</th><th>95% CI</th><th>n</th><th>failed</th><th>why not ranked</th></tr></thead><tbody>')
        for row in others:
            out.append(f'<tr><td>{esc(row["model"])}{_decoding(row)}</td><td><a href="runs/{esc(row["page"])}/index.html">'
                       f'{esc(row["run"])}</a></td><td>{fmt(row["score"])}</td><td>{_interval(row)}</td>'
                       f'<td>{row["n"]}</td><td>{row["failures"]}</td><td><ul class="reasons">'
                       + "".join(f"<li>{esc(r)}</li>" for r in row["reasons"]) + "</ul></td></tr>")
        out.append("</tbody></table>")
    if board.get("comparisons"):
        out.append(f'<p class="meta"><a class="compare" href="{esc(compare_page(board))}">Paired comparisons of '
                   f'neighbouring runs on this board</a> ({len(board["comparisons"])} pair(s), ranked or not).</p>')
    out.append(_published_html(board.get("published") or []))
    out.append("</section>")
    return "\n".join(out)


def compare_page(board: Mapping[str, Any]) -> str:
    """The board's page of paired comparisons, relative to the site's root."""
    key = f'{board["benchmark"]}\0{board["protocol_version"]}\0{board["scorer"]}'
    return f"compare/{board['benchmark']}-{hashlib.sha256(key.encode()).hexdigest()[:10]}.html"


def compare_html(board: Mapping[str, Any]) -> str:
    rows = {r["page"]: r for r in board["rows"]}

    def label(page_name: str) -> str:
        row = rows[page_name]
        return f'<a href="../runs/{esc(page_name)}/index.html">{esc(row["model"])}</a> <small>{esc(row["run"])}</small>'

    parts = ['<p><a href="../index.html">← all boards</a></p>',
             f'<header><h1>Paired comparisons</h1><p class="meta">{esc(board["title"])} · protocol '
             f'{esc(board["protocol_version"])} · scorer {esc(board["scorer"])}. Each run on this board against '
             f'the next one by score, eligible or not: the mean difference of the headline score per {esc(board["cluster"])} (first minus '
             f'second) over the {esc(board["cluster"])}s both runs scored, and the paired test the ranks use '
             f'({esc(board["tie_test"])}). The command renders the pair\'s full comparison report; the same '
             'command with any other two runs compares those.</p></header>',
             '<table class="pairs"><thead><tr><th>first</th><th>second</th><th>difference</th><th>p</th>'
             '<th>shared</th><th>separated</th><th>full comparison</th></tr></thead><tbody>']
    for pair in board["comparisons"]:
        command = f'<code>{esc(pair["command"])}</code>' if pair["command"] else "–"
        parts.append(f'<tr><td>{label(pair["a"])}</td><td>{label(pair["b"])}</td><td>{fmt(pair["difference"], 4)}</td>'
                     f'<td>{fmt(pair["p"], 4)}</td><td>{pair["shared"]}</td>'
                     f'<td>{"yes" if pair["separated"] else "no"}</td><td>{command}</td></tr>')
    parts.append("</tbody></table>")
    return page(f'Paired comparisons · {board["title"]}', "\n".join(parts), depth=1)


def _published_html(published: Sequence[Mapping[str, Any]]) -> str:
    """The paper's own rows beside a board: labelled as published numbers, never ranked."""
    if not published:
        return ""
    dimensions = list(published[0].get("dimensions") or {})
    head = "".join(f"<th>{esc(d)}</th>" for d in dimensions)
    out = [f'<h3>Published in the paper (not reproduced here, never ranked)</h3><p class="meta">'
           f'{esc(published[0]["note"])}. † the paper authors\' own fine-tuned model.</p>'
           f'<table class="published"><thead><tr><th>model</th><th>score</th>{head}</tr></thead><tbody>']
    for row in published:
        mark = ' <span class="fine-tune" title="the paper authors\' own fine-tuned model">†</span>' \
            if row.get("authors_fine_tune") else ""
        pm = f" ± {row['pm']:g}" if row.get("pm") is not None else ""
        cells = "".join(f"<td>{fmt(v, 2)}</td>" for v in (row.get("dimensions") or {}).values())
        out.append(f'<tr class="published"><td>{esc(row["model"])}{mark}</td><td>{fmt(row["score"], 2)}{esc(pm)}</td>'
                   f"{cells}</tr>")
    out.append("</tbody></table>")
    return "\n".join(out)


# --- a run's page ----------------------------------------------------------------------------


def run_html(run: RunPage) -> str:
    row = run.row
    status = "eligible" if row["eligible"] else "not eligible"
    parts = ['<p><a href="../../index.html">← all boards</a></p>',
             f'<header><h1>{esc(row["model"])} <small>{esc(row["run"])}</small></h1>',
             f'<p class="meta">{esc(run.benchmark)} · board {esc(run.board)} · {status}'
             f'{"" if row["rank"] is None else " · rank " + str(row["rank"])} · score {fmt(row["score"])} '
             f'(n {row["n"]}, failed {row["failures"]})</p></header>']
    if row["reasons"]:
        parts.append('<ul class="reasons">' + "".join(f"<li>{esc(r)}</li>" for r in row["reasons"]) + "</ul>")
    parts.append('<nav class="tabs"><a href="#explorer">Explorer</a> <a href="#report">Report</a> '
                 '<a href="#manifest">Manifest</a></nav>')
    note = f'<p class="note">{esc(run.data.note)}</p>' if run.data.note else ""
    parts.append(f'<section id="explorer"><h2>Explorer</h2>{note}<div id="filters"></div>'
                 '<table id="samples" class="display compact" style="width:100%"></table>'
                 '<div id="detail" hidden></div></section>')
    report = ('<p>Its rendered report: <a href="report.html">report.html</a>.</p>' if run.report
              else f'<p class="empty">{esc(REDACTED_NOTICE)}</p>' if run.redacted
              else '<p class="empty">No rendered report in the run directory'
              + (f' (run <code>{esc(run.report_command)}</code>, then build the site again)' if run.report_command
                 else "") + '.</p>')
    parts.append(f'<section id="report"><h2>Report</h2>{report}</section>')
    parts.append('<section id="manifest"><h2>Manifest (run.json)</h2><p>Long lists are shortened here; the whole '
                 f'file: <a href="run.json">run.json</a>.</p>{manifest_html(run.manifest)}</section>')
    return page(f'{row["model"]} · {row["run"]}', "\n".join(parts), depth=2,
                scripts=(f"../../{ASSETS}/dt_bundle.js", "samples.js", f"../../{ASSETS}/explorer.js"))


def manifest_html(manifest: Mapping[str, Any]) -> str:
    """run.json as nested definition lists (keys bold, scalars as text)."""
    def render(value: Any) -> str:
        if isinstance(value, Mapping):
            if not value:
                return "<em>empty</em>"
            return "<dl>" + "".join(f"<dt>{esc(k)}</dt><dd>{render(v)}</dd>" for k, v in value.items()) + "</dl>"
        if isinstance(value, list):
            if len(value) > 20 and all(not isinstance(v, (dict, list)) for v in value):
                return f"<span>{len(value)} items: {esc(', '.join(map(str, value[:20])))}, …</span>"
            return "<ol>" + "".join(f"<li>{render(v)}</li>" for v in value) + "</ol>"
        return f"<code>{esc(json.dumps(value, ensure_ascii=False))}</code>"
    return f'<div class="manifest">{render(manifest)}</div>'


# --- a run's explorer data ---------------------------------------------------------------------
#
# samples.js holds the table column by column (a text column as its distinct values and one code
# per row, scores rounded to SCORE_DECIMALS); detail-K.js holds DETAIL_CHUNK details, each section
# split into a template shared by the chunk (kind, title, flags, a kv's keys) and its values, with
# every text interned once per chunk (a reply shown on each of a sample's metric rows is stored
# once). A shared text (``details.text(shared=True)``: a test sample's context, alike in every
# run) is not in the run's data at all: the detail names its digest, and the text is in the site's
# one store, ``shared/XX.js`` (XX: the digest's first two hex digits), loaded when shown.

SHARED = "shared"
SCORE_DECIMALS = 4  # the table shows three; the detail's key-value floats keep KV_DECIMALS
KV_DECIMALS = 6
_TEXT_KINDS = ("text", "computation", "note")


@functools.lru_cache(maxsize=65536)
def text_digest(text: str) -> str:
    """The key of a shared text in the site's store (remembered: every run shows the same contexts)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True)
class RunData:
    """A run's explorer data: file name -> its text (or the cached file that holds it, linked into
    the site), the shared texts it names (digest -> text), the explorer's note and what test-set
    text it shows (``Explorer.shows``)."""

    files: Mapping[str, str | Path]
    shared: Mapping[str, str]
    note: str | None
    shows: str = ""


def _column(values: list[Any], kind: str) -> Any:
    if kind == "text":
        distinct = sorted({v for v in values if v is not None}, key=str)
        codes = {v: k for k, v in enumerate(distinct)}
        return {"v": distinct, "i": [-1 if v is None else codes[v] for v in values]}
    if kind == "num":
        return [round(v, SCORE_DECIMALS) if isinstance(v, float) and math.isfinite(v) else v for v in values]
    return values


def _encode_chunk(part: Sequence[Sequence[Section]], shared: dict[str, str]) -> dict[str, Any]:
    # A template's number in the chunk and how its sections' values are stored.
    templates: dict[Template, tuple[int, str]] = {}
    # The same by the template object's id: the section functions hand out one object per
    # template, and looking it up by id spares hashing its fields (the chunk holds them all).
    by_id: dict[int, tuple[int, str]] = {}
    strings: dict[Any, int] = {}
    encoded = []
    for detail in part:
        flat: list[Any] = []
        for template, value in detail:
            found = by_id.get(id(template))
            if found is None:
                found = templates.get(template)
                if found is None:
                    kind = template[0][1]
                    # A text-like section's value is a string (or a shared text's digest), else the kind's own.
                    how = ("shared" if ("shared", True) in template else "text") if kind in _TEXT_KINDS else kind
                    found = templates[template] = (len(templates), how)
                by_id[id(template)] = found
            number, how = found
            if how == "text":
                value = strings.setdefault(value, len(strings))
            elif how == "shared":
                if value is not None:
                    digest = text_digest(value)
                    shared[digest] = value
                    value = digest
                value = strings.setdefault(value, len(strings))
            elif how == "kv":
                value = [round(v, KV_DECIMALS) if isinstance(v, float) and math.isfinite(v) else v for v in value]
            elif how == "dialogue":
                value = [strings.setdefault(x, len(strings)) for m in value for x in (m["role"], m["content"])]
            flat += (number, value)
        encoded.append(flat)
    return {"t": [dict(t) for t in templates], "s": list(strings), "d": encoded}


def run_data(explorer: Explorer) -> RunData:
    """The explorer's files of one run (see above): a function of the explorer alone, so a run's
    data is the same whichever site it is built into."""
    n = len(explorer.rows)
    meta = {"columns": [{"key": k, "title": t, "type": kind} for k, t, kind in explorer.columns],
            "filters": list(explorer.filters), "n": n,
            "cols": [_column([row[i] for row in explorer.rows], kind) for i, (_, _, kind) in enumerate(explorer.columns)],
            "chunk": DETAIL_CHUNK, "chunks": (len(explorer.details) + DETAIL_CHUNK - 1) // DETAIL_CHUNK}
    files = {"samples.js": _js_data("window.LB_SAMPLES", meta)}
    shared: dict[str, str] = {}
    for k in range(meta["chunks"]):
        part = _encode_chunk(explorer.details[k * DETAIL_CHUNK:(k + 1) * DETAIL_CHUNK], shared)
        files[f"detail-{k}.js"] = f"window.LB_DETAIL = window.LB_DETAIL || {{}};\n{_js_data(f'window.LB_DETAIL[{k}]', part)}"
    return RunData(files, shared, explorer.note, explorer.shows)


def shared_buckets(texts: Mapping[str, str]) -> dict[str, dict[str, str]]:
    """Shared texts grouped by their digest's first two hex digits (one store file each), in
    digest order."""
    buckets: dict[str, dict[str, str]] = {}
    for digest in sorted(texts):
        buckets.setdefault(digest[:2], {})[digest] = texts[digest]
    return buckets


def write_shared(site_root: Path, texts: Mapping[str, str]) -> None:
    """The site's store of shared texts: one file per digest prefix."""
    for prefix, bucket in shared_buckets(texts).items():
        (site_root / SHARED).mkdir(exist_ok=True)
        (site_root / SHARED / f"{prefix}.js").write_text(
            f"window.LB_SHARED = window.LB_SHARED || {{}};\n{_js_data(f'window.LB_SHARED[{json.dumps(prefix)}]', bucket)}",
            encoding="utf-8")


def _js_value(path: Path) -> Any:
    # The value is the file's last line (JSON has no raw newline): ``window.NAME = VALUE;``.
    line = path.read_text(encoding="utf-8").rstrip("\n").rsplit("\n", 1)[-1]
    return json.loads(line.split(" = ", 1)[1].removesuffix(";"))


def read_run_data(site_root: Path, folder: str) -> tuple[list[list[Any]], list[list[dict[str, Any]]]]:
    """A run's explorer table rows and details, decoded from the site as the page's script
    decodes them (shared texts resolved; numbers as rounded; each section as ``Section.as_dict``)."""
    run = Path(site_root) / "runs" / folder
    meta = _js_value(run / "samples.js")
    cols = [[c["v"][i] if i >= 0 else None for i in c["i"]] if isinstance(c, dict) else c for c in meta["cols"]]
    rows = [list(r) for r in zip(*cols)] if cols else []
    details, store = [], {}
    for k in range(meta["chunks"]):
        part = _js_value(run / f"detail-{k}.js")
        templates = [tuple((key, tuple(v) if isinstance(v, list) else v) for key, v in t.items()) for t in part["t"]]
        for flat in part["d"]:
            detail = []
            for ti, value in zip(flat[::2], flat[1::2]):
                template = templates[ti]
                kind = template[0][1]
                if kind in _TEXT_KINDS:
                    value = part["s"][value]
                    if ("shared", True) in template and value is not None:
                        if value[:2] not in store:
                            store[value[:2]] = _js_value(Path(site_root) / SHARED / f"{value[:2]}.js")
                        value = store[value[:2]][value]
                elif kind == "dialogue":
                    value = [{"role": part["s"][r], "content": part["s"][c]} for r, c in zip(value[::2], value[1::2])]
                detail.append(Section(template, value).as_dict())
            details.append(detail)
    return rows, details


def _link(source: Path, target: Path) -> None:
    """A cached file into the site: a hard link (no copy, the bytes are the cache's), else a copy."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


def write_site(out: Path, content: Mapping[str, Any], csv_text: str, pages: Sequence[RunPage],
               rules: Mapping[str, Sequence[Any]], built: str) -> Path:
    """Write the whole site into ``out`` (replacing a previous one as a whole; the caller has
    checked ``out`` with ``outdir.check``)."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        assets = staging / ASSETS
        assets.mkdir()
        script, css, licence = vendor_bundle()
        (assets / "dt_bundle.js").write_text(script, encoding="utf-8")
        (assets / "dt_bundle.css").write_text(css, encoding="utf-8")
        (assets / "LICENSE-itables-datatables.txt").write_text(licence, encoding="utf-8")
        for name in ("site.css", "explorer.js", "fonts.js"):
            (assets / name).write_text(_asset(name), encoding="utf-8")
        shared: dict[str, str] = {}
        for run in pages:
            folder = staging / "runs" / run.folder
            folder.mkdir(parents=True)
            for name, text in run.data.files.items():
                if isinstance(text, Path):
                    _link(text, folder / name)
                else:
                    (folder / name).write_text(text, encoding="utf-8")
            shared.update(run.data.shared)
            (folder / "run.json").write_text(json.dumps(run.manifest, ensure_ascii=False, indent=2) + "\n",
                                             encoding="utf-8")
            if run.report is not None:
                shutil.copyfile(run.report, folder / "report.html")
            (folder / "index.html").write_text(run_html(run), encoding="utf-8")
        write_shared(staging, shared)
        (staging / "leaderboard.json").write_text(json.dumps(content, ensure_ascii=False, indent=2) + "\n",
                                                  encoding="utf-8")
        (staging / "leaderboard.csv").write_text(csv_text, encoding="utf-8")
        for board in (*content["boards"], *content["archived"]):
            if board.get("comparisons"):
                target = staging / compare_page(board)
                target.parent.mkdir(exist_ok=True)
                target.write_text(compare_html(board), encoding="utf-8")
        shows = sorted({run.data.shows for run in pages})
        (staging / "index.html").write_text(index_html(content, rules, built, shows), encoding="utf-8")
        outdir.mark(staging, outdir.SITE)
        staging.chmod(0o755)
        outdir.replace(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return out

