"""CharacterEval best-of-n: n runs' replies to the same sample in one judge prompt, the judge
naming the best (evals' multicomp with its ``best`` spec, ``engine.grading.multicomp``).

Each sample every run replied to (their S5 replies, from ``rows.jsonl``) is judged in each order
of ``orders``: ``rotations`` (default) shows it n times, every run once in every position;
``given`` once, in the order the runs were named (evals' own, which leaves position bias to the
user). Records go to ``OUT/best_judgements.jsonl`` keyed by (id, order), resuming like any judge
run; how often each run's reply was chosen and how often each position was, over the valid
judgements, with cluster-bootstrap intervals by sample, go into ``OUT/best_summary.json``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from charactereval_lib.charactereval import layout
from charactereval_lib.charactereval.battle import INVALID_WARN_SHARE, run_replies
from charactereval_lib.charactereval.data import OfficialData
from charactereval_lib.charactereval.judge import sample_fields
from charactereval_lib.charactereval.summary import nan_to_none
from charactereval_lib.engine.grading.choices import EVALS
from charactereval_lib.engine.grading.judging import JudgeItem, make_item
from charactereval_lib.engine.grading.multicomp import chosen_reply, multicomp_fill, multicomp_summary, orders
from charactereval_lib.engine.grading.spec import ModelGradedSpec
from charactereval_lib.engine.storage import artifacts, runs

KEY_FIELDS = ("id", "order")
JUDGEMENTS = "best_judgements.jsonl"
SUMMARY = "best_summary.json"
MANIFEST_SECTION = "best"
# evals tries the choices in list order within a line, so with ten or more replies its parser
# reads the answer "10" as "1".
EVALS_PARSER_MAX = 9


def check_runs(out: layout.CharacterEvalRun, run_list: Sequence[layout.CharacterEvalRun], spec: ModelGradedSpec,
               order_kind: str) -> dict[str, Any]:
    """The runs and orders recorded in OUT's run.json: at least two different runs, at most
    ``EVALS_PARSER_MAX`` under the evals parser; another set or order of runs, or another choice
    of orders, in the same OUT is refused (its records would be mixed with these)."""
    paths = [str(run.path.resolve()) for run in run_list]
    if len(paths) < 2:
        raise runs.RunError("best needs at least two runs")
    if len(set(paths)) < len(paths):
        twice = next(p for p in paths if paths.count(p) > 1)
        raise runs.RunError(f"{twice}: given twice; best compares different runs")
    if spec.parser == EVALS and len(paths) > EVALS_PARSER_MAX:
        raise runs.RunError(f"{spec.source}: the evals parser reads the answer '10' as '1' (choices are tried in "
                            f"list order), so it takes at most {EVALS_PARSER_MAX} runs; use a spec with parser: strict")
    chosen = {"runs": paths, "orders": order_kind}
    recorded = out.manifest().get(MANIFEST_SECTION) or {}
    if recorded.get("runs") and (recorded["runs"], recorded.get("orders")) != (paths, order_kind):
        raise runs.RunError(f"{out.path}: holds best-of-n judgements of {', '.join(recorded['runs'])} "
                            f"(orders {recorded.get('orders')}); use another --out")
    return chosen


def best_items(run_list: Sequence[layout.CharacterEvalRun], data: OfficialData, spec: ModelGradedSpec,
               order_kind: str = "rotations") -> list[JudgeItem]:
    """One judge item per (sample every run replied to, order), in test-file order; the key's
    ``order`` is the order's number (0: the runs as named)."""
    replies = [run_replies(run) for run in run_list]
    shown = orders(len(run_list), order_kind)
    items = []
    for sample in data.samples:
        if any(sample.id not in r for r in replies):
            continue
        fields = sample_fields(data, sample)
        texts = [r[sample.id] for r in replies]
        for number, order in enumerate(shown):
            items.append(make_item({"id": sample.id, "order": number}, spec, fields,
                                   **multicomp_fill(spec, texts, order)))
    if not items:
        raise runs.RunError(f"{', '.join(run.name for run in run_list)} have no sample with a reply in common")
    return items


