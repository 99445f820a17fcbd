"""CoSER simulation engine: acting a scene turn by turn, then judging it.

Protocol (both versions; the version settings select every rule that differs):

- Agents: one actor per speaking character, the Environment and the NSP agent
  (``prompts.build_scene_agents``). Round 0 is spoken by the first of ``speaking_characters_w_env``
  (or, with ``continue_from k``, by the NSP's pick after the first ``k`` original lines).
- A round: the current speaker answers (actor or Environment); the stored message gets the
  ``Name: `` prefix at paper (``store_speaker_prefix``); the speaker keeps it as its own
  (assistant) message and every other agent receives it as a user message with the inner
  thoughts removed (they are "thoughts others can't see"). Then the NSP agent predicts the next
  speaker; its parsed reply is stored as the NSP turn. ``<END CHAT>`` ends the scene from round
  index ``end_chat_from`` (the 6th turn) on; an invalid name, the current speaker (no speaker twice
  in a row), ``random`` or an early ``<END CHAT>`` falls back to one draw among the others
  (``text.nsp_fallback``, deterministic), after which HEAD re-sends the NSP system prompt as a
  user message. At most ``max_rounds`` (20) rounds.
- Messages: an agent's consecutive messages of one role are joined with a blank line, and an
  empty message is not added (pinned by the golden NSP-loop vectors).
- Calls: temperature 0 on the first attempt of a turn, 1 on each retry; an empty reply is retried
  up to ``version.max_attempts`` calls (paper 11, HEAD 6) and the last one is kept as it is.
  Transport failures (429, 5xx, resets) are retried by the engine backend at the same
  temperature; a call that still fails stops the scene, which a resumed run continues.
- Refusals (actor, Environment and NSP alike): a reply the provider marks as declined (the
  engine's ``refusal``: ``message.refusal``; or ``content_filter``: finish_reason
  ``content_filter``, or a 400/403 whose body carries a content-filter or moderation marker) is
  an empty reply: retried the same way, and kept as an empty message when every attempt is
  declined, so the scene goes on. The turn record says so (``refused``: some attempt was declined;
  ``refusals``: how many). Upstream has no such path (a declined call is an API error there).
  Account errors and a 403 without a marker are failures, not refusals. The judge gets a declined
  answer as an empty one, which it cannot read; a dimension whose attempts are all unreadable (or
  name another dimension) is a failed judgement, recorded with its reason.

Platform choices (recorded in run.json): each scene draws from its own random stream
(``prompts.scene_rng``), so scenes can run concurrently and a scene's prompts and fallbacks do
not depend on the others; the NSP fallback draws from the sorted candidates.

Served identity (``engine.generation.served``): each turn record and each dimension judgement counts what
the servers reported for its calls (``served``: model names, system fingerprints, calls that
named no model; per role in a judgement, whose repairs go to another model), and a reply that
names another served model than the role's earlier replies in the run stops the run
(``ServedModelChanged``) before it is recorded.

Crash safety: every model call of the loop is appended to ``coser_turns.jsonl`` as soon as it
returns. A resumed scene replays its recorded turns through the same loop (the same draws, the
same histories, no call sent) and continues live after the last one; a finished scene
(``coser_scenes.jsonl``) is not simulated again.
"""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from charactereval_lib.coser.data import Scene
from charactereval_lib.coser.judge import (
    actor_rounds,
    reference_str,
    run_dimension_judgement_async,
    scene_critic_prompts,
    scene_score,
    simulation_str,
)
from charactereval_lib.coser.prompts import (
    ENVIRONMENT,
    NSP,
    AgentPrompt,
    ModelRules,
    build_scene_agents,
    default_rules,
    involved_character_profiles,
    scene_rng,
    speakers_with_environment,
)
from charactereval_lib.coser.text import (
    END_CHAT,
    FULL_WIDTH_SPEAKER_SEPARATOR,
    add_speaker_name,
    fix_repeation,
    nsp_fallback,
    parse_nsp_reply,
    remove_inner_thoughts,
)
from charactereval_lib.coser.upstream import DIMENSIONS, CriticPrompts
from charactereval_lib.coser.versions import COSER_PAPER, FIXED_ROLES, ProtocolVersion
from charactereval_lib.engine import thinking
from charactereval_lib.engine.generation.base import (
    STATUS_OK,
    DecodingParams,
    GenerationRequest,
    check_request_params,
    reasoning_tokens,
)
from charactereval_lib.engine.generation.served import ServedCounts, ServedGuard

