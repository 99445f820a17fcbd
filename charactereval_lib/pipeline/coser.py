"""CoSER given-circumstance acting: its settings and stages (data, run = simulate + judge, dry
run, import, summary, report and comparison)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from charactereval_lib.engine import faults, outdir
from charactereval_lib.engine.generation.base import ConfigError
from charactereval_lib.engine.registry import benchmarks
from charactereval_lib.engine.registry.settings import Number, Settings, SettingsError, positive
from charactereval_lib.engine.stats import DEFAULT_N_BOOT, DEFAULT_SEED
from charactereval_lib.engine.storage import runs
from charactereval_lib.pipeline.data import DataUse, remember
from charactereval_lib.pipeline.outcomes import COMPARISON_HTML, COMPARISON_NOTEBOOK, FIGURES_DIR, REPORT_HTML, REPORT_NOTEBOOK, ReportOutcome, SummaryOutcome

# Seconds one CoSER model call may take before it is abandoned and retried (seed 004 F17: the
# earlier platform's 180 s; upstream's OpenAI client has its own default).
REQUEST_TIMEOUT_S = 180.0

COSER_ROLES = ("actor", "env", "nsp", "judge")
COSER_RULES = ("system_role", "name_suffix", "output_example", "fix_repetition")
COSER_BACKENDS = ("openai", "offline")


class CoserRunSettings(Settings):
    """A CoSER run: the preset, the protocol version and each role's model, endpoint, key
    variable and model-name rules. A role's model left None is the one the protocol version
    fixes for it (``coser.versions.RoleModels``). A role's ``*_base_url`` / ``*_api_key_env`` left None takes
    ``base_url`` / ``api_key_env``; a rule left None follows upstream's rule for the model name;
    ``no_api_key`` sends every role a placeholder key (a local server)."""

    actor_model: str
    preset: str = "smoke"
    protocol: str | None = None  # None: the default version, coser-paper
    backend: str = "openai"
    base_url: str | None = None
    api_key_env: str = "OPENAI_API_KEY"
    no_api_key: bool = False
    # None: the fixed model the protocol version declares (``coser.versions.RoleModels``).
    env_model: str | None = None
    nsp_model: str | None = None
    judge_model: str | None = None
    actor_base_url: str | None = None
    env_base_url: str | None = None
    nsp_base_url: str | None = None
    judge_base_url: str | None = None
    actor_api_key_env: str | None = None
    env_api_key_env: str | None = None
    nsp_api_key_env: str | None = None
    judge_api_key_env: str | None = None
    actor_system_role: str | None = None
    env_system_role: str | None = None
    nsp_system_role: str | None = None
    actor_name_suffix: bool | None = None
    env_name_suffix: bool | None = None
    nsp_name_suffix: bool | None = None
    actor_output_example: bool | None = None
    env_output_example: bool | None = None
    nsp_output_example: bool | None = None
    actor_fix_repetition: bool | None = None
    env_fix_repetition: bool | None = None
    nsp_fix_repetition: bool | None = None
    # Further request-body keys per role (reasoning settings, a router's provider pin), sent as
    # given; the keys the protocol fixes (coser.simulation.FIXED_REQUEST_PARAMS) are refused.
    actor_request_params: dict[str, Any] | None = None
    env_request_params: dict[str, Any] | None = None
    nsp_request_params: dict[str, Any] | None = None
    judge_request_params: dict[str, Any] | None = None
    repair_model: str | None = None
    # The JSON repair call's (None: the judge's when the repair model is the judge's, else none).
    repair_request_params: dict[str, Any] | None = None
    continue_from: int = 0
    wo_thought: bool = False
    # Keep a reply's leading <think> block in the dialogue, as upstream does (seed 004 G08);
    # default: removed before the reply enters the dialogue (C17a, engine.thinking).
    keep_thinking: bool = False
    limit: int | None = None
    concurrency: int = 64
    scene_concurrency: int = 256
    # Seconds per call, as the seed's platform (seed 004 F17); recorded in run.json.
    timeout: Number = REQUEST_TIMEOUT_S
    retry_base_delay: Number = 1.0

    def model_post_init(self, context: Any) -> None:
        from charactereval_lib.coser.run import PRESETS
        from charactereval_lib.coser.versions import VERSIONS

        if not self.actor_model:
            raise SettingsError("actor_model is required (--actor-model)")
        if self.preset not in PRESETS:
            raise SettingsError(f"preset {self.preset!r}: expected one of {', '.join(PRESETS)}")
        if self.protocol is not None and self.protocol not in VERSIONS:
            raise SettingsError(f"protocol {self.protocol!r}: expected one of {', '.join(sorted(VERSIONS))}")
        if self.backend not in COSER_BACKENDS:
            raise SettingsError(f"backend {self.backend!r}: expected one of {', '.join(COSER_BACKENDS)}")
        for role in ("actor", "env", "nsp"):
            value = getattr(self, f"{role}_system_role")
            if value not in (None, "system", "user"):
                raise SettingsError(f"{role}_system_role {value!r}: expected system or user")
        for name in ("limit", "concurrency", "scene_concurrency", "timeout"):
            positive(name, getattr(self, name))
        if self.continue_from < 0 or self.retry_base_delay < 0:
            raise SettingsError("continue_from and retry_base_delay must not be negative")
        for role in (*COSER_ROLES, "repair"):
            params = getattr(self, f"{role}_request_params")
            if params and self.backend != "openai":
                raise SettingsError(f"{role}_request_params (--{role}-request-param) go into the body of an HTTP "
                                    f"request: backend openai sends them, backend {self.backend!r} has none")
        try:
            self.simulation_settings()  # a fixed parameter among the request parameters is reported now
        except ConfigError as exc:
            raise SettingsError(str(exc)) from None

    def simulation_settings(self):
        """The protocol's ``SimulationSettings``: each role's model, endpoint, key variable name
        and rules (only the rules given explicitly are set; the others keep upstream's rule)."""
        from charactereval_lib.coser.prompts import ModelRules, default_rules
        from charactereval_lib.coser.simulation import RoleSettings, SimulationSettings
        from charactereval_lib.coser.versions import DEFAULT_VERSION, get_version

        version = get_version(self.protocol or DEFAULT_VERSION)
        roles = {}
        for role in COSER_ROLES:
            model = getattr(self, f"{role}_model") or version.models.of(role)
            key_env = getattr(self, f"{role}_api_key_env")
            key_env = self.api_key_env if key_env is None else key_env
            flags = {name: getattr(self, f"{role}_{name}", None) for name in COSER_RULES}
            rules = None
            if any(value is not None for value in flags.values()):
                base = default_rules(model, version)
                rules = ModelRules(**{name: getattr(base, name) if value is None else value
                                      for name, value in flags.items()})
            roles[role] = RoleSettings(model=model, base_url=getattr(self, f"{role}_base_url") or self.base_url,
                                       api_key_env="" if self.no_api_key else key_env, backend=self.backend,
                                       rules=rules, request_params=getattr(self, f"{role}_request_params"))
        repair = None
        if self.repair_model or self.repair_request_params:
            repair = RoleSettings(self.repair_model or version.fix_json_model or roles["judge"].model,
                                  roles["judge"].base_url, roles["judge"].api_key_env, self.backend,
                                  request_params=self.repair_request_params)
        return SimulationSettings(version=version, repair=repair, continue_from=self.continue_from,
                                  thoughtless=self.wo_thought, keep_thinking=self.keep_thinking, **roles)

    def preset_settings(self):
        from charactereval_lib.coser.run import PRESETS

        return PRESETS[self.preset]


class CoserSummarizeSettings(Settings):
    """Bootstrap settings of a CoSER summary (resamples of whole scenes, 95% studentized)."""

    n_boot: int = DEFAULT_N_BOOT
    seed: int = DEFAULT_SEED

    def model_post_init(self, context: Any) -> None:
        positive("n_boot", self.n_boot)


class CoserReportSettings(CoserSummarizeSettings):
    """A CoSER report's statistics and whether the HTML keeps the code cells; ``allow_mixed``
    compares runs whose settings differ (with a warning at the top)."""

    show_code: bool = False
    allow_mixed: bool = False


@dataclass
class CoserRunOutcome:
    """What ``coser_run`` did: the preset's (repeat, scene) count, the ones left unfinished with
    their reason, warnings (torn lines repaired) and this session's calls per role."""

    run: runs.RunDir
    scenes: int
    errors: list[str]
    warnings: list[str]
    calls: dict[str, int]

    def exit_code(self) -> int:
        return 1 if self.errors else 0


def coser_scenes(settings: CoserRunSettings, data_dir: str | os.PathLike[str] | None):
    """(located data dir, the preset's scenes after ``limit``, the critic prompts): what a run reads,
    also checked by the batch's pre-flight before any model starts."""
    from charactereval_lib.coser.data import load_test_set, locate_data_dir
    from charactereval_lib.coser.run import select_scenes
    from charactereval_lib.coser.upstream import load_critic_prompts

    located = locate_data_dir(data_dir)
    scenes = select_scenes(load_test_set(located), settings.preset_settings())
    if settings.limit:
        scenes = scenes[: settings.limit]
    shortest = min(scenes, key=lambda scene: len(scene.raw["dialogues"]), default=None)
    if shortest is not None and settings.continue_from > len(shortest.raw["dialogues"]):
        raise SettingsError(f"continue_from {settings.continue_from} (--continue-from): scene {shortest.key!r} has "
                            f"only {len(shortest.raw['dialogues'])} original lines")
    return located, scenes, load_critic_prompts(located)


def coser_data_fetch(data_dir: str | os.PathLike[str] | None = None, *, mirror: str | None = None,
                     progress: bool = False, with_results: bool = False) -> list[str]:
    """CoSER data step: download the pinned files that are missing or altered, then verify all;
    the problems left (empty: every file matches its digests)."""
    from charactereval_lib.coser.data import fetch_data

    fetch_data(data_dir, mirror=mirror, progress=progress, with_results=with_results)
    return coser_data_verify(data_dir, with_results=with_results)


def coser_data_verify(data_dir: str | os.PathLike[str] | None = None, *, with_results: bool = False) -> list[str]:
    """CoSER data step: one problem line per pinned file that is missing or altered."""
    from charactereval_lib.coser.data import verify

    return verify(data_dir, with_results=with_results)


def coser_data_facts(data_dir: str | os.PathLike[str] | None = None) -> tuple[list[str], list[str]]:
    """CoSER data step "data facts": the test set's recorded facts as recounted from the verified
    data (``coser.facts.check``): one line per fact, and one problem line per fact that differs."""
    from charactereval_lib.coser.data import load_test_set
    from charactereval_lib.coser.facts import check

    return check(load_test_set(data_dir))


def coser_data_use(directory: str | os.PathLike[str], *, force: bool = False) -> DataUse:
    """Make ``directory`` the CoSER data directory of the workspace, unless a flag or
    $COSER_DATA_DIR says otherwise. It is verified first (``coser_data_verify``): one that fails
    is refused, unless ``force``."""
    from charactereval_lib.coser.data import BENCHMARK, DATA_DIR_ENV

    return remember(BENCHMARK, directory, DATA_DIR_ENV, coser_data_verify, verify_command="charactereval coser data",
                    force=force)


def coser_data_dir(data_dir: str | os.PathLike[str] | None = None) -> Path:
    """Where the CoSER data is looked up: ``data_dir``, ``$COSER_DATA_DIR``, else data/coser/."""
    from charactereval_lib.coser.data import locate_data_dir

    return locate_data_dir(data_dir)


def coser_dry_run(settings: CoserRunSettings, *, data_dir: str | os.PathLike[str] | None = None,
                  prices: Mapping[str, tuple[float, float]] | None = None) -> list[str]:
    """Calls, tokens and (with ``prices``: role -> USD per million input, output tokens) cost per
    role of the preset's scenes, estimated from their real system prompts; nothing is sent."""
    from charactereval_lib.coser.run import dry_run

    _, scenes, critic = coser_scenes(settings, data_dir)
    return dry_run(scenes, settings.simulation_settings(), settings.preset_settings(), critic, dict(prices or {}))


def coser_run(run: str | os.PathLike[str] | runs.RunDir, settings: CoserRunSettings, *,
              data_dir: str | os.PathLike[str] | None = None, progress: bool = False) -> CoserRunOutcome:
    """Simulate and judge every (repeat, scene) of the preset not finished yet (resuming: the same
    call continues a run; other settings are refused), under the run's writer lock; ``progress``
    shows a bar of finished scene runs."""
    from charactereval_lib.coser.run import coser_job, run_coser, start_run
    from charactereval_lib.coser.simulation import ROLES, RoleClients
    from charactereval_lib.engine.generation.engine import run_closing
    from charactereval_lib.engine.generation.retry import RetryPolicy

    simulation = settings.simulation_settings()
    preset = settings.preset_settings()
    located, scenes, critic = coser_scenes(settings, data_dir)
    run = runs.RunDir.resolve(run)
    if settings.backend == "openai":
        faults.check_endpoints([simulation.role(name).base_url for name in ROLES], "coser run")
    faults.check_writable(run.path, "run directory")
    run.path.mkdir(parents=True, exist_ok=True)
    policy = RetryPolicy(base_delay_s=settings.retry_base_delay, timeout_s=settings.timeout)
    with coser_job(run).locked():
        start_run(run, simulation, preset, scenes, str(located), client=policy.as_dict())
        clients = RoleClients(simulation, concurrency=settings.concurrency, policy=policy)
        outcome = run_closing(clients, lambda: run_coser(run, scenes, simulation, preset, critic, clients,
                                                         scene_concurrency=settings.scene_concurrency,
                                                         progress=progress))
    return CoserRunOutcome(run, outcome["scenes"], outcome["errors"], outcome["warnings"], outcome["calls"])


def coser_import(path: str | os.PathLike[str], run: str | os.PathLike[str] | runs.RunDir, *,
                 protocol: str | None = None, actor_model: str | None = None, score_formula: str | None = None,
                 models: Mapping[str, str] | None = None,
                 data_dir: str | os.PathLike[str] | None = None, metrics: bool = True,
                 progress: bool = False):
    """An official paper-era ``exp/evaluation/*.json`` file as a new CoSER run (``coser.official.
    import_evaluation``): validated whole first, every dimension re-scored from its recorded
    critique, the reproduction report returned and kept in ``run.json``. ``protocol`` and
    ``score_formula`` None: as the file's layout and name say (``import_evaluation``).
    ``models``: the other roles' models (``env_model``, ``nsp_model``, ``judge_model``) where they
    are known more precisely than the experiment name the files were written under (e.g. a dated
    snapshot)."""
    from charactereval_lib.coser.official import import_evaluation
    from charactereval_lib.coser.versions import get_version

    return import_evaluation(run, path, version=get_version(protocol) if protocol else None, data_dir=data_dir,
                             actor_model=actor_model, score_formula=score_formula, metrics=metrics, progress=progress,
                             **dict(models or {}))


def _coser_run_dir(run: str | os.PathLike[str] | runs.RunDir) -> runs.RunDir:
    from charactereval_lib.coser.benchmark import JUDGEMENTS

    run = benchmarks.require(runs.RunDir.resolve(run).require_dir(), "coser")
    run.require(run.artifact(JUDGEMENTS), "run `charactereval coser run` first")
    return run


def coser_summarize(run: str | os.PathLike[str] | runs.RunDir,
                    settings: CoserSummarizeSettings | None = None) -> SummaryOutcome:
    """CoSER statistics (``coser.statistics.compute_summary``) written to ``RUN/coser_summary.json``;
    the warnings are the reasons the run is not comparable with the paper's anchor, then its
    served-identity caveats (``coser.report.served_caveats``)."""
    from charactereval_lib.coser.report import comparability, served_caveats
    from charactereval_lib.coser.statistics import summarize

    settings = settings if settings is not None else CoserSummarizeSettings()
    run = _coser_run_dir(run)
    faults.check_writable(run.path, "run directory")
    summary = summarize(run, n_boot=settings.n_boot, seed=settings.seed)
    manifest = run.manifest()
    return SummaryOutcome(run, summary, comparability(manifest, served=summary["served"])
                          + served_caveats(manifest, summary["served"]))


def coser_analysis(run: str | os.PathLike[str] | runs.RunDir,
                   settings: CoserSummarizeSettings | None = None):
    """One CoSER run loaded for a report (``coser.report.CoserAnalysis``): its summary computed
    afresh (nothing written), its settings, the anchor and the tables and figures the notebooks show."""
    from charactereval_lib.coser.report import load_analysis

    settings = settings if settings is not None else CoserSummarizeSettings()
    return load_analysis(_coser_run_dir(run), n_boot=settings.n_boot, seed=settings.seed)


def coser_report(run: str | os.PathLike[str] | runs.RunDir,
                 settings: CoserReportSettings | None = None, *,
                 out: str | os.PathLike[str] | None = None) -> ReportOutcome:
    """One CoSER run's report: ``OUT/report.ipynb`` (papermill) and ``OUT/report.html`` (OUT:
    the run directory unless given), both written only once the notebook ran through. The
    warnings say why the run is not comparable with the paper, if it is not."""
    from charactereval_lib.coser.report import comparability
    from charactereval_lib.coser.statistics import run_served
    from charactereval_lib.engine.reports import notebook as notebooks

    settings = settings if settings is not None else CoserReportSettings()
    run = _coser_run_dir(run)
    out_dir = outdir.check(out, outdir.REPORTS, inputs=[run.path], default=run.path) if out else run.path
    parameters = {"run_dir": str(run.path.resolve()), "n_boot": settings.n_boot, "seed": settings.seed,
                  "figures_dir": str((out_dir / FIGURES_DIR).resolve())}
    # A failed notebook is kept in the folder for inspection: claimed first, so a rerun may use it.
    outdir.mark(out_dir, outdir.REPORTS, default=run.path)
    source = benchmarks.get("coser").notebook_path("coser-report")
    notebook, html = notebooks.render(source, out_dir / REPORT_NOTEBOOK, out_dir / REPORT_HTML,
                                      parameters, show_code=settings.show_code, title=f"CoSER report: {run.name}")
    return ReportOutcome(notebook, html, comparability(run.manifest(), served=run_served(run)))


def coser_compare(run_list: Sequence[str | os.PathLike[str] | runs.RunDir], out_dir: str | os.PathLike[str],
                  settings: CoserReportSettings | None = None) -> ReportOutcome:
    """A comparison report of several CoSER runs (the first is the reference):
    ``OUT/comparison.ipynb`` and ``OUT/comparison.html``. Runs that differ in protocol version
    or in a model besides the actor's are refused unless ``allow_mixed``."""
    from charactereval_lib.coser.report import comparability, compare_problems
    from charactereval_lib.coser.statistics import run_served
    from charactereval_lib.engine.reports import notebook as notebooks

    settings = settings if settings is not None else CoserReportSettings()
    if len(run_list) < 2:
        raise runs.RunError("coser compare needs at least two runs")
    resolved = [_coser_run_dir(r) for r in run_list]
    out = outdir.check(out_dir, outdir.REPORTS, inputs=[r.path for r in resolved])
    problems = compare_problems(resolved)
    if problems and not settings.allow_mixed:
        raise runs.MixedRunError(f"cannot compare: {problems[0]} (--allow-mixed compares anyway, with a warning)")
    warnings = [f"NOT COMPARABLE: {p}" for p in problems]
    warnings += [f"{r.name}: {w}" for r in resolved for w in comparability(r.manifest(), served=run_served(r))]
    parameters = {"run_dirs": [str(r.path.resolve()) for r in resolved], "n_boot": settings.n_boot,
                  "seed": settings.seed, "figures_dir": str((out / FIGURES_DIR).resolve())}
    title = "CoSER comparison: " + ", ".join(r.name for r in resolved)
    # A failed notebook is kept in the folder for inspection: claimed first, so a rerun may use it.
    outdir.mark(out, outdir.REPORTS)
    source = benchmarks.get("coser").notebook_path("coser-compare")
    notebook, html = notebooks.render(source, out / COMPARISON_NOTEBOOK, out / COMPARISON_HTML,
                                      parameters, show_code=settings.show_code, title=title)
    return ReportOutcome(notebook, html, warnings)


def coser_reproduction(*, data_dir: str | os.PathLike[str] | None = None, n_boot: int = DEFAULT_N_BOOT,
                       seed: int = DEFAULT_SEED, progress: bool = False,
                       no_metrics: bool = False) -> Callable[[Path], dict[str, Any]]:
    """CoSER's ``reproduce`` (``engine.registry.benchmarks.Reproduction``): the released evaluation files,
    re-scored from their recorded critiques; ``no_metrics`` skips BLEU/ROUGE-L (the slow part)."""
    from charactereval_lib.coser.reproduce import reproduce

    return lambda staging: reproduce(staging, data_dir=data_dir, metrics=not no_metrics, n_boot=n_boot, seed=seed,
                                     progress=progress)
