"""Judge inputs and scores against the golden vectors: 200 critic-prompt sets (800 prompts),
their reference texts and profile blocks, the 700 judge inputs' links, 2,800 dimension scores
(both variants, value and type), 700 scene scores and the 7 per-model average blocks."""

from __future__ import annotations

from functools import lru_cache

from charactereval_lib.coser import judge as J
from charactereval_lib.coser.data import load_test_set
from charactereval_lib.coser.prompts import involved_character_profiles
from charactereval_lib.coser.upstream import DIMENSIONS, load_critic_prompts
from charactereval_lib.coser.versions import COSER_HEAD, COSER_PAPER
from tests.coser_golden import data_dir, golden


@lru_cache(maxsize=None)
def scenes():
    return {s.key: s for s in load_test_set(data_dir())}


def legacy_profiles(scene):
    """The profiles stored in the recorded gpt-4o simulation (an older generator): the book
    profile alone, stripped, characters without one left out."""
    raw = scene.raw
    profiles = {}
    for name in raw["speaking_characters_w_env"]:
        text = raw["character_profiles"].get(name, "").strip(" \n")
        if text:
            profiles[name] = text
    return profiles


def exact(a, b) -> bool:
    return type(a) is type(b) and repr(a) == repr(b)


def test_critic_prompts_reference_and_profiles_of_all_200_sets():
    critic = load_critic_prompts(data_dir())
    sets = golden("judge_critic_prompts.jsonl")
    assert len(sets) == 200
    bad = []
    for cs in sets:
        scene = scenes()[cs["scene_key"]]
        profiles = legacy_profiles(scene) if "gpt-4o" in cs["used_by_models"] else involved_character_profiles(scene)
        if J.character_profile_str(profiles) != cs["character_profile_str"]:
            bad.append((cs["critic_prompt_set_id"], "profiles"))
        for version in (COSER_PAPER, COSER_HEAD):  # HEAD builds identical critic prompts here
            if J.reference_str(scene.raw["dialogues"], version) != cs["reference_str"]:
                bad.append((cs["critic_prompt_set_id"], version.name, "reference"))
            if J.scene_critic_prompts(critic, scene.raw, profiles, version) != cs["critic_prompts"]:
                bad.append((cs["critic_prompt_set_id"], version.name, "critic prompts"))
        assert cs["major_characters"] == scene.raw["major_characters"]
    assert bad == []
    # The literal placeholder survives in every Character Fidelity prompt, and only there.
    assert all("{major_characters}" in cs["critic_prompts"]["Character Fidelity"] for cs in sets)


def test_judge_inputs_link_to_the_critic_prompts():
    sets = {cs["critic_prompt_set_id"]: cs for cs in golden("judge_critic_prompts.jsonl")}
    inputs = golden("judge_inputs.jsonl")
    assert len(inputs) == 700
    for record in inputs:
        cs = sets[record["critic_prompt_set_id"]]
        assert cs["scene_key"] == record["scene_key"] and record["reference_str"] == cs["reference_str"]
        assert record["model"] in cs["used_by_models"]
        assert record["messages_roles"] == ["system", "user"]


def test_all_2800_dimension_scores_and_700_scene_scores():
    records = golden("scores.jsonl")
    assert len(records) == 700
    bad = []
    checked = 0
    for r in records:
        n = r["n_actor_rounds"]
        per_dim = {}
        for dim in DIMENSIONS:
            gold = r["dimensions"][dim]
            scores = J.score_dimension(r["recorded_critique"][dim], n)
            per_dim[dim] = scores
            checked += 1
            if not (exact(scores["score"], gold["paper_score_official"]) and exact(scores["score"], gold["recorded_score"])):
                bad.append((r["model"], r["scene_key"], dim, "paper"))
            if not exact(scores["score_clipped"], gold["head_score_official"]):
                bad.append((r["model"], r["scene_key"], dim, "head"))
            if J.severity_sum(r["recorded_critique"][dim]["flaws"]) != gold["int_severity_sum"]:
                bad.append((r["model"], r["scene_key"], dim, "severity"))
        paper = J.scene_score([per_dim[d]["score"] for d in DIMENSIONS])
        head = J.scene_score([per_dim[d]["score_clipped"] for d in DIMENSIONS])
        if not (exact(paper, r["overall"]["paper_official"]) and exact(paper, r["recorded_critique"]["score"])):
            bad.append((r["model"], r["scene_key"], "overall paper"))
        if not exact(head, r["overall"]["head_official"]):
            bad.append((r["model"], r["scene_key"], "overall head"))
    assert checked == 2800
    assert bad == []


def test_order_of_operations_matters():
    # S=17, n=18: the official order gives 41.99999999999999, the rearranged formula 42.0.
    assert J.dimension_score(17, 18) == 41.99999999999999
    assert 100 - 5 * 17 + 1.5 * 18 == 42.0
    assert J.dimension_score(40, 1) == 0 and type(J.dimension_score(40, 1)) is int
    assert J.clipped_score(104.5) == 100 and type(J.clipped_score(104.5)) is int


def test_the_7_per_model_average_blocks():
    records = golden("scores.jsonl")
    blocks = golden("score_averages.jsonl")
    assert len(blocks) == 7
    for block in blocks:
        mine = [r for r in records if r["model"] == block["model"]]
        paper_cases = [{d: J.score_dimension(r["recorded_critique"][d], r["n_actor_rounds"])["score"] for d in DIMENSIONS} for r in mine]
        head_cases = [{d: J.score_dimension(r["recorded_critique"][d], r["n_actor_rounds"])["score_clipped"] for d in DIMENSIONS} for r in mine]
        # TTR needs the recorded simulations, which are not in the data: compare the rest.
        official = {k: v for k, v in block["paper_official_scores_block"].items() if not k.startswith("ttr")}
        paper = J.scores_block(paper_cases, COSER_PAPER)
        assert {k: (type(v), repr(v)) for k, v in paper.items()} == {k: (type(v), repr(v)) for k, v in official.items()}
        assert block["recorded_scores_block"] == block["paper_official_scores_block"]
        head = J.scores_block(head_cases, COSER_HEAD)
        assert repr(head) == repr(block["head_official_unrounded"])
