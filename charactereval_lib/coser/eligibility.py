"""CoSER GCA on the leaderboard: which runs may be ranked, the headline score, the anchor.

Seed 004 §4.5 (rows H01, H03, H19, H23-H27, X13): a run enters the board only under the full
protocol (every test scene, three repeats, whatever preset produced it), with the protocol's
fixed parameters and its environment, next-speaker and judge models, each role on one host;
a failed session is left out of every mean and counted. The board ranks by the average of the
four dimensions with a 95% interval from 1,000 resamples of whole scenes: H28's percentile
interval, studentized here (docs/platform-rules.md#intervals).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from charactereval_lib.coser.benchmark import (
    JUDGEMENTS,
    recognises,  # noqa: F401 - the board's recogniser
)
from charactereval_lib.coser.benchmark import NAME as BENCHMARK
from charactereval_lib.coser.disclosures import BOARD_SELF_PREFERENCE, agreement_line
from charactereval_lib.coser.documents import CoserManifest, CoserSection, Interval, computed_summary
from charactereval_lib.coser.judge import PROTOCOL_FORMULA, SCORE_FORMULAS, run_score_formula
from charactereval_lib.coser.report import is_anchor_actor, load_anchor, routed_pin, served_roles
from charactereval_lib.coser.statistics import judged_frame, read_records
from charactereval_lib.coser.upstream import DIMENSIONS
from charactereval_lib.coser.versions import FIXED_ROLES, VERSIONS
from charactereval_lib.engine.anchor import AVERAGE_MARGIN, DIMENSION_MARGIN, compare_within_margin, rounding_tolerance
from charactereval_lib.engine.generation.served import ALIASES, caveats, mismatches
from charactereval_lib.engine.leaderboard.board import (
    FAILED,
    REPRODUCED,
    AnchorCheck,
    BoardSpec,
    Rule,
    RunView,
    model_label,
    thinking_facts,
    thinking_label,
    thinking_rule,
)
from charactereval_lib.engine.storage import runs

HEADLINE = ("average of the four dimension scores (Storyline Consistency, Anthropomorphism, Character Fidelity, "
            "Storyline Quality), the paper's Average column; each dimension scored "
            f"{SCORE_FORMULAS[PROTOCOL_FORMULA]} (S: the judge's severity sum, n: the actor's rounds), clipped at 100 "
            "where the protocol version clips")
# The fixed parameters of a scene simulation (seed 004 H04, H05, H26); the version's own fields
# (judge max tokens, attempts, clipping, ...) must equal its record too.
FIXED = {"max_rounds": 20, "end_chat_from_round": 5, "max_tokens": 512, "continue_from": 0, "thoughtless": False}
# Failed sessions (a scene whose simulation gave up, or a dimension the judge never answered
# validly, H19) leave every mean; the cap keeps that selection small and the count is shown.
MAX_FAILED_SHARE = 0.01
# The paper prints two decimals: half a unit of the second widens the run's interval in the
# interval check shown beside the margin verdict (engine.anchor).
ANCHOR_TOLERANCE = rounding_tolerance(2)


def _full(view: RunView) -> list[str]:
    f = view.facts
    reasons = []
    if f["scenes"] < f["test_scenes"]:
        reasons.append(f"{f['scenes']} of the {f['test_scenes']} test scenes (preset {f['preset']})")
    if f["repeats"] < f["anchor_repeats"]:
        reasons.append(f"{f['repeats']} repeat(s), the protocol runs {f['anchor_repeats']}")
    return reasons


def _complete(view: RunView) -> list[str]:
    f = view.facts
    reasons = []
    if f["not_run"] or f["unjudged"]:
        reasons.append(f"{f['not_run']} session(s) not run and {f['unjudged']} not judged yet")
    cap = int(MAX_FAILED_SHARE * f["sessions_expected"])
    if view.failures > cap:
        reasons.append(f"{view.failures} failed session(s), more than {cap} ({MAX_FAILED_SHARE:.0%} of "
                       f"{f['sessions_expected']})")
    return reasons


def _fixed(view: RunView) -> list[str]:
    coser = view.manifest.get("coser") or {}
    identity = coser.get("identity") or {}
    reasons = [f"{name} is {identity.get(name)!r}, the protocol fixes {value!r}" for name, value in FIXED.items()
               if identity.get(name) != value]
    version = VERSIONS.get(view.protocol_version)
    if version is not None:
        recorded = identity.get("protocol") or {}
        reasons += [f"protocol setting {k} is {recorded.get(k)!r}, {version.name} fixes {v!r}"
                    for k, v in version.record().items() if recorded.get(k) != v]
        if identity.get("judge_max_tokens") != version.judge_max_tokens:
            reasons.append(f"judge max tokens {identity.get('judge_max_tokens')!r}, {version.name} fixes "
                           f"{version.judge_max_tokens}")
    return reasons


def _models(view: RunView) -> list[str]:
    # The version's own declaration of its fixed models (versions.RoleModels); an unknown
    # version is the protocol rule's reason.
    version = VERSIONS.get(view.protocol_version)
    coser = view.manifest.get("coser") or {}
    models = coser.get("models") or {}
    reasons = []
    if version is not None:
        fixed = version.models
        reasons += [f"the {label} model is {models.get(role)!r}, {version.name} fixes {fixed.of(role)!r} (a dated "
                    "snapshot, named exactly: a moving alias does not say which snapshot answered)"
                    for role, label in FIXED_ROLES.items() if not fixed.accepts(role, models.get(role))]
    roles = (coser.get("identity") or {}).get("roles") or {}
    reasons += [f"the {role} role uses the {spec.get('backend')} backend (placeholder text, no model)"
                for role, spec in sorted(roles.items()) if spec.get("backend") == "offline"]
    return reasons


def _served(view: RunView) -> list[str]:
    return mismatches(view.facts["served_roles"].values())


def _one_host(view: RunView) -> list[str]:
    coser = view.manifest.get("coser") or {}
    fixed = VERSIONS[view.protocol_version].models if view.protocol_version in VERSIONS else None
    reasons = []
    for role in sorted(coser.get("endpoints") or {}):
        host, pin = routed_pin(view.manifest, role)
        if host is None:
            continue
        if pin is None:
            reasons.append(f"the {role} role goes through the router {host}, which may serve one model from "
                           "several providers, and its requests pin none (request parameter provider: "
                           '{"only": [ONE], "allow_fallbacks": false})')
        elif fixed is not None and role in FIXED_ROLES and pin != fixed.vendor:
            reasons.append(f"the {role} role is pinned to the provider {pin!r} on {host}; the protocol's "
                           f"{FIXED_ROLES[role]} model is served by {fixed.vendor!r}")
    return reasons


def _declared() -> str:
    """Each version's fixed models and registered deviations, for the rule's text."""
    parts = []
    for version in VERSIONS.values():
        fixed = version.models
        parts.append(f"{version.name}: " + ", ".join(f"{label} {fixed.of(role)}" for role, label in FIXED_ROLES.items())
                     + "".join(f", a registered deviation from the paper's {FIXED_ROLES[d.role]} model {d.paper}"
                               for d in fixed.deviations))
    return "; ".join(parts)


def _formula(view: RunView) -> list[str]:
    formula = run_score_formula(view.manifest)
    if formula == PROTOCOL_FORMULA:
        return []
    return [f"scored with the {formula} formula {SCORE_FORMULAS.get(formula, '(unknown)')}, not the protocol's "
            f"{SCORE_FORMULAS[PROTOCOL_FORMULA]}"]


RULES = (
    Rule("protocol", f"The run follows a protocol version this workbench implements ({', '.join(VERSIONS)}); each "
         "version has its own board, and runs of other versions go to the archive (seed 004 H01).",
         lambda v: [] if v.protocol_version in VERSIONS else [f"unknown protocol version {v.protocol_version}"]),
    Rule("full-protocol", "Every test scene (200) with three repeats; any preset or scene range that covers "
         "them counts (seed 004 H20, H23, X13).", _full),
    Rule("complete", "Every session simulated and judged. A session whose simulation gave up, or with a dimension "
         "the judge never answered validly, fails as a whole and is left out of every mean (H19); at most "
         f"{MAX_FAILED_SHARE:.0%} of the sessions may fail, and the count is shown on every row.", _complete),
    Rule("fixed-parameters", "The protocol's fixed parameters are not overridden: 20 rounds, <END CHAT> from the "
         "6th turn, 512 reply tokens, no given lines, inner thoughts kept, and every setting of the protocol "
         "version (H26).", _fixed),
    Rule("fixed-models", "Environment, next-speaker and judge are the models the run's protocol version declares "
         "(dated snapshots named exactly, not a moving alias; "
         f"{_declared()}); no role uses the offline placeholder backend (seed 004 F03-F05, H03).", _models),
    Rule("served-models", "Every role was answered by the model it declares, as the server reported it in each reply "
         "(its `model` field, recorded with the system fingerprint per call): a router's provider prefix "
         "(openai/gpt-4o-2024-08-06 for gpt-4o-2024-08-06) and a documented alias of the same dated snapshot ("
         + ", ".join(f"{alias} for {snapshot}" for alias, snapshot in ALIASES.items()) + ") are no difference; a "
         "server that names no model is a caveat on the row (served model not reported), not a reason.", _served),
    Rule("one-host", "Each role is served by one provider: its own host, or a router (openrouter.ai) only when each "
         "request of the role pins one provider with no fallbacks (provider: {\"only\": [ONE], \"allow_fallbacks\": "
         "false} in the body, recorded per role in run.json); the environment, next-speaker and judge roles pin the "
         "vendor of their fixed models (H03, H27). A reasoning setting is allowed and named in the row label (H25).",
         _one_host),
    thinking_rule("No reply that started with a <think>...</think> block went into the simulation as received. The "
                  "simulation removes such a block from every role's reply by default (seed 004 C17a, F19: a "
                  "reasoning model's thinking is not its line; docs/platform-rules.md#thinking-blocks); a run made "
                  "with --keep-thinking (upstream's rule, G08), or before the rule existed, is ranked when none of "
                  "its replies starts with a block, since both rules then give the same dialogue. Its row says "
                  "thinking was kept.",
                  ("reply starts", "replies start"), "the simulation used as received (in the dialogue, so the "
                  "judge's input and the length term, or in the next speaker's parse)"),
    Rule("score-formula", f"Every dimension is scored with the protocol's formula {SCORE_FORMULAS[PROTOCOL_FORMULA]}; "
         "an imported ablation file re-scored with another (such as max(0, 100 - S * 5), without the length "
         "penalty) is shown, not ranked.", _formula),
)

ANCHOR_TEXT = (f"a run of the paper's GPT-4o (gpt-4o-2024-08-06, or openai/gpt-4o-2024-08-06 through a router "
               f"pinned to OpenAI, seed 004 L01) as actor on this board whose four dimension "
               f"scores each lie within {DIMENSION_MARGIN:g} points of the paper's and whose average lies within "
               f"{AVERAGE_MARGIN:g} (seed 004 L15); whether the run's 95% scene-bootstrap interval contains the "
               "paper's value is shown beside, as information")


def read(path: Path, manifest: dict[str, Any], context: Mapping[str, Any]) -> list[RunView]:
    """One view per run, on the board of its judge model."""
    run = runs.RunDir(path)
    coser = run.manifest_model(CoserManifest).coser or CoserSection()
    # Read once for the summary, the clusters and the explorer (``RunView.parsed``).
    records = read_records(run)
    # The board needs the overall intervals only: not the breakdowns a report shows.
    summary = computed_summary(run, breakdowns=False, records=records)
    anchor = load_anchor()
    clip = (coser.identity.get("protocol") or {}).get("score_upper_clip", False)
    latest = {(r["repeat"], r["scene"], r["dimension"]): r for r in records[JUDGEMENTS] if r.get("kind") == "dimension"}
    frame = judged_frame(list(latest.values()), clip)
    ended = summary.ended_by
    failures = ended.failed + summary.judge_failures
    facts = {"scenes": len(coser.scenes), "repeats": coser.repeats,
             "preset": coser.preset, "test_scenes": anchor["scenes"], "anchor_repeats": anchor["repeats"],
             "sessions_expected": summary.counts.sessions_expected, "not_run": ended.not_run,
             "unjudged": summary.sessions_unjudged, "summary": summary,
             # Counted from the turn records (the replies as received); an import has none.
             **thinking_facts(coser.identity, summary.thinking_blocks.total.with_block
                              if summary.thinking_blocks else None)}
    average = summary.overall.get("average") or Interval()
    actor = (coser.identity.get("roles") or {}).get("actor") or {}
    facts["served_roles"] = served_roles(manifest, summary.served)
    view = RunView(path, BENCHMARK, str(manifest.get("protocol_version")), f"judge {coser.models.get('judge')}",
                   model_label(str(coser.models.get("actor") or path.name),
                               thinking_label({"request_params": actor.get("request_params")}, facts)), manifest,
                   score=average.mean, ci=(average.low, average.high),
                   n=summary.counts.sessions, failures=failures, facts=facts,
                   caveats=caveats(facts["served_roles"].values()), parsed=records)
    if not frame.empty:
        view.clusters = frame.groupby("scene")["score"].mean().to_dict()
    return [view]


# The CoSER authors' own models in the main table: LLaMA-3.1 fine-tuned on CoSER's training data
# (the paper's CoSER-8B and CoSER-70B; CoSER-70B is also the paper's next-speaker model).
AUTHORS_FINE_TUNES = ("CoSER-8B", "CoSER-70B")
PUBLISHED_NOTE = ("published in the CoSER paper's main table (all 200 test scenes x 3 runs, GPT-4o judge and "
                  "environment, CoSER-70B next speaker, the paper-era code {code}): not reproduced here, never ranked")


def published(version: str) -> list[dict[str, Any]]:
    """The paper's 21 published rows, shown beside every CoSER board (seed 004: a board sets its
    runs beside the paper; the rows are the paper's numbers, not runs, so they are never ranked).
    ``authors_fine_tune`` marks the CoSER authors' own models."""
    from charactereval_lib.coser.reproduce import load_main_table

    paper_version = load_anchor()["protocol_version"]
    note = PUBLISHED_NOTE.format(code=paper_version if version == paper_version else
                                 f"{paper_version}, not this board's {version}")
    rows = []
    for row in load_main_table():
        values, pm = row["values"], row["plus_minus"]
        rows.append({"model": row["model"], "section": row["section"],
                     "authors_fine_tune": row["model"] in AUTHORS_FINE_TUNES,
                     "score": values["Average"], "pm": pm["Average"],
                     "dimensions": {d: values[d] for d in DIMENSIONS}, "note": note})
    return sorted(rows, key=lambda r: -r["score"])


