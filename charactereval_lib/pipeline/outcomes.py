"""What the stages of both benchmarks return, and the report file names they share."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from charactereval_lib.engine.storage import runs

REPORT_NOTEBOOK = "report.ipynb"
REPORT_HTML = "report.html"
COMPARISON_NOTEBOOK = "comparison.ipynb"
COMPARISON_HTML = "comparison.html"
# Each report figure is also saved here as PNG, beside the HTML.
FIGURES_DIR = "figures"


@dataclass
class SummaryOutcome:
    run: runs.RunDir
    summary: dict[str, Any]
    warnings: list[str] = field(default_factory=list)
    # The checks of the run's files the warnings rest on (``engine.reports.evidence.Evidence``; None for
    # a benchmark without them).
    evidence: Any = None


@dataclass
class ReportOutcome:
    notebook: Path
    html: Path
    warnings: list[str] = field(default_factory=list)
