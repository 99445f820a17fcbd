"""CoSER import step: an official result file (paper-era ``exp/evaluation/*.json``) as a run.

The format is what the paper-era ``eval_reproduce.py`` (93c1474) saved, as renamed on the
``rebuttal`` branch by ``rename.py``. One JSON object:

- ``scores`` (paper-era name ``avg_scores``): the per-model block, the four dimensions and ``avg``
  rounded to 3 decimals, plus ``ttr_single`` and ``ttr_all``;
- ``cases`` (paper-era name ``results_by_case``): one section per actor model, and a
  ``groundtruth`` section (the original conversations, scored 100; not imported). A model's
  section maps each scene key ``{book}-{i_p}-{i_c}`` to ``simulation`` (messages with ``role``
  and ``content``; NSP turns are not kept), ``simulation_text`` (the judge's user message),
  ``score`` (the scene score) and ``critique`` (per dimension ``flaws`` with
  ``instance``/``type``/``severity`` and the dimension ``score``; the scene ``score`` again).

Two layouts exist (``LAYOUTS``): the paper-era one above, and the rebuttal branch's flat one
(``-no_length_penalty`` ablation files and ``test_set_gpt-4o.json``), written by HEAD's
``main.py``: ``cases`` keyed by scene directly, no model section (the actor model must be named),
the judge text under ``simulation_str``, each critique without a ``score`` but with the scene's
``bleu`` and ``rouge_l``, and a ``scores`` block of unrounded means with ``bleu``/``rouge_l``. A
flat file is therefore re-scored under ``coser-head`` unless told otherwise. The
``-no_length_penalty`` files are re-scored with that ablation's formula
(``judge.SCORE_FORMULAS``), chosen from the file name unless given.

Either spelling of a key is accepted (not both in one file). The whole file is checked against
the pinned test set before anything is written; the run directory is built beside the target
and renamed into place, so a failed import leaves nothing behind.

The run has the layout of ``coser run`` (``run.py``): ``coser_scenes.jsonl`` (the recorded
simulations), ``coser_judgements.jsonl`` (the recorded critiques, each dimension re-scored with
the version's formula and ``n`` from the simulation, the recorded score beside it) and, with
``metrics``, BLEU/ROUGE-L of the recorded simulation text; ``run.json`` names the protocol
version, the roles' models and preset ``imported``, and ``import_official`` holds the source
file's SHA-256 and the reproduction report. There is no ``coser_turns.jsonl``: the file records
no model call. What the file does not hold stays unknown rather than invented: the NSP fallbacks
and the profiles the critic saw are null; how a scene ended is read from its length (20 rounds:
``max_rounds``, fewer: ``end_chat``). TTR is carried in the report as recorded, not recomputed.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from charactereval_lib.coser.benchmark import JUDGEMENTS, SCENES
from charactereval_lib.coser.data import Scene, load_test_set, locate_data_dir
from charactereval_lib.coser.judge import (
    SCORE_FORMULAS,
    actor_rounds,
    headline_score,
    reference_str,
    scene_score,
    score_dimension,
    scores_block,
    simulation_str,
)
from charactereval_lib.coser.metrics import surface_metrics
from charactereval_lib.coser.prompts import NSP
from charactereval_lib.coser.simulation import ROLES, RoleSettings, SimulationSettings
from charactereval_lib.coser.upstream import DIMENSIONS
from charactereval_lib.coser.versions import COSER_HEAD, COSER_PAPER, ProtocolVersion
from charactereval_lib.engine.storage import artifacts, runs
from charactereval_lib.engine.storage.pinned import DataError, load_json_document

FORMAT = "CoSER exp/evaluation JSON (paper-era eval_reproduce.py)"
SCORES_KEYS = ("scores", "avg_scores")
CASES_KEYS = ("cases", "results_by_case")
TEXT_KEYS = ("simulation_text", "simulation_str")
LAYOUTS = {
    "sections": "'cases' keyed by actor model beside 'groundtruth' (paper-era eval_reproduce.py)",
    "flat": "'cases' keyed by scene '{book}-{i_p}-{i_c}' with no model section (rebuttal branch, HEAD main.py; "
            "name the actor model)",
}
NO_LENGTH_PENALTY_SUFFIX = "-no_length_penalty"
_CASE_METRICS = ("bleu", "rouge_l")
GROUNDTRUTH = "groundtruth"
IMPORTED = "imported"
# The roles of the recorded paper-era runs (the experiment name in rename.py and eval_reproduce.py).
PAPER_ENV_MODEL = "gpt-4o"
PAPER_NSP_MODEL = "llama3-1210-8epc"
PAPER_JUDGE_MODEL = "gpt-4o"


class OfficialFormatError(DataError):
    """An official CoSER result file that cannot be imported as it is (one line)."""


@dataclass
class ImportReport:
    """What an import read and how much of the recorded scoring the platform reproduced."""

    run_dir: str
    source: str
    sha256: str
    actor_model: str
    protocol_version: str
    cases: int
    dimension_scores: int
    dimension_scores_reproduced: int
    scene_scores_reproduced: int
    simulation_texts_reproduced: int
    # Every recorded value that the platform computes differently: scene, what, recorded, recomputed.
    mismatches: list[dict[str, Any]] = field(default_factory=list)
    # The per-model block: recorded, recomputed (4 dimensions and avg), whether those agree exactly.
    scores_block: dict[str, Any] = field(default_factory=dict)
    layout: str = "sections"
    score_formula: str = "length_penalty"
    # Per-scene BLEU/ROUGE-L the file records (flat layout), and how many were recomputed exactly.
    metrics_recorded: int = 0
    metrics_reproduced: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary_line(self) -> str:
        block = "reproduced" if self.scores_block.get("reproduced") else "NOT reproduced"
        return (f"{self.run_dir}: imported {self.cases} scenes of {self.actor_model} from {self.source}; "
                f"{self.dimension_scores_reproduced}/{self.dimension_scores} dimension scores and "
                f"{self.scene_scores_reproduced}/{self.cases} scene scores reproduced exactly, "
                f"{self.simulation_texts_reproduced}/{self.cases} simulation texts; scores block {block}")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _exact(a: Any, b: Any) -> bool:
    """Equal in value and in Python type (the official files keep the int 0 / 100 of max/min)."""
    return type(a) is type(b) and repr(a) == repr(b)


def _kind(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _pick(obj: Mapping[str, Any], names: Sequence[str], where: str) -> tuple[str, Any]:
    """The value under the current or the paper-era spelling of a key."""
    present = [name for name in names if name in obj]
    if not present:
        raise OfficialFormatError(f"{where}: missing {names[0]!r} (paper-era spelling {names[1]!r})")
    if len(present) > 1:
        raise OfficialFormatError(f"{where}: has both {names[0]!r} and {names[1]!r}; expected one of them")
    return present[0], obj[present[0]]


def _check_block(block: Any, where: str) -> None:
    if not isinstance(block, dict):
        raise OfficialFormatError(f"{where}: 'scores' should be an object, got {_kind(block)}")
    for key in (*DIMENSIONS, "avg"):
        if not _is_number(block.get(key)):
            raise OfficialFormatError(f"{where}: 'scores' needs a number under {key!r}, got {_kind(block.get(key))}")


def _check_case(case: Any, where: str, layout: str) -> None:
    """One recorded case: the fields the import reads, with the types the official code wrote."""
    if not isinstance(case, dict):
        raise OfficialFormatError(f"{where}: expected an object, got {_kind(case)}")
    _pick(case, TEXT_KEYS, where)
    text_key = next(k for k in TEXT_KEYS if k in case)
    for name, ok, expected in (("simulation", lambda v: isinstance(v, list), "a list of messages"),
                               (text_key, lambda v: isinstance(v, str), "a string"),
                               ("score", _is_number, "a number"),
                               ("critique", lambda v: isinstance(v, dict), "an object")):
        if name not in case:
            raise OfficialFormatError(f"{where}: missing field {name!r}")
        if not ok(case[name]):
            raise OfficialFormatError(f"{where}: field {name!r} should be {expected}, got {_kind(case[name])}")
    for i, message in enumerate(case["simulation"]):
        if not (isinstance(message, dict) and isinstance(message.get("role"), str)
                and isinstance(message.get("content"), str)):
            raise OfficialFormatError(f"{where}: simulation[{i}] should be an object with string 'role' and 'content'")
    critique = case["critique"]
    for dim in DIMENSIONS:
        if dim not in critique:
            raise OfficialFormatError(f"{where}: critique has no {dim!r} dimension")
    # The flat layout's critique carries the scene's BLEU/ROUGE-L instead of its score.
    allowed = {*DIMENSIONS, "score"} if layout == "sections" else {*DIMENSIONS, *_CASE_METRICS}
    extra = sorted(set(critique) - allowed)
    if extra:
        raise OfficialFormatError(f"{where}: critique has an unexpected key {extra[0]!r} (expected the 4 dimensions "
                                  f"and {' and '.join(repr(k) for k in sorted(allowed - set(DIMENSIONS)))})")
    for key in sorted(allowed - set(DIMENSIONS)):
        if (key in critique or layout == "sections") and not _is_number(critique.get(key)):
            raise OfficialFormatError(f"{where}: critique {key!r} should be a number, got {_kind(critique.get(key))}")
    for dim in DIMENSIONS:
        entry = critique[dim]
        at = f"{where}: critique {dim!r}"
        if not isinstance(entry, dict):
            raise OfficialFormatError(f"{at}: expected an object, got {_kind(entry)}")
        if not isinstance(entry.get("flaws"), list):
            raise OfficialFormatError(f"{at}: 'flaws' should be a list, got {_kind(entry.get('flaws'))}")
        for i, flaw in enumerate(entry["flaws"]):
            # The official parse gives every flaw a severity (1 when missing); its type is free, as
            # upstream: only Python ints count in the sum.
            if not isinstance(flaw, dict) or "severity" not in flaw:
                raise OfficialFormatError(f"{at}: flaws[{i}] should be an object with a 'severity'")
        if not _is_number(entry.get("score")):
            raise OfficialFormatError(f"{at}: 'score' should be a number, got {_kind(entry.get('score'))}")


def _layout(cases: Any, where: str) -> str:
    """Which of ``LAYOUTS`` the ``cases`` object has; a one-line error naming them when none."""
    known = "; ".join(f"{name}: {text}" for name, text in LAYOUTS.items())
    if not isinstance(cases, dict) or not cases:
        got = _kind(cases) if not isinstance(cases, dict) else "an empty one"
        raise OfficialFormatError(f"{where}: 'cases' should be a non-empty object, got {got}; known layouts: {known}")
    if GROUNDTRUTH in cases:
        return "sections"
    values = list(cases.values())
    if all(isinstance(v, dict) and "simulation" in v and "critique" in v for v in values):
        return "flat"
    if all(isinstance(v, dict) and all(isinstance(c, dict) for c in v.values()) for v in values):
        return "sections"
    raise OfficialFormatError(f"{where}: cannot recognise the layout of 'cases'; known layouts: {known}")


def _model_section(cases: Any, actor_model: str | None, where: str) -> tuple[str, dict[str, Any]]:
    """The actor model's section of ``cases`` (named, or the only one besides ``groundtruth``)."""
    if GROUNDTRUTH in cases and not isinstance(cases[GROUNDTRUTH], dict):
        raise OfficialFormatError(f"{where}: 'cases' section 'groundtruth' should be an object")
    models = [name for name in cases if name != GROUNDTRUTH]
    if actor_model is None:
        if len(models) != 1:
            found = ", ".join(repr(m) for m in models) or "none"
            raise OfficialFormatError(f"{where}: 'cases' should hold one actor model section besides 'groundtruth' "
                                      f"(found {found}); name the actor model to import")
        actor_model = models[0]
    if actor_model not in models:
        raise OfficialFormatError(f"{where}: 'cases' has no section for actor model {actor_model!r} "
                                  f"(sections: {', '.join(repr(m) for m in models) or 'none'})")
    section = cases[actor_model]
    if not isinstance(section, dict) or not section:
        raise OfficialFormatError(f"{where}: 'cases' section {actor_model!r} should be a non-empty object keyed by "
                                  f"scene key, got {_kind(section) if not isinstance(section, dict) else 'an empty one'}")
    return actor_model, section


