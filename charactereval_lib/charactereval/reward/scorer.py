"""Scoring runs: ``RUN/rows.jsonl`` -> ``RUN/scores.jsonl`` with the reward model (S6 + S8).

- Each row's S6 text is built from the row (reply, metric) and the official data (context,
  profile); its SHA-256 is the row's input digest.
- A record is appended (one flushed line) as soon as a row is scored, so a killed run loses at
  most the line being written. A session is the engine's resumable job (``engine.storage.jobs``) keyed
  by row, input digest, checkpoint identity and mode: a re-run skips every row already scored
  under the same input digest, checkpoint identity and mode, and scores the rest.
- ``shard=(i, n)`` scores the rows whose sample id hashes to shard i (rows of one sample stay
  together, which the fast mode's prefix reuse needs) into ``scores.shard-i-of-n.jsonl``; an
  unsharded run first merges every shard file into ``scores.jsonl`` and then scores what is
  still missing (nothing, when all shards finished), without loading the model if so.
- ``dry_run`` writes ``rm_inputs.jsonl`` (the exact texts, with token counts when a tokenizer
  is given) and loads no model; ``verify`` scores a sample of rows both ways and reports how
  often the fast mode is bitwise equal to the faithful one.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from charactereval_lib.charactereval import layout
from charactereval_lib.charactereval.data import OfficialData
from charactereval_lib.charactereval.protocol import METRIC_BY_EN, PROTOCOL_VERSION
from charactereval_lib.charactereval.reward.inputs import build_rm_text
from charactereval_lib.engine.storage import artifacts, jobs, runs

if TYPE_CHECKING:  # the model module imports torch; the scorer imports it only when scoring
    from charactereval_lib.charactereval.reward.model import FastOptions

FAITHFUL = "faithful"
FAST = "fast"
MODES = (FAITHFUL, FAST)
RM_INPUTS = "rm_inputs.jsonl"
VERIFY_REPORT = "rm_verify.json"
SHARD_GLOB = "scores.shard-*-of-*.jsonl"
ROW_FIELDS = ("id", "metric_en", "metric_zh", "model_output")


@dataclass(frozen=True)
class RowInput:
    """One row to score: its key, its S6 text and that text's digest."""

    id: int
    metric_en: str
    text: str
    input_sha256: str


@dataclass
class ScoringReport:
    rows: int = 0
    already_scored: int = 0
    merged_from_shards: int = 0
    scored: int = 0
    truncated: int = 0
    seconds: float = 0.0
    tokens: int = 0
    output: str = ""
    warnings: list[str] = field(default_factory=list)


def parse_shard(text: str) -> tuple[int, int]:
    """``"I/N"`` with 1 <= I <= N -> (I, N)."""
    try:
        i_text, n_text = text.split("/")
        i, n = int(i_text), int(n_text)
    except ValueError:
        raise runs.RunError(f"--shard {text!r}: expected I/N, e.g. 1/4") from None
    if not 1 <= i <= n:
        raise runs.RunError(f"--shard {text!r}: needs 1 <= I <= N")
    return i, n


def shard_of(sample_id: int, n: int) -> int:
    """Shard (1-based) of a sample: a hash, so shards are balanced and stable across runs."""
    return int.from_bytes(hashlib.sha256(str(sample_id).encode()).digest()[:8], "big") % n + 1


def shard_path(run_dir: Path, shard: tuple[int, int] | None) -> Path:
    if shard is None:
        return run_dir / layout.SCORES
    return run_dir / f"scores.shard-{shard[0]}-of-{shard[1]}.jsonl"


def text_sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _grid_steps(a: float, b: float) -> int:
    """Distance between two bf16 values in representable bf16 steps (ulps)."""
    import torch

    bits = torch.tensor([a, b], dtype=torch.bfloat16).view(torch.int16).tolist()
    # Positive values (sigmoids) order like their bit patterns.
    return abs(bits[0] - bits[1])


# --- rows -> S6 texts -----------------------------------------------------------------------


