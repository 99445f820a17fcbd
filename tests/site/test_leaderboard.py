"""The leaderboard: eligibility rules, the anchor gate, ranks with ties, the JSON/CSV contract and
the command line, on synthetic runs of both benchmarks at the protocol's full size (invented
text only; see ``testing.leaderboard_runs``), an imported CoSER result and a real CoSER smoke run
against the local mock server."""

from __future__ import annotations

import csv
import json
from collections import Counter

import pytest

from charactereval_lib import cli
from charactereval_lib.apps.leaderboard import boards, build, read_runs, write
from charactereval_lib.charactereval.data import load_official_data
from charactereval_lib.charactereval.eligibility import RELEASED
from charactereval_lib.coser import official
from charactereval_lib.engine.leaderboard.board import TIE_TEST, model_label, paired_differences
from charactereval_lib.engine.leaderboard.site import read_run_data
from charactereval_lib.testing.coser_script import scripted_reply
from charactereval_lib.testing.leaderboard_runs import CHECKPOINT, charactereval_run, coser_run, full_size_data, released_run
from charactereval_lib.testing.mockserver import MockServer
from tests.coser.test_coser_official import synthetic_file
from tests.coser_golden import data_dir as coser_data_dir

PAPER = {"Storyline Consistency": 61.59, "Anthropomorphism": 48.93, "Character Fidelity": 48.95,
         "Storyline Quality": 80.33}


# The tests on these runs are marked slow: the fixture builds eleven full-size CharacterEval runs
# (8,032 rows each) and ten CoSER runs, about 18 s before the first of them (and the marks send
# the file to a worker early, not last: tests/conftest.py orders the files by their slow tests).
@pytest.fixture(scope="module")
def runs_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("lb")
    data = load_official_data(full_size_data(root / "data"), verify=False)
    ce = root / "runs" / "ce"
    charactereval_run(ce / "strong", data, model="strong-model", shift=0.4, seed=1)
    charactereval_run(ce / "strong-twin", data, model="strong-twin", shift=0.4, seed=2)
    charactereval_run(ce / "weak", data, model="weak-model", shift=-0.2, seed=3)
    charactereval_run(ce / "unscored", data, model="half-done", seed=4, unscored=100)
    charactereval_run(ce / "test-checkpoint", data, model="tiny-scored", seed=5, checkpoint=None)
    charactereval_run(ce / "old", data, model="old-protocol", seed=6, protocol_version="charactereval-0.9")
    # The anchor needs all five released generations (seed 000 D1/D5).
    for seed, (file_key, paper_row) in enumerate(RELEASED.items(), start=7):
        released_run(root / "anchor" / file_key, data, root / "released" / file_key, paper_row=paper_row,
                     file_key=file_key, seed=seed)
    co = root / "runs" / "coser"
    coser_run(co / "gpt4o", actor="gpt-4o-2024-08-06", targets=PAPER, seed=1)
    coser_run(co / "actor-b", actor="actor-b", level=70, seed=2, failed_sessions=3)
    coser_run(co / "actor-c", actor="actor-c", level=55, seed=3)
    coser_run(co / "sample", actor="actor-d", scenes=20, repeats=1, seed=4)
    coser_run(co / "alias-judge", actor="actor-e", models={"judge": "gpt-4o"}, seed=5)
    coser_run(co / "routed", actor="actor-f", endpoints={"actor": "https://openrouter.ai/api/v1"}, seed=6)
    coser_run(co / "long", actor="actor-g", identity={"max_tokens": 2048}, seed=7)
    coser_run(co / "head-gpt4o", actor="gpt-4o-2024-08-06", protocol="coser-head", level=40, seed=8)
    official.import_evaluation(co / "imported", synthetic_file(root / "official.json"), data_dir=coser_data_dir(),
                               metrics=False, progress=False)
    official.import_evaluation(co / "ablation", synthetic_file(root / "id_set_m-no_length_penalty.json"),
                               data_dir=coser_data_dir(), metrics=False, progress=False)
    return root, data


SCORERS = {"charactereval": "BaichuanCharRM sha256:" + CHECKPOINT[:12], "coser": "judge gpt-4o-2024-08-06"}


VERSIONS = {"charactereval": "charactereval-1.0", "coser": "coser-paper"}