def _ended_by(simulation: Sequence[Mapping[str, str]], max_rounds: int) -> tuple[int, str]:
    rounds = sum(1 for m in simulation if m["role"] != NSP)
    return rounds, "max_rounds" if rounds >= max_rounds else "end_chat"


def import_evaluation(
    run_dir: str | os.PathLike[str] | runs.RunDir,
    path: str | os.PathLike[str],
    *,
    version: ProtocolVersion | None = None,
    data_dir: str | os.PathLike[str] | None = None,
    actor_model: str | None = None,
    score_formula: str | None = None,
    env_model: str = PAPER_ENV_MODEL,
    nsp_model: str = PAPER_NSP_MODEL,
    judge_model: str = PAPER_JUDGE_MODEL,
    metrics: bool = True,
    progress: bool = True,
) -> ImportReport:
    """Protocol step "import an official result file" (see the module docstring): validate the
    whole file, re-score every dimension from its recorded critique, write a new run directory
    ``run_dir`` and return (and record in ``run.json``) how much of the recorded scoring was
    reproduced exactly. ``actor_model`` picks the section of ``cases`` (default: the only one) and
    must be given for the flat layout; ``version`` None: ``coser-paper`` for the paper-era layout,
    ``coser-head`` for the flat one; ``score_formula`` None: ``no_length_penalty`` for a file named
    ``*-no_length_penalty.json``, else ``length_penalty``; ``metrics`` adds BLEU/ROUGE-L of each
    simulation text (ROUGE-L takes ~15 ms a scene)."""
    from tqdm import tqdm

    path = Path(path)
    target = runs.RunDir.resolve(run_dir).path
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise OfficialFormatError(f"{target}: already exists and is not empty; import into a new run directory")
    raw = path.read_bytes() if path.is_file() else None
    if raw is None:
        raise OfficialFormatError(f"{path}: missing (an official exp/evaluation/*.json file)")
    document = load_json_document(path, raw)
    if not isinstance(document, dict):
        raise OfficialFormatError(f"{path}: wrong shape: expected a JSON object with 'scores' and 'cases', "
                                  f"got {_kind(document)}")
    scores_key, recorded_block = _pick(document, SCORES_KEYS, str(path))
    cases_key, cases = _pick(document, CASES_KEYS, str(path))
    _check_block(recorded_block, str(path))
    layout = _layout(cases, str(path))
    if layout == "flat":
        if not actor_model:
            raise OfficialFormatError(f"{path}: 'cases' is keyed by scene with no model section (flat layout); "
                                      "name the actor model that produced the file (--actor-model)")
        section = cases
    else:
        actor_model, section = _model_section(cases, actor_model, str(path))
    if version is None:
        version = COSER_PAPER if layout == "sections" else COSER_HEAD
    if score_formula is None:
        score_formula = "no_length_penalty" if path.stem.endswith(NO_LENGTH_PENALTY_SUFFIX) else "length_penalty"
    if score_formula not in SCORE_FORMULAS:
        raise OfficialFormatError(f"unknown score formula {score_formula!r}; choose one of {sorted(SCORE_FORMULAS)}")
    data_root = locate_data_dir(data_dir)
    scenes: dict[str, Scene] = {s.key: s for s in load_test_set(data_root)}
    for key, case in section.items():
        where = f"{path}: case {actor_model}/{key!r}"
        if key not in scenes:
            raise OfficialFormatError(f"{where}: unknown scene key (not in the pinned test set {data_root})")
        _check_case(case, where, layout)

    settings = SimulationSettings(
        actor=RoleSettings(actor_model, backend=IMPORTED), env=RoleSettings(env_model, backend=IMPORTED),
        nsp=RoleSettings(nsp_model, backend=IMPORTED), judge=RoleSettings(judge_model, backend=IMPORTED),
        version=version,
        random_stream="upstream's process-wide random.seed(42) stream (imported run, not simulated here)",
        nsp_fallback="upstream's draw on a set (imported run)",
        refusal_rule="upstream: a declined call is an API error (imported run)",
        keep_thinking=True,  # the dialogues are upstream's, as recorded
    )
    scene_records, judgement_records, mismatches, block_cases = [], [], [], []
    reproduced_dims = reproduced_scenes = reproduced_texts = metrics_recorded = 0
    metrics_reproduced = {name: 0 for name in _CASE_METRICS}
    metric_values: dict[str, list[float]] = {name: [] for name in _CASE_METRICS}
    for key, case in tqdm(section.items(), desc=f"importing {actor_model}", unit="scene", disable=not progress,
                          leave=False):
        scene = scenes[key]
        simulation, critique = case["simulation"], case["critique"]
        n = actor_rounds(simulation)
        text = case.get("simulation_text", case.get("simulation_str"))
        reproduced_texts += simulation_str(simulation, version) == text
        base = {"repeat": 0, "scene": key, "tag": scene.tag, "book": scene.raw["book"]}
        rounds, ended_by = _ended_by(simulation, settings.max_rounds)
        scene_records.append({**base, "status": "done", "ended_by": ended_by, "rounds": rounds, "fallbacks": None,
                              "simulation": simulation, "profiles": None, "recorded_score": case["score"],
                              "source": IMPORTED})
        if metrics:
            reference = reference_str(scene.raw["dialogues"], version)
            metrics_record = surface_metrics(text, reference)
            judgement_records.append({**base, "kind": "metrics", **metrics_record})
            recorded_metrics = {name: critique[name] for name in _CASE_METRICS if name in critique}
            metrics_recorded += bool(recorded_metrics)
            for name, recorded in recorded_metrics.items():
                metric_values[name].append(metrics_record[name])
                same = metrics_record[name] is not None and _exact(float(metrics_record[name]), recorded)
                metrics_reproduced[name] += same
                if not same:
                    mismatches.append({"scene": key, "what": name, "recorded": recorded,
                                       "recomputed": metrics_record[name]})
        headline = {}
        for dim in DIMENSIONS:
            entry = critique[dim]
            scores = score_dimension(entry, n, score_formula)
            headline[dim] = headline_score(scores, version)
            same = _exact(headline[dim], entry["score"])
            reproduced_dims += same
            if not same:
                mismatches.append({"scene": key, "what": dim, "recorded": entry["score"], "recomputed": headline[dim]})
            judgement_records.append({**base, "kind": "dimension", "dimension": dim, "status": "ok", "critique": entry,
                                      "scores": scores, "attempts": [], "recorded_score": entry["score"],
                                      "reproduced": same, "source": IMPORTED})
        block_cases.append(headline)
        overall = scene_score([headline[d] for d in DIMENSIONS])
        same = _exact(overall, case["score"]) and ("score" not in critique or _exact(overall, critique["score"]))
        reproduced_scenes += same
        if not same:
            mismatches.append({"scene": key, "what": "scene score", "recorded": case["score"], "recomputed": overall})

    # The official block: per-dimension means over the cases in file order, rounded as the version does.
    recomputed_block = scores_block(block_cases, version)
    for name in _CASE_METRICS:
        # The block's BLEU/ROUGE-L: the plain mean of the scenes' values (None when one is missing).
        values = metric_values[name]
        if name in recorded_block and values and len(values) == len(section):
            recomputed_block[name] = None if None in values else sum(values) / len(values)
    report = ImportReport(
        run_dir=str(target), source=str(path), sha256=hashlib.sha256(raw).hexdigest(), actor_model=actor_model,
        protocol_version=version.name, cases=len(section), dimension_scores=len(section) * len(DIMENSIONS),
        dimension_scores_reproduced=reproduced_dims, scene_scores_reproduced=reproduced_scenes,
        simulation_texts_reproduced=reproduced_texts, mismatches=mismatches,
        scores_block={
            "recorded": recorded_block, "recomputed": recomputed_block,
            "reproduced": all(_exact(recomputed_block[k], recorded_block[k]) for k in recomputed_block),
            "not_recomputed": [k for k in recorded_block if k not in recomputed_block],
        },
        layout=layout, score_formula=score_formula, metrics_recorded=metrics_recorded,
        metrics_reproduced=metrics_reproduced if metrics_recorded else {},
    )
    _write_run(target, scene_records, judgement_records, settings, list(section), data_root, {
        "file": str(path), "sha256": report.sha256, "format": FORMAT,
        "keys": {"scores": scores_key, "cases": cases_key}, "actor_model": actor_model, "layout": layout,
        "score_formula": score_formula, "report": report.as_dict(),
    })
    return report


def _write_run(target: Path, scene_records: list[dict[str, Any]], judgement_records: list[dict[str, Any]],
               settings: SimulationSettings, scene_keys: list[str], data_root: Path, source: dict[str, Any]) -> None:
    """Build the run directory beside ``target`` and rename it into place (all or nothing)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.parent / f".{target.name}.import-{secrets.token_hex(4)}"
    staging.mkdir()
    try:
        artifacts.write_jsonl_atomic(staging / SCENES, scene_records)
        artifacts.write_jsonl_atomic(staging / JUDGEMENTS, judgement_records)
        runs.update_manifest(staging, protocol_version=settings.version.name, benchmark="coser", coser={
            "identity": settings.identity(), "preset": IMPORTED, "repeats": 1, "scenes": scene_keys,
            "data_dir": str(data_root), "models": {name: settings.role(name).model for name in ROLES},
        }, import_official=source)
        # rename(2) replaces an empty directory, so an empty target made beforehand is fine.
        os.rename(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
