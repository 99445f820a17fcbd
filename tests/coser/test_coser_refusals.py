"""Refusals in a CoSER simulation (seed 004 H16, H17): a declined actor, Environment or NSP call
takes the empty-reply path (retried at temperature 1, kept empty after the version's last
attempt) and its turn is marked ``refused``; a 403 without a refusal marker is a failed call, not a
refusal. Real HTTP to the local mock server with the deterministic CoSER script."""

from __future__ import annotations

import asyncio
import json

import pytest

from charactereval_lib.coser.benchmark import SCENES, TURNS
from charactereval_lib.coser.data import load_test_set
from charactereval_lib.coser.prompts import NSP
from charactereval_lib.coser.run import PRESETS, run_coser, select_scenes, start_run
from charactereval_lib.coser.simulation import RoleClients, RoleSettings, SimulationSettings, reply_with_retries
from charactereval_lib.coser.upstream import load_critic_prompts
from charactereval_lib.coser.versions import COSER_HEAD, COSER_PAPER
from charactereval_lib.engine.generation.backends import BackendOptions, make_backend
from charactereval_lib.engine.generation.base import STATUS_OK, DecodingParams, GenerationRequest
from charactereval_lib.engine.generation.engine import run_closing
from charactereval_lib.engine.generation.retry import RetryPolicy
from charactereval_lib.engine.storage.artifacts import read_jsonl
from charactereval_lib.engine.storage.runs import RunDir
from charactereval_lib.testing.coser_script import refusal_plan, scripted_reply
from charactereval_lib.testing.mockserver import MockServer
from tests.coser_golden import data_dir

DECLINING = ["refusal", "finish_filter", "filter400", "moderation403"]
FAST = RetryPolicy(max_attempts=4, base_delay_s=0.01, max_delay_s=0.05, timeout_s=5)


# --- the engine: which answers are declined calls --------------------------------------------------


@pytest.mark.parametrize("action, refusal, content_filter, status", [
    ("refusal", True, False, None),
    ("finish_filter", False, True, None),
    ("filter400", False, True, 400),
    ("moderation403", False, True, 403),
    ("403", False, False, 403),
    ("401", False, False, 401),
    ("bad400", False, False, 400),
])
def test_the_engine_marks_only_explicitly_declined_calls(action, refusal, content_filter, status, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-refusals")
    with MockServer(plan=lambda key, attempt, payload: action) as server:
        backend = make_backend("openai", "m", DecodingParams.resolve(),
                               BackendOptions(base_url=server.base_url, concurrency=1, policy=FAST))
        request = GenerationRequest(0, "actor", [{"role": "user", "content": "hello"}])
        result = run_closing(backend, lambda: backend.call(request))
    assert (result.refusal, result.content_filter) == (refusal, content_filter)
    assert result.attempts == 1  # declined and forbidden calls are not retried by the transport
    assert (result.error or {}).get("status") == status
    assert (result.status == STATUS_OK) is (action == "refusal")


# --- the simulation step ---------------------------------------------------------------------------


def scripted_ask(answers):
    """An ``ask`` that returns the given answers in turn and records the temperatures asked for."""
    answers = iter(answers)
    asked = []

    async def ask(role, messages, temperature, max_tokens):
        asked.append(temperature)
        return next(answers)

    return ask, asked


@pytest.mark.parametrize("version, attempts", [(COSER_HEAD, 6), (COSER_PAPER, 11)])
def test_a_declined_reply_is_retried_like_an_empty_one_and_kept_empty_after_the_last_attempt(version, attempts):
    declined = {"text": "", "refused": True, "usage": None}
    ask, asked = scripted_ask([declined] * attempts)
    answer = asyncio.run(reply_with_retries(ask, "actor", [], 512, version.max_attempts))
    assert asked == [0] + [1] * (attempts - 1) and answer["temperatures"] == asked
    assert (answer["reply"], answer["refused"], answer["refusals"]) == ("", True, attempts)

    ask, asked = scripted_ask([declined, {"text": "", "usage": None}, {"text": "Hello.", "usage": None}])
    answer = asyncio.run(reply_with_retries(ask, "actor", [], 512, version.max_attempts))
    assert asked == [0, 1, 1] and (answer["reply"], answer["refused"], answer["refusals"]) == ("Hello.", True, 1)

    ask, asked = scripted_ask([{"text": "Hi.", "usage": None}])
    answer = asyncio.run(reply_with_retries(ask, "actor", [], 512, version.max_attempts))
    assert (answer["reply"], answer["refused"], answer["refusals"]) == ("Hi.", False, 0)


# --- end to end ------------------------------------------------------------------------------------


def smoke_run(run, server, version=COSER_PAPER) -> dict:
    """A smoke run (1 id + 1 ood scene) through the library API against the mock server."""
    settings = SimulationSettings(
        version=version,
        **{role: RoleSettings("mock-" + role, base_url=server.base_url, api_key_env="")
           for role in ("actor", "env", "nsp", "judge")})
    preset = PRESETS["smoke"]
    scenes = select_scenes(load_test_set(data_dir()), preset)
    critic = load_critic_prompts(data_dir())
    run_dir = RunDir(run)
    start_run(run_dir, settings, preset, scenes, str(data_dir()))
    clients = RoleClients(settings, policy=RetryPolicy(base_delay_s=0.01, timeout_s=5))
    return run_closing(clients, lambda: run_coser(run_dir, scenes, settings, preset, critic, clients))


def simulations(run) -> dict:
    return {(r["repeat"], r["scene"]): r["simulation"] for r in read_jsonl(run / SCENES).records
            if r["status"] == "done"}


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory):
    run = tmp_path_factory.mktemp("refusals") / "clean"
    with MockServer(reply=scripted_reply) as server:
        assert smoke_run(run, server)["errors"] == []
    return run


