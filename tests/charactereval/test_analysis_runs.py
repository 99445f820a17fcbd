"""One run's analysis view: warnings read from the run, settings table, displayed tables, Holm, groups."""

from __future__ import annotations

import math
import re
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from charactereval_lib.charactereval import analysis, diagnostics
from charactereval_lib.charactereval.data import load_official_data
from charactereval_lib.charactereval.official import export_official, import_official
from charactereval_lib.charactereval.protocol import METRICS
from charactereval_lib.charactereval.statistics import metric_statistics, paired_comparison
from charactereval_lib.engine.reports.evidence import Evidence, Finding
from charactereval_lib.engine.storage import runs
from charactereval_lib.testing.synthetic import write_synthetic_data, write_synthetic_run

TINY = "TINY RANDOM CHECKPOINT: its scores are meaningless (demos and tests only)"


@pytest.mark.parametrize(
    "scoring",
    [{"rm_label": "tiny-random"}, {"checkpoint": {"label": TINY}}, {"shards": {"1/2": {"checkpoint": {"label": TINY}}}}],
)
def test_a_tiny_reward_model_is_named_plainly(scoring):
    caveats = analysis.run_caveats({"generation": {"backend": "openai"}, "scoring": scoring})
    assert caveats == [analysis.TINY_RM_CAVEAT]


def test_real_runs_have_no_caveats():
    manifest = {"protocol_version": "charactereval-1.0", "generation": {"backend": "openai"},
                "scoring": {"checkpoint": {"label": None, "sha256": "abc"}}, "transform": {"counts": {"missing": 0}}}
    assert analysis.run_caveats(manifest) == []
    checks = Evidence([Finding("run.json"), Finding("replies")], subject="r1")
    box = analysis.warnings_html([], checks)
    assert "No warnings: all 2 checks of r1's files ran and passed (run.json, replies)." in box
    assert "<li>" not in box
    # A check that could not run, or none at all: never "No warnings".
    for unsure in (Evidence([Finding("run.json"), Finding("samples", not_run="no records")]), Evidence([])):
        assert "No warnings" not in analysis.warnings_html([], unsure)


def test_offline_subset_unscored_and_protocol_caveats():
    manifest = {"protocol_version": "charactereval-0.9", "generation": {"backend": "offline"},
                "transform": {"counts": {"missing": 4364}}}
    caveats = analysis.run_caveats(manifest, unscored=3)
    assert caveats[0] == analysis.OFFLINE_CAVEAT
    assert caveats[1].startswith("4364 test sample(s) have no reply (a subset run")
    assert caveats[2].startswith("Scoring is incomplete: 3 row(s)")
    assert "protocol charactereval-0.9" in caveats[3]
    box = analysis.warnings_html(caveats, Evidence([Finding("run.json")]))
    assert box.count("<li>") == 4 and box.startswith('<div class="ce-warnings">') and "Warnings (4)" in box


def test_run_info_is_a_readable_table_of_sections_and_settings():
    manifest = {"protocol_version": "charactereval-1.0",
                "generation": {"backend": "openai", "parameters": {"max_tokens": 512, "temperature": None}},
                "scoring": {"checkpoint": {"sha256": "abc"}, "ids": list(range(20))}}
    info = analysis.run_info(manifest)
    assert list(info.columns) == ["section", "setting", "value"]
    value = info.set_index(["section", "setting"])["value"]
    assert value["versions", "protocol"] == "charactereval-1.0"
    assert value["generation", "backend"] == "openai" and value["", "parameters / max tokens"] == "512"
    assert value["", "parameters / temperature"] == "–"  # a section is named once, on its first row
    assert value["scoring", "checkpoint / sha256"] == "abc" and value["", "ids"] == "[20 items]"


def test_run_settings_read_as_text_not_python():
    manifest = {"scoring": {"elapsed_s": 63.508456294999974, "rows": 123456, "verify": None, "fast": False,
                            "options": {}, "devices": ["cpu", "cuda:0"]},
                "judge_scoring": {"judges": {"j": {"sessions": [{"graded": 1}, {"graded": 5, "elapsed_s": 2.0}]}}}}
    info = analysis.run_info(manifest)
    shown = dict(zip(info["setting"], info["value"]))
    assert shown["elapsed s"] == "63.51" and shown["rows"] == "123,456" and shown["verify"] == "–"
    assert shown["fast"] == "no" and shown["options"] == "–" and shown["devices"] == "cpu, cuda:0"
    # Several judge sessions: the latest one, once.
    assert shown["judges / j / sessions (latest of 2) / graded"] == "5"
    assert not any("{" in v or "None" in v for v in info["value"])
    assert list(info["section"]) == ["versions", "", "", "scoring", *[""] * 5, "judge scoring", ""]
    # A spec per metric: one row per field, not twelve.
    specs = {m: {"parser": "evals", "sha256": m} for m in ("Fluency", "Coherence", "Empathy")}
    shown = dict(zip(*analysis.run_info({"judge_scoring": {"specs": specs}})[["setting", "value"]].T.values))
    assert shown == {"protocol": "–", "package": "–", "git commit": "–", "specs / each of 3 / parser": "evals",
                     "specs / each of 3 / sha256": "3 different values"}