ROLES = ("actor", "env", "nsp", "judge", "repair")
# Request-body keys the protocol fixes (seed 004 H26, J19): what upstream sends (model, messages,
# temperature, max_tokens) and every other sampling control, left at the provider's default as
# upstream leaves it. A role's request parameters may set anything else (reasoning, a provider pin).
FIXED_REQUEST_PARAMS = ("model", "messages", "temperature", "max_tokens", "max_completion_tokens", "top_p", "top_k",
                        "min_p", "frequency_penalty", "presence_penalty", "repetition_penalty", "seed", "n", "stop",
                        "logit_bias", "logprobs", "top_logprobs", "response_format", "stream")


def provider_pin(request_params: Mapping[str, Any] | None) -> str | None:
    """The one provider a role's requests are pinned to on a router (OpenRouter's body key
    ``provider: {"only": [NAME], "allow_fallbacks": false}``), or None when they are not pinned to
    exactly one with fallbacks off (seed 004 H03, H27)."""
    provider = (request_params or {}).get("provider")
    if not isinstance(provider, Mapping) or provider.get("allow_fallbacks") is not False:
        return None
    only = provider.get("only")
    if isinstance(only, list) and len(only) == 1 and isinstance(only[0], str) and only[0]:
        return only[0]
    return None


class CallFailed(RuntimeError):
    """A model call failed after the backend's retries; the scene (or judgement) stops and a
    resumed run continues it."""

    def __init__(self, role: str, error: Mapping[str, Any] | None) -> None:
        error = dict(error or {})
        super().__init__(f"{role} call failed: {error.get('class', 'error')}: {error.get('message', '')}")
        self.role = role
        self.error = error


# --- settings ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RoleSettings:
    """One role's model and endpoint. ``api_key_env`` names the environment variable holding the
    key (the key itself is never stored); ``rules`` overrides upstream's model-name rules;
    ``request_params`` are further request-body keys sent with each of the role's calls
    (reasoning settings, a router's provider pin), never one of ``FIXED_REQUEST_PARAMS``."""

    model: str
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    backend: str = "openai"
    rules: ModelRules | None = None
    request_params: Mapping[str, Any] | None = None

    def resolved_rules(self, version: ProtocolVersion) -> ModelRules:
        return self.rules or default_rules(self.model, version)


