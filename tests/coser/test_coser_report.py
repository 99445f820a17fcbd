"""CoSER statistics, the pipeline API and the reports.

Unit tests compute the summary of a hand-written run directory whose intervals, spreads and
counts are worked out by hand; the end-to-end tests make two smoke runs on the local mock
server (``testing.coser_script``), one with upstream's default judge and environment
(``gpt-4o``: not comparable with the paper) and one with the paper's, and execute the real
report and comparison notebooks on them."""

from __future__ import annotations

import html
import json
import re
import statistics
from pathlib import Path

import pytest
from _browser_support import chromium, requests_leaving

from charactereval_lib import cli, pipeline
from charactereval_lib.apps import reproduction
from charactereval_lib.apps.leaderboard import build
from charactereval_lib.coser.benchmark import JUDGEMENTS, SCENES, SUMMARY, TURNS
from charactereval_lib.coser.disclosures import agreement_line
from charactereval_lib.coser.documents import Interval
from charactereval_lib.coser.report import NOT_COMPARABLE, REPEATS_NOTE, comparability, interval, load_anchor
from charactereval_lib.coser.statistics import compute_summary
from charactereval_lib.coser.upstream import DIMENSIONS
from charactereval_lib.engine.storage.artifacts import write_jsonl_atomic
from charactereval_lib.engine.storage.runs import RunDir
from charactereval_lib.testing.coser_script import scripted_reply
from charactereval_lib.testing.mockserver import AS_REQUESTED, MockServer
from tests.apps.test_reproduce import released_generations
from tests.coser_golden import data_dir

PAPER_MODEL = "gpt-4o-2024-08-06"


# --- a hand-written run -------------------------------------------------------------------------


def dimension_records(repeat: int, scene: str, book: str, tag: str, scores: list[float], status: str = "ok"):
    return [{"repeat": repeat, "scene": scene, "tag": tag, "book": book, "kind": "dimension", "dimension": d,
             "status": status, "scores": {"score": s, "score_clipped": min(s, 100)} if status == "ok" else None}
            for d, s in zip(DIMENSIONS, scores)]


@pytest.fixture()
def hand_run(tmp_path):
    """Book A: scenes a1, a2 judged in repeats 0 and 1; book B: one scene b1 (repeat 0 only, one
    dimension failed); scene b2 failed in its simulation; scene b3 of the preset never ran."""
    run = RunDir(tmp_path / "hand")
    run.path.mkdir()
    run.update_manifest(protocol_version="coser-paper", benchmark="coser", coser={
        "preset": "sample", "repeats": 2, "scenes": ["a1", "a2", "b1", "b2", "b3"],
        "models": {"actor": "m", "env": PAPER_MODEL, "nsp": "CoSER-70B", "judge": PAPER_MODEL, "repair": "r"},
        "identity": {"protocol": {"score_upper_clip": False}, "continue_from": 0, "thoughtless": False}})
    scores = {("a1", 0): [60, 70, 80, 90], ("a1", 1): [62, 72, 82, 110],
              ("a2", 0): [40, 50, 60, 70], ("a2", 1): [44, 54, 64, 74]}
    judgements = []
    for (scene, repeat), values in scores.items():
        judgements += dimension_records(repeat, scene, "A", "id", values)
    judgements += dimension_records(0, "b1", "B", "ood", [30, 30, 30, 30])
    judgements[-1] = {**judgements[-1], "status": "failed", "scores": None}
    judgements += [{"repeat": r, "scene": s, "kind": "metrics", "bleu": b, "rouge_l": 0.5}
                   for (s, r), b in zip(scores, (0.1, 0.2, 0.3, 0.4))]
    write_jsonl_atomic(run.artifact(JUDGEMENTS), judgements)
    scenes = [{"repeat": r, "scene": s, "status": "done", "ended_by": e, "rounds": n}
              for (s, r), e, n in zip([*scores, ("b1", 0)], ["end_chat", "max_rounds", "end_chat", "end_chat",
                                                            "end_chat"], [7, 20, 9, 9, 12])]
    scenes += [{"repeat": 0, "scene": "b2", "status": "error", "error": {}},
               {"repeat": 1, "scene": "b1", "status": "error", "error": {}}]
    write_jsonl_atomic(run.artifact(SCENES), scenes)
    turns = [{"repeat": 0, "scene": "a1", "step": 0, "kind": "actor", "refused": True},
             {"repeat": 0, "scene": "a1", "step": 0, "kind": "actor", "refused": True},  # recorded twice
             {"repeat": 0, "scene": "a1", "step": 1, "kind": "nsp"},  # no field: not refused
             {"repeat": 0, "scene": "a1", "step": 2, "kind": "env", "refused": False},
             {"repeat": 0, "scene": "a2", "step": 0, "kind": "env", "refused": True}]
    write_jsonl_atomic(run.artifact(TURNS), turns)
    return run


