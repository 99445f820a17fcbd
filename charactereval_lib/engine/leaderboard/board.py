"""Leaderboards any benchmark reuses: named eligibility rules, the anchor gate, ranks with ties.

A benchmark declares what a board needs (``BoardSpec``): how to recognise its runs from
``run.json``, how to read one run (``RunView``: scorer, model label, headline score with its
interval, one headline value per cluster for paired tests), its eligibility rules (``Rule``:
a name, the text the site and ``docs/`` show, and a check that returns the reasons a run fails
it) and its anchor check. This module only combines them: one board per (benchmark, protocol
version, scorer), nothing ranked until the anchor is reproduced, and adjacent ranks that a
paired test cannot separate shown as tied. It knows no benchmark's names.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import shlex
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from charactereval_lib.engine import thinking
from charactereval_lib.engine.generation.base import DEFAULT_MAX_TOKENS, ROUTING_PARAMS
from charactereval_lib.engine.stats import wilcoxon_p

TIE_ALPHA = 0.05
TIE_TEST = (f"two-sided Wilcoxon signed-rank test on the per-cluster headline differences over the clusters both "
            f"runs scored; adjacent rows with p >= {TIE_ALPHA} (or no non-zero difference) share a rank")
REPRODUCED, PENDING, FAILED = "reproduced", "pending", "failed"


@dataclass(frozen=True)
class Rule:
    """One eligibility condition: ``check`` returns why a run fails it (empty: it passes)."""

    name: str
    text: str
    check: Callable[[RunView], list[str]]


@dataclass
class RunView:
    """What a board needs of one run, read once from its directory."""

    path: Path
    benchmark: str
    protocol_version: str
    scorer: str
    model: str
    manifest: dict[str, Any]
    score: float | None = None
    ci: tuple[float | None, float | None] = (None, None)
    # One headline value per cluster (sample id, scene), for the paired tie test.
    clusters: dict[Any, float] = field(default_factory=dict)
    n: int = 0  # observations behind the score
    failures: int = 0  # excluded from every mean, counted
    facts: dict[str, Any] = field(default_factory=dict)  # benchmark-specific, for the rules and the site
    reasons: list[str] = field(default_factory=list)
    # How the replies were decoded, where the protocol leaves it to the run (shown on its row).
    decoding: str | None = None
    # What a reader must know beside the score that is no reason to leave the run out (e.g. a
    # server that named no model: "served model not reported"); shown on its row.
    caveats: list[str] = field(default_factory=list)
    # Artifacts the reader parsed that the benchmark's explorer needs too, so that a build parses
    # each once; never kept in the per-run cache (``engine.leaderboard.sitecache``), which keeps the explorer's
    # output instead, and emptied once the explorer ran.
    parsed: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class AnchorCheck:
    status: str  # REPRODUCED or FAILED
    reasons: list[str]
    deltas: dict[str, float]
    # Which of the spec's ``anchor_parts`` this run anchors (None: the spec has no parts).
    part: str | None = None


@dataclass(frozen=True)
class BoardSpec:
    """A benchmark's part of the leaderboard (see the module docstring)."""

    benchmark: str
    title: str
    current_versions: tuple[str, ...]
    headline: str  # what the ranked score is, for the page
    cluster: str  # what the bootstrap and the tie test resample / pair
    rules: tuple[Rule, ...]
    anchor_text: str
    # (run directory, its run.json, shared inputs such as the official data) -> one view per board.
    read: Callable[[Path, dict[str, Any], Mapping[str, Any]], list[RunView]]
    # None: the run is not an anchor run; else whether it reproduces the paper's row.
    anchor: Callable[[RunView], AnchorCheck | None]
    # The command line that renders the full paired comparison (the comparison notebook) of two
    # runs of one board; None: the benchmark has none.
    compare: Callable[[Sequence[RunView]], list[str]] | None = None
    # The runs the anchor needs, all of them (e.g. every released generation); empty: any one
    # anchor run that reproduces the paper suffices.
    anchor_parts: tuple[str, ...] = ()
    # The paper's own published rows shown beside a board of this protocol version (never
    # ranked, never mixed with the runs): version -> rows (``model``, ``score``, ``note``, ...).
    published: Callable[[str], list[dict[str, Any]]] | None = None

    def check(self, view: RunView) -> list[str]:
        return [f"{rule.name}: {reason}" for rule in self.rules for reason in rule.check(view)]


def paired_differences(a: Mapping[Any, float], b: Mapping[Any, float]) -> np.ndarray:
    """The per-cluster differences a - b over the clusters both runs scored, in ``a``'s order:
    one fixed order (a set of text keys would change it from one process to the next, and with
    it the last bits of a mean)."""
    return np.array([value - b[key] for key, value in a.items() if key in b], dtype=float)