def anchor(view: RunView) -> AnchorCheck | None:
    """A run of the paper's actor: each of the paper's four dimensions within ``DIMENSION_MARGIN``
    and its average within ``AVERAGE_MARGIN`` (``engine.anchor.compare_within_margin``, seed 004
    L15); the 95% interval check is in each reason, as information."""
    paper = load_anchor()
    if not is_anchor_actor(view.manifest, paper["actor_model"]):
        return None
    overall = view.facts["summary"].overall
    results = {}
    for name in (*DIMENSIONS, "average"):
        cell = overall.get(name) or Interval()
        interval = (cell.low, cell.high) if cell.low is not None and cell.high is not None else None
        results[name] = compare_within_margin(
            paper["dimensions"][name]["value"], cell.mean, margin=AVERAGE_MARGIN if name == "average" else
            DIMENSION_MARGIN, paper_pm=paper["dimensions"][name]["plus_minus"], interval=interval,
            tolerance=ANCHOR_TOLERANCE)
    deltas = {name: r.delta for name, r in results.items() if r.delta is not None}
    outside = [f"{name}: {r.reason}" for name, r in results.items() if r.within is not True]
    if outside:
        return AnchorCheck(FAILED, outside, deltas)
    return AnchorCheck(REPRODUCED, [f"{name}: {r.reason}" for name, r in results.items()], deltas)


def compare(views: Sequence[RunView]) -> list[str]:
    """``charactereval coser compare`` of runs of one board."""
    return ["charactereval", "coser", "compare", *(str(v.path) for v in views),
            "--out", "comparison-" + "-vs-".join(v.path.name for v in views)]


SPEC = BoardSpec(
    benchmark=BENCHMARK,
    title="CoSER GCA",
    current_versions=tuple(VERSIONS),
    # Judge scores are shown with the judge's agreement with people and the self-preference note.
    headline=f"{HEADLINE}. {agreement_line()} {BOARD_SELF_PREFERENCE}",
    cluster="scene",
    rules=RULES,
    anchor_text=ANCHOR_TEXT,
    read=read,
    anchor=anchor,
    compare=compare,
    published=published,
)