def board(content, benchmark, scorer=None, version=None):
    matches = [b for b in content["boards"] if b["benchmark"] == benchmark and b["scorer"] == (scorer or SCORERS[benchmark])
               and b["protocol_version"] == (version or VERSIONS[benchmark])]
    assert len(matches) == 1, [(b["benchmark"], b["protocol_version"], b["scorer"]) for b in content["boards"]]
    return matches[0]


def row(entry, run):
    return next(r for r in entry["rows"] if r["run"] == run)


@pytest.fixture(scope="module")
def views(runs_dir):
    """Every run read once; the fixtures below put them on boards with and without the anchor."""
    root, data = runs_dir
    read, warnings = read_runs([root / "runs", root / "anchor"], {"charactereval": data})
    assert warnings == []
    return read


@pytest.fixture(scope="module")
def gated(views):
    """The CharacterEval runs without their anchor run: that board must rank nothing."""
    return boards([v for v in views if v.benchmark == "charactereval" and v.path.parent.name != "anchor"]), []


@pytest.fixture(scope="module")
def anchored(runs_dir, views, tmp_path_factory):
    out = tmp_path_factory.mktemp("site") / "out"
    return write(views, [], out, context={"charactereval": runs_dir[1]}), out


@pytest.mark.slow
def test_paired_differences_follow_the_first_runs_order_over_the_shared_clusters():
    """One fixed order, whatever the keys: a mean over a set of scene names would change its
    last bits from one process to the next (string hashing is salted per process)."""
    a = {"scene-b": 4.0, "scene-a": 2.0, "scene-c": 3.5, "scene-d": 1.0}
    b = {"scene-d": 1.5, "scene-c": 3.0, "scene-a": 1.0}
    assert paired_differences(a, b).tolist() == [1.0, 0.5, -0.5]
    assert len(paired_differences(a, {})) == 0


def test_no_board_ranks_anything_while_its_anchor_is_pending(gated):
    content, _ = gated
    entry = board(content, "charactereval")
    assert entry["anchor"]["status"] == "pending" and entry["anchor"]["run"] is None
    assert "released generation" in entry["anchor"]["reasons"][0]
    eligible = [r for r in entry["rows"] if r["eligible"]]
    assert {r["run"] for r in eligible} == {"strong", "strong-twin", "weak"}
    assert all(r["rank"] is None for r in entry["rows"])


@pytest.mark.slow
def test_a_charactereval_anchor_with_some_released_generations_is_pending_and_names_the_missing(views):
    present = ("chatglm3_6b", "baichuan_7b", "xverse_7b")
    content = boards([v for v in views if v.benchmark == "charactereval"
                      and (v.path.parent.name != "anchor" or v.path.name in present)])
    entry = board(content, "charactereval")
    assert entry["anchor"]["status"] == "pending"
    assert sorted(entry["anchor"]["run"].split(", ")) == sorted(present)
    assert entry["anchor"]["reasons"][-1].startswith("still missing 2 of the 5 anchor runs: Qwen-7B, InternLM-7B (")
    assert len(entry["anchor"]["deltas"]) == 3 * 15 and all(r["rank"] is None for r in entry["rows"])


@pytest.mark.slow
def test_ineligible_runs_say_every_reason(gated):
    entry = board(gated[0], "charactereval")
    assert row(entry, "unscored")["reasons"] == ["all-rows-scored: 100 of 8032 rows have no reward-model score"]
    # A run without a checkpoint digest cannot share a board with any digest.
    other = board(gated[0], "charactereval", "reward model, checkpoint not recorded")
    assert [r["reasons"] for r in other["rows"]] == [["official-rm: no scored row records its checkpoint digest"]]


@pytest.mark.slow
def test_older_protocol_versions_are_archived_unranked(gated):
    archived = gated[0]["archived"]
    assert [(b["protocol_version"], [r["run"] for r in b["rows"]]) for b in archived] == [
        ("charactereval-0.9", ["old"])]
    assert archived[0]["anchor"] is None and archived[0]["rows"][0]["rank"] is None
    assert archived[0]["rows"][0]["reasons"][0].startswith("protocol: made under protocol charactereval-0.9")


