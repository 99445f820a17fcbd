"""Seed 004's facts and disclosures (issue 43; docs/conformance.md, section "Seed 004"): the
paper's provenance and licence beside its tables, the dataset facts recounted from the pinned
test set, the checks the paper's own tables pass or fail, the judge's agreement with people and
its self-preference shown with judge scores, the asymmetric de-repetition rule, the partial
reproduction, the dry run's upper bound, and the documented differences from the seed."""

from __future__ import annotations

import csv
import json
import re
from fractions import Fraction
from pathlib import Path

import pytest

from charactereval_lib import cli
from charactereval_lib.coser import disclosures, facts
from charactereval_lib.coser.benchmark import JUDGEMENTS, SCENES
from charactereval_lib.coser.data import load_test_set
from charactereval_lib.coser.eligibility import SPEC
from charactereval_lib.coser.judge import SCORE_FORMULAS, dimension_score
from charactereval_lib.coser.prompts import default_rules
from charactereval_lib.coser.report import DISPLAY_DIGITS, load_analysis, summary_lines
from charactereval_lib.coser.reproduce import notes
from charactereval_lib.coser.simulation import RoleSettings, SimulationSettings
from charactereval_lib.coser.statistics import compute_summary
from charactereval_lib.coser.upstream import DIMENSIONS
from charactereval_lib.coser.versions import COSER_HEAD, COSER_PAPER, PAPER_ROLE_MODELS
from charactereval_lib.engine.storage.artifacts import write_jsonl_atomic
from charactereval_lib.engine.storage.runs import RunDir
from tests.coser_golden import data_dir

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = ROOT / "data" / "reference"
DOCS = ROOT / "docs"
COLUMNS = ("storyline_consistency", "anthropomorphism", "character_fidelity", "storyline_quality")


def table(name: str) -> list[dict[str, str]]:
    with (REFERENCE / name).open(encoding="utf-8") as f:
        return list(csv.DictReader(f))


def section(path: Path, heading: str) -> str:
    """The text of one level-2 section of a docs page."""
    text = path.read_text(encoding="utf-8")
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start:end if end > 0 else len(text)]


def reference_readme() -> str:
    return (REFERENCE / "README.md").read_text(encoding="utf-8")


# --- provenance and licence (004-02, 004-05) ------------------------------------------------------


def test_the_eprint_and_main_exp_digests_are_recorded_beside_the_tables():
    paper = facts.load_facts()["paper"]
    digests = [v["eprint_sha256"] for v in paper["versions"].values()]
    assert list(paper["versions"]) == ["v1", "v2", "v3"] and len(set(digests)) == 3
    assert all(re.fullmatch(r"[0-9a-f]{64}", d) for d in [*digests, paper["main_exp_tex"]["sha256"]])
    # Seed 004 N01: v3's digest ends in c0f6 (a report that printed c4f6 was wrong).
    assert paper["versions"]["v3"]["eprint_sha256"].endswith("c0f6")
    assert paper["main_exp_tex"]["identical_in"] == ["v1", "v2", "v3"]
    readme = reference_readme()
    assert all(d in readme for d in [*digests, paper["main_exp_tex"]["sha256"]])


def test_the_papers_licence_is_recorded_beside_its_tables():
    licence = facts.load_facts()["paper"]["licence"]
    assert licence["spdx"] == "CC-BY-NC-ND-4.0"
    readme = reference_readme()
    coser_part = readme[readme.index("# CoSER paper tables"):]
    assert "CC BY-NC-ND 4.0" in coser_part and "arXiv 2502.09082" in coser_part
    for name in ("coser_paper_main_table.csv", "coser_paper_table13_id_ood.csv", "coser_paper_table5_alignment.csv",
                 "coser_paper_table6_ablation_avg.csv", "coser_gca_anchor.json"):
        assert name in readme and (REFERENCE / name).is_file()


# --- the dataset (004-24, 004-25, 004-27) ---------------------------------------------------------


