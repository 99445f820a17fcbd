"""The report kit every notebook shares: tables as reports show them, the warnings box, the
rendered-by line, several runs' tables stacked into one or side by side, a comparison's heading
and the problems that forbid one, a manifest flattened into settings rows, and the table of
contents that the report template (``reports/template/``, used by ``reports.notebook.to_html``) puts above
the first section.

A benchmark brings its own vocabulary (column names, how a key reads) and its own warnings;
the look of a table, a box and the contents is decided here once.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import pandas as pd

from charactereval_lib import __version__
from charactereval_lib.engine.storage import runs

if TYPE_CHECKING:  # pandas imports its styler (and jinja2) when a table is styled, not before
    from pandas.io.formats.style import Styler

TEMPLATE_DIR = Path(__file__).with_name("template")
DISPLAY_DIGITS = 3

# Text that reads as a number (signed, scientific, an interval, a ± spread, or a marker in a
# column of numbers): aligned right with the numbers.
_NUMBER_LIKE = re.compile(r"(?:[-+−–\d.,e\[\] ±]|n<\d+(?: scenes)?|n/a|unavailable)*")


def show(frame: pd.DataFrame, *, digits: int = DISPLAY_DIGITS, columns: Mapping[str, str] | None = None,
         values: Mapping[str, Callable[[Any], Any]] | None = None) -> Styler:
    """A table as the reports show it: no index column (a named index becomes a column), column
    names without underscores (``columns`` names some outright), the cells of a column in
    ``values`` read through its function (keyed by the column's own name), text escaped and
    aligned left, numbers right, floats rounded to ``digits`` for display only."""
    shown = frame.reset_index(drop=not any(name is not None for name in frame.index.names))
    for column, read in (values or {}).items():
        if column in shown.columns:
            shown[column] = shown[column].map(read)
    labels = columns or {}
    shown = shown.rename(columns=lambda c: labels.get(str(c), str(c).replace("_", " ")))
    text = [c for c in shown.columns if not pd.api.types.is_numeric_dtype(shown[c])
            and not shown[c].astype(str).str.fullmatch(_NUMBER_LIKE).all()]
    headers = [{"selector": f"th.col{shown.columns.get_loc(c)}", "props": "text-align: left;"} for c in text]
    return (shown.style.hide(axis="index").format(precision=digits, na_rep="–", thousands=None, escape="html")
            .set_properties(subset=text, **{"text-align": "left"}).set_table_styles(headers))


def inline_code(text: str) -> str:
    """Markdown's `code` spans of an already escaped warning as HTML ``<code>``."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", text)


def warnings_box(items: Sequence[str], title: str, *, counted: bool = True, intro: str = "",
                 empty: str | None = None) -> str:
    """A box of warnings under a report's heading: ``title`` (with the count when ``counted``),
    ``intro`` after it, one bullet per item (text escaped, `code` spans kept). Without items: the
    quiet box ``empty``, or nothing."""
    if not items:
        return "" if empty is None else f'<div class="ce-warnings ce-none">{html.escape(empty, quote=False)}</div>'
    heading = f"{title} ({len(items)})" if counted else title
    bullets = "".join(f"<li>{inline_code(html.escape(item))}</li>" for item in items)
    return (f'<div class="ce-warnings"><strong>{html.escape(heading)}</strong>{html.escape(intro, quote=False)}'
            f"<ul>{bullets}</ul></div>")


def rendered_by() -> str:
    """Which workbench rendered the report (its version and git commit, when known)."""
    commit = runs.git_commit()
    return f"Rendered by charactereval {__version__}" + (f" at commit `{commit}`." if commit else ".")


class Named(Protocol):
    @property
    def name(self) -> str: ...


def stacked(analyses: Iterable[Named], table: Callable[[Any], pd.DataFrame]) -> pd.DataFrame:
    """One tidy table of several runs: ``table(run)`` for each run, with a leading ``run`` column."""
    frames = [table(run).assign(run=run.name) for run in analyses]
    combined = pd.concat(frames, ignore_index=True)
    return combined[["run", *[c for c in combined.columns if c != "run"]]]


def side_by_side(analyses: Iterable[Named], first: str, labels: Sequence[str],
                 column: Callable[[Any], Sequence[str]]) -> pd.DataFrame:
    """Several runs' values side by side: the row labels in the column ``first``, then one
    column per run (its name), ``column(run)`` in it, in the order given."""
    return pd.DataFrame({first: list(labels), **{run.name: list(column(run)) for run in analyses}})


def comparison_header(title: str, entries: Sequence[str], note: str = "") -> str:
    """A comparison's heading (Markdown): ``title``, the runs as a numbered list in the order
    given (``entries``, one line each), the rendered-by line and ``note`` below it."""
    lines = [f"# {title}", "", *(f"{k}. {entry}" for k, entry in enumerate(entries, 1)), "", rendered_by()]
    return "\n".join([*lines, *(["", note] if note else [])])


def repeated_runs(run_dirs: Sequence[runs.RunDir]) -> list[str]:
    """A comparison's problem when it is given one run more than once (none: [])."""
    resolved = [r.path.resolve() for r in run_dirs]
    repeated = sorted({str(p) for p in resolved if resolved.count(p) > 1})
    return [f"the same run is given more than once: {', '.join(repeated)}"] if repeated else []


def differing(values: Mapping[str, Any], what: str) -> list[str]:
    """A comparison's problem when its runs' ``values`` (by run name) are not all the same:
    "the runs ``what`` ({values})" (none: [])."""
    return [f"the runs {what} ({dict(values)})"] if len(set(values.values())) > 1 else []


def flatten(value: Any, prefix: str = "",
            expand: Callable[[Any, str], list[tuple[str, Any]] | None] | None = None) -> list[tuple[str, Any]]:
    """Nested mappings as (path, value) pairs, the keys of a path joined by " / ": the rows of a
    settings table. ``expand(value, path)`` flattens a value its own way (None: as here), so that
    a benchmark can summarise what its manifests repeat."""
    found = expand(value, prefix) if expand is not None else None
    if found is not None:
        return found
    if isinstance(value, dict):
        return [item for key, inner in value.items()
                for item in flatten(inner, f"{prefix} / {key}" if prefix else str(key), expand)]
    return [(prefix, value)]


# --- table of contents (a filter of the report template) ---------------------------------------

_HEADING = re.compile(r"<h([23])\b([^>]*)>(.*?)</h\1>", re.S)
_ID = re.compile(r'\bid="([^"]+)"')


def _markdown_sources(cell: Mapping[str, Any]) -> list[str]:
    if cell["cell_type"] == "markdown":
        return [cell["source"]]
    return [output["data"]["text/markdown"] for output in cell.get("outputs", [])
            if "text/markdown" in output.get("data", {})]


def cell_headings(cell: Mapping[str, Any]) -> list[tuple[int, str, str]]:
    """The h2/h3 headings a cell shows (its markdown, or a code cell's markdown outputs) as
    (level, id, text), with the ids nbconvert's renderer gives them."""
    from nbconvert.filters.markdown_mistune import markdown2html_mistune

    found = []
    for source in _markdown_sources(cell):
        for level, attrs, inner in _HEADING.findall(markdown2html_mistune(source)):
            ident = _ID.search(attrs)
            text = html.unescape(re.sub(r"<[^>]+>", "", inner)).replace("¶", "").strip()
            found.append((int(level), html.unescape(ident.group(1)) if ident else "", text))
    return found


def contents_html(headings: Sequence[tuple[int, str, str]]) -> str:
    """The table of contents: h2 entries, each with its h3 entries nested below."""
    items, open_sub = [], False
    for level, ident, text in headings:
        link = f'<a href="#{html.escape(ident, quote=True)}">{html.escape(text)}</a>'
        if level == 3 and items:
            items.append(("" if open_sub else "<ol>") + f"<li>{link}</li>")
            open_sub = True
        else:
            items.append(("</ol></li>" if open_sub else "</li>" if items else "") + f"<li>{link}")
            open_sub = False
    items.append("</ol></li>" if open_sub else "</li>")
    return f'<nav class="ce-toc"><span class="ce-toc-title">Contents</span><ol>{"".join(items)}</ol></nav>'


def contents_before(notebook: Mapping[str, Any], cell: Mapping[str, Any]) -> str:
    """The template's filter: the table of contents when ``cell`` is the first to show an h2
    (it opens that cell), else nothing. A notebook without an h2 has none."""
    for earlier in notebook["cells"]:
        if any(level == 2 for level, _, _ in cell_headings(earlier)):
            break
    else:
        return ""
    if earlier is not cell:
        return ""
    return contents_html([h for c in notebook["cells"] for h in cell_headings(c) if h[1]])