@pytest.mark.slow
def test_reproduced_anchor_ranks_with_ties_from_the_paired_test(anchored):
    content, _ = anchored
    entry = board(content, "charactereval")
    assert entry["anchor"]["status"] == "reproduced"
    assert entry["anchor"]["run"].split(", ") == list(RELEASED)  # all five released generations
    assert len(entry["anchor"]["deltas"]) == 5 * 15
    assert [r.split(":")[0] for r in entry["anchor"]["reasons"]] == list(RELEASED.values())
    assert all("all 12 metric means within 0.0005" in r for r in entry["anchor"]["reasons"])
    ranked = [r for r in entry["rows"] if r["rank"] is not None]
    # The anchor's own runs are eligible runs of the board and ranked like the others.
    assert {r["run"] for r in ranked} == {"strong", "strong-twin", "weak", *RELEASED}
    assert {r["run"] for r in ranked[:2]} == {"strong", "strong-twin"}
    # Same quality, different noise: the signed-rank test cannot separate them, so they tie.
    assert [r["rank"] for r in ranked[:2]] == [1, 1] and ranked[1]["tie_test"]["tied_with_above"]
    assert ranked[2]["rank"] == 3 and ranked[2]["tie_test"]["p"] < 0.05
    for r in ranked:
        assert r["ci"][0] < r["score"] < r["ci"][1]
    assert entry["tie_test"] == TIE_TEST


@pytest.mark.slow
def test_coser_rules_anchor_and_failed_sessions(anchored):
    entry = board(anchored[0], "coser")
    assert entry["scorer"] == "judge gpt-4o-2024-08-06"
    assert entry["anchor"]["status"] == "reproduced", entry["anchor"]
    ranked = [r["run"] for r in entry["rows"] if r["rank"] is not None]
    assert ranked == ["actor-b", "gpt4o", "actor-c"]
    assert row(entry, "actor-b")["failures"] == 3 and row(entry, "actor-b")["n"] == 597
    assert row(entry, "sample")["reasons"] == ["full-protocol: 20 of the 200 test scenes (preset sample)",
                                               "full-protocol: 1 repeat(s), the protocol runs 3"]
    assert row(entry, "routed")["reasons"][0].startswith("one-host: the actor role goes through the router openrouter.ai")
    assert row(entry, "long")["reasons"] == ["fixed-parameters: max_tokens is 2048, the protocol fixes 512"]
    alias = board(anchored[0], "coser", "judge gpt-4o")
    assert alias["anchor"]["status"] == "pending"
    assert any(r.startswith("fixed-models: the judge model is 'gpt-4o'") for r in alias["rows"][0]["reasons"])


@pytest.mark.slow
def test_a_failed_anchor_says_which_values_fall_outside_and_ranks_nothing(anchored):
    entry = board(anchored[0], "coser", version="coser-head")
    assert entry["anchor"]["status"] == "failed" and entry["anchor"]["run"] == "head-gpt4o"
    assert len(entry["anchor"]["reasons"]) == 5
    assert entry["anchor"]["reasons"][0].startswith("Storyline Consistency: |delta| ")
    assert "> margin 2.5; interval check (information): paper 61.59 outside our interval [" in entry["anchor"]["reasons"][0]
    assert all(delta < -5 for delta in entry["anchor"]["deltas"].values())  # the run scores about 40
    assert [r["rank"] for r in entry["rows"]] == [None]


@pytest.mark.parametrize("shift, status", [(2.0, "reproduced"), (3.0, "failed")])
def test_the_coser_anchor_is_decided_by_seed_004s_margins_not_by_the_interval(tmp_path, shift, status):
    # Character Fidelity about `shift` above the paper: 2.0 is inside the 2.5 margin although the
    # paper's value is far outside a 600-session interval; 3.0 is outside the margin.
    coser_run(tmp_path / "runs" / "gpt4o", actor="gpt-4o-2024-08-06", seed=11,
              targets={**PAPER, "Character Fidelity": PAPER["Character Fidelity"] + shift})
    views, warnings = read_runs([tmp_path / "runs"], {})
    assert warnings == []
    entry = board(boards(views), "coser")
    assert entry["anchor"]["status"] == status, entry["anchor"]
    fidelity = next(r for r in entry["anchor"]["reasons"] if r.startswith("Character Fidelity"))
    assert "interval check (information): paper 48.95 outside our interval" in fidelity
    assert abs(entry["anchor"]["deltas"]["average"]) <= 1.0