def read_rows(run_dir: Path) -> list[dict[str, Any]]:
    path = Path(run_dir) / layout.ROWS
    result = artifacts.read_jsonl(path)
    for warning in result.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    if not result.records:
        raise runs.RunError(f"{path}: no rows (run `charactereval transform` first)")
    return result.records


def row_inputs(rows: Sequence[dict[str, Any]], data: OfficialData, rows_path: Path | str = layout.ROWS) -> list[RowInput]:
    """S6 (text) for every row of a run: the row's reply and metric joined with the official
    context and profile of its sample; rows that cannot be scored faithfully are refused."""
    samples = data.by_id()
    out = []
    seen: set[tuple[int, str]] = set()
    for number, row in enumerate(rows, start=1):
        where = f"{rows_path}: row {number}"
        missing = [f for f in ROW_FIELDS if f not in row]
        if missing:
            raise runs.RunError(f"{where}: missing field(s) {missing}")
        sample = samples.get(row["id"])
        if sample is None:
            raise runs.RunError(f"{where}: id {row['id']!r} is not a test sample")
        if row.get("role", sample.role) != sample.role:
            raise runs.RunError(f"{where}: role {row['role']!r} but sample {sample.id} is played by {sample.role!r}")
        metric = METRIC_BY_EN.get(row["metric_en"])
        if metric is None or metric.metric_zh != row["metric_zh"]:
            raise runs.RunError(f"{where}: unknown metric {row['metric_en']!r}/{row['metric_zh']!r}")
        if not isinstance(row["model_output"], str):
            raise runs.RunError(f"{where}: model_output is {type(row['model_output']).__name__}, expected a string")
        key = (row["id"], row["metric_en"])
        if key in seen:
            raise runs.RunError(f"{where}: duplicate row for id {key[0]} metric {key[1]}")
        seen.add(key)
        text = build_rm_text(data.profiles[sample.role], sample.context, row["model_output"], row["metric_zh"])
        out.append(RowInput(row["id"], row["metric_en"], text, text_sha256(text)))
    return out


# --- dry run --------------------------------------------------------------------------------


def write_rm_inputs(run_dir: Path, inputs: Sequence[RowInput], tokenizer: Any | None = None) -> int:
    """``rm_inputs.jsonl``: ``{id, metric_en, text}`` per row, plus ``n_tokens`` and
    ``truncated`` (what the model would see) when a tokenizer is given. Nothing is scored."""

    def records() -> Iterable[dict[str, Any]]:
        for row in inputs:
            record: dict[str, Any] = {"id": row.id, "metric_en": row.metric_en, "text": row.text}
            if tokenizer is not None:
                ids, truncated = tokenizer.rm_input_ids(row.text)
                record.update(n_tokens=len(ids), truncated=truncated)
            yield record

    return artifacts.write_jsonl_atomic(Path(run_dir) / RM_INPUTS, records())


def dry_run(run_dir: Path, data: OfficialData, rm_dir: Path | None, shard: tuple[int, int] | None = None) -> int:
    """``score --dry-run``: write ``rm_inputs.jsonl`` for the (shard's) rows; token counts come
    from the checkpoint's tokenizer when ``rm_dir`` is given. Loads no model."""
    tokenizer = None
    if rm_dir is not None:
        from charactereval_lib.charactereval.reward.tokenizer import load_tokenizer

        tokenizer = load_tokenizer(rm_dir)
    run_dir = Path(run_dir)
    inputs = select_rows(row_inputs(read_rows(run_dir), data, run_dir / layout.ROWS), shard)
    count = write_rm_inputs(run_dir, inputs, tokenizer)
    runs.update_manifest(
        run_dir,
        score_dry_run={"rows": count, "tokenizer": str(rm_dir) if rm_dir else None, "created_at": runs.utc_now()},
    )
    return count


# --- resuming -------------------------------------------------------------------------------


# A score record's key: its row, the digest of the row's S6 text, the checkpoint and the mode.
SCORE_KEY = ("id", "metric_en", "input_sha256", "checkpoint_sha256", "mode")


