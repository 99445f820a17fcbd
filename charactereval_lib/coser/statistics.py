"""The statistics of a CoSER run, from its artifacts: ``coser_summary.json`` holds per-dimension
means with cluster-bootstrap intervals by scene, per split (id/ood), per book, per repeat and the
run-to-run spread, how scenes ended, judge failures, refused turns, replies with a thinking block
and what the run did with them, what the servers reported about each role's model (``served``)
and BLEU/ROUGE-L beside them.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

# A run's files are named where the benchmark declares what its runs contain.
from charactereval_lib.coser.benchmark import JUDGEMENTS, SCENES, SUMMARY, TURNS
from charactereval_lib.coser.upstream import DIMENSIONS
from charactereval_lib.engine import thinking
from charactereval_lib.engine.generation.served import ServedCounts
from charactereval_lib.engine.storage.artifacts import read_jsonl, write_json_atomic
from charactereval_lib.engine.storage.runs import RunDir


def judged_frame(latest: Sequence[dict[str, Any]], version_clip: bool) -> Any:
    """One row per (repeat, scene, dimension) of the ``latest`` dimension judgements with a score
    in the run's version variant. A session (repeat, scene) with a dimension the judge never
    answered validly has failed as a whole (seed 004 H19), so none of its dimensions is a row."""
    import pandas as pd

    rows = []
    failed = {(r["repeat"], r["scene"]) for r in latest if r["status"] == "failed"}
    for r in latest:
        if r["status"] == "ok" and (r["repeat"], r["scene"]) not in failed:
            score = r["scores"]["score_clipped" if version_clip else "score"]
            rows.append({"repeat": r["repeat"], "scene": r["scene"], "tag": r["tag"], "book": r["book"],
                         "dimension": r["dimension"], "score": float(score)})
    return pd.DataFrame(rows, columns=["repeat", "scene", "tag", "book", "dimension", "score"])


def interval_table(frame: Any, n_boot: int, seed: int, categories: Sequence[str] = DIMENSIONS,
                   average: bool = True) -> dict[str, Any]:
    """Means per category (the four dimensions) and their average, with 95% studentized
    intervals from a cluster bootstrap that resamples whole scenes (all repeats and categories
    of a scene together; ``engine.stats.studentized_intervals``). With fewer than
    ``stats.MIN_CLUSTERS`` scenes there is no interval (low and high None)."""
    import numpy as np

    from charactereval_lib.engine.stats import cluster_totals, studentized_intervals

    if frame.empty:
        return {}
    clusters = cluster_totals(frame, categories, cluster="scene", category="dimension", value="score",
                              label="dimension")
    width = len(categories)
    combos = np.hstack([np.eye(width), np.full((width, 1), 1.0 / width)]) if average else np.eye(width)
    found = studentized_intervals(clusters, combos, n_boot=n_boot, seed=seed)
    means = [frame[frame.dimension == d].score.mean() for d in categories]
    names = list(categories)
    if average:
        means.append(sum(means) / len(means))
        names.append("average")
    return {name: {"mean": _num(m), "low": _num(lo), "high": _num(hi)}
            for name, m, lo, hi in zip(names, means, found.low, found.high)}


def _num(value: float | None) -> float | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else round(float(value), 4)


def book_table(frame: Any, n_boot: int, seed: int) -> dict[str, Any]:
    """Per book: its split, scene and session counts, and the interval table of its own scenes
    (a cluster bootstrap by scene within the book; no interval for a book of one scene)."""
    return {str(book): {"tag": str(part.tag.iloc[0]), "scenes": int(part.scene.nunique()),
                        "sessions": int(part[["repeat", "scene"]].drop_duplicates().shape[0]),
                        "scores": interval_table(part, n_boot, seed)}
            for book, part in frame.groupby("book", sort=True)}


def repeat_spread(frame: Any) -> tuple[dict[int, dict[str, float | None]], dict[str, float | None] | None]:
    """Each repeat's four dimension means and average, and the run-to-run spread: the sample SD
    (ddof 1) of those per-repeat values across repeats (None with fewer than two repeats)."""
    import pandas as pd

    per_repeat = {}
    for repeat, part in frame.groupby("repeat"):
        means = part.groupby("dimension").score.mean().reindex(DIMENSIONS)
        per_repeat[int(repeat)] = {**{d: _num(means[d]) for d in DIMENSIONS}, "average": _num(means.mean())}
    if len(per_repeat) < 2:
        return per_repeat, None
    table = pd.DataFrame(per_repeat.values())
    return per_repeat, {name: _num(table[name].std(ddof=1)) for name in table.columns}


def surface_table(metrics: Sequence[dict[str, Any]], n_boot: int, seed: int) -> dict[str, Any]:
    """BLEU and ROUGE-L per 100 (as the paper prints BLEU), mean over sessions with a value and a
    scene-cluster bootstrap interval; never part of the four-dimension average."""
    import pandas as pd

    rows = [{"repeat": m["repeat"], "scene": m["scene"], "dimension": name, "score": 100 * m[key]}
            for m in metrics for name, key in SURFACE_METRICS.items() if m.get(key) is not None]
    frame = pd.DataFrame(rows, columns=["repeat", "scene", "dimension", "score"])
    table = {}
    for name in SURFACE_METRICS:
        part = frame[frame.dimension == name]
        empty = {"mean": None, "low": None, "high": None}
        table[name] = {**interval_table(part, n_boot, seed, (name,), average=False).get(name, empty),
                       "sessions": len(part)}
    return table


# Reported beside the four dimensions, per 100: summary name -> key of the metrics record.
SURFACE_METRICS = {"BLEU": "bleu", "ROUGE-L": "rouge_l"}
# How a (repeat, scene) of the preset ended: the simulation's own endings, then the failures.
ENDINGS = ("end_chat", "max_rounds", "failed", "not_run")


def read_records(run_dir: RunDir) -> dict[str, list[dict[str, Any]]]:
    """A run's scene, turn and judgement records (``SCENES``, ``TURNS``, ``JUDGEMENTS`` -> records),
    read once for a caller that needs them more than once (``compute_summary``, then the
    leaderboard's explorer)."""
    return {name: read_jsonl(run_dir.artifact(name)).records for name in (SCENES, TURNS, JUDGEMENTS)}


def scene_endings(scenes: Sequence[dict[str, Any]], expected: Sequence[tuple[int, str]]) -> tuple[dict, list[dict]]:
    """How each (repeat, scene) of the preset ended, from the scene records: ``<END CHAT>``
    (``end_chat``), the round limit (``max_rounds``), a call that failed after its retries
    (``failed``: its latest record is an error) or no record yet (``not_run``); and the
    finished scenes' records."""
    latest = {(r["repeat"], r["scene"]): r for r in scenes}
    counts = dict.fromkeys(ENDINGS, 0)
    for key in dict.fromkeys([*expected, *latest]):
        record = latest.get(key)
        counts["not_run" if record is None else record["ended_by"] if record["status"] == "done" else "failed"] += 1
    return counts, [r for r in latest.values() if r["status"] == "done"]


def refused_turns(latest_turns: Sequence[dict[str, Any]]) -> dict[str, int]:
    """Turns whose record says ``refused: true`` (a missing field counts as not refused), per
    kind of call (actor, env, nsp) and in total; ``latest_turns``: the latest record of each turn."""
    counts = {kind: 0 for kind in ("actor", "env", "nsp")}
    for turn in latest_turns:
        if turn.get("refused") is True:
            counts[turn["kind"]] = counts.get(turn["kind"], 0) + 1
    return {**counts, "total": sum(counts.values())}


def reasoning_totals(latest_turns: Sequence[dict[str, Any]]) -> dict[str, int] | None:
    """Reasoning tokens the servers reported, summed over every attempt of every turn, per kind of
    call (actor, env, nsp) and in total; None when no turn reported any."""
    reported = [t for t in latest_turns if isinstance(t.get("reasoning_tokens"), int)]
    if not reported:
        return None
    counts = {kind: 0 for kind in ("actor", "env", "nsp")}
    for turn in reported:
        counts[turn["kind"]] = counts.get(turn["kind"], 0) + turn["reasoning_tokens"]
    return {**counts, "total": sum(counts.values())}


def thinking_blocks(latest_turns: Sequence[dict[str, Any]], identity: dict[str, Any] | None) -> dict[str, Any] | None:
    """Replies that started with a thinking block (``engine.thinking``), per kind of call (actor,
    env, nsp) and in total, and what the run's recorded rule did with them: ``removed`` before the
    reply entered the simulation, or ``kept`` in it as received. The turn records hold the replies
    as received; None when the run has none (an imported run: its dialogues are upstream's)."""
    if not latest_turns:
        return None
    rule = thinking.recorded(identity)
    kept = rule == thinking.KEPT
    roles: dict[str, dict[str, int]] = {}
    for kind in ("actor", "env", "nsp"):
        replies = [t.get("reply") or "" for t in latest_turns if t["kind"] == kind]
        blocks = thinking.count_blocks(replies)
        roles[kind] = {"replies": len(replies), "with_block": blocks, "removed": 0 if kept else blocks,
                       "kept": blocks if kept else 0}
    total = {key: sum(r[key] for r in roles.values()) for key in ("replies", "with_block", "removed", "kept")}
    return {"rule": rule, "roles": roles, "total": total}


def latest_turns(turns: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The latest of the turn records for each turn (a turn asked again on resume counts once)."""
    return list({(t["repeat"], t["scene"], t["step"]): t for t in turns}.values())


def served_by_role(turns: Iterable[dict[str, Any]], judgements: Iterable[dict[str, Any]]) -> dict[str, ServedCounts]:
    """What the servers reported for the calls behind the given turn and dimension-judgement
    records, per role (actor, env, nsp, judge, repair; ``engine.generation.served``). A record made before
    the workbench recorded it counts its calls as not reported; an imported record (no call made
    here) counts nothing."""
    served: dict[str, ServedCounts] = defaultdict(ServedCounts)
    for turn in turns:
        if "served" in turn:
            served[turn["kind"]].merge(ServedCounts.from_dict(turn["served"]))
        else:
            served[turn["kind"]].not_reported += len(turn.get("temperatures") or [0])
    for judgement in judgements:
        if judgement.get("source"):
            continue
        if "served" in judgement:
            for role, counts in judgement["served"].items():
                served[role].merge(ServedCounts.from_dict(counts))
        else:
            attempts = judgement.get("attempts") or []
            served["judge"].not_reported += len(attempts)
            served["repair"].not_reported += sum(1 for a in attempts if "repair_model" in a)
    return {role: counts for role, counts in served.items() if counts.calls}


def run_served(run_dir: RunDir) -> dict[str, ServedCounts]:
    """``served_by_role`` of a run's latest turns and dimension judgements."""
    return served_by_role(latest_turns(read_jsonl(run_dir.artifact(TURNS)).records),
                          _latest_dimensions(read_jsonl(run_dir.artifact(JUDGEMENTS)).records))


def compute_summary(run_dir: RunDir, *, n_boot: int = 1000, seed: int = 0, breakdowns: bool = True,
                    records: dict[str, list[dict[str, Any]]] | None = None) -> dict[str, Any]:
    """The CoSER statistics of a run, computed from its artifacts without writing anything: the
    four dimensions and their average (version variant) with scene-cluster bootstrap intervals,
    overall, per split (id/ood) and per book; per repeat and the run-to-run spread; rounds per
    scene, how scenes ended, judge failures, refused turns, replies with a thinking block, BLEU and
    ROUGE-L beside them. ``breakdowns=False``: without the intervals per split, per book and of
    BLEU/ROUGE-L (left empty), most of the bootstrap work, for a caller that needs only the
    overall ones (the leaderboard's reader). ``records``: ``read_records``' result, when the
    caller has read them already."""
    import pandas as pd

    manifest = run_dir.manifest()
    coser = manifest.get("coser") or {}
    clip = coser.get("identity", {}).get("protocol", {}).get("score_upper_clip", False)
    records = records or read_records(run_dir)
    judgements = records[JUDGEMENTS]
    latest = _latest_dimensions(judgements)
    frame = judged_frame(latest, clip)
    expected = [(r, s) for r in range(coser.get("repeats", 0)) for s in coser.get("scenes", [])]
    ended_by, done = scene_endings(records[SCENES], expected)
    turns = latest_turns(records[TURNS])
    failed_dims = {(r["repeat"], r["scene"], r["dimension"]) for r in latest if r["status"] == "failed"}
    judged = {(r["repeat"], r["scene"]) for r in latest}
    metrics = [r for r in judgements if r.get("kind") == "metrics"]
    per_repeat, spread = repeat_spread(frame)
    rounds = pd.Series([r["rounds"] for r in done], dtype=float)
    return {
        "protocol_version": manifest.get("protocol_version"),
        "models": coser.get("models"),
        "preset": coser.get("preset"),
        "repeats": coser.get("repeats"),
        "score_variant": "clipped at 100" if clip else "unclipped (paper)",
        "bootstrap": {"resamples": n_boot, "seed": seed, "cluster": "scene", "level": 0.95},
        "counts": {"scenes": int(frame.scene.nunique()),
                   "sessions": int(frame[["repeat", "scene"]].drop_duplicates().shape[0]),
                   "sessions_expected": len(expected)},
        "overall": interval_table(frame, n_boot, seed),
        "by_split": {tag: interval_table(frame[frame.tag == tag], n_boot, seed) for tag in ("id", "ood")}
        if breakdowns else {},
        "by_book": book_table(frame, n_boot, seed) if breakdowns else {},
        "by_repeat": per_repeat,
        "run_to_run_sd": spread,
        "scenes_simulated": len(done),
        "rounds": {"mean": _num(rounds.mean()), "median": _num(rounds.median()), "min": _num(rounds.min()),
                   "max": _num(rounds.max()),
                   "histogram": {int(k): int(v) for k, v in rounds.value_counts().sort_index().items()}}
        if done else {},
        "ended_by": ended_by,
        # Sessions (repeat, scene) with at least one dimension whose judge never answered validly.
        "judge_failures": len({key[:2] for key in failed_dims}),
        "judge_failed_dimensions": {d: sum(1 for k in failed_dims if k[2] == d) for d in DIMENSIONS},
        "sessions_unjudged": len({(r["repeat"], r["scene"]) for r in done} - judged),
        "refused_turns": refused_turns(turns),
        "reasoning_tokens": reasoning_totals(turns),
        "thinking_blocks": thinking_blocks(turns, coser.get("identity")),
        "served": {role: counts.as_dict() for role, counts in served_by_role(turns, latest).items()},
        "bleu_mean": _mean([m.get("bleu") for m in metrics]),
        "rouge_l_mean": _mean([m.get("rouge_l") for m in metrics]),
        "bleu_unavailable": next((m["bleu_unavailable"] for m in metrics if m.get("bleu_unavailable")), None),
        "surface_per_100": surface_table(metrics, n_boot, seed) if breakdowns else {},
    }


def judged_scores(run_dir: RunDir) -> Any:
    """The run's ``judged_frame`` (one row per judged repeat, scene and dimension, in its
    version's score variant), for statistics across runs."""
    clip = ((run_dir.manifest().get("coser") or {}).get("identity", {}).get("protocol", {})
            .get("score_upper_clip", False))
    return judged_frame(_latest_dimensions(read_jsonl(run_dir.artifact(JUDGEMENTS)).records), clip)


def _latest_dimensions(judgements: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    latest = {(r["repeat"], r["scene"], r["dimension"]): r for r in judgements if r.get("kind") == "dimension"}
    return list(latest.values())


def summarize(run_dir: RunDir, *, n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
    """``coser_summary.json``: ``compute_summary`` written atomically into the run."""
    summary = compute_summary(run_dir, n_boot=n_boot, seed=seed)
    write_json_atomic(run_dir.artifact(SUMMARY), summary)
    return summary


def _mean(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return _num(sum(present) / len(present)) if present else None