def tied(differences: np.ndarray, alpha: float = TIE_ALPHA) -> tuple[bool, float]:
    """Whether the paired test fails to separate two runs, from their ``paired_differences``,
    and its p-value."""
    p = wilcoxon_p(differences) if len(differences) else math.nan
    return (math.isnan(p) or p >= alpha), p


def rank_rows(views: Sequence[RunView]) -> list[dict[str, Any]]:
    """Eligible runs by score, best first; a row takes the rank of the row above it when the
    paired test cannot separate the two (competition ranking otherwise)."""
    ordered = sorted(views, key=lambda v: (-(v.score if v.score is not None else -math.inf), v.model, str(v.path)))
    rows = []
    for position, view in enumerate(ordered):
        rank, test = position + 1, None
        if position:
            differences = paired_differences(ordered[position - 1].clusters, view.clusters)
            is_tied, p = tied(differences)
            test = {"p": None if math.isnan(p) else p, "shared": len(differences), "tied_with_above": is_tied}
            if is_tied:
                rank = rows[-1]["rank"]
        rows.append({**row_of(view), "eligible": True, "rank": rank, "tie_test": test})
    return rows


def row_of(view: RunView) -> dict[str, Any]:
    return {"run": view.path.name, "model": view.model, "eligible": not view.reasons,
            "reasons": list(view.reasons), "rank": None, "score": _num(view.score),
            "ci": [_num(view.ci[0]), _num(view.ci[1])] if view.score is not None else None,
            "n": view.n, "failures": view.failures, "page": page_name(view), "decoding": view.decoding,
            "caveats": list(view.caveats)}


def page_name(view: RunView) -> str:
    """The run's folder in the site: the run's name (filesystem-safe) and a digest of its path
    and scorer, so two runs of one name, or one run on two boards, never share a folder."""
    digest = hashlib.sha256(f"{view.path.resolve()}\0{view.scorer}".encode()).hexdigest()[:10]
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in view.path.name)
    return f"{view.benchmark}-{safe}-{digest}"


def model_label(model: str, parameters: Mapping[str, Any] | None) -> str:
    """The row label: the model and, beside it, every setting that went out with its requests and
    can change a reply, so that rows decoded differently never share a label (docs/leaderboard.md,
    "Decoding"; seed 004 H25: a reasoning setting is allowed but never hidden). ``parameters``:
    the decoding parameters as recorded, their ``request_params`` (``--request-param``) included,
    ``chat_template_kwargs`` shown key by key. Left out: what was not sent (None: the provider's or
    the model's default), the default ``max_tokens``, the seed (it picks a draw, not the
    distribution of replies), the preset's name (its values are shown) and routing keys (a
    provider pin says where, not how)."""
    values = dict(parameters or {})
    values.update(values.pop("request_params", None) or {})
    for key in ("preset", "seed", *ROUTING_PARAMS):
        values.pop(key, None)
    if values.get("max_tokens") == DEFAULT_MAX_TOKENS:
        del values["max_tokens"]
    template = values.pop("chat_template_kwargs", None)
    if isinstance(template, Mapping):
        values.update({f"chat_template_kwargs.{k}": v for k, v in template.items() if v is not None})
    shown = {k: v for k, v in values.items() if v not in (None, "")
             and (v is not False or k.startswith("chat_template_kwargs.") or not _names_reasoning(k))}
    if not shown:
        return model
    return f"{model} ({', '.join(f'{k}={setting_text(v)}' for k, v in sorted(shown.items()))})"


def setting_text(value: Any) -> str:
    """A setting's value as a label or the decoding column shows it (a mapping or list as JSON)."""
    return json.dumps(value, sort_keys=True) if isinstance(value, (dict, list)) else str(value)


def _names_reasoning(key: str) -> bool:
    return "reasoning" in key or "thinking" in key


def thinking_facts(identity: Mapping[str, Any] | None, blocks: int | None) -> dict[str, Any]:
    """What a board knows of a run's thinking blocks (``engine.thinking``, docs/platform-rules.md
    #thinking-blocks): ``keep_thinking``, whether the run recorded the upstream rule
    (``--keep-thinking``; an import of upstream's own output records it too), and
    ``thinking_blocks_scored``, how many of the ``blocks`` replies that started with a block went
    into what was scored as received: none under the default rule, which removed them; all of
    them under the upstream rule, which a run made before the rule existed followed."""
    return {"keep_thinking": (identity or {}).get(thinking.KEY) == thinking.KEPT,
            "thinking_blocks_scored": 0 if thinking.recorded(identity) == thinking.REMOVED else blocks or 0}