def test_load_run_and_displayed_tables(tmp_path):
    data = load_official_data(write_synthetic_data(tmp_path / "data", 80), verify=False)
    a = analysis.load_run(write_synthetic_run(tmp_path / "a", data, seed=1, unscored=2), data=data, n_boot=100)
    b = analysis.load_run(write_synthetic_run(tmp_path / "b", data, seed=2), data=data, n_boot=100)
    assert len(a.rows) == len(a.scores) + 2 and len(a.generations) == len(data.samples)
    assert any("Scoring is incomplete: 2 row(s)" in w for w in a.warnings())
    assert f"{len(a.scores)} scored rows of {len(a.rows)}" in a.header_markdown()
    shown = analysis.metric_display(a.stats, a.failed_by_metric())
    assert list(shown.columns) == ["metric", "abbr.", "dimension", "n", "failed", "mean", "95% CI", "SD"]
    # Full precision behind the display; "Communication_skills" is shown without its underscore.
    assert shown.loc[0, "mean"] == a.stats.metrics.loc[0, "mean"]
    assert "Communication skills" in set(shown["metric"])
    both = analysis.side_by_side([a, b])
    assert list(both.columns) == ["cell", "a", "b"] and len(both) == 15
    assert analysis.side_by_side([b, a]).columns.tolist() == ["cell", "b", "a"]
    comparisons = analysis.compare_to_first([a, b], n_boot=50)
    assert list(comparisons) == ["b − a"]
    tables = analysis.paired_tables([a, b], comparisons)
    assert list(tables["b − a"].columns) == ["cell", "shared n", "a", "b", "b − a", "95% CI", "Wilcoxon p", "Holm p",
                                             "MDD (80% power)"]
    assert len(tables["b − a"]) == 15
    assert len(a.scores_with_context()) == len(a.scores)
    with pytest.raises(ValueError, match="at least two runs"):
        analysis.compare_to_first([a])


def test_load_run_names_a_missing_directory(tmp_path):
    with pytest.raises(runs.RunError, match="no such run directory"):
        analysis.load_run(tmp_path / "nope")


# --- item 6: imported scores have an unknown scorer ----------------------------------------------


def test_imported_scores_say_their_scorer_is_unknown():
    manifest = {"generation": {"backend": "import-official", "source": {"kind": "evaluation"}}}
    assert analysis.IMPORTED_SCORES_CAVEAT in analysis.run_caveats({"generation": {"backend": "openai"}},
                                                                   scorer_modes={"imported": 12})
    # Even without score records (an older run), the manifest says the scores came with the file.
    assert analysis.IMPORTED_SCORES_CAVEAT in analysis.run_caveats(manifest)
    # Scored here since: the recorded checkpoint is known.
    rescored = {**manifest, "scoring": {"checkpoint": {"label": None, "sha256": "abc"}}}
    assert analysis.run_caveats(rescored, scorer_modes={"faithful": 12}) == []
    mixed = analysis.run_caveats(rescored, scorer_modes={"faithful": 10, "imported": 2})
    assert analysis.IMPORTED_SCORES_CAVEAT in mixed
    assert any("mix scorer modes (faithful: 10 rows, imported: 2 rows)" in c for c in mixed)


def test_an_exported_then_imported_tiny_run_warns_in_summarize_and_compare(tmp_path):
    data = load_official_data(write_synthetic_data(tmp_path / "data", 60), verify=False)
    tiny = write_synthetic_run(tmp_path / "tiny", data, backend="openai", rm_label="tiny-random")
    evaluation = [p for p in export_official(tiny, data) if p.name == "evaluation.jsonl"][0]
    imported = tmp_path / "imported"
    import_official(evaluation, imported, data)
    # What summarize prints: plain text, read from the run directory alone.
    warnings = analysis.run_warnings(imported)
    assert warnings == [analysis.IMPORTED_SCORES_CAVEAT]
    assert "tiny" not in " ".join(analysis.run_warnings(write_synthetic_run(tmp_path / "real", data, backend="openai",
                                                                            rm_label="BaichuanCharRM")))
    runs_ = [analysis.load_run(tiny, data=data, n_boot=20), analysis.load_run(imported, data=data, n_boot=20)]
    assert runs_[1].warnings() == warnings
    assert f"imported: {analysis.IMPORTED_SCORES_CAVEAT}" in analysis.comparison_warnings(runs_)
    assert f"tiny: {analysis.TINY_RM_CAVEAT}" in analysis.comparison_warnings(runs_)