def _valid(record: Any) -> bool:
    need = ("id", "metric_en", "score", "sigmoid", "mode", "input_sha256", "checkpoint_sha256")
    return isinstance(record, dict) and all(k in record for k in need)


def merge_shards(run_dir: Path, job: jobs.Job) -> int:
    """Append to ``scores.jsonl`` every shard record it does not hold yet; returns how many."""
    target = run_dir / layout.SCORES
    shard_files = sorted(run_dir.glob(SHARD_GLOB))
    if not shard_files:
        return 0
    have = set(job.latest(target, SCORE_KEY, select=_valid))
    merged = 0
    with job.appender(target) as out:
        for path in shard_files:
            for key, record in job.latest(path, SCORE_KEY, select=_valid).items():
                if key not in have:
                    out.write(record)
                    have.add(key)
                    merged += 1
    return merged


# --- scoring --------------------------------------------------------------------------------


def scoring_job(path: Path) -> jobs.Job:
    """One writer per scores file: two scorers appending to the same file would both score the
    same rows; shards write files of their own, so they run side by side."""
    return jobs.Job(path, path.with_name(path.name + ".lock"), "scorer",
                    hint="; wait for it, or split the work with --shard")


@dataclass(frozen=True)
class ScorerSettings:
    mode: str = FAITHFUL
    device: str = "cpu"
    shard: tuple[int, int] | None = None
    fast_token_budget: int = 16384
    fast_reuse_prefix: bool = True
    # Query block for skipping masked attention blocks in fast mode; 0 off, None: CPU only.
    fast_causal_block: int | None = None
    progress: bool = True

    def fast_options(self) -> FastOptions:
        from charactereval_lib.charactereval.reward.model import FastOptions

        return FastOptions(
            token_budget=self.fast_token_budget, reuse_prefix=self.fast_reuse_prefix, causal_block=self.fast_causal_block
        )


def _record(row: RowInput, sigmoid: float, n_tokens: int, n_full: int, truncated: bool, mode: str, ckpt: str) -> dict[str, Any]:
    from charactereval_lib.charactereval.reward.model import to_score

    return {
        "id": row.id,
        "metric_en": row.metric_en,
        "score": to_score(sigmoid),
        "sigmoid": sigmoid,
        "n_tokens": n_tokens,
        "n_tokens_untruncated": n_full,
        "truncated": truncated,
        "mode": mode,
        "input_sha256": row.input_sha256,
        "checkpoint_sha256": ckpt,
    }


def _chunks_by_sample(rows: Sequence[RowInput], lengths: Sequence[int], max_tokens: int) -> Iterable[list[int]]:
    """Consecutive runs of row indices, never splitting a sample, of about ``max_tokens``."""
    chunk: list[int] = []
    tokens = 0
    for i, row in enumerate(rows):
        new_sample = not chunk or rows[chunk[-1]].id != row.id
        if chunk and new_sample and tokens + lengths[i] > max_tokens:
            yield chunk
            chunk, tokens = [], 0
        chunk.append(i)
        tokens += lengths[i]
    if chunk:
        yield chunk


# Rows of whole samples per faithful work unit: faithful scores one row at a time, so a unit
# only sets how much work a Ray worker takes at once and how often its records come back.
FAITHFUL_UNIT_ROWS = 8


def encode_rows(pending: Sequence[RowInput], tokenizer: Any) -> list[tuple[list[int], int, bool]]:
    """Each row's model input (``rm_input_ids``) with its untruncated length, for the record."""
    from charactereval_lib.charactereval.reward.tokenizer import truncate_left

    encoded = []
    for row in pending:
        full = tokenizer.encode_ids(row.text) + [tokenizer.eos_id]
        ids, truncated = truncate_left(full, tokenizer.max_tokens)
        encoded.append((ids, len(full), truncated))
    return encoded


