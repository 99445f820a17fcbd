"""Plain-text tables for the terminal: every column as wide as its widest cell, so that no row
(a long dimension name, a "(avg)" row) runs out of its column; and ``fmt``, a number as every
table shows it (terminal, report, site)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any


def fmt(value: Any, digits: int = 3, missing: str = "–") -> str:
    """A number with ``digits`` decimals; ``missing`` for no value (None or NaN); anything else
    but a float (a count, a label) as it is."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return missing
    return f"{value:.{digits}f}" if isinstance(value, float) else str(value)


def text_table(header: Sequence[str], rows: Sequence[Sequence[object]], *, left: int = 1, gap: int = 2) -> list[str]:
    """The lines of a table: the first ``left`` columns left-aligned, the others right-aligned,
    ``gap`` spaces between columns; cells are shown with ``str``."""
    cells = [[str(c) for c in header], *([str(c) for c in row] for row in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = []
    for row in cells:
        parts = [cell.ljust(width) if i < left else cell.rjust(width) for i, (cell, width) in enumerate(zip(row, widths))]
        lines.append((" " * gap).join(parts).rstrip())
    return lines