def test_the_dataset_facts_are_recorded_and_the_test_set_ones_recounted():
    recorded = facts.load_facts()
    assert (recorded["dataset"]["characters"], recorded["dataset"]["books"]) == (17966, 771)
    assert "last 10%" in recorded["dataset"]["hold_out"]
    scenes = load_test_set(data_dir())
    lines, problems = facts.check(scenes)
    assert problems == []
    counted = facts.recount(scenes)
    assert counted["books"] == 101 and counted["books_by_split"] == {"id": 69, "ood": 32}
    assert counted["scenes_by_split"] == {"id": 100, "ood": 100}
    # Per scene (004-25): 9-32 original lines, median 12, 7 scenes over 20; 1-5 speakers.
    assert (counted["lines_per_scene"], counted["median_lines"], counted["scenes_over_20_lines"]) == ([9, 32], 12, 7)
    assert (counted["speakers"], counted["speakers_with_thought"], counted["speakers_without_profile"]) == (479, 451, 13)
    assert any("101 books (69 id, 32 ood)" in line for line in lines)


def test_the_held_out_book_is_one_of_the_two_test_books_that_fit_it():
    held = facts.load_facts()["held_out_books"]
    assert (held["books"], held["books_in_test_set"], held["scenes_of_that_book"]) == (15, 1, 4)
    scenes = load_test_set(data_dir())
    candidates = facts.held_out_candidates(scenes, held["scenes_of_that_book"], held["plot_range"])
    assert len(candidates) == 2
    assert sorted({s.tag for s in scenes if s.raw["book"] in candidates}) == ["id", "ood"]


def test_coser_data_verify_prints_the_recounted_facts(capsys):
    assert cli.main(["coser", "data", "verify", "--data-dir", str(data_dir())]) == 0
    out = capsys.readouterr().out
    assert "200 scenes (100 id, 100 ood) from 101 books (69 id, 32 ood)" in out
    assert "9-32 original lines per scene, median 12, 7 scenes over 20" in out and "all as recorded" in out


# --- the paper's tables (004-29, 004-30, 004-33, 004-36, 004-37) -----------------------------------


def test_every_average_is_the_mean_of_its_four_dimensions_within_half_a_unit():
    rows = table("coser_paper_main_table.csv") + table("coser_paper_table13_id_ood.csv")
    assert len(rows) == 21 + 42
    for row in rows:
        mean = sum(Fraction(row[c]) for c in COLUMNS) / 4
        assert abs(mean - Fraction(row["average"])) <= Fraction(5, 1000), row["model"]


def test_the_version_footnotes_are_recorded_and_the_fixed_snapshot_is_gpt4os():
    notes_ = {row["model"]: row["version_footnote"] for row in table("coser_paper_main_table.csv")}
    assert (notes_["GPT-4o"], notes_["Claude-3.5-Sonnet"], notes_["Doubao-pro"]) == ("240806", "20240620", "241215")
    assert PAPER_ROLE_MODELS.judge == PAPER_ROLE_MODELS.env == "gpt-4o-2024-08-06"


def test_the_main_table_is_the_mean_of_its_halves_except_for_gpt4o_and_gpt35():
    halves: dict[str, dict[str, dict[str, str]]] = {}
    for row in table("coser_paper_table13_id_ood.csv"):
        halves.setdefault(row["model"], {})[row["split"]] = row
    differ = {}
    for row in table("coser_paper_main_table.csv"):
        split = halves[row["model"]]
        means = {c: (Fraction(split["in-domain"][c]) + Fraction(split["out-of-domain"][c])) / 2
                 for c in (*COLUMNS, "average")}
        gaps = {c: means[c] - Fraction(row[c]) for c in means}
        if any(abs(g) > Fraction(5, 1000) for g in gaps.values()):
            differ[row["model"]] = (means, gaps)
    assert set(differ) == {"GPT-4o", "GPT-3.5"}
    means, gaps = differ["GPT-4o"]
    assert [means[c] for c in (*COLUMNS, "average")] == [Fraction(s) for s in ("61.085", "48.795", "48.50", "79.62",
                                                                                 "59.50")]
    assert max(abs(g) for g in gaps.values()) == Fraction("0.71")
    assert abs(differ["GPT-3.5"][1]["average"]) == Fraction("0.10")
    assert "GPT-4o and GPT-3.5" in reference_readme()


