"""The report kit (issue 17, item 5): one ``show`` that escapes HTML, one warnings box, one
rendered-by line, stacking, and the table of contents and CSS through the report template."""

from __future__ import annotations

import re

import nbformat
import pandas as pd
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from charactereval_lib.charactereval import analysis
from charactereval_lib.engine.reports import kit
from charactereval_lib.engine.reports import notebook as report


def test_show_escapes_html_in_cells_for_every_benchmark():
    frame = pd.DataFrame({"name": ["<b>bold</b> & co"], "interval": ["n<2"]})
    for styled in (kit.show(frame), analysis.show(frame)):
        page = styled.to_html()
        assert "&lt;b&gt;bold&lt;/b&gt; &amp; co" in page and "<b>bold</b>" not in page
        assert "n&lt;2" in page


def test_show_names_columns_and_reads_values_through_the_benchmarks_words():
    frame = pd.DataFrame({"metric_en": ["Communication_skills"], "mean_centred": [1.23456]})
    styled = kit.show(frame, digits=2, columns={"metric_en": "metric"},
                      values={"metric_en": lambda v: v.replace("_", " ")})
    page = styled.to_html()
    assert list(styled.data.columns) == ["metric", "mean centred"]
    assert "Communication skills" in page and "1.23" in page and "1.234" not in page


def test_warnings_box_counts_escapes_and_keeps_code_spans():
    box = kit.warnings_box(["a <tag> & `cmd --x`", "two"], "Warnings")
    assert box.startswith('<div class="ce-warnings"><strong>Warnings (2)</strong><ul>')
    assert "a &lt;tag&gt; &amp; <code>cmd --x</code>" in box and box.count("<li>") == 2
    label = kit.warnings_box(["why"], "NOT COMPARABLE", counted=False, intro=": so it's shown only.")
    assert "<strong>NOT COMPARABLE</strong>: so it's shown only.<ul><li>why</li>" in label
    assert kit.warnings_box([], "Caveats") == ""
    assert kit.warnings_box([], "Warnings", empty="All fine.") == '<div class="ce-warnings ce-none">All fine.</div>'


def test_stacked_puts_the_run_first():
    runs = [type("Run", (), {"name": name, "table": lambda self: pd.DataFrame({"x": [1, 2]})})() for name in "ab"]
    table = kit.stacked(runs, lambda r: r.table())
    assert list(table.columns) == ["run", "x"] and list(table["run"]) == ["a", "a", "b", "b"]


def test_rendered_by_names_the_version():
    assert kit.rendered_by().startswith("Rendered by charactereval ")


def write_notebook(path, cells):
    nbformat.write(new_notebook(cells=cells), str(path))
    return path


def test_the_template_puts_contents_above_the_first_section_and_the_css_last_in_the_head(tmp_path):
    markdown_output = new_output("display_data", data={"text/markdown": "### vs GPT-4 (paper)", "text/plain": "x"})
    notebook = write_notebook(tmp_path / "r.ipynb", [
        new_markdown_cell("# Title\n\nIntro."),
        new_code_cell("x = 1", outputs=[new_output("display_data", data={"text/html": "<div>box</div>"})]),
        new_markdown_cell("## Scores\n\ntext\n\n### Per metric"),
        new_code_cell("display(...)", outputs=[markdown_output]),
        new_markdown_cell("## Run settings"),
    ])
    page = report.to_html(notebook, tmp_path / "r.html").read_text(encoding="utf-8")
    head, body = page.split("</head>", 1)
    # Our rules come after nbconvert's own, so that they win.
    assert head.rindex("nav.ce-toc") > head.rindex('<style type="text/css">')
    assert body.count('<nav class="ce-toc">') == 1
    nav = body.split('<nav class="ce-toc">', 1)[1].split("</nav>", 1)[0]
    assert body.index("<div>box</div>") < body.index('<nav class="ce-toc">') < body.index("<h2")
    texts = re.findall(r'<a href="#([^"]+)">([^<]+)</a>', nav)
    assert [text for _, text in texts] == ["Scores", "Per metric", "vs GPT-4 (paper)", "Run settings"]
    assert nav.count("<ol>") == 2 and "Title" not in nav
    assert all(f'id="{ident}"' in body for ident, _ in texts)


def test_a_page_without_sections_has_no_contents(tmp_path):
    notebook = write_notebook(tmp_path / "r.ipynb", [new_markdown_cell("# Title\n\n### Only a minor heading")])
    page = report.to_html(notebook, tmp_path / "r.html").read_text(encoding="utf-8")
    assert "<h3" in page and '<nav class="ce-toc">' not in page
