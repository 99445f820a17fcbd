"""docs/conformance.md stays true: its rows are the seeds' items in order, every test it names
exists (found by parsing the test file, not by running it), every link reaches an anchor of its
page, every `differs` row links the platform rule that gives its reason, and every count line
matches the rows below it."""

from __future__ import annotations

import ast
import re
import unicodedata
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TABLE = ROOT / "docs" / "conformance.md"
STATUSES = ("tested", "differs", "n/a")
# The seeds and how many items they hold between them: issue 43 counted 217; enumerated row by row
# in seed order (000: 56, 001: 34, 002: 31, 004: 99) they are 220, with every id the issue names on
# the item it names. A row lost or added by mistake changes this sum.
SEEDS = ("000", "001", "002", "004")
ALL_ITEMS = 220
COUNTS = re.compile(r"^(\d+) items: (\d+) tested, (\d+) differs, (\d+) n/a\.$")
SECTION = re.compile(r"^## Seed (\d{3}) — \S.*$")
ROW_ID = re.compile(r"^(\d{3})-(\d{2,})$")
TEST_REF = re.compile(r"`(tests/[^`:]+\.py)::([A-Za-z_][\w:]*)`")
FILE_REF = re.compile(r"`((?:charactereval_lib|data|docs|benchmarks|notebooks|configs|tests)/[^`\s:]+)`")
LINK = re.compile(r"\]\(([^)#\s]+\.md)(?:#([^)\s]+))?\)")
PIPE = re.compile(r"(?<!\\)\|")


def parse(text: str) -> tuple[tuple[int, ...] | None, list[dict]]:
    """(the file's total counts, the sections), each section with its counts and rows."""
    total, sections, section = None, [], None
    lines = text.splitlines()
    for number, line in enumerate(lines, start=1):
        match = SECTION.match(line)
        if match:
            section = {"seed": match.group(1), "line": number, "counts": None, "rows": []}
            sections.append(section)
            continue
        counts = COUNTS.match(line)
        if counts:
            values = tuple(int(v) for v in counts.groups())
            if section is None:
                total = values
            elif section["counts"] is None and not section["rows"]:
                section["counts"] = values
            continue
        if section is not None and line.startswith("|") and not line.startswith(("| id ", "|---")):
            cells = [cell.strip() for cell in PIPE.split(line.strip())[1:-1]]
            section["rows"].append({"line": number, "cells": cells})
    return total, sections


def slugs(heading: str) -> set[str]:
    """A heading's anchor as GitHub and as MkDocs (Python-Markdown's toc) make it."""
    text = re.sub(r"\{#[^}]*\}\s*$", "", heading).strip()
    github = re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")
    ascii_text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    mkdocs = re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", ascii_text).strip().lower())
    return {github, mkdocs}


@cache
def anchors(page: Path) -> frozenset[str]:
    text = page.read_text(encoding="utf-8")
    found = set(re.findall(r"""\bid=["']([^"']+)["']""", text)) | set(re.findall(r"\{#([\w-]+)\}", text))
    for heading in re.findall(r"^#{1,6}\s+(.+)$", text, flags=re.MULTILINE):
        found |= slugs(heading)
    return frozenset(found)