def test_the_tables_marking_errors_are_noted_and_hold_on_its_numbers():
    marks = facts.load_facts()["table_marks"]
    in_domain = [r for r in table("coser_paper_table13_id_ood.csv") if r["split"] == "in-domain"]
    open_source = [r for r in in_domain if r["section"].startswith("Open")]
    keys = {"Storyline Consistency": "storyline_consistency", "Storyline Quality": "storyline_quality"}
    for wrong in marks["in_domain_underline_wrong"]:
        column = keys[wrong["column"]]
        best = max(open_source, key=lambda r: Fraction(r[column]))
        marked = next(r for r in open_source if r["model"] == wrong["marked"])
        assert (best["model"], Fraction(best[column])) == (wrong["best_open_source"],
                                                            Fraction(str(wrong["best_open_source_value"])))
        assert Fraction(marked[column]) == Fraction(str(wrong["marked_value"])) < Fraction(best[column])
    main = {r["model"]: r for r in table("coser_paper_main_table.csv")}
    omitted = marks["list_above_57_omits"]
    assert Fraction(main[omitted["model"]]["average"]) == Fraction(str(omitted["average"])) > 57
    assert marks["in_table_not_in_model_list"] in main
    assert len(marks["out_of_domain_bold_wrong_columns"]) == 3
    readme = reference_readme()
    for text in ("bold", "underline", "GPT-4o Mini", "Mistral-7B"):
        assert text in readme


def test_the_ablation_numbers_ship_with_their_source():
    recorded = facts.load_facts()["ablation"]
    rows = {r["model"]: r for r in table(recorded["table"]) if not r["training_variant"]}
    main = {r["model"]: r for r in table("coser_paper_main_table.csv")}
    example = recorded["counterexample"]
    assert (rows["CoSER-8B"]["standard"], rows["CoSER-8B"]["test_wo_motivations"]) == ("56.45", "56.81")
    assert Fraction(rows[example["model"]]["test_wo_motivations"]) > Fraction(rows[example["model"]]["standard"])
    assert (rows["GPT-4o"]["standard"], rows["GPT-4o"]["test_wo_motivations"]) == ("59.95", "56.34")
    # The ablation's standard column is the main table's Average.
    assert all(rows[m]["standard"] == main[m]["average"] for m in rows)
    assert recorded["latex"] == "Tables/main_exp_cot.tex" and "main_exp_cot.tex" in reference_readme()


# --- what the paper omits, the versions, units, lambda (004-22, 004-49, 004-61, 004-81) -------------


def test_what_the_paper_omits_is_each_a_recorded_setting_and_documented():
    identity = SimulationSettings(RoleSettings("m")).identity()
    assert identity["temperature"] == "0 on a turn's first attempt, 1 on its retries"
    assert (identity["max_tokens"], identity["judge_max_tokens"], identity["max_rounds"]) == (512, 8192, 20)
    assert identity["random_stream"].startswith("per-scene") and identity["protocol"]["max_attempts"] == 11
    text = section(DOCS / "platform-rules.md", "What the paper omits")
    for item in ("temperature", "512", "seed", "retries", "60 words", "±"):
        assert item in text, item
    anchor = json.loads((REFERENCE / "coser_gca_anchor.json").read_text(encoding="utf-8"))
    assert "does not define" in anchor["plus_minus"]


def test_the_judges_token_cap_and_attempts_are_each_versions_own():
    assert (COSER_PAPER.judge_max_tokens, COSER_HEAD.judge_max_tokens) == (8192, 8196)
    assert (COSER_PAPER.max_attempts, COSER_HEAD.max_attempts) == (11, 6)
    versions = (DOCS / "coser-versions.md").read_text(encoding="utf-8")
    assert "| `judge_max_tokens` | 8192 | 8196 | `297ffff` |" in versions
    assert "| `max_attempts` | 11 | 6 | `297ffff` |" in versions