# --- item 8: n < 2 has no interval ---------------------------------------------------------------


def one_row_of_fluency(tmp_path):
    """Statistics where Fluency has a single row and the other metrics have 30."""
    rows = [{"id": 1, "metric_en": "Fluency", "score": 3.5}]
    rows += [{"id": 10 + i, "metric_en": m.metric_en, "score": 2.0 + (i % 5) * 0.5}
             for m in METRICS[1:] for i in range(30)]
    return metric_statistics(pd.DataFrame(rows), n_boot=50)


def test_a_metric_of_one_row_has_no_interval_in_any_table(tmp_path):
    stats = one_row_of_fluency(tmp_path)
    # Resampling one row would give a zero-width interval: the statistics give none (NaN, null in
    # summary.json), and no table shows one.
    assert math.isnan(stats.metrics.loc[0, "ci_low"]) and math.isnan(stats.metrics.loc[0, "ci_high"])
    metrics = analysis.metric_display(stats).set_index("metric")
    assert metrics.loc["Fluency", "95% CI"] == "n<4" and metrics.loc["Coherence", "95% CI"].startswith("[")
    dims = analysis.dimension_display(stats).set_index("dimension")
    assert dims.loc["Conversational Ability", "95% CI"] == "n<4"
    assert dims.loc["Character Consistency", "95% CI"].startswith("[")
    assert math.isnan(diagnostics.sample_size_table(stats).loc[0, "ci_half_width"])
    caveats = analysis.run_caveats({}, metric_n=dict(zip(stats.metrics["metric_en"], stats.metrics["n"])))
    assert caveats == [caveats[0]] and "Fluency (n=1)" in caveats[0] and "n<4" in caveats[0]


def test_paired_cells_of_one_shared_row_have_no_interval():
    a = pd.DataFrame([{"id": 1, "metric_en": "Fluency", "score": 3.5}]
                     + [{"id": 10 + i, "metric_en": metric, "score": 3.0 + (i % 3) * 0.25}
                        for metric in ("Empathy", "Coherence", "Consistency") for i in range(20)])
    b = a.assign(score=a["score"] - 0.25 * (a["id"] % 2))
    comparison = paired_comparison(a, b, n_boot=30)
    cells = analysis.paired_tables([SimpleNamespace(name="b"), SimpleNamespace(name="a")],
                                   {"a − b": comparison})["a − b"].set_index("cell")
    assert cells.loc["Fluency (Flu)", "95% CI"] == "n<4"
    assert cells.loc["Fluency (Flu)", "Wilcoxon p"] == "n<4" and cells.loc["Fluency (Flu)", "Holm p"] == "–"
    assert cells.loc["Empathy (Emp)", "95% CI"].startswith("[")
    assert cells.loc["Conversational Ability avg.", "95% CI"] == "n<4"


# --- Holm, display, characters ----------------------------------------------------------------


def test_holm_by_hand():
    # Sorted 0.01, 0.03, 0.04 times 3, 2, 1 -> 0.03, 0.06, 0.04 -> monotone 0.03, 0.06, 0.06.
    assert analysis.holm([0.01, 0.04, 0.03, math.nan]).tolist()[:3] == pytest.approx([0.03, 0.06, 0.06])
    assert math.isnan(analysis.holm([0.01, math.nan])[1])
    # Never above 1, and never below the adjusted p of a smaller raw p.
    assert analysis.holm([0.5, 0.9]).tolist() == [1.0, 1.0]
    assert analysis.holm([]).size == 0


