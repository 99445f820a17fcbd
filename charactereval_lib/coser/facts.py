"""What the workbench records about the CoSER paper and its test set, and the test-set facts
recounted from the pinned data.

``data/reference/coser_paper_facts.json`` records, each with its source (seed 004's review of
the paper's LaTeX, the official repository and the released files): the paper's versions, their
e-print digests and licence; the dataset's size; the test set's shape; the held-out books; the
marking errors of the main table; the ablation the paper's text misreads. Only the test-set facts
can be checked from the files the workbench fetches: ``recount`` computes them from the scenes
and ``check`` compares them with the record (``charactereval coser data verify`` prints them).
"""

from __future__ import annotations

import csv
import json
import statistics
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from charactereval_lib.coser.data import Scene
from charactereval_lib.coser.prompts import ENVIRONMENT, involved_character_profiles
from charactereval_lib.engine.resources import resource_path

FACTS_FILE = "data/reference/coser_paper_facts.json"
ALIGNMENT_FILE = "data/reference/coser_paper_table5_alignment.csv"


@lru_cache(maxsize=1)
def _facts_text() -> str:
    return resource_path(FACTS_FILE).read_text(encoding="utf-8")


def load_facts() -> dict[str, Any]:
    """The recorded facts (a fresh copy each call)."""
    return json.loads(_facts_text())


def judge_agreement() -> dict[str, float]:
    """The paper's agreement with human judgements, in percent (Table 5, shipped in
    data/reference/): the GPT-4o judge of the GCA protocol and the automatic metrics."""
    record = load_facts()["judge_agreement"]
    wanted = {record["judge"]: "judge", **{m: m for m in record["automatic_metrics"]}}
    with resource_path(f"data/reference/{record['table']}").open(encoding="utf-8") as f:
        found = {wanted[row["scoring_method_as_printed"]]: float(row["alignment_pct"])
                 for row in csv.DictReader(f) if row["scoring_method_as_printed"] in wanted}
    return {key: found[key] for key in wanted.values()}


def held_out_candidates(scenes: Sequence[Scene], n_scenes: int, plot_range: Sequence[int]) -> list[str]:
    """The test-set books with exactly ``n_scenes`` scenes whose plot indices all lie in
    ``plot_range`` (inclusive): where the recorded held-out book can be."""
    low, high = plot_range
    by_book: dict[str, list[int]] = {}
    for scene in scenes:
        by_book.setdefault(scene.raw["book"], []).append(scene.raw["i_p"])
    return sorted(book for book, plots in by_book.items()
                  if len(plots) == n_scenes and all(low <= p <= high for p in plots))


def recount(scenes: Sequence[Scene]) -> dict[str, Any]:
    """The test set's facts (the keys of the record's ``test_set``), counted from the scenes:
    speakers are the speaking characters other than the Environment; a speaker "with thought"
    has a non-empty ``thought`` in ``key_characters``; one "without profile" gets no profile
    (``prompts.involved_character_profiles``); the Environment is "appended" to the scenes that
    do not list it (``prompts.speakers_with_environment``)."""
    speakers_per_scene, lines = [], []
    with_thought = without_profile = listed = 0
    for scene in scenes:
        raw = scene.raw
        thoughts = {k.get("name"): k.get("thought") for k in raw["key_characters"]}
        speakers = [name for name in raw["speaking_characters_w_env"] if name != ENVIRONMENT]
        speakers_per_scene.append(len(speakers))
        with_thought += sum(bool(thoughts.get(name)) for name in speakers)
        without_profile += len(speakers) - len(involved_character_profiles(scene))
        listed += ENVIRONMENT in raw["speaking_characters_w_env"]
        lines.append(len(raw["dialogues"]))
    splits = sorted({s.tag for s in scenes})
    books = {tag: {s.raw["book"] for s in scenes if s.tag == tag} for tag in splits}
    return {
        "scenes": len(scenes),
        "scenes_by_split": {tag: sum(s.tag == tag for s in scenes) for tag in splits},
        "books": len({s.raw["book"] for s in scenes}),
        "books_by_split": {tag: len(names) for tag, names in books.items()},
        "speakers_per_scene": [min(speakers_per_scene), max(speakers_per_scene)],
        "speakers": sum(speakers_per_scene),
        "speakers_with_thought": with_thought,
        "speakers_without_profile": without_profile,
        "key_character_entries": sum(len(s.raw["key_characters"]) for s in scenes),
        "lines_per_scene": [min(lines), max(lines)],
        "median_lines": statistics.median(lines),
        "scenes_over_20_lines": sum(n > 20 for n in lines),
        "environment_listed": listed,
        "environment_appended": len(scenes) - listed,
    }


def check(scenes: Sequence[Scene]) -> tuple[list[str], list[str]]:
    """(facts, problems): one line per recorded test-set fact and held-out-book fact as recounted
    from ``scenes``, and one line per fact that differs from the record."""
    facts = load_facts()
    recorded, counted = facts["test_set"], recount(scenes)
    problems = [f"test-set fact {key}: recorded {recorded[key]!r}, counted {counted[key]!r}"
                for key in counted if counted[key] != recorded[key]]
    held = facts["held_out_books"]
    candidates = held_out_candidates(scenes, held["scenes_of_that_book"], held["plot_range"])
    if not candidates:
        problems.append(f"held-out book: no test book has {held['scenes_of_that_book']} scenes within plots "
                        f"{held['plot_range'][0]}-{held['plot_range'][1]}")
    c = counted
    lines = [
        f"{c['scenes']} scenes ({c['scenes_by_split'].get('id')} id, {c['scenes_by_split'].get('ood')} ood) from "
        f"{c['books']} books ({c['books_by_split'].get('id')} id, {c['books_by_split'].get('ood')} ood)",
        f"{c['speakers']} speaking characters ({c['speakers_per_scene'][0]}-{c['speakers_per_scene'][1]} per "
        f"scene), {c['speakers_with_thought']} with inner thoughts, {c['speakers_without_profile']} without a profile",
        f"{c['lines_per_scene'][0]}-{c['lines_per_scene'][1]} original lines per scene, median {c['median_lines']:g}, "
        f"{c['scenes_over_20_lines']} scenes over 20",
        f"Environment listed in {c['environment_listed']} scenes, appended to {c['environment_appended']}",
        f"held-out books: the paper's training held out {held['books']} books, {held['books_in_test_set']} of them "
        f"in the test set with {held['scenes_of_that_book']} scenes (plots {held['plot_range'][0]}-"
        f"{held['plot_range'][1]}); {len(candidates)} test book(s) fit that description",
    ]
    return lines, problems