def test_scores_are_per_100_and_rounded_only_for_display(tmp_path):
    run = RunDir(tmp_path / "r")
    run.path.mkdir()
    run.update_manifest(protocol_version="coser-paper", benchmark="coser", coser={
        "preset": "sample", "repeats": 1, "scenes": ["s1", "s2"],
        "models": {"actor": "m", "env": "e", "nsp": "n", "judge": "j", "repair": "r"},
        "identity": {"protocol": {"score_upper_clip": False}, "continue_from": 0, "thoughtless": False}})
    scores = {"s1": [61.234567, 50.0, 48.5, 80.0], "s2": [60.0, 47.1, 49.0, 81.333333]}
    judgements = [{"repeat": 0, "scene": s, "tag": "id", "book": "B", "kind": "dimension", "dimension": d,
                   "status": "ok", "scores": {"score": v, "score_clipped": min(v, 100)}}
                  for s, values in scores.items() for d, v in zip(DIMENSIONS, values)]
    judgements += [{"repeat": 0, "scene": s, "kind": "metrics", "bleu": b, "rouge_l": 0.1211}
                   for s, b in (("s1", 0.0590), ("s2", 0.0591))]
    write_jsonl_atomic(run.artifact(JUDGEMENTS), judgements)
    write_jsonl_atomic(run.artifact(SCENES), [{"repeat": 0, "scene": s, "status": "done", "ended_by": "end_chat",
                                               "rounds": 8} for s in scores])
    summary = compute_summary(run, n_boot=20, seed=0)
    sc = summary["overall"]["Storyline Consistency"]["mean"]
    assert sc == round((61.234567 + 60.0) / 2, 4) == 60.6173  # no rounding before the mean; 4 decimals kept
    assert summary["surface_per_100"]["BLEU"]["mean"] == pytest.approx(5.905)  # BLEU per 100
    analysis = load_analysis(run, n_boot=20, seed=0)
    shown = analysis.scores_table().set_index("score")["mean"]
    assert DISPLAY_DIGITS == 2 and shown["Storyline Consistency"] == "60.62"  # the paper's two decimals


def test_the_length_correction_is_lambda_1_5_and_its_derivation_is_documented():
    assert SCORE_FORMULAS["length_penalty"] == "max(0, 100 - (S - 0.3 * n) * 5)"
    # Each actor round adds 0.3 * 5 = 1.5 points to a dimension: lambda = 1.5.
    assert dimension_score(4, 11) - dimension_score(4, 10) == pytest.approx(1.5)
    text = section(DOCS / "platform-rules.md", "Length correction")
    for item in ("1.5", "1.6", "1,200", "per round"):
        assert item in text, item


# --- disclosures (004-80, 004-82, 004-94, 004-95) --------------------------------------------------


def test_the_judges_agreement_with_people_is_read_from_the_papers_table():
    assert facts.judge_agreement() == {"judge": 68.6, "BLEU": 75.3, "ROUGE-L": 72.0}
    line = disclosures.agreement_line()
    assert "68.6%" in line and "75.3%" in line and "72.0%" in line


def test_judge_scores_are_shown_with_the_agreement_on_the_board_the_reproduction_and_summarize(tmp_path):
    line = disclosures.agreement_line()
    assert line in SPEC.headline and disclosures.BOARD_SELF_PREFERENCE in SPEC.headline
    assert line in notes({"files": [], "metrics": True})
    summary = {"protocol_version": "coser-paper", "models": {"actor": "gpt-4o-2024-08-06",
                                                             "judge": "gpt-4o-2024-08-06"},
               "score_variant": "unclipped", "bootstrap": {"resamples": 0}, "counts": {
                   "scenes": 0, "sessions": 0, "sessions_expected": 0}, "overall": {}, "by_split": {"id": {}, "ood": {}},
               "by_book": {}, "by_repeat": {}, "scenes_simulated": 0, "rounds": {"histogram": {}},
               "ended_by": {"end_chat": 0, "max_rounds": 0, "failed": 0, "not_run": 0}, "judge_failures": 0,
               "judge_failed_dimensions": {}, "sessions_unjudged": 0, "refused_turns": {"total": 0},
               "surface_per_100": {}}
    lines = summary_lines(summary, tmp_path / "s.json")
    assert line in lines and any(x.startswith("Self-preference: the actor 'gpt-4o-2024-08-06' is the judge's own")
                                 for x in lines)