def work_units(pending: Sequence[RowInput], encoded: Sequence[tuple[list[int], int, bool]], settings: ScorerSettings) -> list[list[int]]:
    """Row indices that ``score_rows`` scores together, whole samples each. In fast mode they are
    its batching chunks (a batch's shapes, hence possibly its roundings, depend on its rows), so a
    unit scored on its own, e.g. by a Ray worker, gives exactly the numbers of one pass over all
    rows: the greedy split of a unit's own rows is the unit itself."""
    if settings.mode == FAST:
        return list(_chunks_by_sample(pending, [len(ids) for ids, _, _ in encoded], 8 * settings.fast_token_budget))
    return list(_chunks_by_sample(pending, [1] * len(pending), FAITHFUL_UNIT_ROWS))


def score_rows(
    pending: Sequence[RowInput],
    tokenizer: Any,
    model: Any,
    settings: ScorerSettings,
    ckpt_sha: str,
    emit: Callable[[dict[str, Any]], None],
) -> tuple[int, int]:
    """Score ``pending`` rows (sorted by sample) and hand each record to ``emit`` as soon as it
    exists. Returns (tokens seen by the model, rows truncated)."""
    from tqdm import tqdm

    from charactereval_lib.charactereval.reward.model import sigmoid_faithful, sigmoids_fast

    encoded = encode_rows(pending, tokenizer)
    tokens = sum(len(ids) for ids, _, _ in encoded)
    truncated_count = sum(1 for _, _, t in encoded if t)
    options = settings.fast_options()
    bar = tqdm(total=len(pending), unit="row", desc=f"scoring ({settings.mode})", disable=not settings.progress)
    try:
        for unit in work_units(pending, encoded, settings):
            if settings.mode == FAITHFUL:
                for i in unit:
                    ids, n_full, truncated = encoded[i]
                    emit(_record(pending[i], sigmoid_faithful(model, ids), len(ids), n_full, truncated, FAITHFUL, ckpt_sha))
                    bar.update(1)
            else:
                values = sigmoids_fast(model, [encoded[i][0] for i in unit], [pending[i].id for i in unit], options)
                for i, sigmoid in zip(unit, values):
                    ids, n_full, truncated = encoded[i]
                    emit(_record(pending[i], sigmoid, len(ids), n_full, truncated, FAST, ckpt_sha))
                bar.update(len(unit))
    finally:
        bar.close()
    return tokens, truncated_count


def resolve_device(device: str | None) -> str:
    import torch

    if device:
        try:
            torch.device(device)
        except RuntimeError:
            raise runs.RunError(f"--device {device!r}: expected cpu, cuda or cuda:N") from None
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise runs.RunError(f"--device {device}: CUDA is not available in this torch build/machine")
        return device
    return "cuda" if torch.cuda.is_available() else "cpu"


def select_rows(inputs: Sequence[RowInput], shard: tuple[int, int] | None) -> list[RowInput]:
    chosen = [r for r in inputs if shard is None or shard_of(r.id, shard[1]) == shard[0]]
    # Rows of one sample next to each other (stable within a sample), so the fast mode can
    # share their prefix and chunks never split a sample.
    order = {}
    for r in chosen:
        order.setdefault(r.id, len(order))
    return sorted(chosen, key=lambda r: order[r.id])


class LocalEngine:
    """Scores in this process: the model is loaded here and ``score_rows`` runs over every
    pending row. (``ray_scorer.RayEngine`` is the other engine: the same units, on workers.)"""

    def describe(self) -> dict[str, Any]:
        return {"engine": "local"}

    @contextlib.contextmanager
    def session(self, rm_dir: Path, settings: ScorerSettings, ckpt_sha: str):
        """Loads the model, then yields ``score(pending, emit) -> (tokens, truncated)``."""
        from charactereval_lib.charactereval.reward.checkpoint import load_model
        from charactereval_lib.charactereval.reward.tokenizer import load_tokenizer

        tokenizer, model = load_tokenizer(rm_dir), load_model(rm_dir, settings.device)
        yield lambda pending, emit: score_rows(pending, tokenizer, model, settings, ckpt_sha, emit)


