"""What CharacterEval's runs need besides a model: the official data (fetch, verify, the doctor's
protocol self-check, stratified subsets) and the reward-model checkpoint (download, check, a
tiny meaningless one for demos and tests)."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from charactereval_lib.charactereval.data import OfficialData, load_official_data, locate_data_dir

# The data the scorer needs, and the annotation guide `data verify` checks with it.
BASE_GROUPS = ("required", "guide")


@dataclass
class DataCheck:
    """The located data directory, the files fetched this call and one line per file that is
    missing or altered (empty: every file matches its pinned digests)."""

    data_dir: Path
    problems: list[str]
    fetched: list[Any] = field(default_factory=list)


def data_groups(*, with_results: bool = False, with_rm_train: bool = False) -> list[str]:
    """The pinned file groups: the base ones, and the released replies and the RM's training
    annotations when asked for."""
    return [*BASE_GROUPS, *(["results"] if with_results else []), *(["rm_train"] if with_rm_train else [])]


def data_fetch(data_dir: str | os.PathLike[str] | None = None, *, with_results: bool = False,
               with_rm_train: bool = False, mirror: str | None = None, progress: bool = False) -> DataCheck:
    """Download the pinned official files that are missing or altered (from ``mirror`` instead
    of GitHub when given), then verify them all."""
    from charactereval_lib.charactereval.data import fetch

    located = locate_data_dir(data_dir)
    groups = data_groups(with_results=with_results, with_rm_train=with_rm_train)
    fetched = fetch(located, groups, mirror=mirror, progress=progress)
    return DataCheck(located, data_verify(located, with_results=with_results, with_rm_train=with_rm_train).problems,
                     fetched)


def data_verify(data_dir: str | os.PathLike[str] | None = None, *, with_results: bool = False,
                with_rm_train: bool = False) -> DataCheck:
    """The official files checked against their pinned digests."""
    from charactereval_lib.charactereval.data import verify_files

    located = locate_data_dir(data_dir)
    return DataCheck(located, verify_files(located, data_groups(with_results=with_results,
                                                                  with_rm_train=with_rm_train)))


@dataclass
class DataUse:
    """What ``data use`` remembered: the workspace file written, the directory, its problems
    (missing or altered files; empty: all verified; only ever non-empty with ``force``) and the
    environment variable that overrides it in this process, if set."""

    config: Path
    data_dir: Path
    problems: list[str]
    overridden_by: str | None


def remember(benchmark: str, directory: str | os.PathLike[str], env_var: str,
             problems: Callable[[Path], list[str]], *, verify_command: str, force: bool = False) -> DataUse:
    """Record ``directory`` as the workspace's data directory of ``benchmark`` once it passed
    ``problems`` (the benchmark's verify: directory -> lines). A directory that fails is a
    ``DataError`` naming its first problem, and the workspace keeps what it had; ``force``
    records it anyway (its problems are then in the result)."""
    from charactereval_lib.engine.storage import workspace
    from charactereval_lib.engine.storage.pinned import DataError

    target = Path(directory).expanduser().absolute()
    if target.exists() and not target.is_dir():
        raise DataError(f"{target}: not a directory")
    # Read first: a malformed workspace file is its own error, before the folder is judged.
    before = workspace.remembered_data_dir(benchmark)
    found = problems(target) if target.is_dir() else [f"{target}: no such directory"]
    if found and not force:
        kept = f"the workspace keeps {before}" if before else "nothing was recorded"
        raise DataError(f"{target}: not a verified {benchmark} data directory: {len(found)} problem(s), the first: "
                        f"{found[0]} (`{verify_command} verify --dir {target}` lists them; {kept}; "
                        "--force records it anyway)")
    config = workspace.remember_data_dir(benchmark, target)
    return DataUse(config, target, found, env_var if os.environ.get(env_var) else None)


def data_use(directory: str | os.PathLike[str], *, force: bool = False) -> DataUse:
    """Make ``directory`` the official data directory of the workspace (every command and notebook
    started in it or below it), unless a flag or $CHARACTEREVAL_DATA_DIR says otherwise. It is
    verified first (``data_verify``): one that fails is refused, unless ``force``."""
    from charactereval_lib.charactereval.data import BENCHMARK, DATA_DIR_ENV

    return remember(BENCHMARK, directory, DATA_DIR_ENV, lambda located: data_verify(located).problems,
                    verify_command="charactereval data", force=force)


def data_subset(size: int, *, out: str | os.PathLike[str] | None = None,
                data_dir: str | os.PathLike[str] | None = None) -> list[int]:
    """A deterministic metric-stratified subset of ``size`` sample ids, also written to ``out``
    (one per line) when given."""
    from charactereval_lib.charactereval.subsets import stratified_subset, write_ids

    ids = stratified_subset(load_official_data(data_dir), size)
    if out:
        write_ids(Path(out), ids, comment=f"stratified subset of {size} samples")
    return ids


@dataclass
class DoctorOutcome:
    data: OfficialData
    checks: list[Any]  # charactereval.doctor.Check

    @property
    def failed(self) -> list[Any]:
        return [check for check in self.checks if not check.ok]


def doctor(data_dir: str | os.PathLike[str] | None = None, *,
           paper_latex: str | os.PathLike[str] | None = None) -> DoctorOutcome:
    """Every protocol fact recomputed on the full official data (raises ``DataError`` when the
    data is missing or altered), and with ``paper_latex`` a copy of the paper's LaTeX source
    checked against the digest Table 4's provenance records."""
    from charactereval_lib.charactereval.doctor import paper_latex_check, run_checks

    data = load_official_data(data_dir)
    return DoctorOutcome(data, run_checks(data) + ([paper_latex_check(paper_latex)] if paper_latex else []))


def rm_download(target: str | os.PathLike[str], *, endpoint: str | None = None) -> Path:
    """BaichuanCharRM at the pinned revision into ``target`` (resumable)."""
    from charactereval_lib.charactereval.reward.download import download_rm

    return download_rm(target, endpoint=endpoint)


def rm_check(checkpoint: str | os.PathLike[str]) -> list[str]:
    """One line per problem of a checkpoint directory's config, tokenizer and weight index."""
    from charactereval_lib.charactereval.reward.download import check_rm_dir
    from charactereval_lib.charactereval.reward.tokenizer import load_tokenizer

    problems = check_rm_dir(checkpoint, required=("config.json", "tokenizer.model"))
    if not problems:
        load_tokenizer(checkpoint)
    return problems


def rm_make_tiny(target: str | os.PathLike[str], *, from_data: bool = False,
                 data_dir: str | os.PathLike[str] | None = None, layers: int = 2, hidden: int = 64, heads: int = 8,
                 vocab: int | None = None, seed: int = 0) -> Path:
    """A tiny random checkpoint (meaningless scores); its tokenizer is trained on the official
    data's text when ``from_data`` or a ``data_dir`` is given, else on synthetic text."""
    from charactereval_lib.charactereval.reward.tiny import make_tiny

    located = locate_data_dir(data_dir) if from_data or data_dir else None
    # The data's text needs more than 3,890 pieces; 8,000 keeps the demo's inputs short.
    return make_tiny(target, data_dir=located, layers=layers, hidden=hidden, heads=heads,
                     vocab_size=vocab or (8000 if located else 2000), seed=seed)
