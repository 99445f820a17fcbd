"""One run's analysis view: caveats read from run.json, settings table, displayed tables."""

from __future__ import annotations

import pytest

from charactereval_lib.charactereval import analysis
from charactereval_lib.engine import runs
from charactereval_lib.charactereval.data import load_official_data
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
    assert analysis.caveats_markdown([]).startswith("No caveats")


def test_offline_subset_unscored_and_protocol_caveats():
    manifest = {"protocol_version": "charactereval-0.9", "generation": {"backend": "offline"},
                "transform": {"counts": {"missing": 4364}}}
    caveats = analysis.run_caveats(manifest, unscored=3)
    assert caveats[0] == analysis.OFFLINE_CAVEAT
    assert caveats[1].startswith("4364 test sample(s) have no reply (a subset run")
    assert caveats[2].startswith("Scoring is incomplete: 3 row(s)")
    assert "protocol charactereval-0.9" in caveats[3]
    assert analysis.caveats_markdown(caveats).count("> ⚠️") == 4


def test_run_info_flattens_sections_and_summarises_long_lists():
    manifest = {"protocol_version": "charactereval-1.0",
                "generation": {"backend": "openai", "parameters": {"max_tokens": 512, "temperature": None}},
                "scoring": {"checkpoint": {"sha256": "abc"}, "ids": list(range(20))}}
    info = analysis.run_info(manifest)["value"]
    assert info["generation.parameters.max_tokens"] == "512"
    assert info["generation.parameters.temperature"] == "None"
    assert info["scoring.checkpoint.sha256"] == "abc" and info["scoring.ids"] == "[20 items]"


def test_load_run_and_displayed_tables(tmp_path):
    data = load_official_data(write_synthetic_data(tmp_path / "data", 80), verify=False)
    a = analysis.load_run(write_synthetic_run(tmp_path / "a", data, seed=1, unscored=2), data=data, n_boot=100)
    b = analysis.load_run(write_synthetic_run(tmp_path / "b", data, seed=2), data=data, n_boot=100)
    assert len(a.rows) == len(a.scores) + 2 and len(a.generations) == len(data.samples)
    assert "Scoring is incomplete: 2 row(s)" in a.header_markdown()
    shown = analysis.metric_display(a.stats, a.failed_by_metric())
    assert list(shown.columns) == ["abbr", "dimension", "n", "failed", "mean", "95% CI", "sd"]
    assert shown.loc["Fluency", "mean"] == f"{a.stats.metrics.loc[0, 'mean']:.3f}"
    both = analysis.side_by_side([a, b])
    assert list(both.columns) == ["a", "b"] and len(both) == 15
    comparisons = analysis.compare_to_first([a, b], n_boot=50)
    assert list(comparisons) == ["b − a"]
    assert len(analysis.paired_display(comparisons["b − a"])) == 15
    assert len(a.scores_with_context()) == len(a.scores)
    with pytest.raises(ValueError, match="at least two runs"):
        analysis.compare_to_first([a])


def test_load_run_names_a_missing_directory(tmp_path):
    with pytest.raises(runs.RunError, match="no such run directory"):
        analysis.load_run(tmp_path / "nope")