def score_run(
    run_dir: Path, rm_dir: Path, data: OfficialData, settings: ScorerSettings, engine: Any = None
) -> ScoringReport:
    """Score the rows of ``run_dir`` that are not scored yet under this checkpoint and mode, in
    this process or with another ``engine`` (``describe()`` for the manifest; ``session(...)``
    loads the model and yields the scoring function, see ``LocalEngine``); whatever the engine,
    only this process writes the scores."""
    from charactereval_lib.charactereval.reward.checkpoint import checkpoint_identity

    if settings.mode not in MODES:
        raise runs.RunError(f"--mode {settings.mode!r}: expected one of {', '.join(MODES)}")
    run_dir = Path(run_dir)
    report = ScoringReport()
    inputs = select_rows(row_inputs(read_rows(run_dir), data, run_dir / layout.ROWS), settings.shard)
    report.rows = len(inputs)
    identity = checkpoint_identity(rm_dir)
    out_path = shard_path(run_dir, settings.shard)
    report.output = str(out_path)
    job = scoring_job(out_path)
    with job.locked():
        _score_locked(run_dir, rm_dir, settings, inputs, identity, job, report, engine or LocalEngine())
    report.warnings.extend(job.warnings)
    return report


def _score_locked(
    run_dir: Path,
    rm_dir: Path,
    settings: ScorerSettings,
    inputs: Sequence[RowInput],
    identity: dict[str, Any],
    job: jobs.Job,
    report: ScoringReport,
    engine: Any,
) -> None:
    """The body of ``score_run`` while holding the output file's lock."""
    from charactereval_lib.charactereval.reward.tiny import tiny_label

    ckpt_sha = identity["sha256"]
    out_path = job.where
    if settings.shard is None:
        report.merged_from_shards = merge_shards(run_dir, job)
    plan = job.plan(out_path, inputs, lambda row: (row.id, row.metric_en, row.input_sha256, ckpt_sha, settings.mode),
                    SCORE_KEY, jobs.recorded_is_done, select=_valid)
    pending = plan.pending
    report.already_scored = plan.done
    label = tiny_label(rm_dir)
    parameters = {
        "mode": settings.mode,
        "device": settings.device,
        "protocol_version": PROTOCOL_VERSION,
        "checkpoint": {"path": str(rm_dir), "sha256": ckpt_sha, "format": identity["format"], "label": label},
        "fast": asdict(settings.fast_options()) if settings.mode == FAST else None,
    }
    if pending:
        with engine.session(rm_dir, settings, ckpt_sha) as score, job.appender(out_path) as out:
            # Once the engine has passed its checks (GPUs, workers): a refused run leaves run.json as it was.
            _record_manifest(run_dir, settings, {**parameters, **engine.describe(), "started_at": runs.utc_now(),
                                                 "rows": len(inputs)})

            def emit(record: dict[str, Any]) -> None:
                # A test checkpoint's label travels with each score it made: the score file alone
                # says the scores are meaningless (``charactereval.evidence``).
                out.write({**record, "checkpoint_label": label} if label else record)
                report.scored += 1

            start = time.perf_counter()
            report.tokens, report.truncated = score(pending, emit)
            report.seconds = time.perf_counter() - start
    summary = {k: v for k, v in asdict(report).items() if k != "warnings"}
    _record_manifest(run_dir, settings, {**parameters, **engine.describe(), **summary, "finished_at": runs.utc_now()})


def _record_manifest(run_dir: Path, settings: ScorerSettings, section: dict[str, Any]) -> None:
    """Scorer parameters in ``run.json``: under ``scoring`` for an unsharded run, under
    ``scoring.shards["i/n"]`` for a shard (concurrent shards each update their own entry)."""
    if settings.shard is None:
        runs.update_manifest(run_dir, scoring={**section, "shards": runs.load_manifest(run_dir).get("scoring", {}).get("shards", {})})
        return
    label = f"{settings.shard[0]}/{settings.shard[1]}"
    current = runs.load_manifest(run_dir).get("scoring", {})
    shards = {**current.get("shards", {}), label: section}
    runs.update_manifest(run_dir, scoring={**current, "shards": shards})


