"""CoSER prompt building: the actors', the environment's and the NSP agent's system prompts.

Upstream builds these in ``get_character_prompt`` / ``get_environment_prompt`` /
``get_nsp_prompt`` of each version's utils.py and finishes them in ``Agent``. Their wording is
not restated here: the skeletons (f-strings, output formats, decorators, the environment's
self-descriptions) are read at run time from the scene's pinned, verified utils.py
(``upstream.load_prompt_skeletons``); the golden prompt vectors (``prompts_paper/head/
variants.jsonl``, 560 scenes x agents) pin the result. What ``Agent`` adds (the actors' length
rule and the name suffix) is read the same way from the version's agent.py
(``upstream.load_agent_additions``). Only the conversation-start marker, a format delimiter that
upstream's entry points (not among the pinned files) send as the first user message, is written
here.

Randomness: two choices per agent come from a ``random.Random``: the decorator put before each
other character's profile (one draw per actor whenever the scene has any profile) and the
environment's self-description (one draw). Upstream draws them from one process-wide stream;
``prompt_stream`` replays that stream exactly, ``scene_rng`` is the per-scene stream that real,
concurrent runs use (a recorded platform choice).
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from charactereval_lib.coser.data import Scene
from charactereval_lib.coser.upstream import AgentAdditions, PromptSkeletons, load_agent_additions, load_prompt_skeletons
from charactereval_lib.coser.versions import ProtocolVersion

ENVIRONMENT = "Environment"
NSP = "NSP"
CONVERSATION_START = "===Conversation Start===\n\n"
PROCESS_SEED = 42


def skeletons(scene: Scene, version: ProtocolVersion) -> PromptSkeletons:
    """The prompt skeletons of ``version``'s utils.py in the scene's data directory."""
    return load_prompt_skeletons(version.name, scene.data_dir)


@dataclass(frozen=True)
class ModelRules:
    """Per-role model-name rules of upstream, as explicit flags (defaults: ``default_rules``)."""

    system_role: str  # "system", or "user" when the family takes no system message
    name_suffix: bool  # append the name suffix of agent.py (asks the reply to start with the name)
    output_example: bool  # actors: the output-format line carries the e.g./such-as examples
    # actors: replies go through `text.fix_repeation` (upstream: every model but GPT and Claude)
    fix_repetition: bool = False


def default_rules(model: str, version: ProtocolVersion) -> ModelRules:
    """Upstream's model-name rules for one agent's model.

    - system message sent as ``user`` for ``claude*`` and ``o1*`` (both versions);
    - name suffix: paper for ``llama3p1-8b-instruct``, ``llama31-70-chat`` and any name containing
      ``step``; HEAD (d7cee90) for names starting with ``llama`` or ``step``;
    - no output example: HEAD for names containing ``coser`` (any case); paper for the CoSER
      fine-tune ``llama3-1210-8epc`` (the only paper-era name the golden vectors pin; pass the flag
      explicitly for other fine-tunes);
    - repetition fix of actor replies for every model whose name contains neither ``gpt`` nor
      ``claude`` (both versions).

    Upstream tests the name string as given, so a router's provider-prefixed id
    (``anthropic/claude-3.5-sonnet``, ``openai/o1-mini``, ``meta-llama/llama-3.1-70b-instruct``)
    would fall out of its family. The rules read the name after the last ``/`` instead, as the
    earlier platform's family table did (seed 004 H06, F23, K12); a name without ``/`` (every name
    the golden vectors pin) is tested exactly as upstream tests it."""
    name = model.rsplit("/", 1)[-1]
    system_role = "user" if name.startswith(("claude", "o1")) else "system"
    if version.name_suffix_rule == "paper":
        name_suffix = name in ("llama3p1-8b-instruct", "llama31-70-chat") or "step" in name
        output_example = not (name == "llama3-1210-8epc" or "coser" in name.lower())
    else:
        name_suffix = name.startswith(("llama", "step"))
        output_example = "coser" not in name.lower()
    fix_repetition = not any(family in name.lower() for family in ("gpt", "claude"))
    return ModelRules(system_role=system_role, name_suffix=name_suffix, output_example=output_example,
                      fix_repetition=fix_repetition)


@dataclass
class AgentPrompt:
    """One agent of a scene with its prompts and the random draw its prompt consumed."""

    name: str
    kind: str  # "actor", "env" or "nsp"
    model: str
    rules: ModelRules
    raw_prompt: str
    system_prompt: str
    rng_draw: dict[str, Any] | None = None
    initial_messages: list[dict[str, str]] = field(default_factory=list)


def involved_character_profiles(scene: Scene) -> dict[str, str]:
    """Simulation step "involved profiles" (paper 93c1474): for each speaking character except
    the Environment, the plot's ``key_characters[].description`` (when present), a blank line and
    the book profile, stripped of spaces/newlines; characters with an empty result are left out."""
    raw = scene.raw
    plot_characters = {c.get("name"): c for c in raw["plot"].get("key_characters", [])}
    profiles = {}
    for name in raw["speaking_characters_w_env"]:
        if name == ENVIRONMENT:
            continue
        profile = raw["character_profiles"].get(name, "")
        info = plot_characters.get(name)
        if info is not None and "description" in info:
            profile = info["description"].strip(" \n") + "\n\n" + profile.strip(" \n")
        profile = profile.strip(" \n")
        if profile:
            profiles[name] = profile
    return profiles


def speakers_with_environment(scene: Scene) -> list[str]:
    """The scene's speakers: ``speaking_characters_w_env`` with the Environment appended when
    absent (upstream mutates the list, so the NSP candidates include it)."""
    names = list(scene.raw["speaking_characters_w_env"])
    if ENVIRONMENT not in names:
        names.append(ENVIRONMENT)
    return names


def agent_order(scene: Scene) -> list[str]:
    """Agent creation order: the speakers (Environment at its listed place, else last), then
    the NSP agent. Random draws follow this order."""
    return speakers_with_environment(scene) + [NSP]


def _draw(rng: random.Random, population: tuple[str, ...], purpose: str, counter: list[int]) -> tuple[str, dict]:
    value = rng.choice(population)
    index = population.index(value)  # the populations have distinct members
    counter[0] += 1
    return value, {
        "draw_no": counter[0] - 1,
        "population_size": len(population),
        "index": index,
        "value": population[index],
        "purpose": purpose,
    }


def actor_prompt(
    scene: Scene,
    character: str,
    profiles: dict[str, str],
    decorator: str,
    version: ProtocolVersion,
    *,
    thoughtless: bool,
    output_example: bool,
) -> str:
    """Upstream step "character prompt" (``get_character_prompt``, fixed template): identity,
    own profile, scenario, the other characters' profiles each behind ``decorator``, inner
    thoughts (read from ``version.thought_key``, so always empty at HEAD), requirements."""
    raw = scene.raw
    sk = skeletons(scene, version)
    thought = ""
    for entry in raw["key_characters"]:
        if entry.get("name") == character:
            thought = entry.get(version.thought_key, "")
    others = "".join(sk.other_profile_line.render({"decorator": decorator, "other_character": name, "profile": text})
                     for name, text in profiles.items() if name != character)
    if thoughtless:
        output_format = sk.output_thoughtless
    else:
        output_format = sk.output_thought_example if output_example else sk.output_thought
    # The profile section is there even when the character has no profile (13 actors).
    prompt = sk.character_head.render({
        "character": character, "book_name": raw["book"], "character_profile": profiles.get(character, ""),
        "scenario": raw["scenario"],
        "other_character_profiles_str": sk.others_section.render({"other_character_profiles_str": others})
        if others else "",
        sk.thought_param: sk.thought_section.render({sk.thought_param: thought}) if thought else "",
    })
    return prompt + sk.requirements.render({"output_format": output_format})


def environment_prompt(scene: Scene, role: str, version: ProtocolVersion) -> str:
    """Upstream step "environment prompt" (``get_environment_prompt``): the main characters are
    the scene's ``major_characters`` list (not the speaking list) without the Environment, shown
    as a Python list."""
    majors = [name for name in scene.raw["major_characters"] if name != ENVIRONMENT]
    return skeletons(scene, version).environment.render(
        {"random.choice(model_roles)": role, "major_characters": majors, "scenario": scene.raw["scenario"]})


def nsp_prompt(scene: Scene, version: ProtocolVersion) -> str:
    """Upstream step "NSP prompt" (``get_nsp_prompt``): the candidate list is
    ``speaking_characters_w_env`` after upstream appended a missing Environment to it, shown as
    a Python list; HEAD's (958f962) ends with an output-format block."""
    sk = skeletons(scene, version)
    return sk.nsp.render({**sk.nsp_constants, "all_characters": speakers_with_environment(scene),
                          "scenario": scene.raw["scenario"]})


