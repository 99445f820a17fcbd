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

DOCS = Path(__file__).resolve().parents[1] / "docs" / "coser-versions.md"
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
def test_a_full_run_with_every_default_is_eligible_on_its_board(tmp_path):
    """600 sessions (200 scenes x 3) through the real engine, then `leaderboard`."""
    run = tmp_path / "runs" / "default-full"
    with MockServer(reply=scripted_reply, keep_payloads=False) as server:
        coser_run(run, server.base_url, preset="full")
    assert cli.main(["leaderboard", str(tmp_path / "runs"), "--out", str(tmp_path / "site")]) == 0
    [entry] = json.loads((tmp_path / "site" / "leaderboard.json").read_text(encoding="utf-8"))["boards"]
    [row] = entry["rows"]
    assert entry["protocol_version"] == "coser-paper" and entry["scorer"] == "judge gpt-4o-2024-08-06"
    assert row["reasons"] == [] and row["eligible"] and row["n"] == 600
