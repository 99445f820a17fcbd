"""CharacterEval reproduction: the five released generations scored beside the paper's Table 4.

Upstream released ``results/generation_trans_<model>.jsonl`` for five 7B models (fetched with
``data fetch --with-results``, verified by digest). Each is imported (S5 already ran on them),
scored with the reward-model checkpoint the user gives (S6, S8), summarised (S9 with cluster
bootstrap intervals) and every metric mean and dimension average is set beside Table 4 by
``engine.anchor.compare_to_paper``. Without a checkpoint nothing is scored: the rows hold the
paper's values only and the document says what is missing and how to get it. A checkpoint that
carries the tiny-random label is reported as meaningless on every row.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from charactereval_lib.charactereval import layout
from charactereval_lib.charactereval.data import OfficialData, locate_data_dir, verify_files
from charactereval_lib.charactereval.official import import_official
from charactereval_lib.charactereval.protocol import DIMENSIONS, METRICS
from charactereval_lib.charactereval.reference import DIMENSION_SUFFIX, PAPER_DECIMALS, load_paper_table
from charactereval_lib.engine.anchor import compare_to_paper, rounding_tolerance

BENCHMARK = "charactereval"
RESULTS_GROUP = "results"
# Released file key -> the model's row in Table 4.
RELEASED_MODELS = {"chatglm3_6b": "ChatGLM3-6B", "baichuan_7b": "Baichuan2-7B", "qwen_7b": "Qwen-7B",
                   "internlm_7b": "InternLM-7B", "xverse_7b": "XVERSE-7B"}
MISSING_RM = ("no reward-model checkpoint given: nothing was scored. Real numbers need BaichuanCharRM "
              "(`charactereval rm download --dir models/BaichuanCharRM`, 26.5 GB) and a GPU: rerun with "
              "`--rm models/BaichuanCharRM --device cuda`")
REASON_SAME_INPUT = ("the released replies themselves (no generation here); differences come from the scorer: "
                     "checkpoint, precision, device and batching")


def released_file(key: str) -> str:
    return f"generation_trans_{key}.jsonl"


def released_paths(data_dir: str | os.PathLike[str] | None = None) -> dict[str, Path]:
    """The five released files of the data directory, verified against their pinned digests."""
    from charactereval_lib.engine.storage.pinned import DataError

    root = locate_data_dir(data_dir)
    problems = verify_files(root, (RESULTS_GROUP,))
    if problems:
        raise DataError(f"{problems[0]} (the released generations: `charactereval data fetch --with-results`)")
    return {key: root / released_file(key) for key in RELEASED_MODELS}


def _columns() -> list[tuple[str, str, str]]:
    """(column as Table 4 names it, kind, key in the summary) for the 12 metrics and 3 dimensions."""
    return ([(m.metric_en, "metric", m.metric_en) for m in METRICS]
            + [(d.key + DIMENSION_SUFFIX, "dimension", d.key) for d in DIMENSIONS])


def _cells(summary: Mapping[str, Any] | None) -> dict[str, dict[str, Any]]:
    if summary is None:
        return {}
    cells = {r["metric_en"]: r for r in summary["metrics"]}
    cells.update({r["dimension"]: r for r in summary["dimensions"]})
    return cells


def rows_for(key: str, source_file: str, summary: Mapping[str, Any] | None, meaningless: str | None) -> list[dict]:
    """One row per Table 4 column of the released model ``key`` (its summary None: not scored)."""
    import math

    model = RELEASED_MODELS[key]
    table = load_paper_table()
    cells = _cells(summary)
    reasons = [MISSING_RM if summary is None else REASON_SAME_INPUT]
    if meaningless:
        reasons.insert(0, f"MEANINGLESS: {meaningless}")
    rows = []
    for column, kind, summary_key in _columns():
        cell = cells.get(summary_key, {})
        mean = cell.get("mean")
        mean = None if mean is None or (isinstance(mean, float) and math.isnan(mean)) else float(mean)
        low, high = cell.get("ci_low"), cell.get("ci_high")
        interval = None if low is None or high is None or math.isnan(low) or math.isnan(high) else (low, high)
        paper = float(table.loc[model, column])
        decision = compare_to_paper(paper, mean, interval=interval, tolerance=rounding_tolerance(PAPER_DECIMALS))
        rows.append({"model": model, "source_file": source_file, "kind": kind, "column": column, "paper": paper,
                     "paper_pm": None, "recorded": None, "recomputed": mean, "n": cell.get("n"),
                     "interval": list(interval) if interval else None, "delta": decision.delta,
                     "within": decision.within, "decision": decision.reason, "reason": "; ".join(reasons),
                     "reasons": reasons})
    return rows


def reproduce(staging: Path, *, data: OfficialData, files: Mapping[str, Path], rm: str | None = None,
              device: str | None = None, score: Callable[[Path], Any] | None = None, n_boot: int = 1000,
              seed: int = 0) -> dict[str, Any]:
    """Import, score and summarise each released file under ``staging/runs/``; the reproduction
    document (rows against Table 4). ``score(run_dir)`` scores a run with the checkpoint ``rm``
    (the caller's scoring step); without ``rm`` nothing is scored."""
    from charactereval_lib.charactereval.reward.tiny import tiny_label
    from charactereval_lib.charactereval.summary import summarize_run

    meaningless = tiny_label(rm) if rm else None
    rows, imported = [], []
    for key, path in files.items():
        run_dir = Path(staging) / "runs" / key
        kind, result = import_official(Path(path), run_dir, data)
        summary = None
        if rm:
            if score is None:
                raise ValueError("a checkpoint was given without the step that scores with it")
            score(run_dir)
            summary = summarize_run(layout.CharacterEvalRun(run_dir), id2metric=data.id2metric, n_boot=n_boot, seed=seed)
        counts = result.counts()
        # The released files are pinned by git blob SHA-1 only (data/upstream.json); the SHA-256
        # of the bytes scored is recorded here, as import-official records it in the run.
        source = layout.CharacterEvalRun(run_dir).manifest()["generation"]["source"]
        imported.append({"file": Path(path).name, "model": RELEASED_MODELS[key], "run": f"runs/{key}", "kind": kind,
                         "sha256": source["sha256"], "rows": counts["rows"], "failed_generations": counts["failed"],
                         "scored": summary is not None})
        rows.extend(rows_for(key, Path(path).name, summary, meaningless))
    return {"benchmark": BENCHMARK, "rm": str(rm) if rm else None, "device": device, "meaningless": meaningless,
            "missing": None if rm else MISSING_RM, "tolerance": rounding_tolerance(PAPER_DECIMALS),
            "bootstrap": {"resamples": n_boot, "seed": seed, "cluster": "sample", "level": 0.95},
            "files": imported, "rows": rows}


def anchor_verdict(document: Mapping[str, Any]) -> dict[str, Any]:
    """The board's anchor rule (``eligibility.anchor``, seed 000 D1/D5) on a reproduction: every
    one of the 12 metric means of every released generation within half a unit of the third
    decimal of its Table 4 cell, with no interval (the scorer is deterministic). Dimension
    averages are shown, not gated (the published ones differ from the mean of the published
    metrics by up to 0.00067). A test checkpoint never reproduces it."""
    tolerance = document["tolerance"]
    models: dict[str, dict[str, Any]] = {}
    for row in document["rows"]:
        model = models.setdefault(row["model"], {"metrics": 0, "within": 0, "outside": [], "largest": None,
                                                 "dimensions": {}})
        if row["kind"] != "metric":
            model["dimensions"][row["column"]] = row["delta"]
            continue
        decision = compare_to_paper(row["paper"], row["recomputed"], tolerance=tolerance)
        model["metrics"] += 1
        if decision.within:
            model["within"] += 1
        else:
            model["outside"].append({"metric": row["column"], "paper": row["paper"], "recomputed": row["recomputed"],
                                     "delta": decision.delta})
        if decision.delta is not None and (model["largest"] is None
                                           or abs(decision.delta) > abs(model["largest"]["delta"])):
            model["largest"] = {"metric": row["column"], "delta": decision.delta}
    complete = set(models) == set(RELEASED_MODELS.values())
    reproduced = (complete and not document.get("meaningless") and document.get("missing") is None
                  and all(m["within"] == m["metrics"] for m in models.values()))
    return {"tolerance": tolerance, "models": models, "reproduced": reproduced,
            "metrics": sum(m["metrics"] for m in models.values()),
            "within": sum(m["within"] for m in models.values())}


def notes(document: dict[str, Any]) -> list[str]:
    """What a reader of the reproduction must know first (its warning box)."""
    found = []
    if document.get("missing"):
        found.append(document["missing"])
    if document.get("meaningless"):
        found.append(f"MEANINGLESS SCORES: {document['meaningless']}. They show every step working, nothing "
                     "about the models; real numbers need the real BaichuanCharRM weights.")
    return found or ["Scored with the checkpoint " + str(document.get("rm")) + "."]


def file_columns(f: dict[str, Any], document: dict[str, Any]) -> dict[str, Any]:
    """One released file in the reproduction's table: its rows, failed generations, whether scored."""
    return {"rows": f["rows"], "failed generations": f["failed_generations"], "scored": "yes" if f["scored"] else "no"}


def sections(document: dict[str, Any]) -> list[Any]:
    """The report's sections: the released files, then every row against Table 4."""
    from charactereval_lib.engine.reports import reproduction as rp

    return [rp.files_section(document, "the released replies, imported and scored"),
            rp.paper_section(document, "the paper's value within our interval, widened by the paper's rounding",
                             digits=3)]
