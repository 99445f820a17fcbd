"""CharacterEval's run layout: the files its stages write beside the engine's (``rows.jsonl`` of
S5 transform, the reward model's and the judge's scores, summaries and metric tables) and
``CharacterEvalRun``, the run directory with the readers that answer "the latest score per row"
and "which scorer made these scores" in one place.
"""

from __future__ import annotations

import functools
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from charactereval_lib.engine.storage import artifacts
from charactereval_lib.engine.storage.runs import MixedRunError, RunDir, RunError

ROWS = "rows.jsonl"
SCORES = "scores.jsonl"
SUMMARY = "summary.json"
METRICS_CSV = "metrics.csv"
JUDGE_SCORES = "judge_scores.jsonl"
# Scorers are a named dimension of a run: each keeps its own score file and summary, so a run
# can hold reward-model and judge scores of the same rows side by side.
REWARD_MODEL = "reward-model"
JUDGE = "judge"
SCORERS = (REWARD_MODEL, JUDGE)
_SCORER_FILES = {REWARD_MODEL: (SCORES, SUMMARY, METRICS_CSV),
                 JUDGE: (JUDGE_SCORES, "judge_summary.json", "judge_metrics.csv")}


_SCORE_TYPES = (float, int, type(None))


def check_score_record(record: Any, where: str) -> None:
    """A score record that analysis can use: an object with an integer ``id``, a string
    ``metric_en`` and a numeric (or null: not scored) ``score``; else RunError naming ``where``
    and the field, since a damaged artifact must not reach the statistics."""
    if not isinstance(record, dict):
        raise RunError(f"{where}: not a JSON object")
    # The common case first, in one expression: a full run's score file holds 8,032 records or more.
    if type(record.get("id")) is int and type(record.get("metric_en")) is str and type(record.get("score")) in _SCORE_TYPES:
        return
    for name, kinds in (("id", int), ("metric_en", str), ("score", _SCORE_TYPES)):
        value = record.get(name)
        if not isinstance(value, kinds) or isinstance(value, bool):
            raise RunError(f"{where}: field {name!r} must be {'a number or null' if name == 'score' else kinds.__name__}"
                           f", got {value!r}")


def _scorer_files(scorer: str) -> tuple[str, str, str]:
    try:
        return _SCORER_FILES[scorer]
    except KeyError:
        raise RunError(f"unknown scorer {scorer!r}; expected one of {', '.join(SCORERS)}") from None


@dataclass(frozen=True)
class ScorerIdentity:
    """What makes two scores comparable: the scorer, its checkpoint (or judge) and its mode."""

    scorer: str
    checkpoint: str | None
    mode: str | None

    def label(self) -> str:
        checkpoint = self.checkpoint[:12] if self.checkpoint else "unknown checkpoint"
        return f"{self.scorer} {checkpoint} mode={self.mode or 'unknown'}"


def scorer_identity(record: dict[str, Any]) -> ScorerIdentity:
    """The scorer configuration a score record was made with. Imported official scores carry no
    checkpoint: their scorer is unknown and says so."""
    fields = (record.get("scorer"), record.get("mode"), record.get("parser"),
              record.get("checkpoint_sha256") or record.get("judge_model"))
    try:
        return _identity(*fields)
    except TypeError:  # an unhashable field (a damaged record) is not remembered
        return _identity.__wrapped__(*fields)


@functools.lru_cache(maxsize=256)
def _identity(scorer: str | None, mode: str | None, parser: str | None, checkpoint: str | None) -> ScorerIdentity:
    # One object per configuration: a run's thousands of records share one or two.
    scorer = scorer or ("imported" if mode == "imported" else REWARD_MODEL)
    # A judge's compatibility mode is its parser (evals or strict); the model is its checkpoint.
    return ScorerIdentity(scorer, checkpoint, parser if scorer == JUDGE else mode)


