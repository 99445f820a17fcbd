"""A CoSER run in a run directory: presets, the concurrent crash-safe loop, dry run (its
statistics: ``coser.statistics``).

Artifacts (JSON Lines, appended and flushed by a writer thread per file, under one writer lock):

- ``coser_turns.jsonl``: every model call of every scene's simulation, as it returns;
- ``coser_scenes.jsonl``: a scene's finished simulation (or the error that stopped it);
- ``coser_judgements.jsonl``: one record per (repeat, scene, dimension), plus BLEU/ROUGE-L;
- ``coser_summary.json`` (``coser.statistics.summarize``).

Scenes run concurrently, turns within a scene sequentially. A run is the engine's resumable job
(``engine.storage.jobs``) over three keyed files: turns by (repeat, scene, step), scenes by (repeat,
scene), judgements by (repeat, scene, dimension). Resuming (the same command again) skips
finished work, continues each unfinished scene from its last recorded turn and judges what
is not judged yet; a SIGKILL loses at most the lines still queued for writing (the last
moments' calls, asked again on resume). Ctrl-C or SIGTERM stops the calls in flight, writes
every record received, marks the run interrupted in run.json and raises ``CoserInterrupted``.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# A run's files are named where the benchmark declares what its runs contain.
from charactereval_lib.coser.benchmark import JUDGEMENTS, SCENES, TURNS
from charactereval_lib.coser.data import Scene
from charactereval_lib.coser.judge import reference_str, simulation_str
from charactereval_lib.coser.metrics_worker import metrics_worker
from charactereval_lib.coser.prompts import build_scene_agents, scene_rng
from charactereval_lib.coser.simulation import (
    ROLES,
    CallFailed,
    RoleClients,
    SimulationSettings,
    judge_inputs,
    judge_scene,
    reply_with_retries,
    simulate_scene,
)
from charactereval_lib.coser.statistics import served_by_role
from charactereval_lib.coser.upstream import DIMENSIONS, CriticPrompts
from charactereval_lib.engine import thinking
from charactereval_lib.engine.generation.base import RunAborted
from charactereval_lib.engine.generation.engine import cancel_on_sigterm
from charactereval_lib.engine.generation.estimate import estimate_request_tokens, estimate_tokens
from charactereval_lib.engine.storage import jobs
from charactereval_lib.engine.storage.artifacts import latest_by_key
from charactereval_lib.engine.storage.runs import RunDir

LOCK = ".coser.lock"


@dataclass(frozen=True)
class Preset:
    name: str
    scenes_per_split: int | None  # None = every scene
    repeats: int


# full: the paper's 200 scenes x 3 runs; sample: 10 id + 10 ood x 1; smoke: 1 id + 1 ood x 1.
PRESETS = {p.name: p for p in (Preset("full", None, 3), Preset("sample", 10, 1), Preset("smoke", 1, 1))}


def select_scenes(scenes: Sequence[Scene], preset: Preset) -> list[Scene]:
    """The preset's scenes: all, or per split (id, ood) ``scenes_per_split`` spread evenly over
    the split in file order (every 10th for ``sample``, the first for ``smoke``)."""
    if preset.scenes_per_split is None:
        return list(scenes)
    chosen = []
    for tag in ("id", "ood"):
        split = [s for s in scenes if s.tag == tag]
        step = max(1, len(split) // preset.scenes_per_split)
        chosen.extend(split[::step][: preset.scenes_per_split])
    return chosen


# --- the run -----------------------------------------------------------------------------------------


def coser_job(run_dir: RunDir) -> jobs.Job:
    """The run's job: ``locked()`` is its writer lock, held around ``start_run`` and ``run_coser``."""
    return jobs.Job(run_dir.path, run_dir.path / LOCK, "CoSER run")


@dataclass
class CoserSession:
    """What a session of a run did, in scene runs (repeat x scene): ``done`` simulated and
    judged (including those finished by an earlier session), ``failed`` stopped by a call that
    gave up, the rest not finished."""

    scenes: int
    done: int = 0
    failed: int = 0

    @property
    def remaining(self) -> int:
        return self.scenes - self.done - self.failed

    def line(self) -> str:
        return f"{self.done}/{self.scenes} scene runs complete, {self.failed} failed, {self.remaining} remaining"