def finish_system_prompt(raw_prompt: str, kind: str, name: str, rules: ModelRules, additions: AgentAdditions) -> str:
    """Upstream step "Agent init": strip newlines, add the actors' length rule, then the
    name suffix (glued without a separator, which shows after the NSP prompt's final ``].``);
    both read from the version's agent.py."""
    prompt = raw_prompt.strip("\n")
    if kind == "actor":
        prompt += additions.actor_rule
    if rules.name_suffix:
        prompt += additions.name_suffix.render({"name": name})
    return prompt


def initial_messages(system_prompt: str, rules: ModelRules) -> list[dict[str, str]]:
    """An agent's messages once the conversation starts. When the system prompt is sent as a
    user message, the start marker merges into it (two user messages in a row are joined)."""
    if rules.system_role == "user":
        return [{"role": "user", "content": system_prompt + "\n\n" + CONVERSATION_START}]
    return [{"role": "system", "content": system_prompt}, {"role": "user", "content": CONVERSATION_START}]


def build_scene_agents(
    scene: Scene,
    version: ProtocolVersion,
    rng: random.Random,
    *,
    actor_model: str,
    env_model: str,
    nsp_model: str,
    thoughtless: bool = False,
    rules: dict[str, ModelRules] | None = None,
    draw_counter: list[int] | None = None,
) -> list[AgentPrompt]:
    """Protocol step "create the scene's agents": every agent's prompts in creation order,
    consuming ``rng`` exactly as upstream does. ``rules`` overrides the per-role model rules
    (keys ``actor``, ``env``, ``nsp``); ``draw_counter`` numbers the draws of a shared stream."""
    counter = draw_counter if draw_counter is not None else [0]
    role_rules = {
        "actor": default_rules(actor_model, version),
        "env": default_rules(env_model, version),
        "nsp": default_rules(nsp_model, version),
    }
    role_rules.update(rules or {})
    profiles = involved_character_profiles(scene)
    additions = load_agent_additions(version.name, scene.data_dir)
    agents = []
    for name in agent_order(scene):
        if name == NSP:
            kind, model, raw, draw = "nsp", nsp_model, nsp_prompt(scene, version), None
        elif name == ENVIRONMENT:
            role, draw = _draw(rng, skeletons(scene, version).environment_roles, "environment model role phrase",
                               counter)
            kind, model, raw = "env", env_model, environment_prompt(scene, role, version)
        else:
            decorator, draw = "", None
            if profiles:
                decorator, draw = _draw(rng, skeletons(scene, version).profile_decorators, "profile decorator",
                                        counter)
            kind, model = "actor", actor_model
            raw = actor_prompt(
                scene, name, profiles, decorator, version,
                thoughtless=thoughtless, output_example=role_rules["actor"].output_example,
            )
        agent_rules = role_rules[kind]
        system_prompt = finish_system_prompt(raw, kind, name, agent_rules, additions)
        agents.append(
            AgentPrompt(
                name=name, kind=kind, model=model, rules=agent_rules, raw_prompt=raw,
                system_prompt=system_prompt, rng_draw=draw,
                initial_messages=initial_messages(system_prompt, agent_rules),
            )
        )
    return agents


