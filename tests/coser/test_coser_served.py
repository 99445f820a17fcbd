"""CoSER and issue 39: the served identity of every role (recorded per call, read by the board,
the "comparable" label and the caveats), a resumed run whose server now serves another model,
the seed's anchor actor spelled as a router names it (L01, pinned to OpenAI), and provider pins
of the wrong shape. Real runs go through the command line against the local mock server."""

from __future__ import annotations

import json

import pytest

from charactereval_lib import cli
from charactereval_lib.apps.leaderboard import boards, read_runs
from charactereval_lib.coser.benchmark import JUDGEMENTS, SUMMARY, TURNS
from charactereval_lib.coser.report import (
    NOT_COMPARABLE,
    caveats,
    comparability,
    comparable_sentence,
    is_anchor_actor,
    load_anchor,
    served_caveats,
    served_confirmed,
)
from charactereval_lib.engine.storage import artifacts, runs
from charactereval_lib.testing.coser_script import scripted_reply
from charactereval_lib.testing.leaderboard_runs import coser_run as synthetic_run
from charactereval_lib.testing.mockserver import SERVED_MODEL, SYSTEM_FINGERPRINT, MockServer
from tests.coser_golden import data_dir

PAPER = {"Storyline Consistency": 61.59, "Anthropomorphism": 48.93, "Character Fidelity": 48.95,
         "Storyline Quality": 80.33}
ROUTER = "https://openrouter.ai/api/v1"
ROLES = ("actor", "env", "nsp", "judge", "repair")


def smoke(run, url, *extra, code=0):
    assert cli.main(["coser", "run", str(run), "--preset", "smoke", "--actor-model", "mock-actor", "--base-url", url,
                     "--no-api-key", "--data-dir", str(data_dir()), "--retry-base-delay", "0.01", "--timeout", "5",
                     "--quiet", *extra]) == code


def test_every_call_records_what_its_server_reported_and_summarize_says_it(tmp_path, capsys):
    run = tmp_path / "run"
    with MockServer(reply=scripted_reply) as server:
        smoke(run, server.base_url, "--limit", "1")
    turns = artifacts.read_jsonl(run / TURNS).records
    assert turns and all(t["served"] == {"models": {SERVED_MODEL: len(t["temperatures"])}, "system_fingerprints": {
        SYSTEM_FINGERPRINT: len(t["temperatures"])}, "model_not_reported": 0} for t in turns)
    judged = [r for r in artifacts.read_jsonl(run / JUDGEMENTS).records if r.get("kind") == "dimension"]
    assert judged and all(set(r["served"]) == {"judge"} for r in judged)
    session = runs.load_manifest(run)["coser"]["session"]["served"]
    assert set(session) == set(ROLES) and session["actor"]["models"] == {SERVED_MODEL: sum(
        len(t["temperatures"]) for t in turns if t["kind"] == "actor")}
    capsys.readouterr()
    assert cli.main(["coser", "summarize", str(run), "--n-boot", "10"]) == 0
    served = json.loads((run / SUMMARY).read_text(encoding="utf-8"))["served"]
    assert set(served) == {"actor", "env", "nsp", "judge"}
    err = capsys.readouterr().err
    # The judge and environment make the run not comparable; the actor and NSP are caveats.
    for line in ("the judge was declared 'gpt-4o-2024-08-06' but its server reported 'mock-served-model'",
                 "the environment was declared 'gpt-4o-2024-08-06'",
                 "The actor was declared 'mock-actor' but its server reported 'mock-served-model'",
                 "The next-speaker model was declared 'gpt-4o-mini-2024-07-18'"):
        assert line in err, err


def test_a_resumed_run_served_by_another_model_stops_before_recording_it(tmp_path, capsys):
    run = tmp_path / "run"
    with MockServer(reply=scripted_reply) as server:
        smoke(run, server.base_url, "--limit", "1")
    before = len(artifacts.read_jsonl(run / TURNS).records)
    capsys.readouterr()
    with MockServer(reply=scripted_reply, served_model="other-model") as server:
        smoke(run, server.base_url, code=1)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "the server now reports the model 'other-model', but this run's earlier " \
                                   f"replies were served by '{SERVED_MODEL}'" in err
    turns = artifacts.read_jsonl(run / TURNS).records
    assert len(turns) == before and not (run / ".coser.lock").exists()
    coser = runs.load_manifest(run)["coser"]
    assert coser["status"] == "aborted" and "other-model" in coser["session"]["aborted"]