class CoserInterrupted(jobs.JobInterrupted):
    """The run was stopped (Ctrl-C / SIGTERM); every record received is saved."""

    def __init__(self, session: CoserSession) -> None:
        super().__init__("CoSER run", session)


class CoserRun:
    """One run directory's state: the latest record of each turn, finished scene, judged
    dimension and surface-metrics record (the job's reading warnings in ``job.warnings``)."""

    def __init__(self, job: jobs.Job, run_dir: RunDir) -> None:
        turns = latest_by_key(job.read(run_dir.artifact(TURNS)), "repeat", "scene", "step")
        scenes = job.read(run_dir.artifact(SCENES))
        judgements = job.read(run_dir.artifact(JUDGEMENTS))
        self.turns: dict[tuple[int, str], dict[int, dict]] = defaultdict(dict)
        for (repeat, scene, step), record in turns.items():
            self.turns[(repeat, scene)][step] = record
        self.done = latest_by_key((r for r in scenes if r["status"] == "done"), "repeat", "scene")
        self.judged = latest_by_key((r for r in judgements if r.get("dimension") and r["status"] in ("ok", "failed")),
                                    "repeat", "scene", "dimension")
        self.metrics = latest_by_key((r for r in judgements if r.get("kind") == "metrics"), "repeat", "scene")
        # Every recorded call's served model, per role: the run's replies come from one (engine.generation.served).
        self.served = served_by_role(turns.values(), (r for r in judgements if r.get("kind") == "dimension"))


def check_identity(run_dir: RunDir, settings: SimulationSettings, preset: Preset) -> None:
    """A resumed run must keep every setting that changes what is sent or how it is judged
    (refused in one line naming each one that differs)."""
    run_dir.check_protocol(settings.version.name)
    recorded = run_dir.manifest().get("coser")
    if recorded:
        identity, current = recorded.get("identity"), settings.identity()
        if identity is not None and thinking.KEY in current:
            # A run made before the rule was recorded kept its thinking blocks (upstream).
            identity = {**identity, thinking.KEY: thinking.recorded(identity)}
        jobs.check_identity(run_dir.path, {"identity": identity, "preset": recorded.get("preset")},
                            {"identity": current, "preset": preset.name})


