"""CharacterEval battles: two runs' replies to the same samples, judged pairwise in both
presentation orders (``engine.grading.battles``), through the judge engine.

Each sample both runs replied to (their S5 replies, from ``rows.jsonl``) gives two judge calls:
order ``ab`` shows run A's reply first, ``ba`` run B's. Records go to
``OUT/battle_judgements.jsonl`` keyed by (id, order), resuming like any judge run; the outcome of
a sample for run A (win, tie, loss, or invalid when a parse failed) and whether the verdict
survived the swap go into ``OUT/battle_summary.json`` with cluster-bootstrap intervals.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from charactereval_lib.charactereval import layout
from charactereval_lib.charactereval.data import OfficialData
from charactereval_lib.charactereval.judge import sample_fields
from charactereval_lib.charactereval.summary import nan_to_none
from charactereval_lib.engine.grading.battles import (
    ORDERS,
    OUTCOMES,
    battle_requests,
    battle_summary,
    combine_orders,
    preferred_reply,
    spec_verdicts,
)
from charactereval_lib.engine.grading.choices import INVALID
from charactereval_lib.engine.grading.judging import JudgeItem
from charactereval_lib.engine.grading.spec import ModelGradedSpec
from charactereval_lib.engine.storage import artifacts, runs

KEY_FIELDS = ("id", "order")
JUDGEMENTS = "battle_judgements.jsonl"
SUMMARY = "battle_summary.json"
MANIFEST_SECTION = "battle"


def run_replies(run: layout.CharacterEvalRun) -> dict[int, str]:
    """Each sample's S5 reply in a run (the rows of one sample share it)."""
    rows = run.read_rows()
    if not rows:
        raise runs.RunError(f"{run.rows}: no rows (run `charactereval transform` first)")
    return {row["id"]: row["model_output"] for row in rows}


def battle_items(run_a: layout.CharacterEvalRun, run_b: layout.CharacterEvalRun, data: OfficialData, spec: ModelGradedSpec) -> list[JudgeItem]:
    """Two judge items (orders ab and ba) per sample both runs replied to, in test-file order."""
    replies_a, replies_b = run_replies(run_a), run_replies(run_b)
    items = []
    for sample in data.samples:
        if sample.id not in replies_a or sample.id not in replies_b:
            continue
        fields = sample_fields(data, sample)
        for request in battle_requests(spec, fields, replies_a[sample.id], replies_b[sample.id]):
            items.append(JudgeItem({"id": sample.id, "order": request.order}, spec, request.messages))
    if not items:
        raise runs.RunError(f"{run_a.name} and {run_b.name} have no sample with a reply in common")
    return items


def check_pair(out: layout.CharacterEvalRun, run_a: layout.CharacterEvalRun, run_b: layout.CharacterEvalRun) -> dict[str, str]:
    """The pair recorded in OUT's run.json; another pair in the same OUT is refused, since its
    records would be mixed with this one's."""
    pair = {"run_a": str(run_a.path.resolve()), "run_b": str(run_b.path.resolve())}
    if pair["run_a"] == pair["run_b"]:
        raise runs.RunError(f"{run_a.path}: a battle needs two different runs, this one is given twice")
    recorded = out.manifest().get(MANIFEST_SECTION) or {}
    if recorded.get("run_a") and (recorded.get("run_a"), recorded.get("run_b")) != (pair["run_a"], pair["run_b"]):
        raise runs.RunError(f"{out.path}: holds the battle {recorded['run_a']} vs {recorded['run_b']}; use another --out")
    return pair


