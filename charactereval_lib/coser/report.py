"""A CoSER run (or several) loaded for its report: the summary, the paper's anchor, whether the
run is comparable with it, and the tables the notebooks show.

Comparable with the paper means: the judge and the environment are exactly the models the paper's
protocol version declares (``versions.RoleModels``: ``gpt-4o-2024-08-06``, also as
``openai/gpt-4o-2024-08-06`` on a router; the moving alias ``gpt-4o`` does not count as a
declared name), and no reply of theirs was served by another model (``engine.generation.served``: what the
server reported in each reply); protocol ``coser-paper``, no given lines (``continue_from`` 0)
and inner thoughts kept. Any other run is labelled "not comparable with the paper", with every
reason. Other differences (the NSP model, the registered deviation included, a subset of the
scenes, one repeat instead of three, a role served by another model than it declares or by a
server that named no model) are caveats in the warning box: the numbers follow the same rules
but vary more or differ in a known way.

Nothing here writes to the run directory; tables round numbers for display only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pandas as pd

from charactereval_lib.coser.disclosures import agreement_line, run_disclosures, self_preference
from charactereval_lib.coser.documents import CoserSummary, Interval, computed_summary
from charactereval_lib.coser.simulation import provider_pin
from charactereval_lib.coser.statistics import ENDINGS, SURFACE_METRICS
from charactereval_lib.coser.upstream import DIMENSIONS
from charactereval_lib.coser.versions import PAPER_ROLE_MODELS, get_version, names_snapshot
from charactereval_lib.engine import thinking
from charactereval_lib.engine.generation.served import RoleServed, ServedCounts, as_sentence
from charactereval_lib.engine.reports import kit
from charactereval_lib.engine.reports.kit import rendered_by, warnings_box
from charactereval_lib.engine.reports.texttable import fmt
from charactereval_lib.engine.resources import resource_path
from charactereval_lib.engine.stats import TOO_FEW, how_to_read
from charactereval_lib.engine.storage import runs
from charactereval_lib.engine.validation import validate

ANCHOR_FILE = "data/reference/coser_gca_anchor.json"
NOT_COMPARABLE = "not comparable with the paper"
# Hosts that route one model name to several providers: a row would mix providers (H27).
ROUTERS = ("openrouter.ai",)
AVERAGE = "average"
SCORES = (*DIMENSIONS, AVERAGE)
DISPLAY_DIGITS = 2  # the paper prints two decimals
NO_INTERVAL = f"{TOO_FEW} scenes"
HOW_TO_READ = how_to_read(
    "scenes", "a scene's dimensions and repeats come from one simulated dialogue",
    "Per split and per book, the same method runs over that part's scenes only. Paired differences resample the "
    "scenes both runs judged in full; their p-values are two-sided Wilcoxon signed-rank tests over the per-scene "
    "differences.")
# Seed 004 H30: the repeats are not independent runs.
REPEATS_NOTE = ("The repeats share their prompts (each scene's random stream is seeded from the scene alone, as "
                "upstream reuses its setup) and every turn's first call is at temperature 0, so they differ only where "
                "a provider's temperature-0 decoding does or a retry samples; their spread (run-to-run SD) "
                "understates the variance between independent runs.")
ENDING_LABELS = {"end_chat": "<END CHAT>", "max_rounds": "max rounds (20)", "failed": "failed (a call gave up)",
                 "not_run": "not run yet"}


def load_anchor() -> dict[str, Any]:
    """The paper's published GPT-4o row and the settings it was produced with (shipped data,
    provenance in ``data/reference/README.md``)."""
    return json.loads(resource_path(ANCHOR_FILE).read_text(encoding="utf-8"))


# How a sentence names each role of a run.
ROLE_NAMES = {"actor": "the actor", "env": "the environment", "nsp": "the next-speaker model", "judge": "the judge",
              "repair": "the judge's JSON repair"}
# The roles whose models make a run comparable with the paper (the rest are caveats).
COMPARABLE_ROLES = ("judge", "env")


def served_roles(manifest: dict[str, Any], served: Mapping[str, Any] | None) -> dict[str, RoleServed]:
    """Each role with calls on record: the model it declares (run.json) and what its servers
    reported (``served``: per role, ``ServedCounts`` or its dict, as ``statistics.served_by_role``
    and the summary's ``served`` give it)."""
    models = (manifest.get("coser") or {}).get("models") or {}
    served = served or {}
    roles = {}
    for role, counts in sorted(served.items(), key=lambda item: list(ROLE_NAMES).index(item[0])
                               if item[0] in ROLE_NAMES else len(ROLE_NAMES)):
        counts = counts if isinstance(counts, ServedCounts) else ServedCounts.from_dict(counts)
        if counts.calls:
            roles[role] = RoleServed(ROLE_NAMES.get(role, role), models.get(role), counts)
    return roles


def served_caveats(manifest: dict[str, Any], served: Mapping[str, Any] | None) -> list[str]:
    """The served-identity caveats of a run (``engine.generation.served``): a role other than judge and
    environment answered by another model than it declares (those two make the run not
    comparable instead, see ``comparability``), and every role some of whose replies came from
    a server that named no model ("served model not reported")."""
    roles = served_roles(manifest, served)
    lines = [line for role, served_role in roles.items() if role not in COMPARABLE_ROLES
             and (line := served_role.mismatch())]
    lines += [line for served_role in roles.values() if (line := served_role.caveat())]
    return [as_sentence(line) for line in lines]


def routed_pin(manifest: Mapping[str, Any], role: str) -> tuple[str | None, str | None]:
    """The router host a role's endpoint goes through (None: its own host) and the one provider
    its requests pin there (``simulation.provider_pin``; None: no single pin)."""
    coser = manifest.get("coser") or {}
    endpoint = (coser.get("endpoints") or {}).get(role) or {}
    host = urlparse(str(endpoint.get("base_url") or "")).hostname or ""
    if not any(host == r or host.endswith("." + r) for r in ROUTERS):
        return None, None
    request_params = (((coser.get("identity") or {}).get("roles") or {}).get(role) or {}).get("request_params")
    return host, provider_pin(request_params)


def is_anchor_actor(manifest: Mapping[str, Any], snapshot: str) -> bool:
    """Whether the run's actor is the paper's: the dated ``snapshot``, bare or as its vendor's
    router spelling (``versions.names_snapshot``), and on a router pinned to that vendor (seed
    004 L01: ``openai/gpt-4o-2024-08-06`` through a router pinned to OpenAI). Whether its replies
    were served by it is the served-models rule's to say."""
    vendor = PAPER_ROLE_MODELS.vendor
    actor = ((manifest.get("coser") or {}).get("models") or {}).get("actor")
    host, pin = routed_pin(manifest, "actor")
    return names_snapshot(snapshot, vendor, actor) and (host is None or pin == vendor)


def comparability(manifest: dict[str, Any], anchor: dict[str, Any] | None = None,
                  served: Mapping[str, Any] | None = None) -> list[str]:
    """Why a run is not comparable with the paper's anchor (empty: it is). The environment and
    judge must be the fixed models the paper's protocol version declares (``RoleModels``), as
    requested and recorded in run.json, and as their servers reported them (``served``, see
    ``served_roles``)."""
    anchor = anchor or load_anchor()
    coser = manifest.get("coser") or {}
    models = coser.get("models") or {}
    identity = coser.get("identity") or {}
    fixed = get_version(anchor["protocol_version"]).models
    roles = served_roles(manifest, served)
    reasons = []
    for role, label in (("judge", "judge"), ("env", "environment")):
        model, wanted = models.get(role), fixed.of(role)
        if not fixed.accepts(role, model):
            reasons.append(f"{NOT_COMPARABLE}: the {label} model is {model!r}, not the paper's {wanted!r} "
                           "(names must match exactly; the moving alias 'gpt-4o' does not)")
        elif role in roles and roles[role].others():
            reasons.append(f"{NOT_COMPARABLE}: {roles[role].mismatch()}, not the paper's {wanted!r}")
    version = manifest.get("protocol_version")
    if version != anchor["protocol_version"]:
        reasons.append(f"{NOT_COMPARABLE}: protocol {version}, not {anchor['protocol_version']} (the version of the "
                       "paper's numbers)")
    if identity.get("continue_from", 0) != anchor["continue_from"]:
        reasons.append(f"{NOT_COMPARABLE}: the first {identity['continue_from']} original lines were given "
                       "(the paper's table gives none)")
    if identity.get("thoughtless", False) != anchor["thoughtless"]:
        reasons.append(f"{NOT_COMPARABLE}: thoughtless output format (the paper's table keeps inner thoughts)")
    return reasons


def caveats(manifest: dict[str, Any], summary: CoserSummary, anchor: dict[str, Any]) -> list[str]:
    """What else a reader must know before reading the numbers (not a reason for the label)."""
    coser = manifest.get("coser") or {}
    models = coser.get("models") or {}
    identity = coser.get("identity") or {}
    notes = []
    offline = [role for role, spec in (identity.get("roles") or {}).items() if spec.get("backend") == "offline"]
    if offline:
        notes.append(f"Roles {', '.join(offline)} use the offline backend: placeholder text made without any model. "
                     "The numbers demonstrate the wiring only.")
    imported = manifest.get("import_official")
    if imported:
        report = imported["report"]
        notes.append(f"Imported from the official result file {Path(imported['file']).name} (sha256 "
                     f"{imported['sha256'][:12]}…): nothing was simulated or judged here. Re-scored from its recorded "
                     f"critiques: {report['dimension_scores_reproduced']}/{report['dimension_scores']} dimension "
                     f"scores and {report['scene_scores_reproduced']}/{report['cases']} scene scores equal the "
                     "recorded ones exactly (the rest: run.json, import_official).")
    counts = summary.counts
    if counts.scenes < anchor["scenes"] or (summary.repeats or 0) < anchor["repeats"]:
        notes.append(f"A subset: {counts.scenes} of {anchor['scenes']} scenes judged, {summary.repeats} "
                     f"repeat(s) (preset {summary.preset}); the paper's numbers are over {anchor['scenes']} "
                     f"scenes x {anchor['repeats']} runs, so intervals are wider and the mix of books differs.")
    fixed = get_version(anchor["protocol_version"]).models
    paper_nsp = fixed.paper_model("nsp")
    if models.get("nsp") != paper_nsp:
        deviation = next((d for d in fixed.deviations if d.role == "nsp"), None)
        registered = (f" This is the protocol's registered deviation: {deviation.reason}."
                      if deviation is not None and fixed.accepts("nsp", models.get("nsp")) else "")
        notes.append(f"The next-speaker model is {models.get('nsp')!r}; the paper's table used {paper_nsp}."
                     + registered)
    if not is_anchor_actor(manifest, anchor["actor_model"]):
        notes.append(f"The anchor is the paper's GPT-4o ({anchor['actor_model']}) as actor; this run's actor is "
                     f"{models.get('actor')!r}, so differences from it include the actor's.")
    notes += served_caveats(manifest, summary.served)
    if (summary.repeats or 0) > 1:
        notes.append(REPEATS_NOTE)
    ended = summary.ended_by
    if ended.failed or ended.not_run:
        notes.append(f"{ended.failed} scene run(s) failed and {ended.not_run} were not run: rerun "
                     "`charactereval coser run` with the same settings to finish them.")
    if summary.judge_failures:
        notes.append(f"{summary.judge_failures} session(s) have a dimension the judge never answered validly; "
                     "such a session fails as a whole and is left out of every mean.")
    if summary.sessions_unjudged:
        notes.append(f"{summary.sessions_unjudged} finished scene run(s) are not judged yet.")
    if summary.bleu_unavailable:
        notes.append(summary.bleu_unavailable)
    return notes + run_disclosures(manifest)


def compare_problems(run_dirs: Sequence[runs.RunDir]) -> list[str]:
    """Why runs must not be compared as they are: the same run twice, or runs that differ in
    protocol version or in a model other than the actor (environment, NSP, judge, repair)."""
    manifests = {r.name: r.manifest() for r in run_dirs}
    problems = kit.repeated_runs(run_dirs) + kit.differing({name: m.get("protocol_version") for name, m in manifests.items()},
                                             "follow different protocol versions")
    for role in ("env", "nsp", "judge", "repair"):
        models = {name: ((m.get("coser") or {}).get("models") or {}).get(role) for name, m in manifests.items()}
        problems += kit.differing(models, f"have different {role} models")
    return problems


# --- display -----------------------------------------------------------------------------------


def interval(cell: Interval | None) -> str:
    """"[low, high]", or ``NO_INTERVAL`` when too few scenes leave none, "–" without a value."""
    if cell is None or cell.mean is None:
        return "–"
    return NO_INTERVAL if cell.low is None else f"[{fmt(cell.low, DISPLAY_DIGITS)}, {fmt(cell.high, DISPLAY_DIGITS)}]"


def served_confirmed(manifest: dict[str, Any], served: Mapping[str, Any] | None) -> bool:
    """Whether the servers of the judge and the environment named the declared model in every reply."""
    roles = served_roles(manifest, served)
    return all(role in roles and roles[role].served_as_declared() and not roles[role].counts.not_reported
               for role in COMPARABLE_ROLES)


def comparable_sentence(confirmed: bool) -> str:
    """What the report says of a comparable run: whether the servers of its judge and
    environment confirmed their model (``served_confirmed``)."""
    how = ("as declared and as their servers reported in every reply" if confirmed else
           "as declared; their servers did not report the model of every reply")
    return (f"Comparable with the paper's anchor: judge and environment are the paper's model ({how}), protocol "
            "coser-paper, no given lines, inner thoughts kept.")


def warnings_html(reasons: Sequence[str], notes: Sequence[str], comparable: str | None = None) -> str:
    """The boxes under the heading: the "NOT COMPARABLE WITH THE PAPER" label with every reason
    (a quiet line saying the run is comparable instead, ``comparable``), then the caveats, if any."""
    # The box's heading says "not comparable" once; its bullets give only the reasons.
    label = warnings_box([r.removeprefix(f"{NOT_COMPARABLE}: ") for r in reasons], NOT_COMPARABLE.upper(),
                         counted=False, intro=": settings that change the scores differ from the paper's, so its "
                         "anchor is shown for orientation only.",
                         empty=comparable or comparable_sentence(False))
    return label + warnings_box(notes, "Caveats")


@dataclass
class CoserAnalysis:
    """One run's manifest, summary (computed afresh) and the paper's anchor."""

    run: runs.RunDir
    manifest: dict[str, Any]
    summary: CoserSummary
    anchor: dict[str, Any]
    how_to_read = HOW_TO_READ  # the report's methods in one paragraph

    @property
    def name(self) -> str:
        return self.run.name

    @property
    def models(self) -> dict[str, Any]:
        return self.summary.models or {}

    def not_comparable(self) -> list[str]:
        return comparability(self.manifest, self.anchor, self.summary.served)

    def caveats(self) -> list[str]:
        return caveats(self.manifest, self.summary, self.anchor)

    def warnings_html(self, extra: Sequence[str] = ()) -> str:
        """The label and caveats box (the judge's agreement with people last); ``extra``: more
        caveats (e.g. ``plots.font_warnings()``)."""
        return warnings_html(self.not_comparable(), [*self.caveats(), *extra, agreement_line()],
                             comparable_sentence(served_confirmed(self.manifest, self.summary.served)))

    def header_markdown(self) -> str:
        """Report heading: protocol version, the roles' models, preset and n."""
        s, counts = self.summary, self.summary.counts
        label = f" — **{NOT_COMPARABLE.upper()}**" if self.not_comparable() else ""
        models = self.models
        return "\n".join([
            f"# CoSER report: {self.name}{label}",
            "",
            f"Protocol **{s.protocol_version}**, scores {s.score_variant}; preset **{s.preset}**: "
            f"{counts.scenes} scenes judged, {counts.sessions} of {counts.sessions_expected} sessions "
            f"(scene x repeat, {s.repeats} repeat(s)); intervals: {s.bootstrap['resamples']} cluster-bootstrap "
            "resamples of whole scenes, 95% studentized (bootstrap-t), none below 4 scenes.",
            "",
            "| role | model |",
            "|---|---|",
            *(f"| {label} | `{models.get(role)}` |" for role, label in (
                ("actor", "actor (under test)"), ("env", "environment"), ("nsp", "next speaker (NSP)"),
                ("judge", "judge"), ("repair", "judge JSON repair"))),
            "",
            rendered_by(),
        ])

    def paper_cell(self, name: str) -> str:
        entry = {**self.anchor["dimensions"], **self.anchor["surface_per_100"]}.get(name)
        return "–" if entry is None else f"{entry['value']:.2f} ± {entry['plus_minus']:.2f}"

    def scores_table(self) -> pd.DataFrame:
        """The four dimensions and their average: mean, 95% interval, run-to-run SD, the paper's
        GPT-4o value and this run minus it."""
        overall, spread = self.summary.overall, self.summary.run_to_run_sd or {}
        rows = []
        for name in SCORES:
            cell = overall.get(name) or Interval()
            paper = self.anchor["dimensions"][name]["value"]
            rows.append({"score": name, "mean": fmt(cell.mean, DISPLAY_DIGITS), "95% interval": interval(cell),
                         "run-to-run SD": fmt(spread.get(name), DISPLAY_DIGITS), "paper (GPT-4o)": self.paper_cell(name),
                         "run - paper": fmt(None if cell.mean is None else cell.mean - paper, DISPLAY_DIGITS)})
        return pd.DataFrame(rows)

    def surface_table(self) -> pd.DataFrame:
        """BLEU and ROUGE-L per 100, with the reason when BLEU is unavailable."""
        rows = []
        for name in SURFACE_METRICS:
            cell = self.summary.surface_per_100.get(name)
            note = ""
            if name == "BLEU" and self.summary.bleu_unavailable:
                note = "unavailable: " + self.summary.bleu_unavailable.removeprefix("BLEU unavailable: ")
            rows.append({"metric": name, "mean": "unavailable" if note else fmt(cell.mean if cell else None, DISPLAY_DIGITS),
                         "95% interval": "–" if note else interval(cell), "sessions": cell.sessions if cell else 0,
                         "paper (GPT-4o)": self.paper_cell(name), "note": note})
        return pd.DataFrame(rows)

    def split_table(self) -> pd.DataFrame:
        """Per split (id: in-distribution books, ood: out-of-distribution): mean and interval."""
        rows = []
        for tag, table in self.summary.by_split.items():
            row = {"split": tag}
            for name in SCORES:
                cell = table.get(name)
                row[name] = fmt(cell.mean if cell else None, DISPLAY_DIGITS)
                row[f"{name} 95%"] = interval(cell)
            rows.append(row)
        return pd.DataFrame(rows)

    def book_table(self) -> pd.DataFrame:
        """Per book: split, scenes, sessions, each dimension's mean and the average with its
        interval (a bootstrap of the book's own scenes)."""
        rows = []
        for book, entry in self.summary.by_book.items():
            scores = entry.scores
            row = {"book": book, "split": entry.tag, "scenes": entry.scenes, "sessions": entry.sessions}
            row.update({name: fmt((scores.get(name) or Interval()).mean, DISPLAY_DIGITS) for name in DIMENSIONS})
            row[AVERAGE] = fmt((scores.get(AVERAGE) or Interval()).mean, DISPLAY_DIGITS)
            row["average 95%"] = interval(scores.get(AVERAGE))
            rows.append(row)
        return pd.DataFrame(rows, columns=["book", "split", "scenes", "sessions", *SCORES, "average 95%"])

    def repeat_table(self) -> pd.DataFrame:
        """Each repeat's dimension means and average (the spread's raw material)."""
        rows = [{"repeat": int(r), **{n: fmt(v.get(n), DISPLAY_DIGITS) for n in SCORES}}
                for r, v in self.summary.by_repeat.items()]
        return pd.DataFrame(rows, columns=["repeat", *SCORES])

    def endings_table(self) -> pd.DataFrame:
        """How the preset's scene runs ended."""
        ended = self.summary.ended_by
        return pd.DataFrame([{"ending": ENDING_LABELS[k], "scene runs": getattr(ended, k)} for k in ENDINGS])

    def rounds_table(self) -> pd.DataFrame:
        rounds = self.summary.rounds
        return pd.DataFrame([{k: fmt(getattr(rounds, k), DISPLAY_DIGITS) for k in ("mean", "median", "min", "max")}])

    def judge_table(self) -> pd.DataFrame:
        """Judge failures per dimension, the sessions they touch, refused turns per role, and per
        role the replies that started with a thinking block and what the run did with them."""
        s = self.summary
        rows = [{"what": f"failed judgements: {d}", "count": n} for d, n in s.judge_failed_dimensions.items()]
        rows.append({"what": "sessions with a failed judgement", "count": s.judge_failures})
        rows.append({"what": "finished scene runs not judged yet", "count": s.sessions_unjudged})
        rows += [{"what": f"refused turns: {k}", "count": v} for k, v in s.refused_turns.items()]
        rows += thinking_rows(s)
        return pd.DataFrame(rows)

    def settings_table(self) -> pd.DataFrame:
        """The recorded settings (run.json's coser section and versions), one row each."""
        coser = self.manifest.get("coser") or {}
        rows = [("protocol version", self.manifest.get("protocol_version")),
                ("package", self.manifest.get("package_version")), ("git commit", self.manifest.get("git_commit")),
                ("preset", coser.get("preset")), ("repeats", coser.get("repeats")),
                ("scenes", len(coser.get("scenes") or []))]
        rows += [(f"identity / {k}", v) for k, v in kit.flatten(coser.get("identity") or {})]
        rows += [(f"endpoints / {k}", v) for k, v in kit.flatten(coser.get("endpoints") or {})]
        return pd.DataFrame([(k, str(v)) for k, v in rows], columns=["setting", "value"])

    def scores_figure(self) -> Any:
        from charactereval_lib.coser.figures import scores_figure

        return scores_figure({self.name: self.summary.model_dump()["overall"]}, self.anchor)

    def book_figure(self) -> Any:
        from charactereval_lib.coser.figures import book_figure

        return book_figure(self.summary.model_dump()["by_book"])

    def rounds_figure(self) -> Any:
        from charactereval_lib.coser.figures import rounds_figure

        return rounds_figure(self.summary.rounds.histogram,
                             {ENDING_LABELS[k]: n for k, n in self.summary.ended_by.model_dump().items()})


def load_analysis(run: runs.RunDir, *, n_boot: int, seed: int) -> CoserAnalysis:
    """A run's summary computed afresh (the same function and settings as ``coser summarize``)."""
    return CoserAnalysis(run, run.manifest(), computed_summary(run, n_boot=n_boot, seed=seed), load_anchor())


# --- several runs ------------------------------------------------------------------------------


def comparison_header_markdown(analyses: Sequence[CoserAnalysis]) -> str:
    entries = []
    for a in analyses:
        s, models = a.summary, a.models
        label = f"; **{NOT_COMPARABLE}**" if a.not_comparable() else ""
        entries.append(f"**{a.name}**: actor `{models.get('actor')}`, environment `{models.get('env')}`, "
                       f"NSP `{models.get('nsp')}`, judge `{models.get('judge')}`; protocol {s.protocol_version}, "
                       f"preset {s.preset}, {s.counts.scenes} scenes x {s.repeats} repeat(s){label}")
    return kit.comparison_header("CoSER comparison", entries)


def comparison_warnings_html(analyses: Sequence[CoserAnalysis], extra: Sequence[str] = ()) -> str:
    problems = compare_problems([a.run for a in analyses])
    reasons = [f"runs not comparable with each other: {p}" for p in problems]
    reasons += [f"{a.name}: {r.removeprefix(f'{NOT_COMPARABLE}: ')}" for a in analyses for r in a.not_comparable()]
    notes = [f"{a.name}: {n}" for a in analyses for n in a.caveats()]
    confirmed = all(served_confirmed(a.manifest, a.summary.served) for a in analyses)
    return warnings_html(reasons, [*notes, *extra, agreement_line()], comparable_sentence(confirmed))


def side_by_side(analyses: Sequence[CoserAnalysis], split: str | None = None) -> pd.DataFrame:
    """Mean [interval] per score, one column per run: overall beside the paper's anchor, or one
    split (the anchor is over both splits, so it is not shown there)."""
    def column(a: CoserAnalysis) -> list[str]:
        cells = [(a.summary.by_split[split] if split else a.summary.overall).get(name) for name in SCORES]
        return [f"{fmt(cell.mean if cell else None, DISPLAY_DIGITS)} {interval(cell)}" for cell in cells]

    table = kit.side_by_side(analyses, "score", SCORES, column)
    if not split:
        table["paper (GPT-4o)"] = [analyses[0].paper_cell(name) for name in SCORES]
    return table


def comparison_figure(analyses: Sequence[CoserAnalysis]) -> Any:
    from charactereval_lib.coser.figures import scores_figure

    return scores_figure({a.name: a.summary.model_dump()["overall"] for a in analyses}, analyses[0].anchor)


def paired_differences(analyses: Sequence[CoserAnalysis], *, n_boot: int, seed: int) -> pd.DataFrame:
    """Each later run minus the first (the reference) on the scenes both judged, as ``compare``
    does for CharacterEval: per score the two means over those scenes (repeats averaged per
    scene), the difference with a paired 95% interval (the shared scenes resampled whole) and a
    two-sided Wilcoxon signed-rank p over the per-scene differences (– where undefined)."""
    from charactereval_lib.coser.statistics import interval_table, judged_scores
    from charactereval_lib.engine.stats import wilcoxon_p

    def per_scene(analysis: CoserAnalysis) -> pd.DataFrame:
        return judged_scores(analysis.run).groupby(["scene", "dimension"], as_index=False)["score"].mean()

    reference = per_scene(analyses[0])
    rows = []
    for other in analyses[1:]:
        both = per_scene(other).merge(reference, on=["scene", "dimension"], suffixes=("_a", "_b"))
        both = both[both.groupby("scene")["dimension"].transform("size") == len(DIMENSIONS)]
        diffs = both.assign(score=both["score_a"] - both["score_b"])
        table = interval_table(diffs, n_boot, seed)
        scene_average = diffs.groupby("scene")["score"].mean()
        for name in SCORES:
            part = diffs if name == AVERAGE else diffs[diffs.dimension == name]
            values = scene_average if name == AVERAGE else part["score"]
            cell = Interval.model_validate(table[name]) if name in table else None
            p = wilcoxon_p(values.to_numpy()) if len(values) else float("nan")
            rows.append({"comparison": f"{other.name} − {analyses[0].name}", "score": name,
                         "scenes": int(part["scene"].nunique()),
                         "mean A": fmt(None if part.empty else part["score_a"].mean(), DISPLAY_DIGITS),
                         "mean B": fmt(None if part.empty else part["score_b"].mean(), DISPLAY_DIGITS),
                         "A − B": fmt(cell.mean if cell else None, DISPLAY_DIGITS), "95% interval": interval(cell),
                         "Wilcoxon p": "–" if p != p else f"{p:.3g}"})
    return pd.DataFrame(rows, columns=["comparison", "score", "scenes", "mean A", "mean B", "A − B", "95% interval",
                                       "Wilcoxon p"])


# What each recorded rule (engine.thinking) did with a reply's leading block.
THINKING_TREATMENT = {thinking.REMOVED: "removed before the simulation used it",
                      thinking.KEPT: "kept in the simulation as received, upstream's rule"}


def thinking_rows(summary: CoserSummary) -> list[dict[str, Any]]:
    """The report's rows of replies that started with a thinking block (``summary.thinking_blocks``):
    one per role and the total, each naming what the run's rule did with them."""
    blocks = summary.thinking_blocks
    what = "replies starting with a <think> block"
    if blocks is None:
        return [{"what": what, "count": "not recorded (no turn records: an imported run, or a summary written "
                                        "before they were counted)"}]
    treated = THINKING_TREATMENT.get(blocks.rule, blocks.rule)
    return [{"what": f"{what}: {role} ({treated})", "count": f"{counts.with_block} of {counts.replies}"}
            for role, counts in {**blocks.roles, "total": blocks.total}.items()]


def summary_lines(summary: dict[str, Any], path: Path | str) -> list[str]:
    """``coser summarize`` on the terminal, like ``summarize``: per score (the four dimensions and
    their average) the mean and 95% interval, overall and per split, then the scenes, sessions,
    endings and judge failures, and where the whole summary was written (``summary`` as written
    there, read through ``CoserSummary``)."""
    from charactereval_lib.engine.reports.texttable import text_table

    typed = validate(CoserSummary, summary, str(path), runs.RunError)

    def cell(table: dict[str, Interval], name: str) -> str:
        entry = table.get(name)
        return "–" if entry is None or entry.mean is None else f"{fmt(entry.mean, DISPLAY_DIGITS)} {interval(entry)}"

    rows = [[name, fmt((typed.overall.get(name) or Interval()).mean, DISPLAY_DIGITS), interval(typed.overall.get(name)),
             *(cell(typed.by_split[tag], name) for tag in ("id", "ood"))] for name in SCORES]
    counts, ended = typed.counts, typed.ended_by
    lines = text_table(["score", "mean", "95% interval", "id books", "ood books"], rows)
    lines.append(f"scores {typed.score_variant}: paper-era scores are not clipped, so a dimension can exceed "
                 "100")
    lines.append(f"{counts.scenes} scene(s), {counts.sessions}/{counts.sessions_expected} session(s) judged; "
                 + ", ".join(f"{ENDING_LABELS[k]} {getattr(ended, k)}" for k in ENDINGS)
                 + f"; judge failures {typed.judge_failures}, refused turns {typed.refused_turns['total']}"
                 + (f", reasoning tokens {typed.reasoning_tokens['total']:,} ("
                    + ", ".join(f"{k} {v:,}" for k, v in typed.reasoning_tokens.items() if k != "total") + ")"
                    if typed.reasoning_tokens else "")
                 + (f", replies starting with a <think> block {typed.thinking_blocks.total.with_block} "
                    f"({THINKING_TREATMENT.get(typed.thinking_blocks.rule, typed.thinking_blocks.rule)})"
                    if typed.thinking_blocks and typed.thinking_blocks.total.with_block else ""))
    if (typed.repeats or 0) > 1:
        lines.append(REPEATS_NOTE)
    models = typed.models or {}
    lines += [line for line in (self_preference(models.get("actor"), models.get("judge")), agreement_line()) if line]
    lines.append(f"wrote {path} (every statistic: per book, per repeat, rounds, BLEU/ROUGE-L)")
    return lines
