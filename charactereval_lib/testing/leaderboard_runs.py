"""Synthetic runs of both benchmarks at the protocol's full size, for the leaderboard's tests and
benchmark. Everything is invented (names, dialogue, critiques): no test-set text, no released
output. A CharacterEval run has 4,564 samples and 8,032 rows like the real test set; a CoSER
run 200 scenes x 3 repeats; the settings recorded are the protocol's unless told otherwise."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from charactereval_lib.charactereval import layout
from charactereval_lib.charactereval.doctor import EXPECTED_NO_METRIC_IDS, EXPECTED_ROWS_PER_METRIC, EXPECTED_SAMPLES
from charactereval_lib.charactereval.official import export_official, import_official
from charactereval_lib.charactereval.protocol import METRICS, PROTOCOL_VERSION
from charactereval_lib.charactereval.reference import load_paper_table
from charactereval_lib.coser.benchmark import JUDGEMENTS, SCENES, TURNS
from charactereval_lib.coser.judge import dimension_score
from charactereval_lib.coser.upstream import DIMENSIONS
from charactereval_lib.coser.versions import get_version
from charactereval_lib.engine.generation.served import ServedCounts
from charactereval_lib.engine.storage import artifacts, runs
from charactereval_lib.testing.synthetic import write_synthetic_data, write_synthetic_run

CHECKPOINT = "c0ffee" * 10 + "abcd"
_ROUNDS_WORDS = ("风", "雨", "灯", "路", "山", "河", "夜", "星")


def full_size_data(directory: Path) -> Path:
    """Synthetic official-shaped data with the real counts: 4,564 samples, 8,032 rows."""
    rows = {m.metric_en: EXPECTED_ROWS_PER_METRIC[m.abbr] for m in METRICS}
    return write_synthetic_data(directory, EXPECTED_SAMPLES, metric_rows=rows,
                                no_metric_share=EXPECTED_NO_METRIC_IDS / EXPECTED_SAMPLES)


def charactereval_run(run_dir: Path, data: Any, *, model: str, shift: float = 0.0, seed: int = 0,
                      checkpoint: str | None = CHECKPOINT, failed_ids: Collection[int] = (), unscored: int = 0,
                      protocol_version: str = PROTOCOL_VERSION) -> Path:
    """A generated, transformed and scored run recorded as the real scorer records it (checkpoint
    digest on every score and in run.json)."""
    write_synthetic_run(run_dir, data, seed=seed, shift=shift, model=model, failed_ids=failed_ids, unscored=unscored)
    _record_scores(Path(run_dir), artifacts.read_jsonl(Path(run_dir) / layout.SCORES).records, checkpoint, protocol_version)
    return Path(run_dir)


def released_run(run_dir: Path, data: Any, work_dir: Path, *, paper_row: str, file_key: str, seed: int = 0) -> Path:
    """A released generation's run as a user makes it: a synthetic run exported to the official
    ``generation_trans`` format under the released file's name, imported with ``import-official``,
    then scored (checkpoint digest recorded) so that its metric means equal ``paper_row`` of
    Table 4 (every row moved by its metric's gap)."""
    source = charactereval_run(Path(work_dir) / "source", data, model=file_key, seed=seed)
    exported = {p.name: p for p in export_official(source, data, Path(work_dir) / "official")}
    released = exported["generation_trans.jsonl"].rename(Path(work_dir) / f"generation_trans_{file_key}.jsonl")
    import_official(released, Path(run_dir), data)
    scores = artifacts.read_jsonl(source / layout.SCORES).records
    table = load_paper_table()
    by_metric: dict[str, list[float]] = {}
    for record in scores:
        by_metric.setdefault(record["metric_en"], []).append(record["score"])
    gap = {m: float(table.loc[paper_row, m]) - float(np.mean(v)) for m, v in by_metric.items()}
    for record in scores:
        record["score"] += gap[record["metric_en"]]
    _record_scores(Path(run_dir), scores, CHECKPOINT, PROTOCOL_VERSION)
    return Path(run_dir)


def _record_scores(run_dir: Path, scores: list[dict[str, Any]], checkpoint: str | None, protocol_version: str) -> None:
    for record in scores:
        if checkpoint:
            record["checkpoint_sha256"] = checkpoint
    artifacts.write_jsonl_atomic(run_dir / layout.SCORES, scores)
    runs.update_manifest(run_dir, protocol_version=protocol_version, scoring={
        "mode": "faithful", "device": "cpu", "protocol_version": protocol_version,
        "checkpoint": {"sha256": checkpoint, "format": "bin-sharded", "label": None}})


def coser_run(run_dir: Path, *, actor: str, scenes: int = 200, repeats: int = 3, seed: int = 0, level: float = 60.0,
              protocol: str = "coser-paper", models: Mapping[str, str] | None = None,
              identity: Mapping[str, Any] | None = None, failed_sessions: int = 0,
              endpoints: Mapping[str, str] | None = None, targets: Mapping[str, float] | None = None,
              request_params: Mapping[str, Mapping[str, Any]] | None = None,
              served: Mapping[str, str | None] | None = None) -> Path:
    """A simulated and judged CoSER run: ``scenes`` invented scenes over 10 books, half id and
    half ood, each dimension's critique a few flaws whose severities give scores around
    ``level`` (or around ``targets[dimension]``); the first ``failed_sessions`` sessions have a
    dimension the judge never answered validly. Each role's request parameters are
    ``request_params[role]``; each session records one call per role (actor, environment, next
    speaker: three turns of one attempt each; the judge in each judgement) served by the model the
    role declares, or by ``served[role]`` (None: a server that named no model)."""
    rng = np.random.default_rng(seed)
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    version = get_version(protocol)
    fixed = version.models
    roles = {"actor": actor, "env": fixed.env, "nsp": fixed.nsp, "judge": fixed.judge,
             "repair": version.fix_json_model or fixed.judge, **(models or {})}
    # One call per record, served by the declared model or by ``served[role]`` (None: not reported).
    served_record = {}
    for role, model in {**roles, **(served or {})}.items():
        counts = ServedCounts()
        counts.add(model, "fp_synthetic" if model else None)
        served_record[role] = counts.as_dict()

    keys = [f"scene-{i:03d}" for i in range(scenes)]
    turns = []
    books = {k: f"Book {i % 10}" for i, k in enumerate(keys)}
    tags = {k: "id" if i < scenes // 2 else "ood" for i, k in enumerate(keys)}
    scene_records, judgements = [], []
    session = 0
    for repeat in range(repeats):
        for key in keys:
            dialogue = []
            for turn in range(int(rng.integers(4, 9))):
                role = "Environment" if turn % 4 == 3 else ("Alice" if turn % 2 == 0 else "Bob")
                dialogue.append({"role": role, "content": f"{role}: " + "".join(rng.choice(_ROUNDS_WORDS, 6))})
            n = sum(1 for m in dialogue if m["role"] not in ("Environment", "NSP"))
            turns += [{"repeat": repeat, "scene": key, "step": step, "kind": kind, "speaker": kind, "reply": "",
                       "temperatures": [0], "usage": None, "refused": False, "refusals": 0,
                       "served": served_record[kind]} for step, kind in enumerate(("actor", "env", "nsp"))]
            scene_records.append({"repeat": repeat, "scene": key, "tag": tags[key], "book": books[key], "status": "done",
                                  "ended_by": "end_chat", "rounds": len(dialogue), "fallbacks": 0,
                                  "simulation": dialogue, "profiles": {}})
            base = {"repeat": repeat, "scene": key, "tag": tags[key], "book": books[key]}
            for d_index, dimension in enumerate(DIMENSIONS):
                if session < failed_sessions and d_index == 0:
                    judgements.append({**base, "kind": "dimension", "dimension": dimension, "status": "failed",
                                       "critique": None, "scores": None, "reason": "no usable critique in 6 attempts"})
                    continue
                target = (targets or {}).get(dimension, level)
                # Severity sum S such that 100 - (S - 0.3n) * 5 is near the target.
                total = max(0, int(round((100 - target) / 5 + 0.3 * n + rng.normal(0, 1.5))))
                flaws = []
                while total > 0:
                    severity = int(min(total, rng.integers(1, 6)))
                    flaws.append({"instance": f"invented flaw {len(flaws) + 1}", "type": "synthetic",
                                  "severity": severity})
                    total -= severity
                score = dimension_score(sum(f["severity"] for f in flaws), n)
                judgements.append({**base, "kind": "dimension", "dimension": dimension, "status": "ok",
                                   "critique": {"flaws": flaws}, "scores": {"score": score,
                                                                            "score_clipped": min(score, 100)},
                                   "attempts": [{"temperature": 0, "status": "ok"}],
                                   "served": {"judge": served_record["judge"]}})
            session += 1
    artifacts.write_jsonl_atomic(run_dir / TURNS, turns)
    artifacts.write_jsonl_atomic(run_dir / SCENES, scene_records)
    artifacts.write_jsonl_atomic(run_dir / JUDGEMENTS, judgements)
    recorded = {"protocol_version": protocol, "protocol": version.record(),
                "roles": {name: {"model": model, "backend": "openai",
                                 **({"request_params": dict(request_params[name])} if name in (request_params or {})
                                    else {})} for name, model in roles.items()},
                "max_rounds": 20, "end_chat_from_round": 5, "max_tokens": 512,
                "judge_max_tokens": version.judge_max_tokens, "continue_from": 0, "thoughtless": False,
                **(identity or {})}
    runs.update_manifest(run_dir, protocol_version=protocol, benchmark="coser", coser={
        "identity": recorded, "preset": "full" if scenes >= 200 and repeats >= 3 else "sample", "repeats": repeats,
        "scenes": keys, "models": roles,
        "endpoints": {name: {"base_url": (endpoints or {}).get(name, "https://api.example.invalid/v1"),
                             "api_key_env": "OPENAI_API_KEY"} for name in roles}})
    return run_dir