async def run_coser(run_dir: RunDir, scenes: Sequence[Scene], settings: SimulationSettings, preset: Preset,
                    critic: CriticPrompts, clients: RoleClients, *, scene_concurrency: int = 256,
                    progress: bool = False) -> dict[str, Any]:
    """Simulate and judge every (repeat, scene) of the preset that is not finished yet (with
    ``progress``, a bar of finished scene runs on stderr). The caller holds the run's writer lock
    (``coser_job(run_dir).locked()``). Raises ``CoserInterrupted`` when cancelled (Ctrl-C,
    SIGTERM), once every record received is written and run.json says so."""
    from tqdm import tqdm

    job = coser_job(run_dir)
    state = CoserRun(job, run_dir)
    clients.establish(state.served)
    work = [(r, s) for r in range(preset.repeats) for s in scenes]
    errors: list[str] = []
    session = CoserSession(len(work))
    interrupted = False
    aborted: RunAborted | None = None
    limit = asyncio.Semaphore(scene_concurrency)
    with job.appender(run_dir.artifact(TURNS), background=True) as turns, \
            job.appender(run_dir.artifact(SCENES), background=True) as scene_log, \
            job.appender(run_dir.artifact(JUDGEMENTS), background=True) as judge_log:

        async def one(repeat: int, scene: Scene) -> None:
            key = (repeat, scene.key)
            async with limit:
                try:
                    record = state.done.get(key) or await simulate(repeat, scene)
                    await judge(repeat, scene, record)
                except CallFailed as exc:
                    errors.append(f"repeat {repeat} scene {scene.key}: {exc}")
                    session.failed += 1
                else:
                    session.done += 1
                bar.update()

        async def simulate(repeat: int, scene: Scene) -> dict[str, Any]:
            recorded = state.turns.get((repeat, scene.key), {})

            async def turn(step: int, kind: str, speaker: str, messages: list[dict[str, str]]) -> dict[str, Any]:
                if step in recorded:
                    return recorded[step]
                answer = await reply_with_retries(clients.ask, kind, messages, settings.max_tokens,
                                                  settings.version.max_attempts)
                record = {"repeat": repeat, "scene": scene.key, "step": step, "kind": kind, "speaker": speaker,
                          **answer}
                turns.write(record)
                return record

            try:
                outcome = await simulate_scene(scene, repeat, settings, turn)
            except CallFailed as exc:
                scene_log.write({"repeat": repeat, "scene": scene.key, "status": "error", "error": exc.error})
                raise
            record = {"repeat": repeat, "scene": scene.key, "tag": scene.tag, "book": scene.raw["book"],
                      "status": "done", "ended_by": outcome.ended_by, "rounds": outcome.rounds,
                      "fallbacks": outcome.fallbacks, "simulation": outcome.simulation, "profiles": outcome.profiles}
            scene_log.write(record)
            return record

        async def judge(repeat: int, scene: Scene, record: dict[str, Any]) -> None:
            todo = [d for d in DIMENSIONS if (repeat, scene.key, d) not in state.judged]
            base = {"repeat": repeat, "scene": scene.key, "tag": scene.tag, "book": scene.raw["book"]}
            metrics = judging = None
            if (repeat, scene.key) not in state.metrics:
                # The two texts alone: judge_inputs would also build the four critic prompts,
                # which judge_scene builds for its calls.
                text = simulation_str(record["simulation"], settings.version)
                reference = reference_str(scene.raw["dialogues"], settings.version)
                # BLEU/ROUGE-L are CPU work: in a child process while the judge calls are out, so
                # neither the event loop nor its GIL waits for them (see metrics_worker).
                metrics = asyncio.wrap_future(metrics_worker().submit(text, reference))
            if todo:
                judging = judge_scene(clients.ask, record["simulation"], scene, record["profiles"], critic, settings,
                                      todo)
            computed, results = await asyncio.gather(_maybe(metrics), _maybe(judging))
            if computed is not None:
                judge_log.write({**base, "kind": "metrics", **computed})
            for result in results or ():
                judge_log.write({**base, "kind": "dimension", **result})

        stop_on_sigterm = cancel_on_sigterm()
        tasks = [asyncio.ensure_future(one(r, s)) for r, s in work]
        try:
            with tqdm(total=len(work), disable=not progress, unit="scene", desc="coser run", dynamic_ncols=True) as bar:
                await asyncio.gather(*tasks)
        except asyncio.CancelledError:
            # Every scene task has stopped by now (gather waits for their cancellation), so what
            # they received is queued and the appenders' close writes it.
            interrupted = True
        except RunAborted as exc:
            # The run cannot go on (an unreachable endpoint, another served model): the other
            # scenes stop too, and what they received is written before the appenders close.
            aborted = exc
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            stop_on_sigterm()
    status = "interrupted" if interrupted else "aborted" if aborted else "partial" if errors else "complete"
    run_dir.update_manifest(coser={"status": status, "session": {
        "done": session.done, "failed": session.failed, "remaining": session.remaining,
        **({"aborted": str(aborted)} if aborted else {}),
        "served": {role: clients.served[role].as_dict() for role in ROLES}}})
    if interrupted:
        raise CoserInterrupted(session)
    if aborted:
        raise aborted
    return {"scenes": len(work), "errors": errors, "warnings": job.warnings, "calls": dict(clients.calls)}


async def _maybe(awaitable: Any) -> Any:
    return None if awaitable is None else await awaitable


def start_run(run_dir: RunDir, settings: SimulationSettings, preset: Preset, scenes: Sequence[Scene],
              data_dir: str, client: dict[str, Any] | None = None) -> None:
    """Check (or record) the run's settings in run.json; never a key, only key variable names.
    ``client``: this session's request timeout and retry policy (they may change on resume)."""
    check_identity(run_dir, settings, preset)
    run_dir.update_manifest(protocol_version=settings.version.name, benchmark="coser", coser={
        "status": "running", "identity": settings.identity(), "endpoints": settings.endpoints(),
        "client": client, "preset": preset.name, "repeats": preset.repeats,
        "scenes": [s.key for s in scenes], "data_dir": str(data_dir),
        "models": {name: settings.role(name).model for name in ("actor", "env", "nsp", "judge", "repair")},
    })


# --- dry run ----------------------------------------------------------------------------------------

