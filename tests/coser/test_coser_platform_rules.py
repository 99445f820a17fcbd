"""CoSER's platform rules as seed 004 specifies them (issue 30): each protocol version's one
declaration of its fixed role models, which the defaults, the "comparable with the paper" label,
the board's rule and the docs read; the request timeout; extra request parameters of a role;
provider pins on a router; model-family rules on provider-prefixed ids. Runs go through the
command line against the local mock server (``testing.coser_script``)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from charactereval_lib import cli, pipeline
from charactereval_lib.coser.eligibility import RULES
from charactereval_lib.coser.report import comparability
from charactereval_lib.coser.versions import FIXED_ROLES, VERSIONS
from charactereval_lib.testing.coser_script import scripted_reply
from charactereval_lib.testing.mockserver import MockServer
from tests.coser_golden import data_dir

DOCS = Path(__file__).resolve().parents[2] / "docs" / "coser-versions.md"
DATED = re.compile(r"-\d{4}-\d{2}-\d{2}$")


def coser_run(run: Path, url: str, *extra: str, preset: str = "smoke") -> None:
    """``coser run`` with every default but the endpoint (and ``extra``)."""
    assert cli.main(["coser", "run", str(run), "--preset", preset, "--actor-model", "mock-actor", "--base-url", url,
                     "--no-api-key", "--data-dir", str(data_dir()), "--retry-base-delay", "0.01", "--quiet",
                     *extra]) == 0


# --- item 1: one declaration per version ---------------------------------------------------------


@pytest.mark.parametrize("name", sorted(VERSIONS))
def test_each_version_declares_dated_role_models_and_its_deviation_from_the_paper(name):
    fixed = VERSIONS[name].models
    for role in FIXED_ROLES:
        assert DATED.search(fixed.of(role)), (role, fixed.of(role))  # a snapshot, never an alias
    assert (fixed.env, fixed.judge, fixed.nsp) == ("gpt-4o-2024-08-06", "gpt-4o-2024-08-06", "gpt-4o-mini-2024-07-18")
    [deviation] = fixed.deviations
    assert (deviation.role, deviation.paper, deviation.runs) == ("nsp", "CoSER-70B", fixed.nsp)
    assert "297ffff" in deviation.reason and "F05" in deviation.reason
    assert fixed.accepts("judge", "openai/gpt-4o-2024-08-06") and not fixed.accepts("judge", "gpt-4o")


def test_defaults_label_rule_and_docs_read_the_declaration(capsys):
    for name, version in VERSIONS.items():
        sim = pipeline.CoserRunSettings(actor_model="a", protocol=name).simulation_settings()
        assert {role: sim.role(role).model for role in FIXED_ROLES} == {r: version.models.of(r) for r in FIXED_ROLES}
    with pytest.raises(SystemExit):
        cli.main(["coser", "run", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "default: the one the protocol version fixes, coser-head gpt-4o-mini-2024-07-18, coser-paper " \
           "gpt-4o-mini-2024-07-18" in help_text
    manifest = {"protocol_version": "coser-paper", "coser": {"models": {
        role: VERSIONS["coser-paper"].models.of(role) for role in FIXED_ROLES}, "identity": {}}}
    assert comparability(manifest) == []
    rule = next(r for r in RULES if r.name == "fixed-models")
    docs = DOCS.read_text(encoding="utf-8")
    for version in VERSIONS.values():
        for role in FIXED_ROLES:
            assert version.models.of(role) in rule.text and f"`{version.models.of(role)}`" in docs
        for deviation in version.models.deviations:
            assert deviation.paper in rule.text and deviation.reason in " ".join(docs.split())


def test_a_default_smoke_run_records_the_declared_models_and_the_180_s_timeout(tmp_path):
    run = tmp_path / "run"
    with MockServer(reply=scripted_reply) as server:
        coser_run(run, server.base_url, "--limit", "1")
    coser = json.loads((run / "run.json").read_text(encoding="utf-8"))["coser"]
    assert {role: coser["models"][role] for role in FIXED_ROLES} == {
        role: VERSIONS["coser-paper"].models.of(role) for role in FIXED_ROLES}
    # Seed 004 F17: 180 s per call, recorded with the session's retry policy.
    assert coser["client"]["timeout_s"] == 180.0 == pipeline.CoserRunSettings(actor_model="a").timeout


@pytest.mark.slow
def test_a_full_run_with_every_default_fails_only_because_the_mock_served_every_role(tmp_path):
    """600 sessions (200 scenes x 3) through the real engine, then `leaderboard` (issue 39's
    reproduction, once marked eligible): every setting passes its rule, and the served identity
    alone keeps the run off the board, one line per role naming both models."""
    run = tmp_path / "runs" / "default-full"
    with MockServer(reply=scripted_reply, keep_payloads=False) as server:
        coser_run(run, server.base_url, preset="full")
    assert cli.main(["leaderboard", str(tmp_path / "runs"), "--out", str(tmp_path / "site")]) == 0
    [entry] = json.loads((tmp_path / "site" / "leaderboard.json").read_text(encoding="utf-8"))["boards"]
    [row] = entry["rows"]
    assert entry["protocol_version"] == "coser-paper" and entry["scorer"] == "judge gpt-4o-2024-08-06"
    assert not row["eligible"] and row["n"] == 600
    declared = {"actor": "mock-actor", "environment": "gpt-4o-2024-08-06", "next-speaker model":
                "gpt-4o-mini-2024-07-18", "judge": "gpt-4o-2024-08-06"}
    assert [r.split(" but ")[0] for r in row["reasons"]] == [
        f"served-models: the {role} was declared {model!r}" for role, model in declared.items()]
    assert all(" but its server reported 'mock-served-model' for " in r for r in row["reasons"])


# --- items 2 and 3: request parameters of each role, provider pins ----------------------------------

PIN = {"only": ["openai"], "allow_fallbacks": False}
ROUTER = "https://openrouter.ai/api/v1"


def test_role_request_params_and_pins_go_out_are_recorded_and_shown(tmp_path):
    from charactereval_lib.coser.benchmark import SUMMARY
    from charactereval_lib.testing.coser_script import role_of
    from charactereval_lib.testing.mockserver import REASONING_TOKENS

    run = tmp_path / "runs" / "pinned"
    pins = [arg for role in FIXED_ROLES for arg in (f"--{role}-request-param", f"provider={json.dumps(PIN)}")]
    with MockServer(reply=scripted_reply) as server:
        coser_run(run, server.base_url, "--limit", "1", "--actor-request-param", 'reasoning_effort="high"',
                  "--actor-request-param", 'provider={"only": ["some-host"], "allow_fallbacks": false}', *pins)
    by_role = {}
    for payload in server.received:
        by_role.setdefault(role_of(payload), []).append(payload)
    assert all(p["reasoning_effort"] == "high" and p["provider"]["only"] == ["some-host"] for p in by_role["actor"])
    for role in ("env", "nsp", "judge"):
        assert all(p["provider"] == PIN and "reasoning_effort" not in p for p in by_role[role]), role
        assert all(p["temperature"] in (0, 1) and p["max_tokens"] in (512, 8192) for p in by_role[role])
    coser = json.loads((run / "run.json").read_text(encoding="utf-8"))["coser"]
    assert coser["identity"]["roles"]["actor"]["request_params"] == {
        "reasoning_effort": "high", "provider": {"only": ["some-host"], "allow_fallbacks": False}}
    assert {role: e.get("provider_pin") for role, e in coser["endpoints"].items()} == {
        "actor": "some-host", "env": "openai", "nsp": "openai", "judge": "openai", "repair": None}
    # Reasoning tokens reported by the server: on each actor turn's record, summed in the summary.
    turns = [json.loads(line) for line in (run / "coser_turns.jsonl").read_text(encoding="utf-8").splitlines()]
    actor_turns = [t for t in turns if t["kind"] == "actor"]
    assert all(t["reasoning_tokens"] == REASONING_TOKENS * len(t["temperatures"]) for t in actor_turns)
    assert all("reasoning_tokens" not in t for t in turns if t["kind"] != "actor")
    assert cli.main(["coser", "summarize", str(run), "--n-boot", "20"]) == 0
    total = sum(t["reasoning_tokens"] for t in actor_turns)
    assert json.loads((run / SUMMARY).read_text())["reasoning_tokens"] == {"actor": total, "env": 0, "nsp": 0,
                                                                           "total": total}
    # The board's row label names the reasoning setting; the run page shows each role's pin.
    assert cli.main(["leaderboard", str(tmp_path / "runs"), "--out", str(tmp_path / "site")]) == 0
    [entry] = json.loads((tmp_path / "site" / "leaderboard.json").read_text(encoding="utf-8"))["boards"]
    [row] = entry["rows"]
    assert row["model"] == "mock-actor (reasoning_effort=high)"
    page = (tmp_path / "site" / "runs" / row["page"] / "index.html").read_text(encoding="utf-8")
    assert page.count("<dt>provider_pin</dt>") == 4


@pytest.mark.parametrize(("flag", "value"), [("--actor-request-param", "temperature=1"),
                                             ("--judge-request-param", "max_tokens=5"),
                                             ("--nsp-request-param", "top_p=0.5")])
def test_a_parameter_the_protocol_fixes_is_refused_in_one_line(tmp_path, capsys, flag, value):
    assert cli.main(["coser", "run", str(tmp_path / "run"), "--actor-model", "a", "--no-api-key", "--base-url",
                     "http://127.0.0.1:9/v1", flag, value]) == 2
    err = capsys.readouterr().err
    key = value.partition("=")[0]
    assert err == f"error: {flag[2:].partition('-')[0]} request parameter {key!r} cannot be set: the CoSER protocol " \
                  "fixes it (seed 004 H26)\n"
    assert not (tmp_path / "run").exists()


def test_a_router_counts_as_one_provider_only_with_a_pin(tmp_path):
    from charactereval_lib.apps.leaderboard import read_runs
    from charactereval_lib.coser.eligibility import SPEC
    from charactereval_lib.testing.leaderboard_runs import coser_run as synthetic_run

    def roles(pins):
        fixed = VERSIONS["coser-paper"].models
        models = {"actor": "a", **{r: fixed.of(r) for r in FIXED_ROLES}, "repair": "claude-3-5-sonnet-20240620"}
        return {"roles": {role: {"model": model, "backend": "openai",
                                 **({"request_params": {"provider": pins[role]}} if role in pins else {})}
                          for role, model in models.items()}}

    everyone = dict.fromkeys(("actor", "env", "nsp", "judge", "repair"), ROUTER)
    pinned = {role: PIN for role in ("actor", "env", "nsp", "judge", "repair")}
    synthetic_run(tmp_path / "pinned", actor="a", endpoints=everyone, identity=roles(pinned), scenes=4, repeats=1)
    synthetic_run(tmp_path / "unpinned", actor="a", endpoints=everyone,
                  identity=roles({**pinned, "actor": {"only": ["x", "y"], "allow_fallbacks": False},
                                  "nsp": {"only": ["openai"]}}), scenes=4, repeats=1)
    synthetic_run(tmp_path / "azure", actor="a", endpoints=everyone,
                  identity=roles({**pinned, "judge": {"only": ["azure"], "allow_fallbacks": False}}), scenes=4,
                  repeats=1)
    views, _ = read_runs([tmp_path], {})
    one_host = {v.path.name: [r for r in SPEC.check(v) if r.startswith("one-host")] for v in views}
    assert one_host["pinned"] == []
    assert [r.split(" role ")[0] for r in one_host["unpinned"]] == ["one-host: the actor", "one-host: the nsp"]
    assert all("pin none" in r for r in one_host["unpinned"])
    assert one_host["azure"] == ["one-host: the judge role is pinned to the provider 'azure' on openrouter.ai; the "
                                 "protocol's judge model is served by 'openai'"]


# --- item 5: family rules on provider-prefixed ids --------------------------------------------------


@pytest.mark.parametrize(("actor", "protocol", "system_as_user", "suffix"), [
    ("anthropic/claude-3.5-sonnet", "coser-paper", True, False),
    ("openai/o1-mini", "coser-paper", True, False),
    ("meta-llama/llama-3.1-70b-instruct", "coser-head", False, True),
    ("mock-actor", "coser-paper", False, False),
])
def test_a_provider_prefixed_id_gets_its_familys_rules_on_the_wire(tmp_path, actor, protocol, system_as_user, suffix):
    from charactereval_lib.testing.coser_script import role_of

    run = tmp_path / "run"
    with MockServer(reply=scripted_reply) as server:
        assert cli.main(["coser", "run", str(run), "--preset", "smoke", "--limit", "1", "--actor-model", actor,
                         "--protocol", protocol, "--base-url", server.base_url, "--no-api-key", "--data-dir",
                         str(data_dir()), "--retry-base-delay", "0.01", "--quiet"]) == 0
    actor_calls = [p for p in server.received if role_of(p) == "actor"]
    assert actor_calls and all(p["model"] == actor for p in actor_calls)
    for payload in actor_calls:
        first = payload["messages"][0]
        assert first["role"] == ("user" if system_as_user else "system")
        assert all(m["role"] != "system" for m in payload["messages"]) == system_as_user
        assert ("Start your response with" in first["content"]) == suffix
    # The other roles keep theirs: the fixed GPT-4o snapshots take a system message.
    assert all(p["messages"][0]["role"] == "system" for p in server.received if role_of(p) in ("env", "nsp", "judge"))