@dataclass(frozen=True)
class SimulationSettings:
    """Everything that decides what a CoSER run sends and how it is judged."""

    actor: RoleSettings
    # None: the fixed model the version declares for the role (``versions.RoleModels``).
    env: RoleSettings = None  # type: ignore[assignment]
    nsp: RoleSettings = None  # type: ignore[assignment]
    judge: RoleSettings = None  # type: ignore[assignment]
    # The JSON repair call: None = the judge's endpoint with the version's repair model.
    repair: RoleSettings | None = None
    version: ProtocolVersion = COSER_PAPER
    max_rounds: int = 20
    end_chat_from: int = 5  # round index from which <END CHAT> is accepted (the 6th turn)
    max_tokens: int = 512
    continue_from: int = 0
    thoughtless: bool = False
    # A reply's leading <think> block: removed before it enters the dialogue (engine.thinking).
    keep_thinking: bool = False
    random_stream: str = "per-scene sha256(42:scene_key)"
    nsp_fallback: str = "one draw among the sorted candidates"
    refusal_rule: str = ("a declined call (message.refusal, finish_reason content_filter, or a 400/403 with a "
                         "content-filter or moderation marker) is an empty reply: retried at temperature 1, "
                         "kept empty after the last attempt, turn marked refused; a 403 without a marker fails")

    def __post_init__(self) -> None:
        for name in FIXED_ROLES:
            if getattr(self, name) is None:
                object.__setattr__(self, name, RoleSettings(self.version.models.of(name)))
        for name in ROLES:
            check_request_params(self.role(name).request_params, FIXED_REQUEST_PARAMS,
                                 "the CoSER protocol fixes it (seed 004 H26)", f"{name} request parameter")

    def role(self, name: str) -> RoleSettings:
        if name == "repair":
            if self.repair is not None:
                return self.repair
            model = self.version.fix_json_model or self.judge.model
            # The judge's parameters (its provider pin) fit the repair call only on the judge's model.
            return replace(self.judge, model=model,
                           request_params=self.judge.request_params if model == self.judge.model else None)
        return getattr(self, name)

    def rules(self) -> dict[str, ModelRules]:
        return {kind: self.role(kind).resolved_rules(self.version) for kind in ("actor", "env", "nsp")}

    def identity(self) -> dict[str, Any]:
        """What a resumed run must keep: every setting that changes what is sent or how it is
        judged (endpoints and key variable names may change between resumes; see ``endpoints``)."""
        roles = {}
        for name in ROLES:
            role = self.role(name)
            roles[name] = {"model": role.model, "backend": role.backend,
                           "rules": asdict(role.resolved_rules(self.version))}
            if role.request_params:
                # Only when set: the identity of runs without them stays what it was.
                roles[name]["request_params"] = dict(role.request_params)
        return {
            "protocol_version": self.version.name,
            "protocol": self.version.record(),
            "roles": roles,
            "max_rounds": self.max_rounds,
            "end_chat_from_round": self.end_chat_from,
            "max_tokens": self.max_tokens,
            "judge_max_tokens": self.version.judge_max_tokens,
            "temperature": "0 on a turn's first attempt, 1 on its retries",
            "continue_from": self.continue_from,
            "thoughtless": self.thoughtless,
            thinking.KEY: thinking.rule(self.keep_thinking),
            "random_stream": self.random_stream,
            "nsp_fallback": self.nsp_fallback,
            "refusal_rule": self.refusal_rule,
        }


    def endpoints(self) -> dict[str, Any]:
        """Each role's endpoint and the NAME of its key variable (never the key); with a provider
        pin on a router (``provider_pin``), the provider it names."""
        endpoints = {}
        for name in ROLES:
            role = self.role(name)
            endpoints[name] = {"base_url": role.base_url, "api_key_env": role.api_key_env}
            pin = provider_pin(role.request_params)
            if pin is not None:
                endpoints[name]["provider_pin"] = pin
        return endpoints


# --- the one chat call helper ----------------------------------------------------------------------

Ask = Callable[[str, list[dict[str, str]], float, int], Awaitable[dict[str, Any]]]


