"""The benchmark registry: the one place the command line, ``batch`` and run checks learn which
benchmarks exist. The engine knows none by name.

A benchmark package declares itself once, as a ``Benchmark`` (its name, title, data hooks,
protocol versions, how it recognises its runs, its settings and stages, its notebooks and
where they live, its command-line hook and its part of the leaderboard), and is found in one of
two ways:

- an entry point in the group ``charactereval_lib.benchmarks`` (the built-ins are listed in the
  library's ``pyproject.toml``; an installed package lists its own), whose value is
  ``module:attribute``;
- ``$CHARACTEREVAL_BENCHMARKS``: ``module:attribute`` entries separated by commas, for a
  package that is importable but not installed (a project's own benchmark, a test's).

Stages and hooks may be given as callables or as ``"module:attribute"`` strings, imported when
first used: declaring a benchmark then costs nothing, and ``charactereval --help`` stays fast.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from charactereval_lib.engine.generation.base import ConfigError
from charactereval_lib.engine.resources import resource_path
from charactereval_lib.engine.storage import runs

ENTRY_POINT_GROUP = "charactereval_lib.benchmarks"
ENV = "CHARACTEREVAL_BENCHMARKS"
# The stages a benchmark may declare; ``batch`` runs them in this order.
STAGES = ("run", "summarize", "report")

# A callable, or "module:attribute" naming one (imported on first use).
Ref = Callable[..., Any] | str


class BenchmarkError(ConfigError):
    """A benchmark that cannot be found, loaded or used as declared (one line naming it)."""


def resolve(ref: Ref | type | None, what: str) -> Any:
    """The object ``ref`` names (``module:attribute``), or ``ref`` itself when it is one."""
    if not isinstance(ref, str):
        return ref
    module, _, attribute = ref.partition(":")
    try:
        target = importlib.import_module(module)
        for part in attribute.split(".") if attribute else ():
            target = getattr(target, part)
    except (ImportError, AttributeError) as exc:
        raise BenchmarkError(f"{what}: cannot load {ref!r} ({type(exc).__name__}: {exc})") from None
    return target


@dataclass(frozen=True)
class Option:
    """A command-line option of a benchmark's reproduction: ``--NAME`` (underscores as dashes),
    given to ``prepare`` as the keyword ``name`` when the user gives it; ``flag``: an option
    without a value (True when given)."""

    name: str
    help: str
    flag: bool = False
    metavar: str | None = None

    @property
    def flag_name(self) -> str:
        return "--" + self.name.replace("_", "-")


@dataclass(frozen=True)
class Section:
    """One section of a rendered reproduction report: a Markdown heading and text, then its
    parts in order (a table as a pandas DataFrame, or Markdown as a string)."""

    heading: str
    text: str = ""
    parts: tuple[Any, ...] = ()


# The keywords every reproduction's ``prepare`` takes; no option of a benchmark may reuse one.
COMMON_KEYWORDS = ("data_dir", "n_boot", "seed", "progress")


@dataclass(frozen=True)
class Reproduction:
    """How ``charactereval reproduce --benchmark NAME`` recomputes a benchmark's paper from its
    released files. ``prepare(data_dir=, n_boot=, seed=, progress=, **options)`` checks what the
    reproduction needs (one-line errors, before anything is made) and returns ``make(staging)``,
    which writes its work under ``staging`` and returns the reproduction document
    (``apps.reproduction``). ``options`` are its command-line options (``Option``), ``keywords``
    the further keywords of ``prepare`` a Python caller may give (e.g. a test's own data); any
    other is refused. ``title`` heads the rendered report, ``notes(document)`` gives the lines of
    its warning box, ``file_columns(file, document)`` the columns its table of released files
    shows for one of them (after file and model) and ``sections(document)`` the report's
    sections (``Section``) after its header and notes (default: the released files, then every
    row against the paper: ``apps.reproduction.files_section`` and ``paper_section``)."""

    prepare: Ref
    title: str
    options: tuple[Option, ...] = ()
    keywords: tuple[str, ...] = ()
    notes: Ref | None = None
    file_columns: Ref | None = None
    sections: Ref | None = None

    def accepts(self, keyword: str) -> bool:
        return keyword in self.keywords or any(option.name == keyword for option in self.options)


@dataclass(frozen=True)
class Notebook:
    """A notebook a benchmark ships (in its ``notebook_dir``): its file, whether it takes several
    runs (parameter ``run_dirs``) or one (``run_dir``), whether it reads the benchmark's data
    directory (``data_dir``, found by its ``locate`` hook) and whether its run must exist already
    (a notebook that makes the run does not)."""

    file: str
    several: bool = False
    data: bool = False
    existing: bool = True


@dataclass(frozen=True)
class Benchmark:
    """One benchmark, as its package declares it.

    ``recognises(manifest)`` says whether a ``run.json`` belongs to it; ``owns(run)`` whether a
    run directory does (default: its manifest is recognised), so that a command of another
    benchmark can refuse the run and say which commands read it (``readers``). ``settings``
    and ``stages`` are keyed by stage name (``STAGES``): each stage is called as
    ``stage(run, settings, **options)`` (``report`` also takes ``out``), ``settings`` being an
    instance of the stage's settings class, built from a mapping by its ``from_mapping``.
    ``data`` holds hooks such as ``fetch`` and ``verify`` (``data_dir`` -> problem lines) and
    ``locate`` (``data_dir`` or None -> the data directory its commands read);
    ``notebooks`` its notebooks by the name ``charactereval notebook NAME`` takes, files in
    ``notebook_dir`` (None: the workbench's own ``notebooks/``; a package outside the library
    names its own folder); ``board``, ``board_inputs``, ``explorer`` and ``report`` are what the
    leaderboard shows of its runs; ``reproduction`` (a ``Reproduction``) what
    ``reproduce`` runs for it; ``batch`` the ``engine.registry.batching.BatchPlan`` subclass that runs its
    models in ``charactereval batch`` (None: the default plan, its stages in order); ``errors``
    the exception types bad input to its commands raises. Its settings classes derive from
    ``engine.registry.settings.Settings``."""

    name: str
    title: str
    protocol_versions: tuple[str, ...]
    recognises: Ref
    readers: str
    owns: Ref | None = None
    settings: Mapping[str, Ref | type] = field(default_factory=dict)
    stages: Mapping[str, Ref] = field(default_factory=dict)
    data: Mapping[str, Ref] = field(default_factory=dict)
    notebooks: Mapping[str, Notebook] = field(default_factory=dict)
    notebook_dir: str | os.PathLike[str] | None = None
    # The subcommand of the command line that holds its stages (None: none; the CharacterEval
    # commands are the command line's own); ``add_commands(parser)`` fills it, by default with
    # one action per stage (``cli.stages``).
    command: str | None = None
    command_help: str = ""
    add_commands: Ref | None = None
    # The leaderboard's part (``engine.leaderboard.board.BoardSpec``); what its boards and explorer share
    # (``board_inputs(data_dir)`` -> (value, why it is missing or None), given to them as
    # ``context[name]``: e.g. the official data; the leaderboard's ``--data-dir`` is located by
    # the ``locate`` data hook); the sample explorer of a run page (``explorer(view, context)``,
    # its details typed sections of ``engine.leaderboard.details``) and the rendered report a run directory
    # may hold.
    board: Ref | None = None
    board_inputs: Ref | None = None
    explorer: Ref | None = None
    report: str | None = None
    reproduction: Reproduction | None = None
    batch: Ref | None = None
    # The exception classes (or "module:attribute" naming one) that bad input to its commands
    # raises: the command line reports them in one line, exit status 2, as the engine's own.
    errors: tuple[Ref | type, ...] = ()

    def stage(self, name: str) -> Callable[..., Any]:
        if name not in self.stages:
            raise BenchmarkError(f"benchmark {self.name!r} has no {name} stage (it declares "
                                 f"{', '.join(self.stages) or 'none'})")
        return resolve(self.stages[name], f"benchmark {self.name!r}, {name} stage")

    def settings_class(self, stage: str) -> Any:
        if stage not in self.settings:
            raise BenchmarkError(f"benchmark {self.name!r} declares no settings for its {stage} stage")
        return resolve(self.settings[stage], f"benchmark {self.name!r}, {stage} settings")

    def make_settings(self, stage: str, values: Mapping[str, Any] | None, where: str) -> Any:
        """The stage's settings from a mapping (a YAML section, ``--set`` pairs); errors name
        ``where`` and the key."""
        return self.settings_class(stage).from_mapping(dict(values or {}), where)

    def call(self, stage: str, run: Any, settings: Any, *, data_dir: Any = None, progress: bool = False,
             out: Any = None) -> Any:
        """One stage, called as the registry's convention says: ``run(run, settings, data_dir=,
        progress=)``, ``summarize(run, settings)``, ``report(run, settings, out=)``."""
        function = self.stage(stage)
        if stage == "run":
            return function(run, settings, data_dir=data_dir, progress=progress)
        if stage == "report":
            return function(run, settings, out=out)
        return function(run, settings)

    def hook(self, name: str) -> Any:
        """The object a hook field (``board``, ``explorer``, ...) names, None when undeclared."""
        return resolve(getattr(self, name), f"benchmark {self.name!r}, {name}")

    def locate(self, data_dir: str | os.PathLike[str] | None) -> Path:
        """The data directory its commands read (its ``locate`` data hook), given ``data_dir`` or None."""
        if "locate" not in self.data:
            raise BenchmarkError(f"benchmark {self.name!r} declares no locate hook (where its data directory is)")
        return Path(resolve(self.data["locate"], f"benchmark {self.name!r}, locate")(data_dir))

    def notebook_path(self, name: str) -> Path:
        """The file of its notebook ``name``; one-line errors for an undeclared or missing one."""
        if name not in self.notebooks:
            raise BenchmarkError(f"benchmark {self.name!r} declares no notebook {name!r} (it declares "
                                 f"{', '.join(self.notebooks) or 'none'})")
        folder = Path(self.notebook_dir) if self.notebook_dir is not None else resource_path("notebooks")
        path = folder / self.notebooks[name].file
        if not path.is_file():
            raise BenchmarkError(f"{path}: notebook {name!r} of benchmark {self.name!r} is missing")
        return path

    def recognises_manifest(self, manifest: Mapping[str, Any]) -> bool:
        return bool(resolve(self.recognises, f"benchmark {self.name!r}")(dict(manifest)))

    def owns_run(self, run: runs.RunDir) -> bool:
        if self.owns is not None:
            return bool(resolve(self.owns, f"benchmark {self.name!r}")(run))
        return run.manifest_path.exists() and self.recognises_manifest(run.manifest())


def _declared(ref: str, where: str) -> Benchmark:
    benchmark = resolve(ref, where)
    if not isinstance(benchmark, Benchmark):
        raise BenchmarkError(f"{where}: {ref!r} is a {type(benchmark).__name__}, not a Benchmark")
    return benchmark


def _refs() -> list[tuple[str, str]]:
    """(where it was declared, ``module:attribute``) of every benchmark, installed ones first."""
    found = [(f"entry point {ep.name!r}", ep.value) for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)]
    extra = [item.strip() for item in os.environ.get(ENV, "").split(",") if item.strip()]
    return found + [(f"${ENV}", item) for item in extra]


_cache: dict[tuple[tuple[str, str], ...], dict[str, Benchmark]] = {}


def registry() -> dict[str, Benchmark]:
    """Every declared benchmark by name (read again when ``$CHARACTEREVAL_BENCHMARKS`` changes);
    two declarations of one name are an error."""
    refs = tuple(_refs())
    if refs not in _cache:
        found: dict[str, Benchmark] = {}
        for where, ref in refs:
            benchmark = _declared(ref, where)
            if benchmark.name in found and found[benchmark.name] is not benchmark:
                raise BenchmarkError(f"{where}: a second benchmark named {benchmark.name!r} ({ref})")
            found[benchmark.name] = benchmark
        _cache[refs] = found
    return _cache[refs]


def get(name: str) -> Benchmark:
    known = registry()
    if name not in known:
        # An editable install made before the registry existed has no entry points: reinstall it.
        raise BenchmarkError(f"unknown benchmark {name!r}; registered: {', '.join(sorted(known)) or 'none'} "
                             f"(a package registers one by an entry point in {ENTRY_POINT_GROUP} or ${ENV}; "
                             "after an upgrade, install the workbench again: pip install -e .)")
    return known[name]


def reproducible() -> dict[str, Benchmark]:
    """The benchmarks that declare a reproduction (``charactereval reproduce``), by name."""
    return {name: b for name, b in sorted(registry().items()) if b.reproduction is not None}


def user_errors() -> tuple[type[BaseException], ...]:
    """The user-facing error types every benchmark declares (``Benchmark.errors``)."""
    return tuple(resolve(ref, f"benchmark {b.name!r}, errors") for b in registry().values() for ref in b.errors)


def owner(run: runs.RunDir) -> Benchmark | None:
    """The benchmark a run directory belongs to, None when none claims it (a new run)."""
    return next((b for b in registry().values() if b.owns_run(run)), None)


def require(run: runs.RunDir, name: str) -> runs.RunDir:
    """``run`` if no other benchmark owns it; else a one-line error naming the benchmark that
    does and the commands that read its runs ("run ... first" would send the user the wrong way)."""
    wanted = get(name)
    found = owner(run)
    if found is not None and found.name != wanted.name:
        raise runs.RunError(f"{run.path}: a {found.title} run, not a {wanted.title} one; {found.readers} read it")
    return run
