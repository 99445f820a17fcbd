"""A CharacterEval run's served identity (``engine.generation.served``): the model under test as the servers
of its replies reported it, and each judge's, read from the records themselves.

Every generation record of a reply (``generate``) keeps the ``model`` and ``system_fingerprint``
its server reported, and so does every judge record; the latest record of each sample (or row)
counts. Imported replies (``import-official``) were made by no call here and count nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from charactereval_lib.charactereval import layout
from charactereval_lib.engine.generation.served import RoleServed, ServedCounts, as_sentence, caveats, mismatches


def generation_served(run: layout.CharacterEvalRun,
                      generations: Mapping[int, Mapping[str, Any]] | None = None) -> RoleServed | None:
    """The model under test: declared in run.json, served as its latest reply records say
    (``generations``, when read already); None when no reply of the run came from a call made here."""
    latest = run.latest_generations() if generations is None else generations
    records = [r for r in latest.values() if "source" not in r]
    counts = ServedCounts.of_records(records)
    if not counts.calls:
        return None
    return RoleServed("the model under test", (run.manifest().get("generation") or {}).get("model"), counts)


def judge_served(run: layout.CharacterEvalRun, judge_model: str) -> RoleServed | None:
    """A judge: declared by its records' ``judge_model``, served as its latest records say."""
    counts = ServedCounts.of_records(run.latest_scores(scorer=layout.JUDGE, judge_model=judge_model).values())
    return RoleServed(f"the judge {judge_model}", judge_model, counts) if counts.calls else None


def served_roles(run: layout.CharacterEvalRun, judge_model: str | None = None) -> list[RoleServed]:
    """The generation's served identity and, when ``judge_model`` is given, that judge's."""
    roles = [generation_served(run), judge_served(run, judge_model) if judge_model else None]
    return [role for role in roles if role is not None]


def served_caveats(run_dir: Path | str | layout.CharacterEvalRun, judge_model: str | None = None) -> list[str]:
    """The served-identity lines a run's warnings show: a role answered by another model than
    it declares (one line naming both), and replies whose server named no model ("served model
    not reported")."""
    roles = served_roles(layout.CharacterEvalRun.resolve(run_dir), judge_model)
    return [as_sentence(line) for line in [*mismatches(roles), *caveats(roles)]]