def test_holm_p_spans_every_comparison_in_the_report(tmp_path):
    data = load_official_data(write_synthetic_data(tmp_path / "data", 80), verify=False)
    runs_ = [analysis.load_run(write_synthetic_run(tmp_path / name, data, seed=k, shift=0.2 * k), data=data, n_boot=30)
             for k, name in enumerate(["c", "a", "b"])]
    comparisons = analysis.compare_to_first(runs_, n_boot=30)
    tables = analysis.paired_tables(runs_, comparisons)
    assert list(tables) == ["a − c", "b − c"]
    raw = np.concatenate([c.metrics["p_wilcoxon"].tolist() + c.dimensions["p_wilcoxon"].tolist()
                          for c in comparisons.values()])
    shown = [p for t in tables.values() for p in t["Holm p"]]
    assert shown == [f"{p:.3g}" for p in analysis.holm(raw)]
    assert all(float(h) >= float(r) for t in tables.values() for h, r in zip(t["Holm p"], t["Wilcoxon p"]))


def test_show_hides_the_index_and_rounds_for_display_only():
    # Text left; numbers, and text that reads as numbers (signed, intervals, n<2, p), right.
    aligned = analysis.show(pd.DataFrame({"name": ["a"], "delta": ["+0.5"], "ci": ["3.1 n<2"], "p": ["1e-06"]}))
    css = aligned.to_html().split("</style>", 1)[0]
    left = re.findall(r"([^{}]*)\{\s*text-align: left;", css)
    assert {col for selectors in left for col in re.findall(r"col(\d+)", selectors)} == {"0"}
    assert any("th.col0" in selectors for selectors in left)
    frame = pd.DataFrame({"metric_en": ["Communication_skills"], "dimension": ["conversational_ability"],
                          "ci_half_width": [0.123456], "off_grid": [3]})
    styled = analysis.show(frame)
    page = styled.to_html()
    assert "0.123" in page and "0.123456" not in page and styled.data.loc[0, "CI half-width"] == 0.123456
    assert "Communication skills" in page and "Conversational Ability" in page and "off grid" in page
    assert "_" not in "".join(styled.data.columns) and 'class="row_heading' not in page


def test_group_results_by_hand():
    scores = pd.DataFrame({
        "id": [1, 1, 2, 3, 4], "role": ["甲", "甲", "甲", "乙", "乙"],
        "metric_en": ["Fluency", "Empathy", "Fluency", "Fluency", "Empathy"],
        "score": [3.0, 4.0, 2.0, 4.0, 2.0]})
    table = analysis.group_results(scores, "role", n_boot=200).set_index("role")
    # Metric means: Fluency 3, Empathy 3; centred: 甲 (0, 1, -1) -> 0, 乙 (1, -1) -> 0.
    assert table.loc["甲", "mean_centred"] == pytest.approx(0.0) and table.loc["甲", "mean_score"] == pytest.approx(3.0)
    # Fewer than 4 groups: nothing to pool toward, the raw means with their own intervals.
    assert table.loc["甲", "pooled"] == pytest.approx(0.0) and table.loc["甲", "shrinkage"] == 0
    assert table.loc["甲", "pooled_low"] < 0 < table.loc["甲", "pooled_high"]
    shown = analysis.group_display(table.reset_index(), "role").set_index("character")
    assert list(shown.columns[-3:]) == ["centred mean (raw)", "centred mean (pooled)", "95% CI (pooled)"]


def test_a_character_of_one_sample_cannot_top_the_pooled_ranking():
    # 12 characters of 20 samples spread around 0, one of a single sample far above them all.
    rng = np.random.default_rng(3)
    rows = [{"id": 100 * c + i, "role": f"c{c}", "metric_en": "Fluency", "score": 3.0 + 0.1 * (c - 6) + rng.normal(0, 0.5)}
            for c in range(12) for i in range(20)]
    rows.append({"id": 9999, "role": "lone", "metric_en": "Fluency", "score": 3.7})
    table = analysis.group_results(pd.DataFrame(rows), "role")
    lone = table.set_index("role").loc["lone"]
    assert table["mean_centred"].idxmax() == table.index[table["role"] == "lone"][0]
    assert table.iloc[-1]["role"] != "lone" and lone["shrinkage"] > 0.5
    assert lone["pooled_low"] < lone["pooled"] < lone["pooled_high"] and lone["mean_centred"] > lone["pooled"]
    big = table.set_index("role").loc["c11"]
    assert big["shrinkage"] < lone["shrinkage"]


def test_metrics_without_rows_show_a_dash_not_n_lt_2():
    stats = metric_statistics(pd.DataFrame([{"id": 1, "metric_en": "Fluency", "score": 3.0}]), n_boot=10)
    shown = analysis.metric_display(stats).set_index("metric")
    assert shown.loc["Fluency", "95% CI"] == "n<4" and shown.loc["Empathy", "95% CI"] == "–"
    assert analysis.dimension_display(stats).set_index("dimension").loc["Conversational Ability", "95% CI"] == "–"
