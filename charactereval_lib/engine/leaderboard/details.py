"""A sample's detail in the leaderboard's explorer, as typed sections that one renderer
(``leaderboard/assets/explorer.js``) draws for every benchmark.

A benchmark's explorer returns, per sample, a list of sections made by the functions below:
key-value pairs, a text, a table, a dialogue, a score computation, a note. Each says which of
its parts are test-set text (contexts, profiles, replies, critiques): a text and a dialogue are
by default, a key-value pair or a table column when marked. ``redact`` drops those parts for a
site published without test-set text (``leaderboard --redact``), so the redaction is the same
for every benchmark and a new one cannot forget it. ``check`` refuses a malformed section when
the site is written, rather than letting the page draw nothing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

Section = dict[str, Any]
KINDS = ("kv", "text", "table", "dialogue", "computation", "note")
REDACTED = "not published (redacted site)"
_REQUIRED = {"kv": ("items",), "text": ("text",), "table": ("columns", "rows"), "dialogue": ("messages",),
             "computation": ("text",), "note": ("text",)}


def kv(title: str, items: Iterable[tuple[str, Any]], *, private: Iterable[str] = ()) -> Section:
    """Key-value pairs; ``private``: the keys whose values are test-set text."""
    return {"kind": "kv", "title": title, "items": [[k, v] for k, v in items], "private_keys": list(private)}


def text(title: str, body: str | None, *, empty: str = "not available", scored: bool = False,
         private: bool = True, shared: bool = False) -> Section:
    """A text shown as written (``empty`` when there is none); ``scored``: the part a score was
    computed from, set apart; ``shared``: a text every run shows alike (a test sample's context),
    which the site stores once for all runs (``engine.leaderboard.site``) rather than in each run's data."""
    section = {"kind": "text", "title": title, "text": body, "empty": empty, "scored": scored, "private": private}
    return {**section, "shared": True} if shared else section


def table(title: str, columns: Sequence[str], rows: Iterable[Sequence[Any]], *, private: Iterable[str] = ()) -> Section:
    """A table; ``private``: the columns that hold test-set text."""
    return {"kind": "table", "title": title, "columns": list(columns), "rows": [list(r) for r in rows],
            "private_columns": list(private)}


def dialogue(title: str, messages: Iterable[Mapping[str, Any]]) -> Section:
    """Messages ``{"role", "content"}`` in order (always test-set text)."""
    return {"kind": "dialogue", "title": title, "private": True,
            "messages": [{"role": m.get("role"), "content": m.get("content")} for m in messages]}


def computation(title: str, worked: str) -> Section:
    """How a score was computed, written out so that it can be checked by hand."""
    return {"kind": "computation", "title": title, "text": worked}


def note(title: str, body: str, *, failure: bool = False) -> Section:
    """A short statement (a failure and its reason when ``failure``)."""
    return {"kind": "note", "title": title, "text": body, "failure": failure}


def check(sections: Any, where: str) -> None:
    """A ValueError naming ``where`` and the section when ``sections`` is not a list of sections."""
    if not isinstance(sections, list):
        raise ValueError(f"{where}: a sample's detail is a list of sections, not a {type(sections).__name__}")
    for k, section in enumerate(sections):
        kind = section.get("kind") if isinstance(section, Mapping) else None
        if kind not in KINDS:
            raise ValueError(f"{where}, section {k}: kind {kind!r} is not one of {', '.join(KINDS)}")
        missing = [key for key in ("title", *_REQUIRED[kind]) if key not in section]
        if missing:
            raise ValueError(f"{where}, section {k} ({kind}): missing {', '.join(missing)}")


def redact(sections: Sequence[Section]) -> list[Section]:
    """The sections without their test-set text: a private section is left out, a private key
    or column dropped, and one note says that something was (where the first part left out was)."""
    kept: list[Section] = []
    dropped_at: int | None = None
    for section in sections:
        if section.get("private"):
            dropped_at = len(kept) if dropped_at is None else dropped_at
            continue
        if section["kind"] == "kv" and section.get("private_keys"):
            hidden = set(section["private_keys"])
            section = {**section, "items": [i for i in section["items"] if i[0] not in hidden], "private_keys": []}
            dropped_at = len(kept) + 1 if dropped_at is None else dropped_at
        elif section["kind"] == "table" and section.get("private_columns"):
            keep = [i for i, c in enumerate(section["columns"]) if c not in set(section["private_columns"])]
            section = {**section, "columns": [section["columns"][i] for i in keep],
                       "rows": [[row[i] for i in keep] for row in section["rows"]], "private_columns": []}
            dropped_at = len(kept) + 1 if dropped_at is None else dropped_at
        kept.append(section)
    if dropped_at is not None:
        kept.insert(dropped_at, note("Test-set text", REDACTED))
    return kept