def test_per_book_intervals_spread_and_counts_match_a_hand_computation(hand_run):
    summary = compute_summary(hand_run, n_boot=1000, seed=0)
    book_a = summary["by_book"]["A"]
    assert (book_a["tag"], book_a["scenes"], book_a["sessions"]) == ("id", 2, 4)
    # Each scene's mean over its two repeats, per dimension (SC, AN, CF, SQ).
    a1, a2 = [61, 71, 81, 100], [42, 52, 62, 72]
    # Two scenes: a percentile bootstrap would print their range as a "95% interval"; below 4
    # scenes no interval keeps that promise, so there is none.
    for i, d in enumerate(DIMENSIONS):
        cell = book_a["scores"][d]
        assert cell["mean"] == pytest.approx((a1[i] + a2[i]) / 2)
        assert (cell["low"], cell["high"]) == (None, None)
    average = book_a["scores"]["average"]
    assert (average["mean"], average["low"], average["high"]) == (pytest.approx(67.625), None, None)
    # Book B's only judged session has a failed dimension: the session fails as a whole (seed 004
    # H19), so B has no score at all, and repeat 0's means are a1's and a2's.
    assert "B" not in summary["by_book"]
    repeat0 = [50, 60, 70, 80]
    repeat1 = [53, 63, 73, 92]
    for i, d in enumerate(DIMENSIONS):
        assert summary["by_repeat"][0][d] == pytest.approx(repeat0[i], abs=1e-4)
        assert summary["run_to_run_sd"][d] == pytest.approx(statistics.stdev([repeat0[i], repeat1[i]]), abs=1e-4)
    assert summary["run_to_run_sd"]["average"] == pytest.approx(
        statistics.stdev([statistics.mean(repeat0), statistics.mean(repeat1)]), abs=1e-4)
    assert summary["ended_by"] == {"end_chat": 4, "max_rounds": 1, "failed": 2, "not_run": 3}
    assert summary["rounds"]["histogram"] == {7: 1, 9: 2, 12: 1, 20: 1}
    assert summary["judge_failures"] == 1 and summary["judge_failed_dimensions"]["Storyline Quality"] == 1
    assert summary["refused_turns"] == {"actor": 1, "env": 1, "nsp": 0, "total": 2}
    assert summary["surface_per_100"]["BLEU"]["mean"] == pytest.approx(25.0)
    assert summary["counts"] == {"scenes": 2, "sessions": 4, "sessions_expected": 10}


def test_a_run_is_comparable_only_with_the_papers_exact_judge_and_environment(hand_run):
    anchor = load_anchor()
    manifest = hand_run.manifest()
    assert comparability(manifest, anchor) == []
    for role in ("judge", "env"):
        alias = json.loads(json.dumps(manifest))
        alias["coser"]["models"][role] = "gpt-4o"
        (reason,) = comparability(alias, anchor)
        assert reason.startswith(NOT_COMPARABLE) and "'gpt-4o'" in reason
    head = {**manifest, "protocol_version": "coser-head"}
    assert any("coser-head" in r for r in comparability(head, anchor))
    given = json.loads(json.dumps(manifest))
    given["coser"]["identity"]["continue_from"] = 3
    assert len(comparability(given, anchor)) == 1


def test_the_anchor_is_the_papers_gpt4o_row():
    anchor = load_anchor()
    values = {k: (v["value"], v["plus_minus"]) for k, v in anchor["dimensions"].items()}
    assert values == {"Storyline Consistency": (61.59, 0.66), "Anthropomorphism": (48.93, 0.48),
                      "Character Fidelity": (48.95, 1.73), "Storyline Quality": (80.33, 0.59),
                      "average": (59.95, 0.50)}
    assert anchor["surface_per_100"] == {"BLEU": {"value": 5.90, "plus_minus": 0.16}}
    assert "role_models" in anchor and "judge_model" not in anchor  # the protocol version declares them


# --- settings and the command line --------------------------------------------------------------


