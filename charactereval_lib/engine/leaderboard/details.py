"""A sample's detail in the leaderboard's explorer, as typed sections that one renderer
(``leaderboard/assets/explorer.js``) draws for every benchmark.

A benchmark's explorer returns, per sample, a list of sections made by the functions below:
key-value pairs, a text, a table, a dialogue, a score computation, a note. Each says which of
its parts are test-set text (contexts, profiles, replies, critiques): a text and a dialogue are
by default, a key-value pair or a table column when marked. ``redact`` drops those parts for a
site published without test-set text (``leaderboard --redact``), so the redaction is the same
for every benchmark and a new one cannot forget it. ``check`` refuses a malformed section when
the site is written, rather than letting the page draw nothing.

A section is made in the form the site stores it: its template (kind, title, flags, a key-value
section's keys, a table's columns), which the sections of one kind and title share and the
site writes once per chunk of details, and its own value (the text, the key-value values, the
rows, the messages). A full-size run has tens of thousands of sections; made this way, none is
taken apart again to be stored (``Section.as_dict`` gives the form a reader expects).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

Template = tuple[tuple[str, Any], ...]  # (field, value) pairs, kind first; lists as tuples, so hashable
KINDS = ("kv", "text", "table", "dialogue", "computation", "note")
REDACTED = "not published (redacted site)"
# The field of each kind of section that holds its own value (the rest is its template).
VALUE_FIELD = {"kv": "items", "text": "text", "table": "rows", "dialogue": "messages", "computation": "text",
               "note": "text"}
_REQUIRED = {"kv": ("keys",), "table": ("columns",)}


class Section(NamedTuple):
    """One section of a sample's detail: ``template`` (what it shares with the sections of its
    kind and title) and ``value`` (a kv's values in the order of its keys, a text, a table's
    rows, a dialogue's messages)."""

    template: Template
    value: Any

    @property
    def kind(self) -> str:
        return self.template[0][1]

    def as_dict(self) -> dict[str, Any]:
        """The section as one object, the way the page's script rebuilds it: a key-value
        section's ``items`` as [key, value] pairs, lists as lists."""
        out = {k: list(v) if isinstance(v, tuple) else v for k, v in self.template}
        if self.kind == "kv":
            out["items"] = [[k, v] for k, v in zip(out.pop("keys"), self.value)]
        else:
            out[VALUE_FIELD[self.kind]] = self.value
        return out


def kv(title: str, items: Iterable[tuple[str, Any]], *, private: Iterable[str] = ()) -> Section:
    """Key-value pairs; ``private``: the keys whose values are test-set text."""
    keys, values = [], []
    for key, value in items:
        keys.append(key)
        values.append(value)
    return Section(_kv_template(title, tuple(private), tuple(keys)), values)


@functools.lru_cache(maxsize=1024)
def _kv_template(title: str, private: tuple[str, ...], keys: tuple[str, ...]) -> Template:
    return (("kind", "kv"), ("title", title), ("private_keys", private), ("keys", keys))


def text(title: str, body: str | None, *, empty: str = "not available", scored: bool = False,
         private: bool = True, shared: bool = False) -> Section:
    """A text shown as written (``empty`` when there is none); ``scored``: the part a score was
    computed from, set apart; ``shared``: a text every run shows alike (a test sample's context),
    which the site stores once for all runs (``engine.leaderboard.site``) rather than in each run's data."""
    return Section(_text_template(title, empty, scored, private, shared), body)


@functools.lru_cache(maxsize=1024)
def _text_template(title: str, empty: str, scored: bool, private: bool, shared: bool) -> Template:
    # One object per distinct template: a full-size run makes tens of thousands of texts of a few.
    template = (("kind", "text"), ("title", title), ("empty", empty), ("scored", scored), ("private", private))
    return (*template, ("shared", True)) if shared else template


def table(title: str, columns: Sequence[str], rows: Iterable[Sequence[Any]], *, private: Iterable[str] = ()) -> Section:
    """A table; ``private``: the columns that hold test-set text."""
    return Section((("kind", "table"), ("title", title), ("columns", tuple(columns)),
                    ("private_columns", tuple(private))), [list(r) for r in rows])


def dialogue(title: str, messages: Iterable[Mapping[str, Any]]) -> Section:
    """Messages ``{"role", "content"}`` in order (always test-set text)."""
    return Section((("kind", "dialogue"), ("title", title), ("private", True)),
                   [{"role": m.get("role"), "content": m.get("content")} for m in messages])


def computation(title: str, worked: str) -> Section:
    """How a score was computed, written out so that it can be checked by hand."""
    return Section((("kind", "computation"), ("title", title)), worked)


def note(title: str, body: str, *, failure: bool = False) -> Section:
    """A short statement (a failure and its reason when ``failure``)."""
    return Section((("kind", "note"), ("title", title), ("failure", failure)), body)


def check(details: Sequence[Any], where: str) -> None:
    """A ValueError naming ``where``, the sample and the section when a sample's detail in
    ``details`` is not a list of sections (each template is checked once, not once per section
    that shares it)."""
    checked: set[int] = set()  # ids of the templates found sound; the details hold them
    for k, sections in enumerate(details):
        if not isinstance(sections, list):
            raise ValueError(f"{where} sample {k}: a sample's detail is a list of sections, "
                             f"not a {type(sections).__name__}")
        for j, section in enumerate(sections):
            if type(section) is not Section:
                raise ValueError(f"{where} sample {k}, section {j}: a {type(section).__name__}, not a section made "
                                 "by engine.leaderboard.details")
            if id(section.template) not in checked:
                problem = _template_problem(section.template)
                if problem:
                    raise ValueError(f"{where} sample {k}, section {j}{problem}")
                checked.add(id(section.template))


def _template_problem(template: Template) -> str | None:
    fields = dict(template)
    kind = fields.get("kind")
    if kind not in KINDS:
        return f": kind {kind!r} is not one of {', '.join(KINDS)}"
    missing = [key for key in ("title", *_REQUIRED.get(kind, ())) if key not in fields]
    return f" ({kind}): missing {', '.join(missing)}" if missing else None


def redact(sections: Sequence[Section]) -> list[Section]:
    """The sections without their test-set text: a private section is left out, a private key
    or column dropped, and one note says that something was (where the first part left out was)."""
    kept: list[Section] = []
    dropped_at: int | None = None
    for section in sections:
        fields = dict(section.template)
        if fields.get("private"):
            dropped_at = len(kept) if dropped_at is None else dropped_at
            continue
        hidden = set(fields.get("private_keys") or fields.get("private_columns") or ())
        if hidden:
            names = fields["keys"] if section.kind == "kv" else fields["columns"]
            keep = [i for i, name in enumerate(names) if name not in hidden]
            fields["keys" if section.kind == "kv" else "columns"] = tuple(names[i] for i in keep)
            fields["private_keys" if section.kind == "kv" else "private_columns"] = ()
            value = ([section.value[i] for i in keep] if section.kind == "kv"
                     else [[row[i] for i in keep] for row in section.value])
            section = Section(tuple(fields.items()), value)
            dropped_at = len(kept) + 1 if dropped_at is None else dropped_at
        kept.append(section)
    if dropped_at is not None:
        kept.insert(dropped_at, note("Test-set text", REDACTED))
    return kept