# Assumed shape of a simulation for the estimate (no model is called): rounds per scene, reply
# tokens per role, judge calls per dimension (retries and repairs included).
EST_ROUNDS = 12
EST_REPLY_TOKENS = {"actor": 90, "env": 60, "nsp": 10, "judge": 450}
EST_JUDGE_CALLS_PER_DIMENSION = 1.15
DRY_RUN_ROLES = ("actor", "env", "nsp", "judge", "repair")


@dataclass(frozen=True)
class _Shape:
    """How a scene's simulation and judgement are assumed to go: ``rounds`` speaker turns, each
    followed by an NSP call; each turn's call made ``attempts`` times (an empty reply is asked
    again); replies of ``reply_tokens`` per role; per dimension ``judge_calls`` judge calls and
    ``repair_calls`` repairs. ``worst_speaker``: each round is spoken by whichever of actor and
    environment costs more (a bound), else every fourth round by the environment."""

    rounds: int
    reply_tokens: dict[str, int]
    attempts: int
    judge_calls: float
    repair_calls: float
    worst_speaker: bool


@dataclass(frozen=True)
class _SceneSizes:
    """A scene's prompt sizes in estimated tokens: the actors' system prompts (mean and largest),
    the environment's, the NSP's, and the four judge prompts without the dialogue."""

    actor_mean: float
    actor_max: float
    env: float
    nsp: float
    judge: tuple[float, ...]


def _scene_sizes(scene: Scene, settings: SimulationSettings, critic: CriticPrompts) -> _SceneSizes:
    agents = build_scene_agents(scene, settings.version, scene_rng(scene.key), actor_model=settings.actor.model,
                                env_model=settings.env.model, nsp_model=settings.nsp.model,
                                thoughtless=settings.thoughtless, rules=settings.rules())
    system = {a.kind: estimate_request_tokens(a.initial_messages) for a in agents}
    actors = [estimate_request_tokens(a.initial_messages) for a in agents if a.kind == "actor"] or [0]
    prompts, *_ = judge_inputs([], scene, {}, critic, settings.version)
    return _SceneSizes(sum(actors) / len(actors), max(actors), system["env"], system["nsp"],
                       tuple(estimate_tokens(prompts[dim]) for dim in DIMENSIONS))


def _dry_run_totals(sizes: Sequence[_SceneSizes], shape: _Shape,
                    prices: dict[str, tuple[float, float]]) -> dict[str, dict[str, float]]:
    """Calls and input/output tokens per role of one repeat of the scenes under ``shape``."""
    totals = {role: {"calls": 0.0, "input": 0.0, "output": 0.0} for role in DRY_RUN_ROLES}

    def add(role: str, calls: float, prompt: float, reply: float) -> None:
        totals[role]["calls"] += calls
        totals[role]["input"] += calls * prompt
        totals[role]["output"] += calls * reply

    def call_cost(role: str, prompt: float) -> float:
        price = prices.get(role, (1.0, 1.0))
        return prompt * price[0] + shape.reply_tokens[role] * price[1]

    for scene in sizes:
        actor_system = scene.actor_max if shape.worst_speaker else scene.actor_mean
        # ``history``: the dialogue every agent has received; the NSP also keeps its own answers.
        history = nsp_own = 0.0
        for i in range(shape.rounds):
            prompts = {"actor": actor_system + history, "env": scene.env + history}
            if shape.worst_speaker:
                kind = max(("actor", "env"), key=lambda role: call_cost(role, prompts[role]))
            else:
                kind = "env" if (i % 4) == 3 else "actor"
            add(kind, shape.attempts, prompts[kind], shape.reply_tokens[kind])
            history += shape.reply_tokens[kind]
            add("nsp", shape.attempts, scene.nsp + history + nsp_own, shape.reply_tokens["nsp"])
            if shape.worst_speaker:
                nsp_own += shape.reply_tokens["nsp"]
        for judge_prompt in scene.judge:
            add("judge", shape.judge_calls, judge_prompt + history, shape.reply_tokens["judge"])
            # A repair asks to fix the judge's answer: at most that answer and the instruction.
            add("repair", shape.repair_calls, shape.reply_tokens["judge"] + 200, shape.reply_tokens["repair"])
    return totals


