"""CoSER judging: critic prompts, the judge's inputs, reading its answer, and the scores.

The critic is asked once per dimension: the system message is the critic prompt (upstream
template + rubric, read from the pinned prompts.py), the user message the simulation text. Its
answer lists flaws with severities; the per-dimension score is
``max(0, 100 - (sum_severity - 0.3 * n) * 5)`` with ``n`` the actor messages, evaluated in
exactly that order (the algebraically equal ``100 - 5*S + 1.5*n`` differs in 8 of the 2,800
recorded scores). HEAD also clips at 100 (0e11992); both variants are always computed.

Where upstream crashes, the platform decides instead (see ``read_judge_answer`` and
``run_dimension_judgement``): an answer without the asked dimension is a rejected answer (upstream:
``KeyError``, the whole run dies), and a dimension whose attempts are all rejected is a failed
judgement with no score (upstream: ``TypeError``, the whole run dies).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from charactereval_lib.coser.text import extract_json, fix_json_model, fix_json_prompt, remove_inner_thoughts, tokenize_words, ttr
from charactereval_lib.coser.upstream import DIMENSIONS, CriticPrompts
from charactereval_lib.coser.versions import ProtocolVersion

ENVIRONMENT = "Environment"
NSP = "NSP"
# Upstream's substitution order. Sequential str.replace: a placeholder that appears inside
# inserted data is substituted only if its token comes later in this order, and the literal
# `{major_characters}` inside the Character Fidelity criteria (inserted last) survives.
_PLACEHOLDER_ORDER = (
    "{book}", "{plot_summary}", "{scenario}", "{character_profiles}", "{original_conversation}",
    "{major_characters}", "{additional_instructions}", "{dimension_name}", "{dimension_brief}",
    "{dimension_criteria}",
)


def character_profile_str(profiles: Mapping[str, str]) -> str:
    """Judge step "profiles block": ``### name``, a blank line, the profile; blank-line joined."""
    return "\n\n".join(f"### {name}\n\n{profile}" for name, profile in profiles.items())


def reference_str(dialogues: Iterable[Mapping[str, str]], version: ProtocolVersion) -> str:
    """Judge step "reference conversation": each original line as ``character: message`` with
    inner thoughts removed (except the Environment's), stripped of newlines, blank-line joined."""
    lines = []
    for turn in dialogues:
        message = turn["message"]
        if turn["character"] != ENVIRONMENT:
            message = remove_inner_thoughts(message, version)
        lines.append(f"{turn['character']}: {message}".strip("\n"))
    return "\n\n".join(lines)


def simulation_str(simulation: Iterable[Mapping[str, str]], version: ProtocolVersion) -> str:
    """Judge step "simulation text" (the judge's user message): NSP turns dropped, inner thoughts
    removed from every non-Environment message, each stripped of newlines, blank-line joined."""
    parts = []
    for message in simulation:
        if message["role"] == NSP:
            continue
        content = message["content"]
        if message["role"] != ENVIRONMENT:
            content = remove_inner_thoughts(content, version)
        parts.append(content.strip("\n"))
    return "\n\n".join(parts)


def actor_rounds(simulation: Iterable[Mapping[str, str]]) -> int:
    """Judge step "n": messages whose role is neither NSP nor Environment, empty ones included."""
    return sum(1 for m in simulation if m["role"] not in (NSP, ENVIRONMENT))


def critic_prompt(
    critic: CriticPrompts,
    dimension: str,
    *,
    book: str,
    plot_summary: str,
    scenario: str,
    profiles_block: str,
    reference: str,
    major_characters: Sequence[str],
    additional_instructions: str = "",
) -> str:
    """Judge step "critic prompt" (upstream sequential replacement, same in both versions)."""
    detail = critic.details[dimension]
    values = {
        "{book}": book,
        "{plot_summary}": plot_summary,
        "{scenario}": scenario,
        "{character_profiles}": profiles_block,
        "{original_conversation}": reference,
        "{major_characters}": ", ".join(major_characters),
        "{additional_instructions}": additional_instructions,
        "{dimension_name}": dimension,
        "{dimension_brief}": detail["dimension_brief"],
        "{dimension_criteria}": detail["dimension_criteria"],
    }
    prompt = critic.template
    for token in _PLACEHOLDER_ORDER:
        prompt = prompt.replace(token, values[token])
    return prompt


