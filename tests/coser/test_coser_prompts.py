"""Agent prompts of all 200 scenes in both versions (and the model variants) equal the golden
vectors, including the process-wide random stream each scene starts from."""

from __future__ import annotations

from functools import lru_cache

import pytest

from charactereval_lib.coser.data import load_test_set
from charactereval_lib.coser.prompts import CONVERSATION_START, ModelRules, build_scene_agents, involved_character_profiles, prompt_stream, scene_rng
from charactereval_lib.coser.upstream import load_agent_additions
from charactereval_lib.coser.versions import COSER_HEAD, COSER_PAPER, get_version
from tests.coser_golden import data_dir, golden

VERSION = {"paper": COSER_PAPER, "head": COSER_HEAD}


@lru_cache(maxsize=None)
def scenes():
    return tuple(load_test_set(data_dir()))


@lru_cache(maxsize=None)
def streamed(version_name: str, actor_model: str, env_model: str, nsp_model: str, thoughtless: bool):
    return tuple(
        prompt_stream(
            scenes(), VERSION[version_name],
            actor_model=actor_model, env_model=env_model, nsp_model=nsp_model, thoughtless=thoughtless,
        )
    )


def agent_view(agent) -> dict:
    return {
        "name": agent.name, "kind": agent.kind, "model": agent.model, "system_role": agent.rules.system_role,
        "raw_prompt": agent.raw_prompt, "system_prompt": agent.system_prompt,
    }


def golden_view(agent: dict) -> dict:
    return {k: agent[k] for k in ("name", "kind", "model", "system_role", "raw_prompt", "system_prompt")}


def standard_messages(agent) -> bool:
    return agent.initial_messages == [
        {"role": agent.rules.system_role, "content": agent.system_prompt},
        {"role": "user", "content": CONVERSATION_START},
    ]


@pytest.mark.parametrize("name", ["paper", "head"])
def test_canonical_prompts_of_all_200_scenes(name):
    records = golden(f"prompts_{name}.jsonl")
    assert len(records) == 200
    first = records[0]
    ours = streamed(name, first["actor_model"], first["env_model"], first["nsp_model"], False)
    mismatches = []
    agents_checked = 0
    for record, got in zip(records, ours, strict=True):
        assert got.scene.key == record["scene_key"] and got.scene.index == record["scene_index"]
        if involved_character_profiles(got.scene) != record["involved_character_profiles"]:
            mismatches.append((record["scene_index"], "involved profiles"))
        rng = record["rng"]
        if (got.draw_no_at_start, got.state_sha256_at_start) != (rng["draw_no_at_start"], rng["state_sha256_at_start"]):
            mismatches.append((record["scene_index"], "rng start"))
        draws = [{k: v for k, v in a.rng_draw.items() if k != "purpose"} for a in got.agents if a.rng_draw]
        if draws != rng["draws"]:
            mismatches.append((record["scene_index"], "draws"))
        assert len(got.agents) == len(record["agents"])
        for ours_agent, gold in zip(got.agents, record["agents"]):
            agents_checked += 1
            if agent_view(ours_agent) != golden_view(gold) or ours_agent.rng_draw != gold["rng_draw"]:
                mismatches.append((record["scene_index"], ours_agent.name))
            if standard_messages(ours_agent) != gold["initial_messages_standard"]:
                mismatches.append((record["scene_index"], ours_agent.name, "initial messages"))
    assert mismatches == []
    assert agents_checked == sum(len(r["agents"]) for r in records)


def _variant_settings(record):
    args = record["extra_cli_args"]
    return record["version"], record["actor_model"], "gpt-4o", record["nsp_model"], "--wo_thought" in args


def test_model_variants():
    records = golden("prompts_variants.jsonl")
    assert len(records) == 160
    canonical = {name: {r["scene_index"]: r for r in golden(f"prompts_{name}.jsonl")} for name in VERSION}
    mismatches = []
    for record in records:
        ours = streamed(*_variant_settings(record))[record["scene_index"]]
        assert ours.scene.key == record["scene_key"]
        gold_agents = canonical[record["version"]][record["scene_index"]]["agents"]
        for ours_agent, gold, base in zip(ours.agents, record["agents"], gold_agents, strict=True):
            expected = golden_view(base) | {"model": ours_agent.model} if gold.get("same_as_canonical") else None
            if expected is None:
                expected = {k: gold[k] for k in ("name", "kind", "system_role", "raw_prompt", "system_prompt")}
                expected["model"] = ours_agent.model
            if agent_view(ours_agent) != expected:
                mismatches.append((record["version"], record["actor_model"], record["scene_index"], ours_agent.name))
            messages = gold.get("initial_messages")
            if messages is not None and ours_agent.initial_messages != messages:
                mismatches.append((record["actor_model"], record["scene_index"], ours_agent.name, "messages"))
            if messages is None and not standard_messages(ours_agent):
                mismatches.append((record["actor_model"], record["scene_index"], ours_agent.name, "standard"))
    assert mismatches == []