def best_outcomes(out: layout.CharacterEvalRun, spec: ModelGradedSpec, n_runs: int,
                  order_kind: str) -> list[dict[str, Any]]:
    """Per judgement answered (a failed call is left out): the sample, its order, the position
    and the run the judge chose (None for an invalid answer)."""
    shown = orders(n_runs, order_kind)
    choices = spec.choices(n_runs)
    latest = artifacts.latest_by_key((r for r in artifacts.read_jsonl(out.artifact(JUDGEMENTS)).records
                                      if r["status"] == "ok"), *KEY_FIELDS)
    outcomes = []
    for (sample_id, number), record in sorted(latest.items()):
        run = chosen_reply(record["choice"], shown[number], choices)
        outcomes.append({"id": sample_id, "order": number, "run": run,
                         "position": None if run is None else shown[number].index(run)})
    return outcomes


def summarize_best(out: layout.CharacterEvalRun, spec: ModelGradedSpec, names: Sequence[str], *,
                   n_boot: int = 1000, seed: int = 0, confidence: float = 0.95) -> dict[str, Any]:
    """How often each run's reply was chosen as the best and how often each position was, with
    cluster-bootstrap intervals by sample, written to ``OUT/best_summary.json`` and returned."""
    manifest = out.manifest().get(MANIFEST_SECTION) or {}
    order_kind = manifest.get("orders", "rotations")
    outcomes = best_outcomes(out, spec, len(names), order_kind)
    result = multicomp_summary([o["run"] for o in outcomes], [o["position"] for o in outcomes],
                               [o["id"] for o in outcomes], len(names), n_boot=n_boot, seed=seed,
                               confidence=confidence)
    summary = {
        "runs": manifest.get("runs"), "names": list(names), "judge_model": manifest.get("judge_model"),
        "spec": spec.name, "orders": order_kind, "bootstrap": {"n_boot": n_boot, "seed": seed, "level": confidence},
        "samples": len({o["id"] for o in outcomes}),
        "chosen": [{"run": name, "count": count, **estimate.__dict__}
                   for name, count, estimate in zip(names, result["counts"], result["replies"], strict=True)],
        "positions": [{"position": k + 1, "count": count, **estimate.__dict__}
                      for k, (count, estimate) in enumerate(zip(result["position_counts"], result["positions"],
                                                                strict=True))],
        "judgements": result["n"], "invalid": result["invalid"], "created_at": runs.utc_now(),
    }
    summary["warnings"] = best_warnings(summary)
    artifacts.write_json_atomic(out.artifact(SUMMARY), nan_to_none(summary))
    return summary


def best_warnings(summary: Mapping[str, Any]) -> list[str]:
    """What a reader must know before the rates: many invalid answers, or nothing valid."""
    n, invalid = summary["judgements"], summary["invalid"]
    warnings = []
    if n and invalid / n > INVALID_WARN_SHARE:
        warnings.append(f"{invalid} of the judge's {n} answers ({invalid / n:.0%}) are invalid (no choice could be "
                        f"read), above the {INVALID_WARN_SHARE:.0%} this workbench warns at: the rates rest on the "
                        f"other {n - invalid}; check the judge's answer format ({JUDGEMENTS} keeps every reply)")
    if n and invalid == n:
        warnings.append("every answer is invalid: no rate can be estimated")
    if summary["orders"] == "given":
        warnings.append("each sample was judged in one order (the runs as named, evals' own): a judge's preference "
                        "for a position favours the run shown there; the position rates show how strong it is")
    return warnings


def best_lines(summary: Mapping[str, Any]) -> list[str]:
    """The terminal lines: judgements and invalid answers, then per run and per position how
    often it was chosen (count out of the valid judgements) with its interval."""
    level = round(summary["bootstrap"]["level"] * 100)
    n, invalid = summary["judgements"], summary["invalid"]
    valid = n - invalid
    lines = [f"{summary['samples']} sample(s) in {n} judgement(s) ({summary['orders']} orders); {valid} valid, "
             f"{invalid} invalid"]
    rows = [(row["run"], row) for row in summary["chosen"]] + \
        [(f"position {row['position']}", row) for row in summary["positions"]]
    width = max(len(label) for label, _ in rows) + 2
    for label, row in rows:
        value = "-" if row["value"] is None or row["value"] != row["value"] else f"{row['value']:.3f}"
        interval = ("n<2" if row["low"] is None or row["low"] != row["low"]
                    else f"[{row['low']:.3f}, {row['high']:.3f}]")
        lines.append(f"  {label:<{width}}{row['count']:>5}/{valid:<5}{value:>7}   {level}% CI {interval}")
    return lines