def battle_outcomes(out: layout.CharacterEvalRun, spec: ModelGradedSpec, verdicts: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """Per sample judged in both orders: which reply each order preferred, the outcome for run A
    and whether the verdict survived the swap. Samples with a failed call are left out."""
    mapping = spec_verdicts(spec, verdicts)
    latest = artifacts.latest_by_key((r for r in artifacts.read_jsonl(out.artifact(JUDGEMENTS)).records if r["status"] == "ok"),
                                *KEY_FIELDS)
    outcomes = []
    for sample_id in sorted({key[0] for key in latest}):
        records = [latest.get((sample_id, order)) for order in ORDERS]
        if None in records:
            continue
        preferred = [preferred_reply(r["choice"], order, mapping) for r, order in zip(records, ORDERS)]
        outcome, consistent = combine_orders(*preferred)
        outcomes.append({"id": sample_id, "preferred_ab": preferred[0], "preferred_ba": preferred[1],
                         "outcome": outcome, "consistent": consistent})
    return outcomes


def summarize_battle(out: layout.CharacterEvalRun, spec: ModelGradedSpec, *, n_boot: int = 1000, seed: int = 0,
                     confidence: float = 0.95) -> dict[str, Any]:
    """Win / tie / loss rates of run A and the position-consistency rate with cluster-bootstrap
    intervals by sample, written to ``OUT/battle_summary.json`` and returned."""
    outcomes = battle_outcomes(out, spec)
    answers = [r for r in artifacts.latest_by_key(
        (r for r in artifacts.read_jsonl(out.artifact(JUDGEMENTS)).records if r["status"] == "ok"), *KEY_FIELDS).values()]
    invalid_answers = sum(r["choice"] == INVALID for r in answers)
    estimates = battle_summary([o["outcome"] for o in outcomes], [o["id"] for o in outcomes],
                               [o["consistent"] for o in outcomes], n_boot=n_boot, seed=seed, confidence=confidence)
    manifest = out.manifest().get(MANIFEST_SECTION) or {}
    summary = {
        "run_a": manifest.get("run_a"), "run_b": manifest.get("run_b"), "judge_model": manifest.get("judge_model"),
        "spec": spec.name, "bootstrap": {"n_boot": n_boot, "seed": seed, "level": confidence},
        **{name: (value.__dict__ if hasattr(value, "__dict__") else value) for name, value in estimates.items()},
        "counts": {**{name: sum(o["outcome"] == name for o in outcomes) for name in (*OUTCOMES, "invalid")},
                   "position_consistency": sum(o["consistent"] is True for o in outcomes)},
        "judge_answers": len(answers), "invalid_answers": invalid_answers,
        "created_at": runs.utc_now(),
    }
    summary["warnings"] = battle_warnings(summary)
    artifacts.write_json_atomic(out.artifact(SUMMARY), nan_to_none(summary))
    return summary


# Above this share of invalid judge answers the rates rest on a minority of the battles and say
# more about the judge's answer format than about the replies.
INVALID_WARN_SHARE = 0.2


def battle_warnings(summary: Mapping[str, Any]) -> list[str]:
    """What a reader must know before the rates: a judge whose answers are invalid more often
    than ``INVALID_WARN_SHARE``, and battles that are all invalid."""
    warnings = []
    answers, invalid = summary["judge_answers"], summary["invalid_answers"]
    if answers and invalid / answers > INVALID_WARN_SHARE:
        warnings.append(f"{invalid} of the judge's {answers} answers ({invalid / answers:.0%}) are invalid (no choice "
                        f"could be read), above the {INVALID_WARN_SHARE:.0%} this workbench warns at: the rates use "
                        f"only the {summary['n'] - summary['invalid']} of {summary['n']} battles with both answers "
                        "valid; check the judge's answer format (battle_judgements.jsonl keeps every reply)")
    if summary["n"] and summary["invalid"] == summary["n"]:
        warnings.append("every battle has an invalid answer: no rate can be estimated")
    return warnings


def battle_lines(summary: Mapping[str, Any], name_a: str, name_b: str) -> list[str]:
    """The terminal lines of a battle: the battles counted, each rate with its count out of the
    valid battles and its interval, position consistency likewise."""
    level = round(summary["bootstrap"]["level"] * 100)
    n, invalid = summary["n"], summary["invalid"]
    valid = n - invalid
    share = f"{invalid / n:.0%}" if n else "-"
    lines = [f"{name_a} vs {name_b}: {n} sample(s) judged in both orders; {valid} valid battle(s), {invalid} "
             f"invalid ({share}); judge answers invalid: {summary['invalid_answers']}/{summary['judge_answers']}"]
    for name in (*OUTCOMES, "position_consistency"):
        estimate, count = summary[name], summary["counts"][name]
        value = "-" if estimate["value"] is None or estimate["value"] != estimate["value"] else f"{estimate['value']:.3f}"
        interval = ("n<2" if estimate["low"] is None or estimate["low"] != estimate["low"]
                    else f"[{estimate['low']:.3f}, {estimate['high']:.3f}]")
        lines.append(f"  {name:<22}{count:>5}/{valid:<5}{value:>7}   {level}% CI {interval}")
    return lines