class RoleClients:
    """Every model call of a run goes through here: one engine backend per role (with the
    engine's retries and adaptive concurrency), temperature and max tokens per request."""

    def __init__(self, settings: SimulationSettings, *, concurrency: int = 64, policy: Any = None,
                 make_backend: Callable[..., Any] | None = None) -> None:
        from charactereval_lib.engine.generation.backends import BackendOptions
        from charactereval_lib.engine.generation.backends import make_backend as engine_backend
        from charactereval_lib.engine.generation.retry import RetryPolicy

        # Offline placeholder replies name their role with the full-width separator, one of the two
        # that CoSER's transcript lines take (``coser.text``); its records were made with it.
        options = BackendOptions(concurrency=concurrency, policy=policy or RetryPolicy(),
                                 offline_separator=FULL_WIDTH_SPEAKER_SEPARATOR)
        build = make_backend or engine_backend
        self._backends = {}
        self._request_params = {}
        for name in ROLES:
            role = settings.role(name)
            self._request_params[name] = dict(role.request_params) if role.request_params else None
            params = DecodingParams(max_tokens=settings.max_tokens, temperature=0,
                                    request_params=self._request_params[name])
            self._backends[name] = build(role.backend, role.model, params,
                                         replace(options, base_url=role.base_url, api_key_env=role.api_key_env))
        self._ids = itertools.count()
        self.calls: dict[str, int] = {name: 0 for name in ROLES}
        # This session's answered calls per role, as the servers reported them.
        self.served = {name: ServedCounts() for name in ROLES}
        self._guards = {name: ServedGuard(f"the {name} role") for name in ROLES}

    def establish(self, earlier: Mapping[str, ServedCounts]) -> None:
        """The models the run's recorded calls were served by, per role: a reply naming another
        one stops the run (``engine.generation.served.ServedGuard``)."""
        self._guards = {name: ServedGuard(f"the {name} role", (earlier.get(name) or ServedCounts()).models)
                        for name in ROLES}

    async def ask(self, role: str, messages: list[dict[str, str]], temperature: float, max_tokens: int
                  ) -> dict[str, Any]:
        """One call: the reply text and its record fields; CallFailed when the backend gave up.
        A declined call (see the module docstring) is no failure: an empty text, ``refused``.
        ``served``: the model name and system fingerprint the server reported (None when it
        answered nothing)."""
        params = DecodingParams(max_tokens=max_tokens, temperature=temperature, request_params=self._request_params[role])
        request = GenerationRequest(next(self._ids), role, messages, params)
        self.calls[role] += 1
        result = await self._backends[role].call(request)
        refused = result.refusal or result.content_filter
        if result.status != STATUS_OK and not refused:
            raise CallFailed(role, result.error)
        served = None
        if result.status == STATUS_OK:
            self._guards[role].check(result.model)
            served = (result.model, result.extra.get("system_fingerprint"))
            self.served[role].add(*served)
        return {"text": "" if refused else result.model_output or "", "refused": refused, "usage": result.usage,
                "attempts": result.attempts, "model": result.model, "served": served}

    async def aclose(self) -> None:
        for backend in self._backends.values():
            await backend.aclose()


async def reply_with_retries(ask: Ask, role: str, messages: list[dict[str, str]], max_tokens: int,
                             max_attempts: int) -> dict[str, Any]:
    """Simulation step "call an agent": temperature 0 first; an empty or declined reply is asked
    again at temperature 1, up to ``max_attempts`` calls, and the last reply is kept as it is (a
    declined one as empty). ``refused``: some attempt was declined; ``refusals``: how many."""
    temperatures = []
    refusals = 0
    reasoning = []
    served = ServedCounts()
    for attempt in range(max_attempts):
        temperature = 0 if attempt == 0 else 1
        temperatures.append(temperature)
        answer = await ask(role, messages, temperature, max_tokens)
        refusals += bool(answer.get("refused"))
        reasoning.append(reasoning_tokens(answer.get("usage")))
        note_served(served, answer)
        if answer["text"]:
            break
    record = {"reply": answer["text"], "temperatures": temperatures, "usage": answer["usage"],
              "refused": refusals > 0, "refusals": refusals, "served": served.as_dict()}
    if any(n is not None for n in reasoning):
        # Every attempt's reasoning tokens (``usage`` is the kept reply's only).
        record["reasoning_tokens"] = sum(n or 0 for n in reasoning)
    return record


def note_served(counts: ServedCounts, answer: Mapping[str, Any]) -> None:
    """Count what the server reported for one answered call (``RoleClients.ask``'s ``served``)."""
    if answer.get("served") is not None:
        counts.add(*answer["served"])


# --- agent histories ---------------------------------------------------------------------------------


def add_message(history: list[dict[str, str]], role: str, content: str) -> None:
    """Upstream ``Agent.update``: an empty message is not added; a message of the same role as
    the last one is joined to it with a blank line."""
    if not content:
        return
    if history and history[-1]["role"] == role:
        history[-1] = {"role": role, "content": history[-1]["content"] + "\n\n" + content}
    else:
        history.append({"role": role, "content": content})