@pytest.mark.slow
def test_an_imported_coser_result_is_listed_with_its_reasons_and_explorable(anchored):
    content, out = anchored
    [imported] = [r for b in content["boards"] if b["benchmark"] == "coser" for r in b["rows"] if r["run"] == "imported"]
    assert not imported["eligible"] and imported["rank"] is None
    assert "full-protocol: 1 of the 200 test scenes (preset imported)" in imported["reasons"]
    samples = (out / "runs" / imported["page"] / "samples.js").read_text(encoding="utf-8")
    assert samples.startswith("window.LB_SAMPLES = ") and '"Book' not in samples
    [computation] = {_computations(d)["Anthropomorphism: score"] for d in _details(out, imported)}
    assert "S = 2 " in computation
    assert "max(0, 100 - (S - 0.3 * n) * 5) = max(0, 100 - (2 - 0.3 * 1) * 5) = " in computation


def _details(out, entry):
    return read_run_data(out, entry["page"])[1]


def _computations(detail):
    """A detail's score computations (typed sections), by title."""
    return {s["title"]: s["text"] for s in detail if s["kind"] == "computation"}


@pytest.mark.slow
def test_an_ablation_import_shows_the_formula_it_was_scored_with_and_is_not_ranked_for_it(anchored):
    """An import of a ``-no_length_penalty`` file: its explorer works out that formula (S = 2, no
    n term: 90), and the board says it is not the protocol's score; the key names the formula."""
    content, out = anchored
    entry = board(content, "coser", "judge gpt-4o")
    ablation = row(entry, "ablation")
    assert ("score-formula: scored with the no_length_penalty formula max(0, 100 - S * 5), not the protocol's "
            "max(0, 100 - (S - 0.3 * n) * 5)") in ablation["reasons"]
    assert not any(r.startswith("score-formula") for r in row(entry, "imported")["reasons"])
    [detail] = _details(out, ablation)
    computations = _computations(detail).values()
    assert len(computations) == 4
    assert {c.split("; ")[1] for c in computations} == {"max(0, 100 - S * 5) = max(0, 100 - 2 * 5) = 90"}
    index = (out / "index.html").read_text(encoding="utf-8")
    assert "each dimension scored max(0, 100 - (S - 0.3 * n) * 5) (S: the judge&#x27;s severity sum" in index
    assert "<code>score-formula</code>" in index


@pytest.mark.slow
def test_ineligible_rows_show_score_interval_and_n_best_first_under_a_not_ranked_label(anchored):
    content, out = anchored
    entry = board(content, "coser")
    others = [r for r in entry["rows"] if not r["eligible"]]
    scores = [r["score"] for r in others]
    assert len(others) >= 3 and scores == sorted(scores, reverse=True)
    index = (out / "index.html").read_text(encoding="utf-8")
    section = index.split('data-board="coser|coser-paper|judge gpt-4o-2024-08-06"')[1].split("</section>")[0]
    assert "<h3>Not ranked: not eligible</h3>" in section and "<th>95% CI</th><th>n</th>" in section.split("ineligible")[1]
    long = row(entry, "long")
    assert f'<td>{long["score"]:.3f}</td><td>[{long["ci"][0]:.3f}, {long["ci"][1]:.3f}]</td><td>{long["n"]}</td>' in section


@pytest.mark.slow
def test_each_run_of_a_board_has_a_paired_comparison_with_its_neighbour_linked_from_it(runs_dir, anchored):
    """Neighbours by score only (N - 1 tests, linear in the runs), eligible or not."""
    content, out = anchored
    entry = board(content, "coser")
    pages = {r["page"]: r["run"] for r in entry["rows"]}
    scores = {r["page"]: r["score"] for r in entry["rows"]}
    by_score = sorted(pages, key=lambda p: -scores[p])
    assert [(c["a"], c["b"]) for c in entry["comparisons"]] == list(zip(by_score, by_score[1:]))
    pair = next(c for c in entry["comparisons"] if pages[c["a"]] == "actor-b")
    assert pair["difference"] > 0 and pair["shared"] > 0
    runs = runs_dir[0] / "runs" / "coser"
    other = pages[pair["b"]]
    assert pair["command"] == (f"charactereval coser compare {runs / 'actor-b'} {runs / other} "
                               f"--out comparison-actor-b-vs-{other}")
    index = (out / "index.html").read_text(encoding="utf-8")
    link = index.split('data-board="coser|coser-paper|judge gpt-4o-2024-08-06"')[1].split('class="compare" href="')[1]
    page = (out / link.split('"')[0]).read_text(encoding="utf-8")
    assert page.count("<tr><td>") == len(pages) - 1 and "charactereval coser compare" in page
    assert 'href="../runs/' in page and 'href="../index.html"' in page


