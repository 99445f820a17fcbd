"""CharacterEval's checks of what a run's files show (``engine.reports.evidence``).

Each check reads the run's record files themselves (generations, rows, scores, judge records),
and the manifest only where the files cannot say (a run made before its records carried the
mark the check reads). A run whose ``run.json`` is gone still gets every warning its files
support: placeholder replies carry the offline backend's mark, every score row the digest (and a
test checkpoint's label) of the checkpoint that made it, and the missing samples are counted
against the official data (or, without it, the protocol's pinned sample count).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from charactereval_lib.charactereval import layout
from charactereval_lib.charactereval.data import OfficialData
from charactereval_lib.charactereval.doctor import EXPECTED_SAMPLES
from charactereval_lib.charactereval.identity import served_caveats
from charactereval_lib.charactereval.summary import load_run_scores
from charactereval_lib.engine.generation.offline import BACKEND_MARK
from charactereval_lib.engine.reports.evidence import CannotCheck, Check, Evidence, run_checks
from charactereval_lib.engine.storage import artifacts, runs

OFFLINE_BACKEND = BACKEND_MARK["backend"]
TINY_MARKER = "tiny"
OFFLINE_CAVEAT = (
    "The replies come from the offline backend: deterministic placeholder text made without "
    "any model. They demonstrate the wiring only; they say nothing about any model."
)
TINY_RM_CAVEAT = (
    "The scores come from a tiny, randomly initialised reward model, not BaichuanCharRM. "
    "They demonstrate the wiring only and are not CharacterEval scores."
)
FAILED = (None, "ERROR")


def no_manifest_line(run_dir: Path) -> str:
    """The one line a run without run.json gets at the top of its summary, report and board row."""
    return (f"No run.json in {run_dir}: the model, backend and settings are unknown; everything said of this run "
            "is read from its record files alone")


def checkpoint_labels(scoring: dict[str, Any]) -> list[str]:
    """Labels the scorer recorded in run.json for its reward-model checkpoint(s): ``scoring.rm_label``,
    or ``scoring.checkpoint.label`` for the whole run and for each shard (``rm make-tiny`` labels
    its checkpoints as tiny)."""
    sections = [scoring, *scoring.get("shards", {}).values()]
    labels = [s.get("rm_label") for s in sections] + [(s.get("checkpoint") or {}).get("label") for s in sections]
    return [str(label) for label in labels if label]


@dataclass
class RunFiles:
    """One run's files as the checks read them (each read once)."""

    run: layout.CharacterEvalRun
    scorer: str
    judge_model: str | None
    data: OfficialData | None
    manifest: dict[str, Any] | None  # None: no run.json
    manifest_error: str | None  # a run.json that cannot be read
    generations: dict[int, dict[str, Any]]
    scores: list[dict[str, Any]]  # the latest score record of each (id, metric) of the scorer
    counts: dict[str, Any] | None  # ``load_run_scores``'s counts (None: no rows yet)
    torn: list[str] = field(default_factory=list)


def read_run_files(run_dir: Path | str | layout.CharacterEvalRun, scorer: str = layout.REWARD_MODEL,
                   judge_model: str | None = None, data: OfficialData | None = None) -> RunFiles:
    """What the checks read of a run: its manifest (or why there is none), its latest generation
    and score records, and the torn last lines its record files have."""
    run = layout.CharacterEvalRun.resolve(run_dir)
    manifest: dict[str, Any] | None = None
    error = None
    if (run.path / runs.MANIFEST).exists():
        try:
            manifest = runs.load_manifest(run.path)
        except runs.RunError as exc:
            error = str(exc)
    torn: list[str] = []
    generations = run.latest_generations(torn)
    # Each record file is read once: the score rows and rows.jsonl go on to the counts.
    rows = artifacts.read_jsonl(run.rows)
    counts = None
    latest = None
    if run.rows.exists():
        judge = run.select_judge(judge_model) if scorer == layout.JUDGE else None
        if scorer != layout.JUDGE or judge:
            latest = run.latest_scores(scorer=scorer, judge_model=judge, warnings=torn)
            _, counts = load_run_scores(run, scorer, judge, rows=rows.records, latest=latest)
        judge_model = judge
    if latest is None:
        torn += artifacts.read_jsonl(run.score_file(scorer)).warnings
    torn += rows.warnings
    scores = list(latest.values()) if latest is not None else []
    return RunFiles(run, scorer, judge_model, data, manifest, error, generations, scores, counts, torn)


def _manifest(files: RunFiles) -> list[str]:
    """run.json is there, readable, and says what the files say (the backend of the replies,
    the checkpoint of the scores)."""
    if files.manifest_error:
        return [f"run.json cannot be read ({files.manifest_error}): its settings are unknown"]
    if files.manifest is None:
        return [no_manifest_line(files.run.path)]
    said = []
    declared = (files.manifest.get("generation") or {}).get("backend")
    marked = sum(1 for r in files.generations.values() if r.get("backend") == OFFLINE_BACKEND)
    if marked and declared not in (None, OFFLINE_BACKEND):
        said.append(f"run.json says the replies came from backend {declared!r}, but {marked} of the generation "
                    "records are the offline backend's placeholders")
    recorded = ((files.manifest.get("scoring") or {}).get("checkpoint") or {}).get("sha256")
    digests = {s.get("checkpoint_sha256") for s in files.scores if s.get("checkpoint_sha256")}
    if files.scorer == layout.REWARD_MODEL and recorded and digests and recorded not in digests:
        said.append(f"run.json names checkpoint sha256:{recorded[:12]}, but the score rows were made by "
                    + ", ".join(f"sha256:{d[:12]}" for d in sorted(digests)))
    return said