def test_declined_first_attempts_of_every_role_are_retried_at_temperature_1_marked_and_the_run_completes(
        clean_run, tmp_path):
    run = tmp_path / "declined"
    plan = refusal_plan(DECLINING, share=2, roles=("actor", "env", "nsp"))
    with MockServer(reply=scripted_reply, plan=plan) as server:
        outcome = smoke_run(run, server)
    assert outcome["errors"] == []
    assert set(DECLINING) <= set(server.actions)
    turns = read_jsonl(run / TURNS).records
    assert all(isinstance(t["refused"], bool) for t in turns)  # on every turn record
    refused = [t for t in turns if t["refused"]]
    assert {t["kind"] for t in refused} == {"actor", "env", "nsp"}
    assert all(t["temperatures"] == [0, 1] and t["refusals"] == 1 and t["reply"] for t in refused)
    assert all(t["temperatures"] == [0] and t["refusals"] == 0 for t in turns if not t["refused"])
    # The script's actors answer the same at any temperature: the retried turns recover the scene.
    assert simulations(run) == simulations(clean_run)
    manifest = json.loads((run / "run.json").read_text())
    assert "refusal_rule" in manifest["coser"]["identity"]


def test_an_actor_that_always_declines_leaves_an_empty_message_after_six_calls_at_head(tmp_path):
    run = tmp_path / "always"
    plan = refusal_plan(["refusal", "moderation403"], share=3, refused_attempts=99)
    with MockServer(reply=scripted_reply, plan=plan) as server:
        outcome = smoke_run(run, server, COSER_HEAD)
    assert outcome["errors"] == []
    refused = [t for t in read_jsonl(run / TURNS).records if t["refused"]]
    assert refused
    for turn in refused:
        assert turn["temperatures"] == [0, 1, 1, 1, 1, 1] and turn["refusals"] == 6 and turn["reply"] == ""
    stored = [m for sim in simulations(run).values() for m in sim if m["role"] != NSP]
    assert sum(m["content"] == "" for m in stored) == len(refused)  # HEAD stores the reply without a prefix
    assert len(simulations(run)) == 2


def test_a_403_without_a_refusal_marker_is_a_failed_call_not_a_refusal(tmp_path):
    run = tmp_path / "forbidden"
    with MockServer(reply=scripted_reply, plan=refusal_plan(["403"], share=1)) as server:
        outcome = smoke_run(run, server)
    assert len(outcome["errors"]) == 2 and all("actor call failed" in e for e in outcome["errors"])
    assert not [t for t in read_jsonl(run / TURNS).records if t["refused"]]
    stopped = [r for r in read_jsonl(run / SCENES).records if r["status"] == "error"]
    assert len(stopped) == 2 and all(r["error"]["status"] == 403 for r in stopped)
    assert server.actions["403"] == 2  # not retried


def test_a_judge_that_declines_every_attempt_fails_the_dimension_with_its_reason(tmp_path):
    def plan(key, attempt, payload):
        system = payload["messages"][0]["content"]
        declines = system.startswith("You are a literary critic") and system.count("Anthropomorphism") > 1
        return "finish_filter" if declines else "ok"

    run = tmp_path / "judge"
    with MockServer(reply=scripted_reply, plan=plan) as server:
        assert smoke_run(run, server, COSER_HEAD)["errors"] == []
    judged = [r for r in read_jsonl(run / "coser_judgements.jsonl").records if r.get("kind") == "dimension"]
    failed = [r for r in judged if r["status"] == "failed"]
    assert {r["dimension"] for r in failed} == {"Anthropomorphism"} and len(failed) == 2
    assert all(len(r["attempts"]) == 6 and "Anthropomorphism" in r["reason"] for r in failed)
    assert all(r["status"] == "ok" for r in judged if r["dimension"] != "Anthropomorphism")
