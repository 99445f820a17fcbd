"""The paper's published numbers (Table 4), shipped as data, and a run's deltas against them.

``data/reference/paper_table4.csv`` holds the 12 metric means, the three published dimension
averages and the MBTI accuracy of 15 models, transcribed from the official leaderboard image
(provenance in ``data/reference/README.md``). The run side of MBTI is never a number: it cannot
be reproduced from what was released (protocol.MBTI_NOT_REPRODUCED).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd

from charactereval_lib.charactereval.diagnostics import NOT_ESTIMABLE, dimension_estimable, estimable, metric_label

# PAPER_TABLE4 and ReferenceError are used as reference.* too (where they were defined before).
from charactereval_lib.charactereval.paper_table import PAPER_TABLE4, ReferenceError, table_path  # noqa: F401
from charactereval_lib.charactereval.protocol import DIMENSIONS, MBTI_NOT_REPRODUCED, METRICS
from charactereval_lib.charactereval.statistics import Statistics

MBTI_COLUMN = "mbti_accuracy"
DIMENSION_SUFFIX = "_avg"
# Published cells are printed with three decimals.
PAPER_DECIMALS = 3


def expected_columns() -> list[str]:
    return (
        ["model"]
        + [m.metric_en for m in METRICS]
        + [d.key + DIMENSION_SUFFIX for d in DIMENSIONS]
        + [MBTI_COLUMN]
    )


def load_paper_table(path: Path | None = None) -> pd.DataFrame:
    """Table 4 as a wide frame indexed by model (NaN where the paper prints "-"): the shipped
    copy unless ``path``."""
    path = table_path(path)
    table = pd.read_csv(path)
    missing = [c for c in expected_columns() if c not in table.columns]
    if missing:
        raise ReferenceError(f"{path}: missing column(s) {missing}")
    if table["model"].duplicated().any():
        raise ReferenceError(f"{path}: duplicate model row(s) {sorted(table.loc[table['model'].duplicated(), 'model'])}")
    numeric = [c for c in expected_columns() if c != "model"]
    table[numeric] = table[numeric].apply(pd.to_numeric, errors="raise")
    return table.set_index("model")


def paper_cells(models: Sequence[str] | None = None, table: pd.DataFrame | None = None) -> pd.DataFrame:
    """Tidy published cells: one row per (model, metric or dimension) with kind, key, name,
    abbr and value. MBTI is left out: it has no counterpart a run can produce."""
    table = load_paper_table() if table is None else table
    models = list(table.index) if models is None else list(models)
    unknown = [m for m in models if m not in table.index]
    if unknown:
        raise ReferenceError(f"unknown paper model(s) {unknown}; Table 4 has {list(table.index)}")
    records = []
    for model in models:
        for metric in METRICS:
            records.append(
                {"model": model, "kind": "metric", "key": metric.metric_en, "name": metric.metric_en,
                 "abbr": metric.abbr, "value": float(table.loc[model, metric.metric_en])}
            )
        for dimension in DIMENSIONS:
            records.append(
                {"model": model, "kind": "dimension", "key": dimension.key, "name": dimension.name,
                 "abbr": "Avg.", "value": float(table.loc[model, dimension.key + DIMENSION_SUFFIX])}
            )
    return pd.DataFrame.from_records(records)


def run_cells(stats: Statistics) -> pd.DataFrame:
    """A run's cells in the same shape as ``paper_cells``: kind, key, name, abbr, mean, interval
    and whether the interval can be estimated (n >= 2)."""
    metrics = stats.metrics.assign(kind="metric", key=stats.metrics["metric_en"], name=stats.metrics["metric_en"],
                                   estimable=estimable(stats.metrics["n"]))
    dims = stats.dimensions.assign(kind="dimension", key=stats.dimensions["dimension"], abbr="Avg.",
                                   estimable=dimension_estimable(stats))
    columns = ["kind", "key", "name", "abbr", "mean", "ci_low", "ci_high", "estimable"]
    return pd.concat([metrics[columns], dims[columns]], ignore_index=True)


def deltas(stats: Statistics, models: Sequence[str], table: pd.DataFrame | None = None) -> pd.DataFrame:
    """Tidy run-minus-paper deltas: one row per (cell, paper model) with the run's mean and
    interval, the published value, ``delta`` and whether the published value lies inside the
    run's interval, widened by the paper's rounding (``engine.anchor``: the one place that decides;
    NA where the interval cannot be estimated). The paper rounds to three decimals, so
    |delta| < 0.0005 is agreement."""
    from charactereval_lib.engine.anchor import compare_to_paper, rounding_tolerance

    run = run_cells(stats)
    paper = paper_cells(models, table)
    merged = paper.merge(run, on=["kind", "key", "name", "abbr"], how="left")
    merged = merged.rename(columns={"value": "paper", "mean": "run"})
    merged["delta"] = merged["run"] - merged["paper"]
    inside = [compare_to_paper(p, r, interval=(lo, hi), tolerance=rounding_tolerance(PAPER_DECIMALS)).within
              for p, r, lo, hi in zip(merged["paper"], merged["run"], merged["ci_low"], merged["ci_high"])]
    inside = pd.Series(inside, index=merged.index, dtype="boolean")
    merged["paper_in_ci"] = inside.where(merged["estimable"].astype(bool), pd.NA)
    return merged[["kind", "key", "name", "abbr", "run", "ci_low", "ci_high", "estimable", "model", "paper", "delta",
                   "paper_in_ci"]]


def delta_table(stats: Statistics, models: Sequence[str], table: pd.DataFrame | None = None) -> pd.DataFrame:
    """Display table, one row per cell plus the MBTI row: the run's mean [interval] and, per
    paper model, its published value and the run's delta, three decimals (display only).

    The run's MBTI cell states why it is not reproduced; the paper's MBTI values are shown as
    published."""
    table = load_paper_table() if table is None else table
    long = deltas(stats, models, table)
    level = round(stats.level * 100)
    run_label = f"this run [{level}% CI]"
    first = long[long["model"] == models[0]] if models else run_cells(stats).rename(columns={"mean": "run"})
    display = pd.DataFrame(
        {
            "cell": [f"{metric_label(n)} ({a})" if k == "metric" else f"{n} avg." for k, n, a in zip(first["kind"], first["name"], first["abbr"])],
            run_label: [_interval_text(r, lo, hi, ok)
                        for r, lo, hi, ok in zip(first["run"], first["ci_low"], first["ci_high"], first["estimable"])],
        }
    )
    for model in models:
        rows = long[long["model"] == model]
        display[f"{model}"] = [_number(v) for v in rows["paper"]]
        display[f"Δ vs {model}"] = [_number(v, signed=True) for v in rows["delta"]]
    mbti = {"cell": "MBTI accuracy (personality back-testing)", run_label: MBTI_NOT_REPRODUCED}
    for model in models:
        mbti[model] = _mbti_text(table.loc[model, MBTI_COLUMN])
        mbti[f"Δ vs {model}"] = "n/a"
    return pd.concat([display, pd.DataFrame([mbti])], ignore_index=True).set_index("cell")


def delta_matrix(stats_by_run: Mapping[str, Statistics], model: str, table: pd.DataFrame | None = None) -> pd.DataFrame:
    """Display table for several runs against one paper model: one row per cell, the published
    value, then each run's delta (three decimals, display only)."""
    table = load_paper_table() if table is None else table
    cells = paper_cells([model], table)
    display = pd.DataFrame(
        {
            "cell": [f"{metric_label(n)} ({a})" if k == "metric" else f"{n} avg." for k, n, a in zip(cells["kind"], cells["name"], cells["abbr"])],
            f"{model} (paper)": [_number(v) for v in cells["value"]],
        }
    )
    for run, stats in stats_by_run.items():
        display[f"Δ {run}"] = [_number(v, signed=True) for v in deltas(stats, [model], table)["delta"]]
    return display.set_index("cell")


def _number(value: float, *, signed: bool = False) -> str:
    if value is None or math.isnan(value):
        return "-"
    return f"{value:+.{PAPER_DECIMALS}f}" if signed else f"{value:.{PAPER_DECIMALS}f}"


def _interval_text(mean: float, low: float, high: float, ok: bool) -> str:
    if mean is None or math.isnan(mean):
        return "-"
    return f"{mean:.{PAPER_DECIMALS}f} " + (f"[{_number(low)}, {_number(high)}]" if ok else NOT_ESTIMABLE)


def _mbti_text(value: float) -> str:
    # The paper prints "-" for CharacterGLM; other values as published (k/216, 2-3 decimals).
    return "-" if math.isnan(value) else f"{value:g}"
