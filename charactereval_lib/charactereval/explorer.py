"""A CharacterEval run's samples for the leaderboard's explorer: one table row per (sample,
metric) row, plus one per failed sample, and a detail per row as typed sections
(``engine.leaderboard.details``): the context, the model's full reply and the first line that was scored,
the reward model's and the judge's scores."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from charactereval_lib.charactereval import layout
from charactereval_lib.charactereval.protocol import METRIC_BY_EN
from charactereval_lib.engine.leaderboard import details as sections
from charactereval_lib.engine.leaderboard.board import RunView
from charactereval_lib.engine.leaderboard.site import Explorer

# What test-set text the details show, for the site's licence warning: the context and replies,
# never the character profile (a sample's detail has no profile section).
SHOWS = "the CharacterEval explorer shows each sample's context, the run's reply and any judge's answer (no character profiles)"
COLUMNS = [("id", "sample", "int"), ("character", "character", "text"), ("novel", "novel", "text"),
           ("metric", "metric", "text"), ("dimension", "dimension", "text"), ("rm", "RM score", "num"),
           ("judge", "judge score", "num"), ("disagreement", "|RM − judge|", "num"), ("failure", "failure", "text")]
FILTERS = ("character", "novel", "metric", "dimension", "failure")
RM_FIELDS = ("score", "sigmoid", "n_tokens", "truncated", "mode")


def explorer(view: RunView, context: Mapping[str, Any]) -> Explorer:
    run = layout.CharacterEvalRun(view.path)
    data = context.get("charactereval")
    samples = data.by_id() if data else {}
    # What the board's reader parsed already (``RunView.parsed``; empty for a view from the cache).
    generations = view.parsed.get("generations") or run.latest_generations()
    rm = view.parsed["rm"] if "rm" in view.parsed else run.latest_scores()
    # A judge's board shows its own judge beside the reward model; the reward model's board the first judge.
    judge_model = view.facts["judge"] or next(iter(run.judge_models()), None)
    judge = run.latest_scores(scorer=layout.JUDGE, judge_model=judge_model) if judge_model else {}
    rows, details = [], []
    for row in view.parsed.get("rows") or run.read_rows():
        key = (row["id"], row["metric_en"])
        rm_record, judge_record = rm.get(key) or {}, judge.get(key) or {}
        rows.append(_row(row["id"], row.get("role"), samples, row["metric_en"], rm_record.get("score"),
                         judge_record.get("score"), ""))
        generation = generations.get(row["id"]) or {}
        details.append(_detail(samples.get(row["id"]), generation.get("model_output"), row.get("model_output"),
                               rm_record, judge_model, judge_record))
    no_metric = set(((view.manifest.get("transform") or {}).get("no_metric_ids")) or [])
    for sample_id, generation in sorted(generations.items()):
        if generation.get("model_output") not in (None, "ERROR") or sample_id in no_metric:
            continue
        error = generation.get("error") or {}
        reason = f"{generation.get('model_output') or 'None'}: {error.get('class', '')} {error.get('message', '')}"
        metrics = [m for m, _ in (data.id2metric.get(str(sample_id), ()) if data else ())] or [None]
        for metric in metrics:
            rows.append(_row(sample_id, samples[sample_id].role if sample_id in samples else None, samples, metric,
                             None, None, reason.strip()))
            attempts = generation.get("attempts")
            failure = reason.strip() + ("" if attempts is None else f" after {attempts} attempt(s)")
            details.append([sections.note("Failure (left out of every mean)", failure, failure=True),
                            *_detail(samples.get(sample_id), generation.get("model_output"), None, {}, None, {})])
    note = None if data else "contexts are not shown: the official data could not be loaded"
    return Explorer(COLUMNS, FILTERS, rows, details, note, SHOWS)


def _detail(sample: Any, reply: str | None, first_line: str | None, rm: Mapping[str, Any], judge_model: str | None,
            judge: Mapping[str, Any]) -> list[sections.Section]:
    out = [sections.text("Context", sample.context if sample else None, shared=True),
           sections.text("The model's full reply", reply, empty="None"),
           sections.text("First line (what was scored)", first_line, empty="–", scored=True)]
    if rm:
        out.append(sections.kv("Reward model", [(k, rm.get(k)) for k in RM_FIELDS]))
    if judge:
        out.append(sections.kv(f"Judge {judge_model or ''}", [("parsed choice", judge.get("choice")),
                                                              ("score", judge.get("score")),
                                                              ("invalid", judge.get("invalid"))]))
        out.append(sections.text("The judge's answer", judge.get("reply"), empty="–"))
    return out


def _row(sample_id: int, role: str | None, samples: Mapping[int, Any], metric: str | None, rm: float | None,
         judge: float | None, failure: str) -> list[Any]:
    sample = samples.get(sample_id)
    dimension = METRIC_BY_EN[metric].dimension.name if metric in METRIC_BY_EN else None
    gap = abs(rm - judge) if rm is not None and judge is not None else None
    return [sample_id, role, sample.novel_name if sample else None, metric, dimension, rm, judge, gap, failure]
