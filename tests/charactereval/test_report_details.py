"""Report and terminal details (issue 19, item 14): aligned "(avg)" rows, metric names as the
reports spell them, a failures figure that says "no failures", and report CSS for the contents
box and unbroken table headers."""

from __future__ import annotations

import re

import pandas as pd

from charactereval_lib.charactereval import figures
from charactereval_lib.charactereval.data import load_official_data
from charactereval_lib.cli import main
from charactereval_lib.engine.reports.kit import TEMPLATE_DIR
from charactereval_lib.engine.reports.texttable import text_table
from charactereval_lib.testing.synthetic import write_synthetic_data, write_synthetic_run


def test_text_table_columns_fit_their_widest_cell():
    lines = text_table(["metric", "n", "mean"], [["Fluency", 3, "4.000"], ["Role-playing attractiveness (avg)", "", "3.5"]])
    assert [len(line) for line in lines[:2]] == [len(lines[0])] * 2
    assert all(line.endswith(("mean", "4.000", "3.5")) for line in lines)
    assert lines[2].index("3.5") + 3 == len(lines[0])


def test_summarize_prints_every_row_in_its_columns(tmp_path, capsys):
    data = load_official_data(write_synthetic_data(tmp_path / "data", 60, seed=2), verify=False)
    run = write_synthetic_run(tmp_path / "run", data, seed=1)
    assert main(["summarize", str(run), "--n-boot", "20", "--data-dir", str(tmp_path / "data")]) == 0
    out = capsys.readouterr().out.splitlines()
    table = out[:1 + 12 + 3]
    assert "Communication skills" in "\n".join(table) and "Communication_skills" not in "\n".join(table)
    assert sum(line.endswith("(avg)") or "(avg)" in line for line in table) == 3
    # The mean column ends at the same place on every row, the "(avg)" rows included.
    ends = {re.search(r"\d\.\d{3}(?=\s+(\[|n<\d|-))", line).end() for line in table[1:]}
    assert len(ends) == 1


def test_the_failures_figure_says_no_failures_when_every_count_is_0():
    breakdown = pd.DataFrame({"category": ["generation", "rows"], "detail": ["failed", "empty"], "count": [0, 0],
                              "total": [10, 20], "share": [0.0, 0.0], "unit": ["samples", "rows"]})
    fig = figures.failure_figure(breakdown)
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert texts == ["No failures and no warning signs: all 2 checks are at 0."]
    assert not any(ax.patches for ax in fig.axes)
    with_one = figures.failure_figure(breakdown.assign(count=[1, 0], share=[0.1, 0.0]))
    assert len(with_one.axes[0].patches) == 2


def test_report_css_keeps_headers_whole_and_the_contents_box_sans_serif():
    css = (TEMPLATE_DIR / "report.css").read_text(encoding="utf-8")
    assert re.search(r"th \{[^}]*white-space: nowrap", css)
    assert re.search(r"nav\.ce-toc \{[^}]*font-family: [^;]*sans-serif", css)
