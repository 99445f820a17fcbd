"""A panel of LLM judges on one run (``charactereval panel``).

Each judge scores the run on its own (``score RUN --scorer judge --judge-model M``, every judge's
records in the same ``judge_scores.jsonl``); the panel combines their grades per (sample, metric)
row into one verdict and says how far the judges agree:

- verdict ``majority``: the grade most judges gave; a tie among the most common grades gives the
  lowest of them (``engine.grading.panels``: the tie rule ``lowest``), and the rows settled that
  way are counted; ``mean``: the mean of the judges' grades.
- a judge's invalid answer (no grade could be read) and a row it has not judged (yet, or its call
  failed) are missing values: the verdict uses the other judges, a row no judge graded has no
  verdict, and every judge's invalid answers and missing rows are counted.
- panel metric means and dimension averages (S9 on the verdicts) with cluster-bootstrap intervals
  by sample, and the judges' Krippendorff's alpha (ordinal, the ``krippendorff`` package) with a
  cluster-bootstrap interval.

Writes ``OUT/panel_verdicts.jsonl`` (one line per row: id, metric_en, each judge's grade, the
verdict, ``n_valid``, ``tied``) and ``OUT/panel_summary.json``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from charactereval_lib.charactereval import layout
from charactereval_lib.charactereval.aggregate import METRIC_ORDER
from charactereval_lib.charactereval.statistics import metric_statistics
from charactereval_lib.charactereval.summary import nan_to_none
from charactereval_lib.engine.grading.panels import inter_judge_alpha, panel_table
from charactereval_lib.engine.stats import DEFAULT_LEVEL, DEFAULT_N_BOOT, DEFAULT_SEED
from charactereval_lib.engine.storage import artifacts, runs

VERDICTS = ("majority", "mean")
TIE_RULE = "lowest"
ALPHA_LEVEL = "ordinal"
SUMMARY = "panel_summary.json"
VERDICTS_FILE = "panel_verdicts.jsonl"
# Where a panel's files go unless told: a folder of the run.
DEFAULT_DIR = "panel"


def judge_grades(run: layout.CharacterEvalRun, judge_models: Sequence[str]) -> pd.DataFrame:
    """One line per (row of rows.jsonl, judge): id, metric_en, judge_model, grade (NaN for an
    invalid answer or a row the judge has not judged), invalid, judged."""
    rows = run.read_rows()
    if not rows:
        raise runs.RunError(f"{run.rows}: no rows (run `charactereval transform` first)")
    lines = []
    for model in judge_models:
        latest = run.latest_scores(scorer=layout.JUDGE, judge_model=run.select_judge(model))
        for row in rows:
            record = latest.get((row["id"], row["metric_en"]))
            invalid = bool(record and record.get("invalid"))
            grade = math.nan if record is None or invalid or record.get("score") is None else float(record["score"])
            lines.append({"id": row["id"], "metric_en": row["metric_en"], "judge_model": model, "grade": grade,
                          "invalid": invalid, "judged": record is not None})
    return pd.DataFrame(lines)


def panel_verdicts(grades: pd.DataFrame, verdict: str) -> pd.DataFrame:
    """Each row's verdict (``panel``; NaN where no judge gave a grade), ``n_valid`` and ``tied``."""
    if verdict not in VERDICTS:
        raise runs.RunError(f"verdict {verdict!r}: expected one of {', '.join(VERDICTS)}")
    table = panel_table(grades, value="grade", method=verdict, tie=TIE_RULE)
    table["panel"] = pd.to_numeric(table["panel"])
    return table


def verdict_records(grades: pd.DataFrame, verdicts: pd.DataFrame) -> list[dict[str, Any]]:
    """The lines of ``panel_verdicts.jsonl``: a row's key, each judge's grade (null: invalid or
    not judged), the verdict (null: no judge graded it), ``n_valid`` and ``tied``."""
    by_row = {key: dict(zip(part["judge_model"], part["grade"]))
              for key, part in grades.groupby(["id", "metric_en"], sort=False)}
    return [{"id": int(v.id), "metric_en": v.metric_en, "grades": nan_to_none(by_row[v.id, v.metric_en]),
             "verdict": nan_to_none(float(v.panel)), "n_valid": int(v.n_valid), "tied": bool(v.tied)}
            for v in verdicts.itertuples()]


def summarize_panel(run: layout.CharacterEvalRun, judge_models: Sequence[str], verdict: str, out: Path, *,
                    n_boot: int = DEFAULT_N_BOOT, seed: int = DEFAULT_SEED, level: float = DEFAULT_LEVEL,
                    warnings: Sequence[str] = ()) -> dict[str, Any]:
    """The panel of ``judge_models`` on ``run`` (see the module docstring): writes the verdicts
    and the summary into ``out`` and returns the summary."""
    grades = judge_grades(run, judge_models)
    verdicts = panel_verdicts(grades, verdict)
    decided = verdicts.dropna(subset=["panel"]).rename(columns={"panel": "score"})
    stats = metric_statistics(decided[["id", "metric_en", "score"]], n_boot=n_boot, seed=seed, level=level)
    alpha = inter_judge_alpha(grades, value="grade", level=ALPHA_LEVEL, n_boot=n_boot, confidence=level, seed=seed)
    if not math.isfinite(alpha.value):
        warnings = [*warnings, "Krippendorff's alpha is undefined: no row was graded by two judges, or every "
                               "grade is the same (see each judge's invalid and not judged rows)"]
    judges = {}
    for model, part in grades.groupby("judge_model", sort=False):
        judges[model] = {"graded": int(part["grade"].notna().sum()), "invalid": int(part["invalid"].sum()),
                         "not_judged": int((~part["judged"]).sum()),
                         "invalid_by_metric": {m: int(part.loc[part["metric_en"] == m, "invalid"].sum())
                                               for m in METRIC_ORDER}}
    summary = {
        "run": run.name,
        "judges": list(judge_models),
        "verdict": verdict,
        "tie_rule": TIE_RULE if verdict == "majority" else None,
        "counts": {"rows": len(verdicts), "with_verdict": len(decided), "without_verdict": len(verdicts) - len(decided),
                   "ties_settled": int(verdicts["tied"].sum())},
        "per_judge": judges,
        "bootstrap": stats.settings(),
        "metrics": stats.metrics.to_dict(orient="records"),
        "dimensions": stats.dimensions.to_dict(orient="records"),
        "krippendorff_alpha": {"level": ALPHA_LEVEL, **alpha.__dict__},
        "warnings": list(warnings),
        "created_at": runs.utc_now(),
    }
    out.mkdir(parents=True, exist_ok=True)
    artifacts.write_jsonl_atomic(out / VERDICTS_FILE, verdict_records(grades, verdicts))
    artifacts.write_json_atomic(out / SUMMARY, nan_to_none(summary))
    return summary
