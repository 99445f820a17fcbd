"""A CoSER run's sessions for the leaderboard's explorer: one table row per (repeat, scene), and
a detail as typed sections (``engine.leaderboard.details``): the simulated dialogue, each dimension's
critique (flaws and severities) and its score computation (n, severity sum, formula, clipping),
so a number can be checked by hand."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from charactereval_lib.coser.benchmark import JUDGEMENTS, SCENES
from charactereval_lib.coser.judge import SCORE_FORMULAS, actor_rounds, run_score_formula, severity_sum, worked_formula
from charactereval_lib.coser.statistics import read_records
from charactereval_lib.coser.upstream import DIMENSIONS
from charactereval_lib.engine.leaderboard import details as sections
from charactereval_lib.engine.leaderboard.board import RunView
from charactereval_lib.engine.leaderboard.site import Explorer
from charactereval_lib.engine.storage import runs

ABBR = {"Storyline Consistency": "SC", "Anthropomorphism": "AN", "Character Fidelity": "CF", "Storyline Quality": "SQ"}
# What test-set text the details show, for the site's licence warning.
SHOWS = "the CoSER explorer shows each scene's simulated dialogue and the judge's critiques (flaws)"
COLUMNS = [("scene", "scene", "text"), ("book", "book", "text"), ("split", "split", "text"),
           ("repeat", "repeat", "int"), *[(ABBR[d], ABBR[d], "num") for d in DIMENSIONS],
           ("average", "average", "num"), ("ended", "ended by", "text"), ("failure", "failure", "text")]
FILTERS = ("book", "split", "ended", "failure")


def explorer(view: RunView, context: Mapping[str, Any]) -> Explorer:
    run = runs.RunDir(view.path)
    clip = (((view.manifest.get("coser") or {}).get("identity") or {}).get("protocol") or {}).get("score_upper_clip")
    formula = run_score_formula(view.manifest)
    # What the board's reader parsed already (``RunView.parsed``; empty for a view from the cache).
    records = view.parsed or read_records(run)
    scenes = {(r["repeat"], r["scene"]): r for r in records[SCENES]}
    judged: dict[tuple[int, str], dict[str, dict[str, Any]]] = {}
    for record in records[JUDGEMENTS]:
        if record.get("kind") == "dimension":
            judged.setdefault((record["repeat"], record["scene"]), {})[record["dimension"]] = record
    rows, details = [], []
    for key in sorted(set(scenes) | set(judged), key=lambda k: (k[1], k[0])):
        scene, dims = scenes.get(key) or {}, judged.get(key, {})
        n = actor_rounds(scene.get("simulation") or [])
        computations, values = {}, []
        for dimension in DIMENSIONS:
            record = dims.get(dimension)
            computations[dimension] = _computation(record, n, bool(clip), formula)
            values.append(computations[dimension].get("score"))
        failure = _failure(scene, dims)
        average = sum(values) / len(values) if not failure and all(v is not None for v in values) else None
        any_record = next(iter(dims.values()), {})
        rows.append([key[1], scene.get("book") or any_record.get("book"), scene.get("tag") or any_record.get("tag"),
                     key[0], *(None if failure else v for v in values), average,
                     scene.get("ended_by") or ("failed" if scene.get("status") == "error" else None), failure])
        details.append(_detail(scene, computations, SCORE_FORMULAS[formula], bool(clip)))
    return Explorer(COLUMNS, FILTERS, rows, details, None, SHOWS)


def _detail(scene: Mapping[str, Any], computations: Mapping[str, Mapping[str, Any]], formula: str,
            clip: bool) -> list[sections.Section]:
    out = []
    error = scene.get("error")
    if error:
        # A provider's error message may quote the request; its class and role say what failed.
        items = error.items() if isinstance(error, Mapping) else [("error", error)]
        out.append(sections.kv("Simulation error", items,
                               private=[k for k, _ in items if k not in ("class", "role")]))
    out.append(sections.dialogue("Simulated dialogue", scene.get("simulation") or []))
    for name, c in computations.items():
        if c["status"] != "ok":
            out.append(sections.note(name, f"{c['status']}{': ' + c['reason'] if c.get('reason') else ''}",
                                     failure=True))
            continue
        # A flaw's instance and type quote or describe the scene; its severity is a number.
        out.append(sections.table(name, ("flaw", "type", "severity"),
                                  ([f["instance"] if "instance" in f else json.dumps(f, ensure_ascii=False),
                                    f.get("type", ""), _severity(f.get("severity"))] for f in c["flaws"]),
                                  private=("flaw", "type")))
        out.append(sections.computation(
            f"{name}: score", f"n = {c['n']} actor rounds, S = {c['severity_sum']} (integer severities only); "
            f"{formula} = {c['worked']} = {_js(c['unclipped'])}"
            + (f"; clipped min(score, 100) = {_js(c['clipped'])}" if clip else "; no upper clip in this version")
            + f"; score {_js(c['score'])}"))
    return out


def _severity(value: Any) -> str:
    # As JSON writes it (a full run has tens of thousands of flaws, nearly all integer severities).
    return str(value) if type(value) is int else json.dumps(value)


def _js(value: Any) -> str:
    """A number as a reader writes it (100, not 100.0), the way the page always showed it."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return "null" if value is None else str(value)


def _computation(record: Mapping[str, Any] | None, n: int, clip: bool, formula: str) -> dict[str, Any]:
    if record is None:
        return {"status": "not judged"}
    if record.get("status") != "ok":
        return {"status": record.get("status"), "reason": record.get("reason")}
    flaws = (record.get("critique") or {}).get("flaws") or []
    scores = record.get("scores") or {}
    severity = severity_sum(flaws)
    return {"status": "ok", "flaws": flaws, "severity_sum": severity, "n": n,
            "worked": worked_formula(formula, severity, n),
            "unclipped": scores.get("score"), "clipped": scores.get("score_clipped"),
            "score": scores.get("score_clipped" if clip else "score")}


def _failure(scene: Mapping[str, Any], dims: Mapping[str, Mapping[str, Any]]) -> str:
    if scene.get("status") == "error":
        return "simulation gave up"
    failed = [d for d, r in dims.items() if r.get("status") == "failed"]
    if failed:
        return "judge failed: " + ", ".join(ABBR.get(d, d) for d in failed)
    if len(dims) < len(DIMENSIONS):
        return "not judged"
    return ""