def thinking_rule(text: str, counted: tuple[str, str], fate: str) -> Rule:
    """The ``thinking`` rule of a benchmark whose views carry ``thinking_facts``: a run is left out
    when a reply's leading block was scored as received. ``counted``: what a reason counts, in
    the singular and the plural ("scored reply starts", "scored replies start"); ``fate``: what
    happened to such a block ("S5 scored as the answer")."""

    def check(view: RunView) -> list[str]:
        blocks = view.facts.get("thinking_blocks_scored", 0)
        if not blocks:
            return []
        return [f"{blocks} {counted[blocks != 1]} with a <think> block that {fate} (thinking kept: made with "
                "--keep-thinking, or before the rule)"]

    return Rule("thinking", text, check)


def thinking_label(parameters: Mapping[str, Any] | None, facts: Mapping[str, Any]) -> dict[str, Any]:
    """``parameters`` for ``model_label``, with ``keep_thinking=True`` when the run kept its thinking
    blocks (``thinking_facts``): its row says so, as a reasoning setting's does (seed 004 H25)."""
    return {**(parameters or {}), **({"keep_thinking": True} if facts.get("keep_thinking") else {})}


def _num(value: float | None) -> float | None:
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else round(float(value), 4)


def anchor_state(spec: BoardSpec, views: Sequence[RunView]) -> dict[str, Any]:
    """The board's gate: reproduced by an eligible anchor run, failed (an anchor run that falls
    outside, and by how much), or pending (no anchor run yet, and what is missing)."""
    checks = [(v, spec.anchor(v)) for v in views]
    candidates = [(v, c) for v, c in checks if c is not None]
    if spec.anchor_parts:
        return _anchor_of_parts(spec, candidates)
    for view, check in candidates:
        if check.status == REPRODUCED and not view.reasons:
            return {"status": REPRODUCED, "run": view.path.name, "reasons": check.reasons, "deltas": check.deltas}
    if candidates:
        view, check = candidates[0]
        reasons = list(check.reasons) + [f"anchor run not eligible: {r}" for r in view.reasons]
        status = FAILED if check.status == FAILED else PENDING
        return {"status": status, "run": view.path.name, "reasons": reasons, "deltas": check.deltas}
    return {"status": PENDING, "run": None, "reasons": [f"no anchor run on this board: {spec.anchor_text}"],
            "deltas": {}}


def _by_score(views: Iterable[RunView]) -> list[RunView]:
    """Best score first, runs without a score last."""
    return sorted(views, key=lambda v: (v.score is None, -(v.score or 0.0), v.model, str(v.path)))


