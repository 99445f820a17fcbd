"""A judge's calibration: its agreement with human labels (``metaeval``), recorded beside its
scores and said before they are shown or compared.

openai/evals asks a model-graded eval's metascore (the exact agreement of the judge's choices
with human labels) to be "close to 1.0" before its scores are trusted. The workbench makes that
a threshold (``METASCORE_THRESHOLD`` unless told otherwise): ``score RUN --scorer judge
--calibration METAEVAL_DIR`` records the overall metascore of that meta-evaluation of the same
judge model in ``run.json`` (``judge_scoring.judges[M].calibration``), with the threshold and the
specs and answer formats the meta-evaluation used. Every place that shows or compares the
judge's scores (its report, a reward-model report that shows it beside, a comparison,
``summarize``) then warns first when the judge has no calibration, when its calibration was made
with other specs or answer formats than the judge's latest session used, or when its metascore
is below the threshold.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from charactereval_lib.charactereval import layout
from charactereval_lib.engine.storage import artifacts, runs

# evals: "close to 1.0 for a good model-graded eval"; its docs give no number. (This module is
# imported by the settings, which the CLI builds its parser from: pandas only when used.)
METASCORE_THRESHOLD = 0.9
EVALS_RULE = "openai/evals asks it to be close to 1.0 for a good model-graded eval"


def spec_identity(judge_entry: Mapping[str, Any]) -> dict[str, list[str | None]]:
    """Per metric, the spec digest and answer format a judge's ``run.json`` entry records."""
    return {metric: [spec.get("sha256"), spec.get("eval_type")]
            for metric, spec in (judge_entry.get("specs") or {}).items()}


def read_calibration(metaeval_dir: str | Path, judge_model: str, threshold: float) -> dict[str, Any]:
    """The calibration a meta-evaluation directory gives ``judge_model``, as ``run.json``
    records it: its overall metascore with interval and counts, the labels file, the specs and
    answer formats it was made with, and the ``threshold`` to warn at. A directory that holds
    no judge meta-evaluation of that model is a one-line ``RunError``."""
    from charactereval_lib.charactereval.metaeval import SUMMARY
    from charactereval_lib.charactereval.summary import judge_manifest

    path = Path(metaeval_dir)
    summary = artifacts.read_json(path / SUMMARY)
    if summary.get("scorer") != layout.JUDGE or summary.get("scorer_model") != judge_model:
        made = f"{summary.get('scorer')} {summary.get('scorer_model')}"
        raise runs.RunError(f"{path / SUMMARY}: a meta-evaluation of {made}, not of the judge {judge_model}")
    overall = (summary.get("groups") or {}).get("overall")
    if not overall:
        raise runs.RunError(f"{path / SUMMARY}: no overall group (no label was scored)")
    entry = judge_manifest(runs.load_manifest(path), judge_model)
    return {"source": str(path.resolve()), "labels": summary.get("labels"), "n_labels": summary.get("n_labels"),
            "unscored": summary.get("unscored"), "invalid": overall.get("invalid"),
            "metascore": overall["metascore"], "specs": spec_identity(entry), "threshold": threshold}


def metascore_text(metascore: Mapping[str, Any]) -> str:
    """``0.620 [0.550, 0.700] on 40 labels`` (no interval where it has none)."""
    value, low, high = metascore.get("value"), metascore.get("low"), metascore.get("high")
    shown = "undefined" if value is None or value != value else f"{value:.3f}"
    interval = "" if low is None or low != low else f" [{low:.3f}, {high:.3f}]"
    return f"{shown}{interval} on {metascore.get('n')} label(s)"


def below_threshold(metascore: Mapping[str, Any], threshold: float) -> bool:
    """Whether a metascore fails the threshold (an undefined one fails it)."""
    value = metascore.get("value")
    return value is None or value != value or value < threshold


def calibration_caveat(manifest: Mapping[str, Any], judge_model: str) -> str | None:
    """The warning shown before ``judge_model``'s scores of a run (its ``run.json``), or None
    when its recorded calibration passes the threshold with the same specs."""
    from charactereval_lib.charactereval.summary import judge_manifest

    entry = judge_manifest(manifest, judge_model)
    calibration = entry.get("calibration")
    if not calibration:
        return (f"The judge {judge_model} has no recorded agreement with human labels: its metascore (exact agreement "
                f"with labelled rows, `charactereval metaeval`) is unknown, and {EVALS_RULE}. Record one with "
                f"`charactereval score RUN --scorer judge --judge-model {judge_model} --calibration METAEVAL_DIR`.")
    where = f"`{calibration['source']}`"
    if calibration.get("specs") != spec_identity(entry):
        return (f"The judge {judge_model}'s recorded agreement with human labels (metascore "
                f"{metascore_text(calibration['metascore'])}, {where}) was measured with other judge specs or answer "
                "formats than these scores were made with, so it does not vouch for them.")
    threshold = calibration["threshold"]
    if below_threshold(calibration["metascore"], threshold):
        return (f"The judge {judge_model} agrees with human labels below the threshold: metascore "
                f"{metascore_text(calibration['metascore'])} ({where}) against {threshold:g} ({EVALS_RULE}). "
                "Its scores may not say what a human would.")
    return None


def metaeval_warnings(summary: Mapping[str, Any], threshold: float) -> list[str]:
    """The meta-evaluation's own warning when its overall metascore fails the threshold."""
    overall = (summary.get("groups") or {}).get("overall")
    if overall and below_threshold(overall["metascore"], threshold):
        return [f"the overall metascore {metascore_text(overall['metascore'])} is below {threshold:g} ({EVALS_RULE}): "
                "read this scorer's scores with care"]
    return []