@dataclass(frozen=True)
class CharacterEvalRun(RunDir):
    """A CharacterEval run directory: the engine's ``RunDir`` with the paths of CharacterEval's
    artifacts and the readers of its rows and scores."""

    @property
    def rows(self) -> Path:
        return self.path / ROWS

    @property
    def scores(self) -> Path:
        return self.path / SCORES

    @property
    def summary(self) -> Path:
        return self.path / SUMMARY

    @property
    def metrics_csv(self) -> Path:
        return self.path / METRICS_CSV

    @property
    def judge_scores(self) -> Path:
        return self.path / JUDGE_SCORES

    def score_file(self, scorer: str = REWARD_MODEL) -> Path:
        """The score records of one scorer (``SCORERS``)."""
        return self.path / _scorer_files(scorer)[0]

    def summary_file(self, scorer: str = REWARD_MODEL) -> Path:
        """Where ``summarize`` writes one scorer's summary (the reward model's is ``summary.json``)."""
        return self.path / _scorer_files(scorer)[1]

    def metrics_csv_file(self, scorer: str = REWARD_MODEL) -> Path:
        return self.path / _scorer_files(scorer)[2]

    def read_rows(self) -> list[dict[str, Any]]:
        return artifacts.read_jsonl(self.rows).records

    def judge_models(self, path: Path | None = None) -> list[str]:
        """The judge models whose records are in ``judge_scores.jsonl`` (or ``path``), in the order
        they first appear: one file holds several judges, each with its own latest records."""
        records = artifacts.read_jsonl(path or self.judge_scores).records
        return list(dict.fromkeys(r["judge_model"] for r in records if r.get("judge_model")))

    def select_judge(self, judge_model: str | None = None, path: Path | None = None) -> str | None:
        """The judge model whose scores are meant: ``judge_model`` when given (an error when the
        file has no records of it), else the only judge of the file (None when it has none); a
        file holding several judges needs a choice, and the error lists them."""
        models = self.judge_models(path)
        where = path or self.judge_scores
        if judge_model is not None:
            if judge_model not in models:
                raise RunError(f"{where}: no records of judge model {judge_model!r} "
                               f"(judges here: {', '.join(models) or 'none'})")
            return judge_model
        if len(models) > 1:
            raise RunError(f"{where}: holds {len(models)} judge models ({', '.join(models)}); "
                           "choose one with --judge-model (judge_model=...)")
        return models[0] if models else None

    def latest_scores(self, path: Path | None = None, *, scorer: str = REWARD_MODEL,
                      judge_model: str | None = None, warnings: list[str] | None = None) -> dict[tuple, dict[str, Any]]:
        """The latest score record per (id, metric) of a scorer's score file (or another file).
        Judge records of failed calls (status error) hold no score and are left out; judge
        records are those of one judge model (``select_judge``). ``warnings`` gets the file's
        torn-line notice, if any (as ``latest_generations`` gives its file's)."""
        path = path or self.score_file(scorer)
        read = artifacts.read_jsonl(path)
        if warnings is not None:
            warnings.extend(read.warnings)
        for number, record in zip(read.lines, read.records):
            check_score_record(record, f"{path}:{number}")
        records = [r for r in read.records if r.get("status", "ok") == "ok"]
        if scorer == JUDGE:
            chosen = self.select_judge(judge_model, path)
            records = [r for r in records if r.get("judge_model") == chosen]
        return artifacts.latest_by_key(records, "id", "metric_en")

    def scored_rows(self, scorer: str = REWARD_MODEL, judge_model: str | None = None, *,
                    latest: dict[tuple, dict[str, Any]] | None = None, rows: list[dict[str, Any]] | None = None
                    ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        """(all rows, the rows that have a score of ``scorer``, each joined with its latest score
        record); ``latest``, ``rows``: those records and rows.jsonl's when the caller has read them already."""
        rows = self.read_rows() if rows is None else rows
        if latest is None:
            latest = self.latest_scores(scorer=scorer, judge_model=judge_model)
        scored = []
        for row in rows:
            score = latest.get((row["id"], row["metric_en"]))
            if score is not None:
                scored.append({**row, **score})
        return rows, scored

    def scorer_identities(self, scorer: str = REWARD_MODEL, judge_model: str | None = None, *,
                          latest: dict[tuple, dict[str, Any]] | None = None) -> Counter:
        """How many of the latest score records (``latest`` when read already) each scorer
        configuration made."""
        if latest is None:
            latest = self.latest_scores(scorer=scorer, judge_model=judge_model)
        return Counter(scorer_identity(record) for record in latest.values())

    def consistency_problems(self, scorer: str = REWARD_MODEL, judge_model: str | None = None) -> list[str]:
        """Why this run's numbers must not be published as one set: scores from several scorer
        configurations (checkpoint or judge model, mode; for the judge, one judge model's
        records made with several parsers). Empty when consistent."""
        identities = self.scorer_identities(scorer, judge_model)
        if len(identities) <= 1:
            return []
        parts = "; ".join(f"{identity.label()}: {count} rows" for identity, count in identities.most_common())
        return [f"{self.path}: the scores mix {len(identities)} scorer configurations ({parts})"]

    def check_consistent(self, *, allow_mixed: bool = False, scorer: str = REWARD_MODEL,
                         judge_model: str | None = None) -> list[str]:
        """Refuse a mixed run with one line naming what differs, or, with ``allow_mixed``,
        return the problems as warnings the caller must show loudly."""
        problems = self.consistency_problems(scorer, judge_model)
        if problems and not allow_mixed:
            raise MixedRunError(
                f"{problems[0]}; re-score with one configuration, or pass --allow-mixed to analyse it anyway"
            )
        return problems