@dataclass
class SceneState:
    """A scene's agents, histories and simulation as the loop builds them."""

    scene: Scene
    agents: dict[str, AgentPrompt]
    histories: dict[str, list[dict[str, str]]]
    speakers: list[str]
    simulation: list[dict[str, str]] = field(default_factory=list)

    def broadcast(self, speaker: str, stored: str, version: ProtocolVersion) -> None:
        """The speaker keeps its message; every other agent (the NSP included) gets it as a
        user message without the inner thoughts."""
        for name, history in self.histories.items():
            if name == speaker:
                add_message(history, "assistant", stored)
            else:
                add_message(history, "user", remove_inner_thoughts(stored, version))


@dataclass
class SceneOutcome:
    scene: Scene
    repeat: int
    simulation: list[dict[str, str]]
    ended_by: str  # "end_chat" or "max_rounds"
    rounds: int
    fallbacks: int
    profiles: dict[str, str]


TurnSource = Callable[[int, str, str, list[dict[str, str]]], Awaitable[dict[str, Any]]]


async def simulate_scene(scene: Scene, repeat: int, settings: SimulationSettings, turn: TurnSource) -> SceneOutcome:
    """Protocol step "simulate one scene" (see the module docstring). ``turn(step, kind,
    speaker, messages)`` returns ``{"reply": text, ...}`` for the ``step``-th model call of the
    scene: a recorded one on resume, else a live call that it records."""
    version = settings.version
    rng = scene_rng(scene.key)
    rules = settings.rules()
    agents = build_scene_agents(
        scene, version, rng, actor_model=settings.actor.model, env_model=settings.env.model,
        nsp_model=settings.nsp.model, thoughtless=settings.thoughtless, rules=rules,
    )
    state = SceneState(scene, {a.name: a for a in agents}, {a.name: list(a.initial_messages) for a in agents},
                       speakers_with_environment(scene))
    steps = itertools.count()
    fallbacks = 0
    rule = thinking.rule(settings.keep_thinking)

    async def predict(current: str, round_index: int) -> str | None:
        """The NSP turn: the next speaker, or None when the scene ends here."""
        nonlocal fallbacks
        answer = await turn(next(steps), "nsp", NSP, state.histories[NSP])
        parsed = parse_nsp_reply(thinking.apply(answer["reply"], rule), version)
        add_message(state.histories[NSP], "assistant", parsed)
        state.simulation.append({"role": NSP, "content": parsed})
        if parsed == END_CHAT and round_index >= settings.end_chat_from:
            return None
        if parsed in state.speakers and parsed != current:
            return parsed
        fallbacks += 1
        if version.nsp_reinject_system_prompt:
            add_message(state.histories[NSP], "user", state.agents[NSP].system_prompt)
        return nsp_fallback(state.speakers, current, rng)

    current: str | None = state.speakers[0]
    if settings.continue_from:
        # The first k original lines are given; the NSP picks who continues (a platform choice).
        for line in scene.raw["dialogues"][: settings.continue_from]:
            stored = f"{line['character']}: {line['message']}"
            state.simulation.append({"role": line["character"], "content": stored})
            state.broadcast(line["character"], stored, version)
        current = await predict(scene.raw["dialogues"][settings.continue_from - 1]["character"], 0)
    rounds = 0
    for round_index in range(settings.max_rounds):
        if current is None:
            break
        kind = "env" if current == ENVIRONMENT else "actor"
        answer = await turn(next(steps), kind, current, state.histories[current])
        # The record keeps the reply as received; the dialogue (and so the judge's input and the
        # length term) gets it without a leading thinking block unless the run keeps it.
        reply = thinking.apply(answer["reply"], rule)
        if kind == "actor" and rules["actor"].fix_repetition:
            reply = fix_repeation(reply) or reply
        stored = add_speaker_name(reply, current) if version.store_speaker_prefix else reply
        state.simulation.append({"role": current, "content": stored})
        state.broadcast(current, stored, version)
        rounds += 1
        current = await predict(current, round_index)
    ended_by = "end_chat" if current is None else "max_rounds"
    return SceneOutcome(scene, repeat, state.simulation, ended_by, rounds, fallbacks, involved_character_profiles(scene))