@pytest.mark.parametrize(("actor", "judge", "expected"), [
    ("gpt-4o-2024-08-06", "gpt-4o-2024-08-06", "is the judge's own model"),
    ("openai/gpt-4o-2024-08-06", "gpt-4o-2024-08-06", "is the judge's own model"),
    ("gpt-4o-mini-2024-07-18", "gpt-4o-2024-08-06", "family (OpenAI)"),
    ("anthropic/claude-3.5-sonnet", "claude-3-5-sonnet-20240620", "family (Anthropic Claude)"),
    ("meta-llama/llama-3.1-70b-instruct", "gpt-4o-2024-08-06", None),
    ("mock-actor", "gpt-4o", None),
    ("my-own-model", "my-own-judge", None),
])
def test_self_preference_is_warned_for_the_judges_model_and_family(actor, judge, expected):
    warning = disclosures.self_preference(actor, judge)
    assert (warning is None) if expected is None else (expected in warning and "self-preference" in warning)
    manifest = {"coser": {"models": {"actor": actor, "judge": judge}}}
    assert (warning in disclosures.run_disclosures(manifest)) if warning else disclosures.run_disclosures(manifest) == []


def test_the_asymmetric_de_repetition_rule_is_a_caveat_saying_the_actors_side():
    def identity(actor: str) -> dict:
        rules = default_rules(actor, COSER_PAPER)
        return {"coser": {"models": {"actor": actor, "judge": "gpt-4o-2024-08-06"},
                          "identity": {"roles": {"actor": {"rules": {"fix_repetition": rules.fix_repetition}}}}}}

    mistral = [x for x in disclosures.run_disclosures(identity("mistral-7b")) if x.startswith("Asymmetric")]
    claude = [x for x in disclosures.run_disclosures(identity("claude-3-haiku")) if x.startswith("Asymmetric")]
    assert len(mistral) == len(claude) == 1
    assert "were passed through it" in mistral[0] and "were not" in claude[0]
    assert "except GPT and Claude" in mistral[0]


def test_the_reproduction_says_it_is_partial():
    said = notes({"files": [], "metrics": True})
    assert disclosures.PARTIAL in said
    for missing in ("win rates", "retrieval", "human evaluation"):
        assert missing in disclosures.PARTIAL
    assert "partial" in section(DOCS / "platform-rules.md", "Partial reproduction").lower()


# --- the dry run (004-89) ------------------------------------------------------------------------


def test_the_dry_run_cost_is_an_estimate_and_an_upper_bound_that_counts_retries(capsys):
    prices = [x for role in ("actor", "env", "nsp", "judge") for x in ("--price", f"{role}=100:200")]
    base = ["coser", "run", "r", "--actor-model", "a", "--dry-run", "--data-dir", str(data_dir()), *prices]
    # The paper's repair model is not the judge's: the bound needs its price.
    assert cli.main(base) == 0
    out = capsys.readouterr().out
    assert "estimated cost: ~$" in out and "for repair (claude-3-5-sonnet-20240620) for the upper bound" in out
    assert cli.main([*base, "--price", "repair=100:200"]) == 0
    out = capsys.readouterr().out
    money = lambda label: float(re.search(label + r"[^$]*\$([0-9,.]+)", out).group(1).replace(",", ""))  # noqa: E731
    estimate, bound, ceiling = money("estimated cost"), money("upper bound"), money("counting every retry")
    assert estimate < bound < ceiling
    # Every call of the bound asked the version's 11 times.
    assert ceiling == pytest.approx(COSER_PAPER.max_attempts * bound, rel=1e-4)
    assert "after empty or declined replies" in out


# --- documented decisions (004-21, 004-91, 004-92) -------------------------------------------------


def test_rouge_l_is_reported_as_documented():
    text = section(DOCS / "platform-rules.md", "ROUGE-L")
    for item in ("1.0.1", "never", "average", "anchor"):
        assert item in text, item


def test_every_difference_from_d7cee90_is_listed():
    text = section(DOCS / "platform-rules.md", "Differences from d7cee90")
    for item in ("motivation", "name-suffix", "<think>", "random", "failure", "refus", "retries", "label"):
        assert item in text, item
    identity = SimulationSettings(RoleSettings("m")).identity()
    assert {"thinking", "random_stream", "refusal_rule"} <= set(identity)


def test_coser_70b_as_llama3_1210_8epc_is_stated_as_an_inference_with_its_evidence():
    versions = (DOCS / "coser-versions.md").read_text(encoding="utf-8")
    start = versions.index("`llama3-1210-8epc` is CoSER-70B")
    said = versions[start:versions.index("\n\n", start)]
    for item in ("inference", "NSP", "8 epochs", "70B"):
        assert item in said, item
    assert "llama3-1210-8epc" in reference_readme() and "inference" in reference_readme()