def scene_critic_prompts(
    critic: CriticPrompts, scene_raw: Mapping[str, Any], profiles: Mapping[str, str], version: ProtocolVersion
) -> dict[str, str]:
    """The four critic prompts of one scene, given the profiles the simulation used."""
    common = dict(
        book=scene_raw["book"],
        plot_summary=scene_raw["plot"]["summary"],
        scenario=scene_raw["scenario"],
        profiles_block=character_profile_str(profiles),
        reference=reference_str(scene_raw["dialogues"], version),
        major_characters=scene_raw["major_characters"],
    )
    return {dim: critic_prompt(critic, dim, **common) for dim in DIMENSIONS}


# --- reading the judge's answer -----------------------------------------------------------------


def validate_critique(value: Any) -> dict[str, Any] | None:
    """Judge step "validate" (upstream ``parse_response``): a dict whose keys are all dimension
    names, each mapping to a dict with a ``flaws`` list of dicts. A missing or null
    ``severity`` becomes 1 (kept in the critique). Returns the critique, or None if rejected."""
    if not isinstance(value, dict) or not value or not all(k in DIMENSIONS for k in value):
        return None
    critique = {}
    for dim, entry in value.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("flaws"), list):
            return None
        flaws = []
        for flaw in entry["flaws"]:
            if not isinstance(flaw, dict):
                return None
            flaw = dict(flaw)
            if flaw.get("severity") is None:
                flaw["severity"] = 1
            flaws.append(flaw)
        critique[dim] = {**entry, "flaws": flaws}
    return critique


@dataclass(frozen=True)
class JudgeRead:
    """What one judge answer yields for the asked dimension.

    status: ``ok``; ``needs_repair`` (no truthy JSON value: upstream asks for one repair);
    ``invalid`` (JSON that fails validation); ``wrong_dimension`` (valid, but without the asked
    dimension: upstream crashes with KeyError, the platform rejects the answer and retries)."""

    status: str
    critique: dict[str, Any] | None = None


def read_judge_answer(text: str, dimension: str, *, repaired: bool = False) -> JudgeRead:
    """Judge step "read the answer": extract JSON, validate, pick the asked dimension.
    ``repaired`` marks the answer of the repair call, which gets no second repair."""
    value = extract_json(text)
    if not value:
        return JudgeRead("invalid" if repaired else "needs_repair")
    critique = validate_critique(value)
    if critique is None:
        return JudgeRead("invalid")
    if dimension not in critique:
        return JudgeRead("wrong_dimension")
    return JudgeRead("ok", critique[dimension])


# --- scores ------------------------------------------------------------------------------------


def severity_sum(flaws: Iterable[Mapping[str, Any]]) -> int:
    """Judge step "sum severities" (upstream): only Python ints count, so ``True`` counts 1 and
    ``False`` 0, negatives subtract, and ``"3"``, ``3.0``, ``2.5``, lists and dicts are ignored."""
    return sum(f["severity"] for f in flaws if isinstance(f.get("severity"), int))


def dimension_score(severity: int, n: int) -> float | int:
    """Judge step "dimension score", paper-era (93c1474): ``max(0, 100 - (S - 0.3*n) * 5)`` in
    exactly this order of operations; no upper clip, so it can exceed 100. ``max`` returns the
    int 0 when the penalty wins, as upstream."""
    return max(0, 100 - (severity - 0.3 * n) * 5)