def test_run_settings_resolve_roles_and_report_bad_values_by_name():
    settings = pipeline.CoserRunSettings(actor_model="a", base_url="http://x/v1", judge_base_url="http://j/v1",
                                         env_api_key_env="ENV_KEY", actor_name_suffix=True)
    sim = settings.simulation_settings()
    assert (sim.actor.base_url, sim.judge.base_url, sim.env.api_key_env, sim.nsp.api_key_env) == (
        "http://x/v1", "http://j/v1", "ENV_KEY", "OPENAI_API_KEY")
    assert sim.actor.rules.name_suffix is True and sim.env.rules is None and sim.version.name == "coser-paper"
    assert pipeline.CoserRunSettings(actor_model="a", no_api_key=True).simulation_settings().judge.api_key_env == ""
    with pytest.raises(pipeline.SettingsError, match="unknown key"):
        pipeline.CoserRunSettings.from_mapping({"actor_model": "a", "judge": "x"}, "cfg")
    with pytest.raises(pipeline.SettingsError, match="preset 'huge'"):
        pipeline.CoserRunSettings(actor_model="a", preset="huge")
    with pytest.raises(pipeline.SettingsError, match="actor_model is required"):
        pipeline.CoserRunSettings(actor_model="")


def test_bad_price_is_one_line_and_exit_2(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["coser", "run", "r", "--actor-model", "a", "--dry-run", "--price", "judge=1:x"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "ROLE=IN:OUT" in err


def test_dry_run_prices_each_role(capsys):
    assert cli.main(["coser", "run", "r", "--actor-model", "a", "--dry-run", "--data-dir", str(data_dir()),
                     "--price", "actor=1:2", "--price", "env=1:2", "--price", "nsp=1:2", "--price", "judge=1:2"]) == 0
    out = capsys.readouterr().out
    assert "preset smoke, 2 scene(s) x 1 repeat(s)" in out and "estimated cost: ~$" in out


# --- end to end: smoke runs, reports, comparison --------------------------------------------------


def smoke(run: Path, url: str, *extra: str) -> None:
    assert cli.main(["coser", "run", str(run), "--preset", "smoke", "--actor-model", "mock-actor", "--base-url", url,
                     "--no-api-key", "--data-dir", str(data_dir()), "--retry-base-delay", "0.01", "--timeout", "5",
                     "--quiet", *extra]) == 0


@pytest.fixture(scope="module")
def rendered(tmp_path_factory):
    """Two smoke runs (upstream's aliases gpt-4o and gpt-4o-mini as judge, environment and NSP;
    the protocol's defaults, the paper's snapshots), each summarised and reported, and their
    comparison."""
    root = tmp_path_factory.mktemp("coser-report")
    alias, paper = root / "alias", root / "paper"
    # A server that serves what it is asked (the default mock reports one model for all: see
    # test_a_mock_that_answers_every_role_is_not_comparable).
    with MockServer(reply=scripted_reply, served_model=AS_REQUESTED) as server:
        smoke(alias, server.base_url, "--judge-model", "gpt-4o", "--env-model", "gpt-4o", "--nsp-model", "gpt-4o-mini")
        smoke(paper, server.base_url)
    out = {}
    for run in (alias, paper):
        assert cli.main(["coser", "summarize", str(run), "--n-boot", "200"]) == 0
        assert cli.main(["coser", "report", str(run), "--n-boot", "200"]) == 0
        out[run.name] = (json.loads((run / SUMMARY).read_text()), (run / "report.html").read_text(encoding="utf-8"))
    assert cli.main(["coser", "compare", str(alias), str(paper), "--out", str(root / "cmp"), "--n-boot", "200",
                     "--allow-mixed"]) == 0
    out["compare"] = (None, (root / "cmp" / "comparison.html").read_text(encoding="utf-8"))
    out["root"] = root
    return out


@pytest.mark.slow
def test_report_shows_the_anchor_and_the_summarys_numbers(rendered):
    summary, page = rendered["alias"]
    text = html.unescape(page)
    for value in ("61.59 ± 0.66", "48.93 ± 0.48", "48.95 ± 1.73", "80.33 ± 0.59", "59.95 ± 0.50", "5.90 ± 0.16"):
        assert value in text
    assert "Protocol <strong>coser-paper</strong>" in page and "preset <strong>smoke</strong>" in page
    for model in ("mock-actor", "gpt-4o", "gpt-4o-mini"):
        assert f"<code>{model}</code>" in page
    for name, cell in summary["overall"].items():
        assert f"{cell['mean']:.2f}" in text and interval(Interval.model_validate(cell)) in text, name
    # Per book: every book of the summary with its average.
    assert ">Per book<" in page
    for book, entry in summary["by_book"].items():
        assert html.escape(book) in page and f"{entry['scores']['average']['mean']:.2f}" in text
    if summary["bleu_unavailable"]:
        assert "unavailable: " in text
    else:
        assert f"{summary['surface_per_100']['BLEU']['mean']:.2f}" in text
    assert f"{summary['surface_per_100']['ROUGE-L']['mean']:.2f}" in text
    assert text.count("<img") >= 3 and "Contents" in text


@pytest.mark.slow
def test_not_comparable_label_follows_the_judge_and_environment(rendered):
    _, alias_page = rendered["alias"]
    _, paper_page = rendered["paper"]
    assert "NOT COMPARABLE WITH THE PAPER" in alias_page and "not the paper's 'gpt-4o-2024-08-06'" in alias_page
    assert "not comparable" not in paper_page.lower()
    assert "Comparable with the paper's anchor" in html.unescape(paper_page)
    # The default NSP is the declared deviation from the paper's CoSER-70B: the caveat gives its reason.
    assert "the paper's table used CoSER-70B. This is the protocol's registered deviation: upstream's own default" \
        in html.unescape(paper_page)


@pytest.mark.slow
def test_comparison_shows_both_runs_and_why_they_differ(rendered):
    _, page = rendered["compare"]
    text = html.unescape(page)
    assert "alias" in text and "paper" in text and "59.95 ± 0.50" in text
    assert "runs not comparable with each other: the runs have different env models" in text
    assert "alias: the judge model is 'gpt-4o'" in text and "paper: the judge model" not in text
    assert "alias: not comparable with the paper" not in text  # the box's heading says it once


@pytest.mark.slow
def test_judge_scores_are_shown_with_the_judges_agreement_and_the_de_repetition_rule(rendered):
    """Seed 004 I03 and T06 (issue 43, 004-80 and 004-94): the report and the comparison say how
    often the paper's judge agreed with people, and which side of upstream's de-repetition rule
    the actor was on (mock-actor is neither GPT nor Claude)."""
    for name in ("alias", "paper", "compare"):
        text = html.unescape(rendered[name][1])
        assert agreement_line() in text, name
        assert "Asymmetric rule: upstream removes repeated passages" in text and "were passed through it" in text


@pytest.mark.slow
def test_compare_refuses_mixed_runs_without_allow_mixed(rendered, tmp_path, capsys):
    root = rendered["root"]
    assert cli.main(["coser", "compare", str(root / "alias"), str(root / "paper"), "--out", str(tmp_path)]) == 2
    assert "cannot compare: the runs have different env models" in capsys.readouterr().err


@pytest.mark.slow
def test_every_page_of_a_site_with_reports_a_reproduction_and_a_comparison_works_offline(rendered, tmp_path):
    """Issue 29 item 2: the site over the two reported runs and a reproduction's runs, and the
    reproduction's and the comparison's own pages, opened from file://: no request leaves the
    folder of the page (the reports once loaded require.js, MathJax and mermaid from CDNs)."""
    root = rendered["root"]
    data, files = released_generations(tmp_path)
    repro = reproduction.reproduce("charactereval", tmp_path / "repro", n_boot=20, data=data, files=files).out
    site = tmp_path / "site"
    build([root / "alias", root / "paper", repro / "runs"], site, context={"charactereval": data})
    pages = sorted(site.rglob("*.html"))
    assert len([p for p in pages if p.name == "report.html"]) == 2
    opened = [(p, site) for p in pages] + [(repro / "reproduction.html", repro), (root / "cmp" / "comparison.html",
                                                                                   root / "cmp")]
    with chromium() as browser:
        for page_file, folder in opened:
            assert requests_leaving(browser, page_file, folder) == [], page_file
            text = page_file.read_text(encoding="utf-8")
            # Nor is anything fetched later (mermaid was imported only when a diagram was shown).
            assert not re.search(r"""<(?:script|link|img|iframe)[^>]*(?:src|href)\s*=\s*["']?(?:https?:)?//"""
                                 r"""|import\(\s*["']https?:""", text), page_file


# --- the analyst's view (issue 19, items 12 and 13) ---------------------------------------------


def test_coser_summarize_prints_a_table_and_says_what_it_wrote(hand_run, capsys):
    assert cli.main(["coser", "summarize", str(hand_run.path), "--n-boot", "50"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    summary = json.loads((hand_run.path / SUMMARY).read_text())
    assert "{" not in out and len(lines) == 1 + 5 + 5
    assert lines[0].split() == ["score", "mean", "95%", "interval", "id", "books", "ood", "books"]
    average = summary["overall"]["average"]
    assert lines[5].startswith("average") and f"{average['mean']:.2f}" in lines[5]
    assert interval(Interval.model_validate(average)) in lines[5]
    assert lines[1].split()[-1] == "–"  # the ood split's only scene failed: no score
    assert "not clipped, so a dimension can exceed 100" in lines[6]
    # Two repeats: the summary says they share prompts and a temperature-0 first call (seed 004 H30).
    assert lines[-3] == REPEATS_NOTE and "understates the variance between independent runs" in REPEATS_NOTE
    # The judge's agreement with people is shown with its scores (seed 004 I03, issue 43 004-80).
    assert lines[-2] == agreement_line()
    assert lines[-1].startswith(f"wrote {hand_run.path / SUMMARY}")


def test_the_report_says_repeats_share_prompts_so_their_spread_understates_variance(hand_run, rendered):
    from charactereval_lib.coser.report import load_analysis

    assert REPEATS_NOTE in load_analysis(hand_run, n_boot=50, seed=0).caveats()
    # Every report says it beside the per-repeat table, even of a one-repeat run.
    text = html.unescape(rendered["alias"][1])
    assert "share their prompts" in text and "understates the variance between independent runs" in text


def test_coser_paired_differences_match_a_hand_computation(hand_run, tmp_path):
    from charactereval_lib.coser.report import load_analysis, paired_differences

    other = RunDir(tmp_path / "other")
    other.path.mkdir()
    (other.path / "run.json").write_bytes((hand_run.path / "run.json").read_bytes())
    records = json.loads("[" + ",".join((hand_run.path / JUDGEMENTS).read_text().splitlines()) + "]")
    for record in records:
        if record.get("kind") == "dimension" and record["scene"] == "a1" and record["scores"]:
            record["scores"] = {**record["scores"], "score": record["scores"]["score"] + 5}
    write_jsonl_atomic(other.artifact(JUDGEMENTS), records)
    for name in (SCENES, TURNS):
        (other.path / name).write_bytes((hand_run.path / name).read_bytes())
    analyses = [load_analysis(run, n_boot=100, seed=0) for run in (hand_run, other)]
    table = paired_differences(analyses, n_boot=100, seed=0).set_index("score")
    # Scenes a1 (+5 on every dimension) and a2 (unchanged); b1 lost a dimension, so it is out.
    assert list(table.index) == [*DIMENSIONS, "average"] and set(table["scenes"]) == {2}
    # Two shared scenes: too few for an interval (n<4 scenes), the difference alone is shown.
    assert set(table["A − B"]) == {"2.50"} and set(table["95% interval"]) == {"n<4 scenes"}
    assert table.loc["average", "comparison"] == "other − hand"
    assert float(table.loc["average", "mean A"]) - float(table.loc["average", "mean B"]) == pytest.approx(2.5, abs=0.01)


def test_the_comparison_report_has_paired_differences(rendered):
    _, page = rendered["compare"]
    assert "Paired differences" in page and "paper − alias" in html.unescape(page)


def test_book_figure_keeps_markers_whole_titles_full_and_marks_one_scene_books():
    from charactereval_lib.coser.figures import BOOK_BASE_INCHES, BOOK_ROW_INCHES, book_figure

    long_title = "A Very Long Book Title That Goes On And On Well Past Forty-Five Characters"
    by_book = {long_title: {"tag": "id", "scores": {"average": {"mean": 60.0, "low": 55.0, "high": 65.0}}},
               "Short": {"tag": "ood", "scores": {"average": {"mean": 112.0, "low": None, "high": None}}}}
    fig = book_figure(by_book)
    ax = fig.axes[0]
    low, high = ax.get_ylim()
    assert low <= -0.5 and high >= 1.5  # half a row of room around both markers
    assert [t.get_text() for t in ax.get_yticklabels()] == [long_title, "Short"]
    assert [t.get_text() for t in ax.texts] == ["n<4"]
    assert "not clipped" in ax.get_xlabel()
    many = {f"book {k}": {"tag": "id", "scores": {"average": {"mean": float(k), "low": k - 1.0, "high": k + 1.0}}}
            for k in range(100)}
    assert book_figure(many).get_size_inches()[1] == pytest.approx(BOOK_BASE_INCHES + BOOK_ROW_INCHES * 100)


def test_the_warning_box_states_not_comparable_once_and_renders_code():
    from charactereval_lib.coser.report import warnings_html

    box = warnings_html([f"{NOT_COMPARABLE}: the judge model is 'gpt-4o'"], ["install a CJK font (`fc-list :lang=zh`)"])
    assert box.count("NOT COMPARABLE WITH THE PAPER") == 1 and f"{NOT_COMPARABLE}:" not in box
    assert "<li>the judge model is &#x27;gpt-4o&#x27;</li>" in box
    assert "<code>fc-list :lang=zh</code>" in box and "`" not in box