def test_a_charactereval_judge_board_compares_by_its_judge():
    from pathlib import Path

    from charactereval_lib.charactereval.eligibility import compare
    from charactereval_lib.engine.leaderboard.board import RunView

    views = [RunView(Path("/r") / name, "charactereval", "charactereval-1.0", "judge j", name, {}, facts={"judge": "j"})
             for name in ("a", "b")]
    assert compare(views) == ["charactereval", "compare", "/r/a", "/r/b", "--scorer", "judge", "--judge-model", "j",
                              "--out", "comparison-a-vs-b"]


@pytest.mark.slow
def test_a_test_checkpoint_board_says_so_in_its_title(runs_dir, tmp_path):
    import shutil

    from charactereval_lib.engine.storage import runs

    root, data = runs_dir
    run = tmp_path / "tiny-scored"
    shutil.copytree(root / "runs" / "ce" / "weak", run)
    scoring = runs.load_manifest(run)["scoring"]
    runs.update_manifest(run, scoring={**scoring, "checkpoint": {**scoring["checkpoint"], "label": "tiny-random"}})
    views, _ = read_runs([run], {"charactereval": data})
    [entry] = boards(views)["boards"]
    assert entry["scorer"] == f"test checkpoint tiny-random sha256:{CHECKPOINT[:12]} (not BaichuanCharRM)"
    assert entry["rows"][0]["reasons"] == ["official-rm: scored by a test checkpoint (tiny-random), not BaichuanCharRM"]


@pytest.mark.slow
def test_two_copies_of_one_run_are_flagged_as_duplicates(runs_dir, tmp_path):
    import shutil

    root, data = runs_dir
    for name in ("a-original", "b-copy"):
        shutil.copytree(root / "runs" / "coser" / "actor-c", tmp_path / name)
    views, _ = read_runs([tmp_path], {})
    [entry] = boards(views)["boards"]
    copy, original = row(entry, "b-copy"), row(entry, "a-original")
    assert copy["reasons"] == [f"duplicate: a copy of {tmp_path / 'a-original'} (the same run.json and scores), "
                               "which stands for both on this board"]
    assert not original["reasons"] and original["eligible"]


@pytest.mark.slow
def test_a_site_built_inside_an_input_folder_is_passed_over_by_the_next_build(runs_dir, tmp_path):
    import shutil

    root, _ = runs_dir
    shutil.copytree(root / "runs" / "coser" / "sample", tmp_path / "runs" / "sample")
    # --out may not lie inside an input (engine.outdir), but a site built beside a run lands
    # inside the folder a later build is given: that build passes over it without a warning.
    first, warnings = build([tmp_path / "runs" / "sample"], tmp_path / "runs" / "site", context={})
    assert warnings == [] and first["runs"] == 1
    again, warnings = build([tmp_path / "runs"], tmp_path / "elsewhere", context={})
    assert warnings == [] and again["runs"] == 1
    with pytest.raises(Exception, match="holds only a leaderboard site's copies of run.json, no run"):
        build([tmp_path / "runs" / "site"], tmp_path / "other", context={})


@pytest.mark.slow
def test_every_coser_board_shows_the_papers_published_rows_beside_its_runs_never_ranked(anchored):
    content, out = anchored
    for version in ("coser-paper", "coser-head"):
        published = board(content, "coser", version=version)["published"]
        assert len(published) == 21 and all("rank" not in r for r in published)
        assert {r["model"] for r in published if r["authors_fine_tune"]} == {"CoSER-8B", "CoSER-70B"}
        gpt4o = next(r for r in published if r["model"] == "GPT-4o")
        assert (gpt4o["score"], gpt4o["pm"], gpt4o["dimensions"]["Character Fidelity"]) == (59.95, 0.5, 48.95)
        assert "not reproduced here, never ranked" in gpt4o["note"]
        assert ("not this board's coser-head" in gpt4o["note"]) == (version == "coser-head")
    entry = board(content, "coser")
    assert not {r["model"] for r in entry["rows"]} & {r["model"] for r in entry["published"]}  # never mixed
    assert board(content, "charactereval")["published"] == []
    index = (out / "index.html").read_text(encoding="utf-8")
    coser_boards = sum(b["benchmark"] == "coser" for b in content["boards"])
    assert coser_boards == 3 and all(len(b["published"]) == 21 for b in content["boards"] if b["benchmark"] == "coser")
    assert index.count("Published in the paper (not reproduced here, never ranked)") == coser_boards
    assert index.count('<tr class="published"><td>CoSER-70B <span class="fine-tune"') == coser_boards