def dimension_score_no_length_penalty(severity: int) -> int:
    """Ablation "without length penalty" (the rebuttal branch's ``-no_length_penalty`` files):
    ``max(0, 100 - S * 5)``, no ``n`` term. Not written in any released code: established from
    the four released files, whose 1,600 recorded dimension scores it reproduces exactly (value
    and int type), while the length-penalty formula reproduces none of them."""
    return max(0, 100 - severity * 5)


# Per-dimension score formulas by name (what a run or an imported file was scored with), with
# slots for the severity sum S and the actor rounds n, so a page can show one worked out.
_FORMULA_SLOTS = {
    "length_penalty": "max(0, 100 - ({S} - 0.3 * {n}) * 5)",
    "no_length_penalty": "max(0, 100 - {S} * 5)",
}
SCORE_FORMULAS = {name: slots.format(S="S", n="n") for name, slots in _FORMULA_SLOTS.items()}
# The protocol's formula: any other (an imported ablation file) is not the benchmark's score.
PROTOCOL_FORMULA = "length_penalty"


def run_score_formula(manifest: Mapping[str, Any]) -> str:
    """The formula a run's dimension scores were computed with: an import records the one it
    re-scored the file with; a simulated run is always judged with the protocol's."""
    return (manifest.get("import_official") or {}).get("score_formula") or PROTOCOL_FORMULA


def worked_formula(formula: str, severity: int, n: int) -> str:
    """``SCORE_FORMULAS[formula]`` with this dimension's S and n in place."""
    return _FORMULA_SLOTS[formula].format(S=severity, n=n)


def clipped_score(score: float | int) -> float | int:
    """HEAD (0e11992) clip: ``min(score, 100)``, the int 100 when it clips."""
    return min(score, 100)


def score_dimension(critique: Mapping[str, Any], n: int, formula: str = "length_penalty") -> dict[str, Any]:
    """Both score variants of one dimension's critique, under one of ``SCORE_FORMULAS``."""
    severity = severity_sum(critique["flaws"])
    if formula not in SCORE_FORMULAS:
        raise ValueError(f"unknown score formula {formula!r}; choose one of {sorted(SCORE_FORMULAS)}")
    unclipped = dimension_score(severity, n) if formula == "length_penalty" else dimension_score_no_length_penalty(severity)
    return {"score": unclipped, "score_clipped": clipped_score(unclipped)}


def headline_score(scores: Mapping[str, Any], version: ProtocolVersion) -> float | int:
    """The score a version reports for one dimension: clipped at HEAD, unclipped in the paper."""
    return scores["score_clipped"] if version.score_upper_clip else scores["score"]


def scene_score(dimension_scores: Sequence[float | int]) -> float:
    """Judge step "scene score": the mean of the 4 dimension scores (sum, then divide)."""
    return sum(dimension_scores) / len(dimension_scores)


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def scores_block(
    cases: Sequence[Mapping[str, Any]], version: ProtocolVersion, actor_texts: Sequence[str] | None = None
) -> dict[str, Any]:
    """Judge step "per-model averages" (upstream ``scores`` block): per dimension the mean of
    the case scores, ``avg`` the mean of the 4 dimension means; paper rounds to 3 decimals and
    adds ``ttr_single`` (mean per-scene TTR of the actor text) and ``ttr_all`` (TTR of all of it).

    ``cases``: ``{dimension: score, ...}`` per scene, in the version's variant. Upstream raises
    ZeroDivisionError when a scene has no actor text; the platform leaves such scenes out of
    ``ttr_single`` instead (and reports ``None`` when none is left)."""
    block: dict[str, Any] = {dim: mean([c[dim] for c in cases]) for dim in DIMENSIONS}
    block["avg"] = mean([block[dim] for dim in DIMENSIONS])
    if version.averages_include_ttr and actor_texts is not None:
        per_scene = [ttr(t) for t in actor_texts if t and _has_tokens(t)]
        block["ttr_single"] = mean(per_scene) if per_scene else None
        joined = " ".join(actor_texts)
        block["ttr_all"] = ttr(joined) if _has_tokens(joined) else None
    if version.round_averages:
        block = {k: (round(v, 3) if isinstance(v, float) else v) for k, v in block.items()}
    return block