def test_rules_can_be_overridden_per_role():
    scene = scenes()[0]
    forced = ModelRules(system_role="user", name_suffix=True, output_example=False)
    agents = build_scene_agents(
        scene, COSER_PAPER, scene_rng(scene.key), actor_model="gpt-4o", env_model="gpt-4o",
        nsp_model="gpt-4o", rules={"actor": forced},
    )
    actor = agents[0]
    assert actor.rules == forced and actor.initial_messages[0]["role"] == "user"
    suffix = load_agent_additions("coser-paper", data_dir()).name_suffix.render({"name": actor.name})
    assert actor.system_prompt.endswith(suffix) and f'"{actor.name}: "' in suffix
    assert all(a.rules.system_role == "system" for a in agents if a.kind != "actor")


def test_scene_stream_is_independent_of_order():
    first = scene_rng("Book-1-0").random()
    scene_rng("Other-2-0").random()
    assert scene_rng("Book-1-0").random() == first
    assert scene_rng("Book-1-0", seed=7).random() != first


def test_version_lookup():
    assert get_version("coser-paper") is COSER_PAPER
    with pytest.raises(ValueError, match="unknown CoSER protocol version"):
        get_version("coser-2024")


# --- the skeletons come from the pinned utils.py, never from this project's source -------------


def test_prompts_py_restates_no_wording_of_the_upstream_skeletons():
    import inspect

    from charactereval_lib.coser import prompts
    from charactereval_lib.coser.upstream import load_prompt_skeletons

    source = inspect.getsource(prompts)
    for name in ("coser-paper", "coser-head"):
        sk = load_prompt_skeletons(name, data_dir())
        added = load_agent_additions(name, data_dir())
        texts = [sk.output_thoughtless, sk.output_thought, sk.output_thought_example, *sk.environment_roles,
                 added.actor_rule, *(p for p in added.name_suffix.parts if isinstance(p, str))]
        for template in (sk.character_head, sk.thought_section, sk.others_section, sk.requirements, sk.environment,
                         sk.nsp):
            texts += [part for part in template.parts if isinstance(part, str)]
        # Every sentence-sized piece of upstream wording (the short markers like "===Requirements==="
        # are format, and absent too, but not worth a claim).
        pieces = [line for text in texts for line in text.split("\n") if len(line.strip()) >= 20]
        assert pieces and not [p for p in pieces if p.strip() in source], name


def test_an_altered_or_unexpected_agent_py_is_refused_in_one_line(tmp_path):
    """What Agent adds is read from the pinned agent.py of each version (hash-verified, parsed,
    never executed): an altered copy is refused, a reshaped one named in one line."""
    import shutil

    from charactereval_lib.coser.data import UPSTREAM_AGENT
    from charactereval_lib.coser.upstream import parse_agent_additions
    from charactereval_lib.engine.storage.pinned import DataError

    for version in ("coser-paper", "coser-head"):
        added = load_agent_additions(version, data_dir())
        assert added.actor_rule.startswith("\n\n") and added.name_suffix.placeholders() == {"name"}
    name = UPSTREAM_AGENT["coser-head"]
    copy = tmp_path / name
    copy.parent.mkdir(parents=True)
    shutil.copyfile(data_dir() / name, copy)
    copy.write_bytes(copy.read_bytes() + b"\n")
    with pytest.raises(DataError, match="mismatch"):
        load_agent_additions("coser-head", tmp_path)
    source = (data_dir() / name).read_bytes()
    with pytest.raises(DataError) as caught:
        parse_agent_additions(source.replace(b"class Agent:", b"class OldAgent:"), copy)
    assert "no Agent.__init__" in str(caught.value) and "\n" not in str(caught.value)
    parse_agent_additions(source + b"\nraise SystemExit('executed')\n", copy)


def test_an_altered_or_unexpected_utils_py_is_refused_in_one_line(tmp_path):
    import shutil

    from charactereval_lib.coser.data import UPSTREAM_UTILS
    from charactereval_lib.coser.upstream import load_prompt_skeletons, parse_prompt_skeletons
    from charactereval_lib.engine.storage.pinned import DataError

    name = UPSTREAM_UTILS["coser-paper"]
    copy = tmp_path / name
    copy.parent.mkdir(parents=True)
    shutil.copyfile(data_dir() / name, copy)
    copy.write_bytes(copy.read_bytes() + b"\n")
    with pytest.raises(DataError, match="mismatch"):
        load_prompt_skeletons("coser-paper", tmp_path)
    source = (data_dir() / name).read_bytes().replace(b"def get_nsp_prompt", b"def get_nsp_prompt_old")
    with pytest.raises(DataError) as caught:
        parse_prompt_skeletons(source, copy)
    assert "no function get_nsp_prompt" in str(caught.value) and "\n" not in str(caught.value)
    # Never executed: code with side effects at import time is only parsed.
    parse_prompt_skeletons((data_dir() / name).read_bytes() + b"\nraise SystemExit('executed')\n", copy)