@pytest.mark.slow
def test_json_csv_and_site_files_say_the_same(anchored):
    content, out = anchored
    on_disk = json.loads((out / "leaderboard.json").read_text(encoding="utf-8"))
    assert on_disk["boards"] == json.loads(json.dumps(content["boards"]))
    for entry in on_disk["boards"]:
        assert set(entry) >= {"benchmark", "protocol_version", "scorer", "anchor", "rows"}
        assert set(entry["anchor"]) >= {"status", "run", "reasons"}
        for r in entry["rows"]:
            assert set(r) >= {"run", "model", "eligible", "reasons", "rank", "score", "ci"}
    lines = list(csv.DictReader((out / "leaderboard.csv").open(encoding="utf-8")))
    assert len(lines) == sum(len(b["rows"]) for b in content["boards"] + content["archived"])
    for r in on_disk["boards"][0]["rows"]:
        folder = out / "runs" / r["page"]
        assert (folder / "index.html").is_file() and (folder / "samples.js").is_file()
        assert (folder / "detail-0.js").is_file()
        assert json.loads((folder / "run.json").read_text(encoding="utf-8"))["protocol_version"] == \
            on_disk["boards"][0]["protocol_version"]
    assert "window.LBTables = {" in (out / "assets" / "dt_bundle.js").read_text(encoding="utf-8")


@pytest.mark.slow
def test_a_run_that_cannot_be_read_is_left_out_and_said_and_a_failed_build_leaves_the_old_site(runs_dir, tmp_path,
                                                                                                  monkeypatch):
    root, data = runs_dir
    broken = tmp_path / "runs" / "broken"
    broken.mkdir(parents=True)
    (broken / "run.json").write_text('{"protocol_version": "charactereval-1.0"}', encoding="utf-8")
    (tmp_path / "runs" / "torn").mkdir()
    (tmp_path / "runs" / "torn" / "run.json").write_text('{"protocol_version": "charac', encoding="utf-8")
    out = tmp_path / "site"
    content, warnings = build([tmp_path / "runs", root / "runs" / "coser" / "sample"], out,
                              context={"charactereval": data})
    assert len(warnings) == 2 and warnings[0].startswith(f"{tmp_path / 'runs' / 'torn' / 'run.json'}: malformed JSON")
    assert warnings[1].startswith(f"{broken}: cannot be read (") and warnings[1].endswith("left out")
    assert "cannot be read" in (out / "index.html").read_text(encoding="utf-8")
    before = sorted(p.relative_to(out) for p in out.rglob("*"))

    def explode(view, context):
        raise RuntimeError("disk full")

    from dataclasses import replace

    from charactereval_lib.engine.registry import benchmarks

    monkeypatch.setitem(benchmarks.registry(), "coser", replace(benchmarks.get("coser"), explorer=explode))
    with pytest.raises(RuntimeError, match="disk full"):  # no cache: the explorer runs again
        build([root / "runs" / "coser" / "sample"], out, context={"charactereval": data}, cache=False)
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before
    # Nothing half-written beside it: only the per-run cache (engine.leaderboard.sitecache).
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == [".site.cache"]