def dry_run(scenes: Sequence[Scene], settings: SimulationSettings, preset: Preset, critic: CriticPrompts,
            prices: dict[str, tuple[float, float]]) -> list[str]:
    """Calls, tokens and cost per role, from the real system prompts: an estimate under an
    assumed simulation shape (``EST_*``: ~12 rounds, each a speaker call and an NSP call, plus 4
    judge calls; about 29 calls per scene), then an upper bound: every scene runs all its
    rounds, every reply is as long as its token cap allows, and every call is asked the
    version's ``max_attempts`` times (the simulation asks again after an empty or declined
    reply, the judge after an unusable answer, each with a repair). Token counts are estimated
    from characters (about +-50%), so the bound holds only as far as they do; calls that fail
    in transport and are retried by the engine are not counted (they are not answered)."""
    version = settings.version
    estimate = _Shape(EST_ROUNDS, {**EST_REPLY_TOKENS, "repair": 0}, 1, EST_JUDGE_CALLS_PER_DIMENSION, 0, False)
    capped = {"actor": settings.max_tokens, "env": settings.max_tokens, "nsp": settings.max_tokens,
              "judge": version.judge_max_tokens, "repair": version.judge_max_tokens}
    first_answers = _Shape(settings.max_rounds, capped, 1, 1, 1, True)
    every_retry = _Shape(settings.max_rounds, capped, version.max_attempts, version.max_attempts,
                         version.max_attempts, True)
    lines = [f"dry run: preset {preset.name}, {len(scenes)} scene(s) x {preset.repeats} repeat(s), protocol "
             f"{version.name}; estimate (assumed {EST_ROUNDS} rounds per scene, character-based tokens, "
             "about +-50%), nothing sent"]

    def cost(totals: dict[str, dict[str, float]]) -> tuple[float, list[str]]:
        """USD over the preset's repeats, and the roles with calls but no price (a role on the
        judge's model takes the judge's price)."""
        total, unpriced = 0.0, []
        for role, t in totals.items():
            if not t["calls"]:
                continue
            price = prices.get(role) or (prices.get("judge") if settings.role(role).model == settings.judge.model
                                         else None)
            if price is None:
                unpriced.append(role)
                continue
            total += preset.repeats * (t["input"] * price[0] + t["output"] * price[1]) / 1e6
        return total, unpriced

    def ask_prices(roles: list[str], what: str) -> str:
        return ("  pass --price ROLE=IN:OUT (USD per million tokens) for "
                + ", ".join(f"{role} ({settings.role(role).model})" for role in roles) + f" for {what}")

    sizes = [_scene_sizes(scene, settings, critic) for scene in scenes]
    totals = _dry_run_totals(sizes, estimate, prices)
    for role, t in totals.items():
        if not t["calls"]:
            continue
        calls, tin, tout = (t[k] * preset.repeats for k in ("calls", "input", "output"))
        model = settings.role(role).model
        line = f"  {role:<6} {model:<28} {calls:>9,.0f} calls {tin:>13,.0f} input {tout:>11,.0f} output tokens"
        if role in prices:
            line += f"  ~${preset.repeats * (t['input'] * prices[role][0] + t['output'] * prices[role][1]) / 1e6:,.2f}"
        lines.append(line)
    per_scene = sum(t["calls"] for t in totals.values()) / max(1, len(scenes))
    lines.append(f"  about {per_scene:.0f} model calls per scene")
    expected, unpriced = cost(totals)
    if unpriced:
        lines.append(ask_prices(unpriced, "a cost estimate and its upper bound"))
        return lines
    lines.append(f"  estimated cost: ~${expected:,.2f} (no retries)")
    bound, unpriced = cost(_dry_run_totals(sizes, first_answers, prices))
    if unpriced:
        lines.append(ask_prices(unpriced, "the upper bound"))
        return lines
    ceiling, _ = cost(_dry_run_totals(sizes, every_retry, prices))
    lines.append(f"  upper bound: ${bound:,.2f} if every scene runs all {settings.max_rounds} rounds with every "
                 f"reply at its token cap ({settings.max_tokens}; judge and repair {version.judge_max_tokens}) and "
                 "one repair per judge answer")
    lines.append(f"  counting every retry the protocol allows ({version.max_attempts} calls per turn after empty or "
                 f"declined replies, {version.max_attempts} judge answers per dimension, each repaired): at most "
                 f"${ceiling:,.2f}")
    return lines