def _replies(files: RunFiles) -> list[str]:
    """The generation records carry the offline backend's mark (older runs: run.json says so)."""
    marked = any(r.get("backend") == OFFLINE_BACKEND for r in files.generations.values())
    declared = ((files.manifest or {}).get("generation") or {}).get("backend") == OFFLINE_BACKEND
    return [OFFLINE_CAVEAT] if marked or declared else []


def _reward_model(files: RunFiles) -> list[str]:
    """The score rows' checkpoint: a test checkpoint's label, several digests, or a digest that
    nothing names."""
    if files.scorer != layout.REWARD_MODEL or not files.scores:
        return []
    labels = {s["checkpoint_label"] for s in files.scores if s.get("checkpoint_label")}
    labels |= set(checkpoint_labels((files.manifest or {}).get("scoring") or {}))
    said = [TINY_RM_CAVEAT] if any(TINY_MARKER in label.lower() for label in labels) else []
    digests = Counter(s.get("checkpoint_sha256") for s in files.scores)
    if len(digests) > 1:
        said.append("The score rows were made by " + ", ".join(
            f"{count} by {'an unrecorded checkpoint' if d is None else f'sha256:{d[:12]}'}"
            for d, count in sorted(digests.items(), key=lambda item: str(item[0]))) + ": one run, several scorers")
    elif not said and files.manifest is None and not any(s.get("mode") == "imported" for s in files.scores):
        (digest,) = digests
        said.append(f"The scores were made by checkpoint sha256:{str(digest)[:12]}, and without run.json nothing "
                    "says which model that is")
    return said


def _samples(files: RunFiles) -> list[str]:
    """Test samples without a generation record: counted against the official data, else the
    transform's own count, else the protocol's pinned number of samples."""
    generated = set(files.generations)
    if files.data is not None:
        missing = len({s.id for s in files.data.samples} - generated)
    elif files.manifest and ((files.manifest.get("transform") or {}).get("counts") or {}).get("missing") is not None:
        missing = files.manifest["transform"]["counts"]["missing"]
    elif files.generations:
        missing = max(EXPECTED_SAMPLES - len(generated), 0)
    else:
        raise CannotCheck("the run has no generation records to count")
    if not missing:
        return []
    return [f"{missing} test sample(s) have no reply (a subset run, or generation is unfinished): the means rest on "
            "fewer rows than the paper's and are not directly comparable with its table."]


def _failed(files: RunFiles) -> list[str]:
    failed = sum(1 for r in files.generations.values() if r.get("model_output") in FAILED)
    if not failed:
        return []
    return [f"{failed} generation(s) failed (their latest record holds no reply): their rows are left out of the "
            "means and counted as failures; `charactereval generate` again retries them"]


def _unscored(files: RunFiles) -> list[str]:
    if files.counts is None:
        raise CannotCheck(f"{files.run.rows} holds no rows yet (run `charactereval transform`)")
    unscored = files.counts["unscored_rows"] - files.counts.get("invalid_unscored", 0)
    return [f"Scoring is incomplete: {unscored} row(s) have no score yet; means use scored rows only."] if unscored else []


def _served(files: RunFiles) -> list[str]:
    return served_caveats(files.run, files.judge_model)


def _torn(files: RunFiles) -> list[str]:
    return list(dict.fromkeys(files.torn))


CHECKS: tuple[Check[RunFiles], ...] = (
    Check("run.json", "run.json: present, readable, and naming the backend and checkpoint the records show",
          _manifest),
    Check("replies", "generations.jsonl: the offline backend's mark on placeholder replies (older runs: run.json)",
          _replies),
    Check("reward-model", "the score rows' checkpoint_sha256 and checkpoint_label (a test checkpoint's label; "
          "several digests)", _reward_model),
    Check("samples", "generations.jsonl against the official data's sample ids (else the transform's count, else "
          f"the protocol's {EXPECTED_SAMPLES:,})", _samples),
    Check("failed-generations", "generations.jsonl: latest records without a reply", _failed),
    Check("unscored-rows", "rows.jsonl against the score file's latest records", _unscored),
    Check("served-model", "the model each generation and judge record says its server reported, against the "
          "declared one", _served),
    Check("torn-lines", "every record file read: a torn last line left by an interrupted write", _torn),
)


def run_evidence(run_dir: Path | str | layout.CharacterEvalRun, scorer: str = layout.REWARD_MODEL,
                 judge_model: str | None = None, data: OfficialData | None = None) -> Evidence:
    """Every CharacterEval check on one run's files, for one scorer's scores."""
    files = read_run_files(run_dir, scorer, judge_model, data)
    return run_checks(CHECKS, files, subject=files.run.path.name)
