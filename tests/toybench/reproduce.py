"""ToyBench's reproduction (``charactereval reproduce --benchmark toybench``): each released
answers file (``released/answers_<model>.json`` in its data directory: ``{"model", "accuracy",
"answers": [{"id", "reply"}]}``) marked again against the questions' answers, its accuracy with a
question-bootstrap interval set beside the toy paper's (``PAPER``) by the engine's anchor rule.
It declares an option (``--released DIR``) and uses the report's standard sections."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from charactereval_lib.engine.anchor import compare_to_paper, rounding_tolerance
from charactereval_lib.engine.storage import runs
from tests.toybench import NAME
from tests.toybench.stages import locate, read_questions

RELEASED = "released"
# The toy paper's table: accuracy per model, printed with two decimals.
PAPER = {"toy-a": 0.50, "toy-b": 0.75}
PAPER_DECIMALS = 2
REASON = "one released run, marked again against the questions' answers"


def released_file(model: str) -> str:
    return f"answers_{model}.json"


def prepare(*, data_dir: str | os.PathLike[str] | None = None, n_boot: int = 1000, seed: int = 0,
            progress: bool = False, released: str | None = None) -> Callable[[Path], dict[str, Any]]:
    """Every released file is found and read before anything is made (one-line errors)."""
    questions = read_questions(data_dir)
    folder = Path(released) if released else locate(data_dir) / RELEASED
    files = {}
    for model in PAPER:
        path = folder / released_file(model)
        try:
            files[model] = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise runs.RunError(f"{path}: cannot read the released answers ({exc})") from None

    def make(staging: Path) -> dict[str, Any]:
        return _document(questions, files, n_boot=n_boot, seed=seed)

    return make


def _document(questions: list[dict], files: dict[str, dict], *, n_boot: int, seed: int) -> dict[str, Any]:
    import numpy as np

    from charactereval_lib.engine.stats import Clusters, bootstrap_means, percentile_interval

    answer = {q["id"]: q["answer"] for q in questions}
    rows, listed = [], []
    for model, released in files.items():
        correct = np.array([[float(a["reply"] == answer[a["id"]])] for a in released["answers"] if a["id"] in answer])
        clusters = Clusters(np.arange(len(correct)), correct, np.ones_like(correct))
        low, high = (float(v[0]) for v in percentile_interval(bootstrap_means(clusters, n_boot, seed)))
        accuracy = float(correct.mean())
        decision = compare_to_paper(PAPER[model], accuracy, interval=(low, high),
                                    tolerance=rounding_tolerance(PAPER_DECIMALS))
        rows.append({"model": model, "source_file": released_file(model), "kind": "main", "column": "accuracy",
                     "paper": PAPER[model], "paper_pm": None, "recorded": released["accuracy"],
                     "recomputed": accuracy, "interval": [low, high], "delta": decision.delta,
                     "within": decision.within, "decision": decision.reason, "reason": REASON, "reasons": [REASON]})
        listed.append({"file": released_file(model), "model": model, "answers": len(correct),
                       "recorded_reproduced": released["accuracy"] == accuracy})
    return {"benchmark": NAME, "tolerance": rounding_tolerance(PAPER_DECIMALS),
            "bootstrap": {"resamples": n_boot, "seed": seed, "cluster": "question", "level": 0.95},
            "files": listed, "rows": rows}


def notes(document: dict[str, Any]) -> list[str]:
    return [f"{f['file']}: the recorded accuracy is not the recomputed one" for f in document["files"]
            if not f["recorded_reproduced"]]


def file_columns(f: dict[str, Any], document: dict[str, Any]) -> dict[str, Any]:
    return {"answers": f["answers"], "recorded accuracy": "reproduced" if f["recorded_reproduced"] else "differs"}