# --- judging ---------------------------------------------------------------------------------------


async def judge_dimension(ask: Ask, critic_prompt: str, user_message: str, dimension: str, n: int,
                          settings: SimulationSettings) -> dict[str, Any]:
    """Judge step "one dimension" through ``judge.run_dimension_judgement_async``: system = the
    critic prompt, user = the simulation text; repairs go to the version's repair model."""
    version = settings.version
    messages = [{"role": "system", "content": critic_prompt}, {"role": "user", "content": user_message}]

    served = {"judge": ServedCounts(), "repair": ServedCounts()}

    async def ask_judge(temperature: float) -> str:
        answer = await ask("judge", messages, temperature, version.judge_max_tokens)
        note_served(served["judge"], answer)
        return answer["text"]

    async def ask_repair(prompt: str, model: str) -> str:
        # `model` is the version's repair model, which the "repair" role's endpoint serves.
        answer = await ask("repair", [{"role": "user", "content": prompt}], 0, version.judge_max_tokens)
        note_served(served["repair"], answer)
        return answer["text"]

    result = await run_dimension_judgement_async(ask_judge, ask_repair, dimension, n, version, settings.judge.model)
    record = {"dimension": dimension, "status": "failed" if result.failed else "ok", "critique": result.critique,
              "scores": result.scores, "attempts": result.attempts,
              "served": {role: counts.as_dict() for role, counts in served.items() if counts.calls}}
    if result.failed:
        # Upstream crashes the whole run here; the platform fails this scene's judgement and says why.
        statuses = Counter(a["status"] for a in result.attempts)
        record["reason"] = (f"no usable {dimension} critique in {len(result.attempts)} judge attempts ("
                            + ", ".join(f"{status} {count}" for status, count in statuses.most_common()) + ")")
    return record


def judge_inputs(outcome_simulation: Sequence[Mapping[str, str]], scene: Scene, profiles: Mapping[str, str],
                 critic: CriticPrompts, version: ProtocolVersion) -> tuple[dict[str, str], str, str, int]:
    """(critic prompts per dimension, judge user message, reference text, n)."""
    prompts = scene_critic_prompts(critic, scene.raw, profiles, version)
    return (prompts, simulation_str(outcome_simulation, version), reference_str(scene.raw["dialogues"], version),
            actor_rounds(outcome_simulation))


def scene_scores(judgements: Mapping[str, Mapping[str, Any]], version: ProtocolVersion) -> dict[str, Any]:
    """Judge step "scene score": per dimension both variants; the scene score (mean of the 4, in
    the version's variant, and the other variant beside it); None when a dimension failed."""
    if any(judgements.get(d, {}).get("status") != "ok" for d in DIMENSIONS):
        return {"score": None, "score_unclipped": None, "score_clipped": None}
    unclipped = [judgements[d]["scores"]["score"] for d in DIMENSIONS]
    clipped = [judgements[d]["scores"]["score_clipped"] for d in DIMENSIONS]
    return {"score": scene_score(clipped if version.score_upper_clip else unclipped),
            "score_unclipped": scene_score(unclipped), "score_clipped": scene_score(clipped)}


async def judge_scene(ask: Ask, simulation: Sequence[Mapping[str, str]], scene: Scene, profiles: Mapping[str, str],
                      critic: CriticPrompts, settings: SimulationSettings, dimensions: Sequence[str] = DIMENSIONS
                      ) -> list[dict[str, Any]]:
    """The scene's dimension judgements (the 4 calls run concurrently: they are independent)."""
    prompts, user_message, _, n = judge_inputs(simulation, scene, profiles, critic, settings.version)
    return list(await asyncio.gather(*(judge_dimension(ask, prompts[d], user_message, d, n, settings)
                                       for d in dimensions)))