@pytest.mark.slow
def test_cli_builds_the_site_and_bad_paths_are_one_line_errors(runs_dir, tmp_path, capsys):
    root, _ = runs_dir
    assert cli.main(["leaderboard", str(root / "runs" / "coser" / "sample"), "--out", str(tmp_path / "site")]) == 0
    assert "1 board(s)" in capsys.readouterr().out
    assert json.loads((tmp_path / "site" / "leaderboard.json").read_text())["boards"][0]["benchmark"] == "coser"
    assert cli.main(["leaderboard", str(tmp_path / "missing"), "--out", str(tmp_path / "other")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1 and "no such run or folder" in err
    assert not (tmp_path / "other").exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert cli.main(["leaderboard", str(empty), "--out", str(tmp_path / "other")]) == 2
    assert "no run.json" in capsys.readouterr().err


def test_a_row_label_names_every_setting_that_changes_a_reply():
    # Seed 004 H25 (a reasoning setting is never hidden) and seed 001-14 (decoding separates rows):
    # two runs decoded differently never share a label; what was not sent, the default max_tokens,
    # the seed (a draw, not a distribution) and a provider pin (routing) are not in it.
    assert model_label("m", {"temperature": 0.0, "reasoning_effort": "high"}) == \
        "m (reasoning_effort=high, temperature=0.0)"
    assert model_label("m", {"max_tokens": 1024, "temperature": None, "top_p": None, "seed": 3,
                             "reasoning_effort": None}) == "m"
    assert model_label("m", {"max_tokens": 1024, "temperature": 0.8, "top_p": 0.8, "seed": None, "preset": "chatglm3",
                             "request_params": {"top_k": 40, "frequency_penalty": 0.5,
                                                "provider": {"only": ["openai"], "allow_fallbacks": False}}}) == \
        "m (frequency_penalty=0.5, temperature=0.8, top_k=40, top_p=0.8)"
    assert model_label("m", {"max_tokens": 256}) == "m (max_tokens=256)"


def test_the_decoding_column_shows_every_key_that_went_out():
    # Issue 39 item 9: keys sent with --request-param are decoding too; a provider pin is routing.
    from charactereval_lib.charactereval.eligibility import decoding_text
    from charactereval_lib.engine.storage.manifest import GenerationSection

    api = GenerationSection(backend="openai", parameters={
        "max_tokens": 1024, "temperature": 0.8, "top_p": None, "seed": 3,
        "request_params": {"top_k": 40, "frequency_penalty": 0.5, "chat_template_kwargs": {"enable_thinking": False},
                           "provider": {"only": ["openai"], "allow_fallbacks": False}}})
    assert decoding_text(api) == ('temperature 0.8, top_p provider default, at most 1024 tokens, seed 3, '
                                  'chat_template_kwargs {"enable_thinking": false}, frequency_penalty 0.5, top_k 40')


def test_a_real_coser_smoke_run_and_its_report_reach_the_site(tmp_path, capsys):
    """A run made by `coser run` against the local mock server (its real run.json and artifacts),
    with a rendered report beside it: listed with its reasons, the report copied and linked."""
    run = tmp_path / "runs" / "smoke"
    with MockServer(reply=scripted_reply) as server:
        assert cli.main(["coser", "run", str(run), "--preset", "smoke", "--actor-model", "mock-actor", "--base-url",
                         server.base_url, "--no-api-key", "--data-dir", str(coser_data_dir()), "--retry-base-delay",
                         "0.01", "--timeout", "5", "--no-progress"]) == 0
    (run / "report.html").write_text("<html><body>the run's report</body></html>", encoding="utf-8")
    assert cli.main(["leaderboard", str(tmp_path / "runs"), "--out", str(tmp_path / "site")]) == 0
    [entry] = json.loads((tmp_path / "site" / "leaderboard.json").read_text(encoding="utf-8"))["boards"]
    [smoke] = entry["rows"]
    assert entry["scorer"] == "judge gpt-4o-2024-08-06" and entry["anchor"]["status"] == "pending"
    # The default role models are the version's declared snapshots, but the mock server answered
    # every role (it reports `mock-served-model`): the served-models rule says so per role.
    assert smoke["reasons"][:2] == [
        "full-protocol: 2 of the 200 test scenes (preset smoke)", "full-protocol: 1 repeat(s), the protocol runs 3"]
    served = smoke["reasons"][2:]
    assert [r.split(" was declared")[0] for r in served] == [
        f"served-models: the {role}" for role in ("actor", "environment", "next-speaker model", "judge")]
    assert all("but its server reported 'mock-served-model' for " in r for r in served), served
    page = tmp_path / "site" / "runs" / smoke["page"]
    assert (page / "report.html").read_text(encoding="utf-8") == "<html><body>the run's report</body></html>"
    assert 'href="report.html"' in (page / "index.html").read_text(encoding="utf-8")
    assert smoke["n"] == 2 and smoke["failures"] == 0


def test_charactereval_rules_on_recorded_facts(tmp_path):
    """Each rule's reasons from a run's facts as `read` records them (no artifacts needed)."""
    from charactereval_lib.charactereval.eligibility import MAX_FAILED, SPEC
    from charactereval_lib.engine.generation.served import RoleServed, ServedCounts
    from charactereval_lib.engine.leaderboard.board import RunView

    def reasons(**facts):
        base = {"judge": None, "missing": 0, "failed": 0, "failed_scored": 0, "failed_rows": 0, "rows": 8032, "unscored_rows": 0,
                "checkpoints": ["a" * 64], "modes": ["faithful"], "tiny_label": None, "fast_verified": False,
                "served_roles": []}
        view = RunView(tmp_path, "charactereval", "charactereval-1.0", "s", "m", {}, facts={**base, **facts})
        return SPEC.check(view)

    assert reasons() == []
    # Served identity: a documented alias of the same snapshot and a router prefix are no difference.
    same = [RoleServed("the model under test", "gpt-4o", ServedCounts(Counter({"gpt-4o-2024-08-06": 9}))),
            RoleServed("the judge j", "openai/gpt-4o-mini-2024-07-18", ServedCounts(Counter({"gpt-4o-mini": 2})))]
    assert reasons(served_roles=same) == []
    mixed = RoleServed("the model under test", "m", ServedCounts(Counter({"mock-served-model": 3, "openai/m": 1})))
    assert reasons(served_roles=[mixed]) == ["served-models: the model under test was declared 'm' but its server "
                                            "reported 'mock-served-model' for 3 of 4 replies"]
    assert reasons(modes=["fast"]) == ["scorer-mode: fast mode without a `score --verify` on this run and checkpoint "
                                       "that kept every row within one bf16 grid step"]
    assert reasons(modes=["fast", "faithful"], fast_verified=True) == []
    assert reasons(checkpoints=["a" * 64, "b" * 64]) == ["official-rm: rows scored by 2 different checkpoints"]
    assert reasons(tiny_label="tiny-random") == [
        "official-rm: scored by a test checkpoint (tiny-random), not BaichuanCharRM"]
    assert reasons(missing=3) == ["all-samples: 3 scored test samples have neither a reply nor a recorded failure"]
    assert reasons(failed_scored=MAX_FAILED, rows=8032 - 90, failed_rows=90) == []
    assert reasons(failed_scored=MAX_FAILED + 1, rows=8032 - 92, failed_rows=92) == [
        f"all-samples: {MAX_FAILED + 1} scored samples failed (None/ERROR), more than {MAX_FAILED} (1% of 4531)"]
    # Without the official data and with no failed sample: no count to print, and no "None".
    assert reasons(rows=358, failed_rows=None) == ["all-rows-scored: 358 rows, not the protocol's 8032"]
    assert reasons(failed_scored=1, rows=8031, failed_rows=None) == [
        "all-rows-scored: the official data is not available to count the rows of the failed samples"]


@pytest.mark.slow
def test_a_charactereval_row_says_how_its_replies_were_decoded(anchored):
    # Seed 001 row 9 / U1: the paper gives no decoding settings, so each row shows them.
    from charactereval_lib.charactereval.eligibility import decoding_text
    from charactereval_lib.engine.storage.manifest import GenerationSection

    hf = GenerationSection(backend="hf", parameters={"max_tokens": 1024, "temperature": None}, decoding_used={
        "do_sample": True, "temperature": 0.8, "top_p": 0.8, "top_k": 50, "max_new_tokens": 1024, "seed": None,
        "source": "the model's generation_config"})
    assert decoding_text(hf) == ("sampling: temperature 0.8, top_p 0.8, top_k 50, at most 1024 new tokens "
                                 "(the model's generation_config)")
    greedy = GenerationSection(backend="hf", decoding_used={"do_sample": False, "max_new_tokens": 64, "seed": 3,
                                                            "source": "asked, over the model's generation_config"})
    assert decoding_text(greedy) == "greedy, at most 64 new tokens, seed 3 (asked, over the model's generation_config)"
    api = GenerationSection(backend="openai", parameters={"max_tokens": 1024, "temperature": 0.8, "top_p": None})
    assert decoding_text(api) == "temperature 0.8, top_p provider default, at most 1024 tokens"
    assert decoding_text(GenerationSection(backend="import-official")) == "decoding not recorded (imported replies)"
    content, out = anchored
    entry = board(content, "charactereval")
    assert row(entry, "strong")["decoding"] == "offline placeholder replies (no model, no decoding)"
    assert row(entry, "chatglm3_6b")["decoding"] == "decoding not recorded (imported replies)"
    assert all(r["decoding"] is None for r in board(content, "coser")["rows"])
    assert '<small class="decoding">decoding not recorded (imported replies)</small>' in (
        out / "index.html").read_text(encoding="utf-8")
    lines = list(csv.DictReader((out / "leaderboard.csv").open(encoding="utf-8")))
    assert {line["decoding"] for line in lines if line["run"] == "strong"} == {
        "offline placeholder replies (no model, no decoding)"}
