"""A CoSER run's sessions for the leaderboard's explorer: one table row per (repeat, scene), and
a detail record with the simulated dialogue, each dimension's critique (flaws and severities) and
the score computation (n, severity sum, formula, clipping), so a number can be checked by hand."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from charactereval_lib.coser.benchmark import JUDGEMENTS, SCENES
from charactereval_lib.coser.judge import SCORE_FORMULAS, actor_rounds, run_score_formula, severity_sum, worked_formula
from charactereval_lib.coser.upstream import DIMENSIONS
from charactereval_lib.engine import artifacts, runs
from charactereval_lib.engine.board import RunView
from charactereval_lib.engine.site import Explorer

ABBR = {"Storyline Consistency": "SC", "Anthropomorphism": "AN", "Character Fidelity": "CF", "Storyline Quality": "SQ"}
COLUMNS = [("scene", "scene", "text"), ("book", "book", "text"), ("split", "split", "text"),
           ("repeat", "repeat", "int"), *[(ABBR[d], ABBR[d], "num") for d in DIMENSIONS],
           ("average", "average", "num"), ("ended", "ended by", "text"), ("failure", "failure", "text")]
FILTERS = ("book", "split", "ended", "failure")


def explorer(view: RunView, context: Mapping[str, Any]) -> Explorer:
    run = runs.RunDir(view.path)
    clip = (((view.manifest.get("coser") or {}).get("identity") or {}).get("protocol") or {}).get("score_upper_clip")
    formula = run_score_formula(view.manifest)
    scenes = {(r["repeat"], r["scene"]): r for r in artifacts.read_jsonl(run.artifact(SCENES)).records}
    judged: dict[tuple[int, str], dict[str, dict[str, Any]]] = {}
    for record in artifacts.read_jsonl(run.artifact(JUDGEMENTS)).records:
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
        details.append({"dialogue": scene.get("simulation") or [], "n": n, "formula": SCORE_FORMULAS[formula],
                        "clip": "min(score, 100)" if clip else None, "dimensions": computations,
                        "error": scene.get("error")})
    return Explorer(COLUMNS, FILTERS, rows, details, None)


def redact(detail: Mapping[str, Any]) -> dict[str, Any]:
    """A detail record for a site published without test-set text (``leaderboard --redact``):
    the score computation with each flaw's severity, never the dialogue or a critique's words
    (a flaw's instance and type quote or describe the scene)."""
    dimensions = {name: {**c, "flaws": [{"severity": f.get("severity")} for f in c["flaws"]]} if "flaws" in c else c
                  for name, c in (detail.get("dimensions") or {}).items()}
    # A provider's error message may quote the request; its class and role say what failed.
    error = detail.get("error")
    return {"dialogue": [], "n": detail.get("n"), "formula": detail.get("formula"), "clip": detail.get("clip"),
            "dimensions": dimensions, "redacted": True,
            "error": {k: error.get(k) for k in ("class", "role") if k in error} if isinstance(error, Mapping) else None}


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