@cache
def functions_of(path: Path) -> frozenset[str]:
    """Every test function of a file: top-level ``name`` and ``Class::name`` of its classes."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    functions = (ast.FunctionDef, ast.AsyncFunctionDef)
    names = {node.name for node in tree.body if isinstance(node, functions)}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            names |= {f"{node.name}::{item.name}" for item in node.body if isinstance(item, functions)}
    return frozenset(name for name in names if name.split("::")[-1].startswith("test"))


def row_problems(row: dict, page: Path) -> list[str]:
    where = f"{page.name}:{row['line']}"
    cells = row["cells"]
    if len(cells) != 4:
        return [f"{where}: {len(cells)} cells, expected 4 (id, requirement, status, evidence)"]
    _, requirement, status, evidence = cells
    problems = []
    if status not in STATUSES:
        problems.append(f"{where}: status {status!r} is not one of {', '.join(STATUSES)}")
    if not requirement or not evidence:
        problems.append(f"{where}: an empty requirement or evidence")
    tests = TEST_REF.findall(evidence)
    for file, name in tests:
        path = ROOT / file
        if not path.is_file():
            problems.append(f"{where}: {file}: no such test file")
        elif name not in functions_of(path):
            problems.append(f"{where}: {file} has no test {name}")
    for file in FILE_REF.findall(evidence):
        if not (ROOT / file).exists():
            problems.append(f"{where}: {file}: no such file")
    links = LINK.findall(evidence)
    for target, anchor in links:
        linked = (page.parent / target).resolve()
        if not linked.is_file():
            problems.append(f"{where}: link to {target}: no such page")
        elif anchor and anchor not in anchors(linked):
            problems.append(f"{where}: link to {target}#{anchor}: no such anchor")
    if status == "tested" and not tests:
        problems.append(f"{where}: tested, but no test named as `tests/<path>.py::<test>`")
    if status == "differs" and not any(t == "platform-rules.md" and a for t, a in links):
        problems.append(f"{where}: differs, but no link to its entry in platform-rules.md#<anchor>")
    return problems


def table_problems(text: str, page: Path = TABLE) -> list[str]:
    total, sections = parse(text)
    problems = []
    if total is None:
        problems.append(f"{page.name}: no total line '<N> items: <a> tested, <b> differs, <c> n/a.' above the sections")
    if not sections:
        problems.append(f"{page.name}: no section '## Seed NNN — <title>'")
    seen_seeds = [s["seed"] for s in sections]
    if seen_seeds != sorted(set(seen_seeds)):
        problems.append(f"{page.name}: sections out of order or repeated: {', '.join(seen_seeds)}")
    summed = [0, 0, 0, 0]
    for section in sections:
        where = f"{page.name}:{section['line']} (seed {section['seed']})"
        rows = section["rows"]
        ids = [ROW_ID.match(r["cells"][0]) if r["cells"] else None for r in rows]
        for row, match in zip(rows, ids):
            if match is None or match.group(1) != section["seed"]:
                problems.append(f"{page.name}:{row['line']}: id {row['cells'][:1]} is not {section['seed']}-XX")
        numbers = [int(m.group(2)) for m in ids if m]
        if numbers != list(range(1, len(rows) + 1)):
            problems.append(f"{where}: ids are not {section['seed']}-01 to {section['seed']}-{len(rows):02d} in order")
        for row in rows:
            problems += row_problems(row, page)
        statuses = [r["cells"][2] if len(r["cells"]) == 4 else None for r in rows]
        counted = (len(rows), *(statuses.count(s) for s in STATUSES))
        if section["counts"] != counted:
            problems.append(f"{where}: count line says {section['counts']}, the rows give {counted} "
                            "(items, tested, differs, n/a)")
        summed = [a + b for a, b in zip(summed, counted)]
    if total is not None and list(total) != summed:
        problems.append(f"{page.name}: total line says {total}, the sections give {tuple(summed)}")
    if set(seen_seeds) == set(SEEDS) and summed[0] != ALL_ITEMS:
        problems.append(f"{page.name}: the four seeds hold {ALL_ITEMS} items, the table {summed[0]}")
    return problems


def test_the_conformance_table_is_true():
    assert table_problems(TABLE.read_text(encoding="utf-8")) == []


def test_the_table_check_catches_each_kind_of_untruth():
    real = "`tests/project/test_conformance_table.py::test_the_conformance_table_is_true`"
    good = (
        "# T\n\n2 items: 1 tested, 1 differs, 0 n/a.\n\n## Seed 000 — A\n\n2 items: 1 tested, 1 differs, 0 n/a.\n\n"
        "| id | requirement | status | evidence |\n|---|---|---|---|\n"
        f"| 000-01 | a | tested | {real} |\n"
        f"| 000-02 | b | differs | [rules](platform-rules.md#upstream-commit); {real} |\n"
    )
    assert table_problems(good) == []
    broken = {
        "has no test": good.replace("::test_the_conformance_table_is_true` |\n| 000-02",
                                     "::test_gone` |\n| 000-02"),
        "no such anchor": good.replace("#upstream-commit", "#nowhere"),
        "no link to its entry": good.replace("[rules](platform-rules.md#upstream-commit); ", ""),
        "count line says": good.replace("## Seed 000 — A\n\n2 items: 1 tested, 1 differs",
                                        "## Seed 000 — A\n\n2 items: 2 tested, 0 differs"),
        "total line says": good.replace("# T\n\n2 items", "# T\n\n3 items"),
        "is not one of": good.replace("| b | differs |", "| b | done |"),
        "are not 000-01": good.replace("| 000-02 |", "| 000-03 |"),
        "no test named": good.replace(f"| a | tested | {real} |", "| a | tested | `docs/conformance.md` |"),
        "no such file": good.replace(f"| a | tested | {real} |", f"| a | tested | {real}; `data/nothing.csv` |"),
    }
    for expected, text in broken.items():
        problems = table_problems(text)
        # The untruth is named first (a wrong status also leaves the counts off).
        assert problems and expected in problems[0], (expected, problems)


def test_anchors_are_found_as_github_and_mkdocs_make_them(tmp_path):
    page = tmp_path / "p.md"
    page.write_text('<a id="explicit"></a>\n\n## The order (seed 000 S9) — a note\n\n## Attr {#attr-id}\n',
                    encoding="utf-8")
    found = anchors(page)
    assert {"explicit", "attr-id", "the-order-seed-000-s9--a-note", "the-order-seed-000-s9-a-note"} <= found