def _fingerprint(view: RunView) -> str:
    """What makes two folders one run: the same run.json and the same per-cluster scores."""
    text = json.dumps([view.manifest, sorted((str(k), v) for k, v in view.clusters.items()), view.score, view.n],
                      sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


def flag_duplicates(members: Sequence[RunView]) -> None:
    """A copy of a run already on the board (its folder copied elsewhere) would be ranked twice:
    the first by path stays, every other copy fails with the path it copies."""
    # Only runs of the same score and size can be copies: the fingerprint (a few ms a run) is
    # taken of those alone.
    alike = Counter((repr(v.score), v.n) for v in members)  # repr: a NaN score equals itself
    first: dict[str, RunView] = {}
    for view in sorted(members, key=lambda v: str(v.path)):
        if alike[repr(view.score), view.n] < 2:
            continue
        kept = first.setdefault(_fingerprint(view), view)
        if kept is not view:
            view.reasons.append(f"duplicate: a copy of {kept.path} (the same run.json and scores), which stands "
                                "for both on this board")


def comparisons(spec: BoardSpec, members: Sequence[RunView]) -> list[dict[str, Any]]:
    """Each run of one board against its neighbour below, by score (best first, eligible or not),
    by the paired test the ranks use: the mean per-cluster difference (first minus second) over
    the clusters both scored, its p-value, and the command that renders the pair's full
    comparison (the same command compares any other two). Neighbours only, so the work grows
    with the number of runs, not with its square (docs/leaderboard.md, "Paired comparisons")."""
    ordered = _by_score(members)
    pairs = []
    for a, b in zip(ordered, ordered[1:]):
        differences = paired_differences(a.clusters, b.clusters)
        is_tied, p = tied(differences)
        difference = float(np.mean(differences)) if len(differences) else None
        pairs.append({"a": page_name(a), "b": page_name(b), "difference": _num(difference),
                      "p": None if math.isnan(p) else p, "shared": len(differences), "separated": not is_tied,
                      "command": shlex.join(spec.compare([a, b])) if spec.compare else None})
    return pairs


def _anchor_of_parts(spec: BoardSpec, candidates: Sequence[tuple[RunView, AnchorCheck]]) -> dict[str, Any]:
    """The gate of an anchor made of several runs (``BoardSpec.anchor_parts``): reproduced when
    every part has an eligible run that reproduces its row; failed when a part's run falls
    outside; else pending, naming the parts still missing. Deltas are keyed ``part: name``."""
    done: dict[str, tuple[RunView, AnchorCheck]] = {}
    tried: dict[str, tuple[RunView, AnchorCheck]] = {}
    for view, check in candidates:
        if check.status == REPRODUCED and not view.reasons:
            done.setdefault(check.part or "", (view, check))
        else:
            tried.setdefault(check.part or "", (view, check))
    deltas = {f"{part}: {name}": value for part, (_, check) in sorted({**tried, **done}.items())
              for name, value in check.deltas.items()}
    runs_used = [done[part][0].path.name for part in spec.anchor_parts if part in done]
    if all(part in done for part in spec.anchor_parts):
        reasons = [reason for part in spec.anchor_parts for reason in done[part][1].reasons]
        return {"status": REPRODUCED, "run": ", ".join(runs_used), "reasons": reasons, "deltas": deltas}
    reasons, status = [], PENDING
    for part in spec.anchor_parts:
        if part in done or part not in tried:
            continue
        view, check = tried[part]
        status = FAILED if check.status == FAILED else status
        reasons += list(check.reasons) + [f"{part}: anchor run not eligible: {r}" for r in view.reasons]
    missing = [part for part in spec.anchor_parts if part not in done and part not in tried]
    if missing:
        reasons.append(f"still missing {len(missing)} of the {len(spec.anchor_parts)} anchor runs: "
                       f"{', '.join(missing)} ({spec.anchor_text})")
    named = [view.path.name for part, (view, _) in tried.items() if part not in done] + runs_used
    return {"status": status, "run": ", ".join(named) or None, "reasons": reasons, "deltas": deltas}


def build_boards(specs: Mapping[str, BoardSpec], views: Iterable[RunView]) -> dict[str, Any]:
    """Boards of the current protocol versions and the archive of older ones, as the
    ``leaderboard.json`` contract; each view's ``reasons`` are filled by its spec's rules."""
    groups: dict[tuple[str, str, str], list[RunView]] = {}
    for view in views:
        view.reasons = specs[view.benchmark].check(view)
        groups.setdefault((view.benchmark, view.protocol_version, view.scorer), []).append(view)
    boards, archived = [], []
    for (benchmark, version, scorer), members in sorted(groups.items()):
        spec = specs[benchmark]
        flag_duplicates(members)
        board = {"benchmark": benchmark, "title": spec.title, "protocol_version": version, "scorer": scorer,
                 "headline": spec.headline, "cluster": spec.cluster, "tie_test": TIE_TEST,
                 "comparisons": comparisons(spec, members)}
        if version not in spec.current_versions:
            board.update(anchor=None, rows=[row_of(v) for v in _by_score(members)])
            archived.append(board)
            continue
        anchor = anchor_state(spec, members)
        eligible = [v for v in members if not v.reasons]
        ranked = rank_rows(eligible) if anchor["status"] == REPRODUCED else [row_of(v) for v in _by_score(eligible)]
        others = [row_of(v) for v in _by_score(members) if v.reasons]
        board.update(anchor=anchor, rows=ranked + others, published=spec.published(version) if spec.published else [])
        boards.append(board)
    return {"boards": boards, "archived": archived}


CSV_COLUMNS = ["section", "benchmark", "protocol_version", "scorer", "anchor_status", "rank", "run", "model",
               "eligible", "score", "ci_low", "ci_high", "n", "failures", "reasons", "decoding", "caveats"]


def boards_csv(content: Mapping[str, Any]) -> str:
    """One line per (board, row), the same content as the JSON; reasons joined by `` | ``."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(CSV_COLUMNS)
    for section in ("boards", "archived"):
        for board in content[section]:
            status = (board.get("anchor") or {}).get("status", "archived")
            for row in board["rows"]:
                ci = row["ci"] or [None, None]
                writer.writerow([section, board["benchmark"], board["protocol_version"], board["scorer"], status,
                                 row["rank"], row["run"], row["model"], row["eligible"], row["score"], ci[0], ci[1],
                                 row["n"], row["failures"], " | ".join(row["reasons"]), row.get("decoding"),
                                 " | ".join(row.get("caveats") or [])])
    return out.getvalue()
