"""Documentation quotes measured figures only: every speed-up claimed in the README, a page of the
documentation site or a shipped config is one that a committed benchmark result records."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), *sorted((ROOT / "configs").glob("*.yaml"))]
# "3.49x quicker", "five times faster", "2 times slower": a number and a speed comparison.
CLAIM = re.compile(
    r"\b(\w+(?:\.\d+)?)(?:\s*[x×]|\s+times)\s+(?:quicker|faster|slower)", re.IGNORECASE
)


def measured_speedups() -> set[str]:
    """Every ``speedup*`` value in benchmarks/results/*.json, as a README would print it."""
    found: set[str] = set()

    def walk(node):
        if isinstance(node, dict):
            for key, value in node.items():
                if key.startswith("speedup") and isinstance(value, (int, float)):
                    found.add(f"{value:.2f}")
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for path in sorted((ROOT / "benchmarks" / "results").glob("*.json")):
        walk(json.loads(path.read_text(encoding="utf-8")))
    return found


def prose(path: Path) -> str:
    """The file's text with line breaks (and the ``#`` of wrapped comment lines) read as spaces,
    so a claim wrapped over two lines is still one claim."""
    return re.sub(r"\s*\n\s*#?\s*", " ", path.read_text(encoding="utf-8"))


def test_speed_claims_are_measured_figures():
    measured = measured_speedups()
    assert measured, "no benchmark results committed"
    claims = [
        (path.name, match.group(0))
        for path in DOCS
        for match in CLAIM.finditer(prose(path))
    ]
    unmeasured = [(name, claim) for name, claim in claims if CLAIM.match(claim).group(1) not in measured]
    assert not unmeasured, f"speed-ups not in benchmarks/results: {unmeasured}; measured: {sorted(measured)}"


def test_the_quick_start_says_how_to_reach_the_commands_and_offers_lab():
    """The commands after `make demo` are bare `charactereval ...`: the README says to activate
    .venv before the first of them, and the Quick start's optional third line opens Lab."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    quick = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    assert re.search(r"^make lab\s+# optional", quick, re.M)
    first_command = re.search(r"^charactereval ", text, re.M).start()
    assert "source .venv/bin/activate" in text[:first_command]