def test_a_mock_that_answers_every_role_is_not_comparable_and_a_silent_server_is_a_caveat(tmp_path):
    synthetic_run(tmp_path / "run", actor="a", scenes=4, repeats=1)
    manifest = runs.load_manifest(tmp_path / "run")
    anchor = load_anchor()
    mock = {role: {"models": {SERVED_MODEL: 4}} for role in ("actor", "env", "nsp", "judge")}
    assert comparability(manifest, anchor, mock) == [
        f"{NOT_COMPARABLE}: the {label} was declared 'gpt-4o-2024-08-06' but its server reported "
        f"'{SERVED_MODEL}' for 4 of 4 replies, not the paper's 'gpt-4o-2024-08-06'" for label in ("judge", "environment")]
    assert [line.split(" but ")[0] for line in served_caveats(manifest, mock)] == [
        "The actor was declared 'a'", "The next-speaker model was declared 'gpt-4o-mini-2024-07-18'"]
    # A router's spelling and a documented alias are the same model; a server naming none is a caveat.
    same = {"judge": {"models": {"openai/gpt-4o-2024-08-06": 3}}, "env": {"models": {"gpt-4o": 2}}}
    assert comparability(manifest, anchor, same) == [] and served_caveats(manifest, same) == []
    assert served_confirmed(manifest, same)
    silent = {"judge": {"model_not_reported": 2}, "env": {"models": {"gpt-4o-2024-08-06": 2}}}
    assert comparability(manifest, anchor, silent) == [] and not served_confirmed(manifest, silent)
    assert served_caveats(manifest, silent) == [
        "Served model not reported: 2 of 2 replies of the judge came from a server that named no model, so nothing "
        "shows they came from 'gpt-4o-2024-08-06'."]
    assert "did not report the model" in comparable_sentence(False)
    assert "as their servers reported in every reply" in comparable_sentence(True)


def test_the_seeds_anchor_actor_through_a_router_pinned_to_openai_opens_the_board(tmp_path):
    """Seed 004 L01: the anchor run's actor is `openai/gpt-4o-2024-08-06` through a router pinned
    to OpenAI; every role of it goes through the router with that pin. Pinned to another
    provider, its actor is not the paper's."""
    pin = {"provider": {"only": ["openai"], "allow_fallbacks": False}}
    routed = dict.fromkeys(ROLES, ROUTER)
    l01 = synthetic_run(tmp_path / "l01" / "gpt4o", actor="openai/gpt-4o-2024-08-06", targets=PAPER, seed=1,
                        endpoints=routed, request_params=dict.fromkeys(ROLES, pin))
    views, warnings = read_runs([tmp_path / "l01"], {})
    [entry] = boards(views)["boards"]
    assert warnings == [] and entry["anchor"]["status"] == "reproduced" and entry["anchor"]["run"] == "gpt4o"
    [row] = entry["rows"]
    assert row["rank"] == 1 and row["reasons"] == [] and row["caveats"] == []
    notes = caveats(runs.load_manifest(l01), views[0].facts["summary"], load_anchor())
    assert not any("this run's actor is" in note for note in notes), notes
    manifest = runs.load_manifest(l01)
    assert is_anchor_actor(manifest, "gpt-4o-2024-08-06")
    manifest["coser"]["identity"]["roles"]["actor"]["request_params"]["provider"]["only"] = ["azure"]
    assert not is_anchor_actor(manifest, "gpt-4o-2024-08-06")


def test_a_server_that_names_no_model_is_a_caveat_on_the_board_row_its_csv_and_page(tmp_path):
    from charactereval_lib.engine.leaderboard.board import boards_csv
    from charactereval_lib.engine.leaderboard.site import index_html

    synthetic_run(tmp_path / "runs" / "silent", actor="a", scenes=4, repeats=1, served={"judge": None})
    views, _ = read_runs([tmp_path / "runs"], {})
    content = boards(views)
    [row] = content["boards"][0]["rows"]
    caveat = ("served model not reported: 16 of 16 replies of the judge came from a server that named no model, so "
              "nothing shows they came from 'gpt-4o-2024-08-06'")
    assert row["caveats"] == [caveat] and not any(r.startswith("served-models") for r in row["reasons"])
    assert caveat in boards_csv(content)
    assert f'<small class="caveat">{caveat}</small>'.replace("'", "&#x27;") in index_html({**content, "runs": 1}, {}, "now")


@pytest.mark.parametrize(("value", "message"), [
    ('provider="openai"', "actor request parameter 'provider': expected an object such as "),
    ('provider={"only": "openai"}', "actor request parameter 'provider': 'only' must be a list of strings, got "
                                    '"openai"'),
    ('provider={"only": ["openai"], "fallbacks": false}', "actor request parameter 'provider': unknown key "
                                                          "'fallbacks'"),
])
def test_a_provider_pin_of_the_wrong_shape_is_one_line_and_exit_2(tmp_path, capsys, value, message):
    assert cli.main(["coser", "run", str(tmp_path / "run"), "--actor-model", "a", "--no-api-key", "--base-url",
                     "http://127.0.0.1:9/v1", "--actor-request-param", value]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {message}") and err.count("\n") == 1 and "provider-routing" in err
    assert not (tmp_path / "run").exists()