# --- verify ---------------------------------------------------------------------------------


def verify_rows(inputs: Sequence[RowInput], k: int) -> list[RowInput]:
    """About ``k`` rows for a faithful-vs-fast check: whole samples (so prefix reuse is
    exercised) in a fixed pseudo-random order, until at least k rows."""
    by_sample: dict[int, list[RowInput]] = {}
    for row in inputs:
        by_sample.setdefault(row.id, []).append(row)
    order = sorted(by_sample, key=lambda i: hashlib.sha256(f"verify:{i}".encode()).digest())
    chosen: list[RowInput] = []
    for sample_id in order:
        if len(chosen) >= k:
            break
        chosen.extend(by_sample[sample_id])
    return chosen


def compare_modes(faithful: Sequence[float], fast: Sequence[float]) -> dict[str, Any]:
    """Exact-equal fraction and the largest difference, in sigmoid, score and bf16 steps."""
    diffs = [abs(a - b) for a, b in zip(faithful, fast)]
    steps = [_grid_steps(a, b) for a, b in zip(faithful, fast)]
    n = len(diffs)
    equal = sum(1 for d in diffs if d == 0)
    return {
        "rows": n,
        "exact_equal": equal,
        "exact_equal_fraction": equal / n if n else None,
        "max_abs_diff_sigmoid": max(diffs, default=0.0),
        "max_abs_diff_score": 4 * max(diffs, default=0.0),
        "max_diff_grid_steps": max(steps, default=0),
        "rows_beyond_one_step": sum(1 for s in steps if s > 1),
    }


def verify_run(run_dir: Path, rm_dir: Path, data: OfficialData, settings: ScorerSettings, k: int) -> dict[str, Any]:
    """Score about ``k`` rows of the run both ways (nothing is written to scores.jsonl) and
    write ``rm_verify.json`` with the equality statistics and both timings."""
    from charactereval_lib.charactereval.reward.checkpoint import checkpoint_identity, load_model
    from charactereval_lib.charactereval.reward.model import sigmoid_faithful, sigmoids_fast
    from charactereval_lib.charactereval.reward.tokenizer import load_tokenizer

    run_dir = Path(run_dir)
    rows = verify_rows(select_rows(row_inputs(read_rows(run_dir), data, run_dir / layout.ROWS), settings.shard), k)
    tokenizer = load_tokenizer(rm_dir)
    model = load_model(rm_dir, settings.device)
    seqs = [tokenizer.rm_input_ids(r.text)[0] for r in rows]
    start = time.perf_counter()
    faithful = [sigmoid_faithful(model, s) for s in seqs]
    t_faithful = time.perf_counter() - start
    options = settings.fast_options()
    start = time.perf_counter()
    fast = sigmoids_fast(model, seqs, [r.id for r in rows], options)
    t_fast = time.perf_counter() - start
    report = {
        **compare_modes(faithful, fast),
        "tokens": sum(len(s) for s in seqs),
        "faithful_seconds": t_faithful,
        "fast_seconds": t_fast,
        "speedup": t_faithful / t_fast if t_fast else None,
        "device": settings.device,
        "fast": asdict(options),
        "checkpoint_sha256": checkpoint_identity(rm_dir)["sha256"],
        "differences": [
            {"id": r.id, "metric_en": r.metric_en, "faithful": a, "fast": b, "grid_steps": _grid_steps(a, b)}
            for r, a, b in zip(rows, faithful, fast)
            if a != b
        ],
        "created_at": runs.utc_now(),
    }
    artifacts.write_text_atomic(run_dir / VERIFY_REPORT, json.dumps(report, ensure_ascii=False, indent=2) + "\n")
    runs.update_manifest(run_dir, rm_verify={k2: v for k2, v in report.items() if k2 != "differences"})
    return report