def _has_tokens(text: str) -> bool:
    return bool(tokenize_words(text))


# --- the judging loop of one dimension ------------------------------------------------------------


@dataclass
class DimensionJudgement:
    """Outcome of judging one dimension: the critique and both scores, or a failure."""

    dimension: str
    critique: dict[str, Any] | None
    scores: dict[str, Any] | None
    attempts: list[dict[str, Any]] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return self.critique is None


@dataclass(frozen=True)
class JudgeCall:
    """A model call the judging loop needs answered: the judge itself at ``temperature``
    (``kind == "judge"``), or the repair of an unparseable answer (``prompt`` to ``model``)."""

    kind: str
    temperature: float = 0
    prompt: str | None = None
    model: str | None = None


def dimension_judgement_steps(
    dimension: str, n: int, version: ProtocolVersion, judge_model: str
) -> Generator[JudgeCall, str, DimensionJudgement]:
    """Judge step "judge one dimension", without I/O: yields each call it needs and is sent the
    answer's text; returns the judgement. Up to ``version.max_attempts`` judge calls
    (temperature 0 first, 1 on retries); an answer without a usable JSON value gets one repair
    call (model per version). Upstream's crashes become outcomes: a wrong-dimension answer is
    retried; exhausted attempts give a failed judgement (no score). The synchronous and the
    asynchronous drivers below share this one loop."""
    attempts = []
    for attempt in range(version.max_attempts):
        temperature = 0 if attempt == 0 else 1
        answer = yield JudgeCall("judge", temperature=temperature)
        read = read_judge_answer(answer, dimension)
        record = {"temperature": temperature, "status": read.status}
        if read.status == "needs_repair":
            model = fix_json_model(version, judge_model)
            record["repair_model"] = model
            repaired = yield JudgeCall("repair", prompt=fix_json_prompt(answer), model=model)
            read = read_judge_answer(repaired, dimension, repaired=True)
            record["status"] = read.status
        attempts.append(record)
        if read.status == "ok":
            critique = dict(read.critique)
            scores = score_dimension(critique, n)
            critique["score"] = headline_score(scores, version)
            return DimensionJudgement(dimension, critique, scores, attempts)
    return DimensionJudgement(dimension, None, None, attempts)


def run_dimension_judgement(
    ask_judge: Callable[[float], str],
    ask_repair: Callable[[str, str], str],
    dimension: str,
    n: int,
    version: ProtocolVersion,
    judge_model: str,
) -> DimensionJudgement:
    """``dimension_judgement_steps`` driven synchronously: ``ask_judge(temperature)`` and
    ``ask_repair(prompt, model)`` return the answers' text."""
    steps = dimension_judgement_steps(dimension, n, version, judge_model)
    try:
        call = next(steps)
        while True:
            answer = ask_judge(call.temperature) if call.kind == "judge" else ask_repair(call.prompt, call.model)
            call = steps.send(answer)
    except StopIteration as done:
        return done.value


async def run_dimension_judgement_async(
    ask_judge: Callable[[float], Awaitable[str]],
    ask_repair: Callable[[str, str], Awaitable[str]],
    dimension: str,
    n: int,
    version: ProtocolVersion,
    judge_model: str,
) -> DimensionJudgement:
    """``dimension_judgement_steps`` driven by coroutines (the simulation engine's judge)."""
    steps = dimension_judgement_steps(dimension, n, version, judge_model)
    try:
        call = next(steps)
        while True:
            if call.kind == "judge":
                answer = await ask_judge(call.temperature)
            else:
                answer = await ask_repair(call.prompt, call.model)
            call = steps.send(answer)
    except StopIteration as done:
        return done.value