@dataclass
class StreamedScene:
    """A scene's agents plus where the shared stream stood when the scene started."""

    scene: Scene
    agents: list[AgentPrompt]
    draw_no_at_start: int
    state_sha256_at_start: str


def prompt_stream(scenes: Iterable[Scene], version: ProtocolVersion, **agent_kwargs: Any) -> Iterator[StreamedScene]:
    """Upstream's process-wide random stream, replayed: ``random.seed(42)`` once (HEAD), or
    again at the first scene of each test file (paper reseeds per generate call, i.e. when
    the ``tag`` changes from ``id`` to ``ood``). Exact only when no dialogue draws (NSP
    fallbacks, HTTP retries) happen between scenes, as in the golden protocol."""
    rng = random.Random()
    counter = [0]
    current_file = None
    for scene in scenes:
        if current_file is None or (version.reseed_per_test_file and scene.tag != current_file):
            rng.seed(PROCESS_SEED)
            counter = [0]
        current_file = scene.tag
        start, state = counter[0], hashlib.sha256(repr(rng.getstate()).encode()).hexdigest()
        agents = build_scene_agents(scene, version, rng, draw_counter=counter, **agent_kwargs)
        yield StreamedScene(scene, agents, start, state)


def scene_rng(scene_key: str, seed: int = PROCESS_SEED) -> random.Random:
    """Platform choice for real (concurrent) runs: each scene's own stream, seeded from the
    SHA-256 of ``"{seed}:{scene_key}"``, so a scene's prompts and fallbacks do not depend on
    which scenes ran before it, on retries, or on scheduling."""
    digest = hashlib.sha256(f"{seed}:{scene_key}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))
