"""Warnings from evidence: named checks that read what a run's files show.

A report's warnings must rest on what the run recorded, not on what its manifest says about
it: a run whose ``run.json`` is gone, or was written by another step, still has its replies
and scores, and those say what made them. A benchmark declares its checks (``Check``: a name,
what it reads, a function of the run's files returning warning lines); ``run_checks`` runs them
all and keeps, per check, whether it ran and what it found (``Evidence``). A check that cannot
run (a file it needs is damaged) is said as a warning of its own, never skipped in silence:
"No warnings" (``Evidence.all_clear``) means every check ran and found nothing, and its line
names the checks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from charactereval_lib.engine.storage.artifacts import RunError

F = TypeVar("F")


class CannotCheck(Exception):
    """Raised by a check whose evidence is not there to read (said, not skipped)."""


@dataclass(frozen=True)
class Check(Generic[F]):
    """A named check: ``reads`` says which files it reads (for the docs and the "No warnings"
    line), ``find`` returns the warnings the files give (empty: passed)."""

    name: str
    reads: str
    find: Callable[[F], list[str]]


@dataclass
class Finding:
    """One check's outcome: its warnings, or why it could not run."""

    check: str
    warnings: list[str] = field(default_factory=list)
    not_run: str | None = None

    @property
    def passed(self) -> bool:
        return self.not_run is None and not self.warnings


@dataclass
class Evidence:
    """Every check's finding, in the order the checks are declared."""

    findings: list[Finding]
    # What the run's files are (named in the "No warnings" line), e.g. the run directory.
    subject: str = "the run"

    @property
    def warnings(self) -> list[str]:
        """The warning lines, a check that could not run included."""
        lines = []
        for finding in self.findings:
            lines += finding.warnings
            if finding.not_run is not None:
                lines.append(f"The check {finding.check!r} could not run: {finding.not_run}")
        return lines

    @property
    def checks(self) -> list[str]:
        return [finding.check for finding in self.findings]

    @property
    def all_clear(self) -> bool:
        """Every check ran and passed."""
        return bool(self.findings) and all(finding.passed for finding in self.findings)

    def clear_line(self) -> str:
        """The "No warnings" line: what it rests on (only meaningful when ``all_clear``)."""
        return (f"No warnings: all {len(self.findings)} checks of {self.subject}'s files ran and passed "
                f"({', '.join(self.checks)}).")

    def as_dict(self) -> dict[str, Any]:
        """For summary.json: each check and its outcome."""
        return {finding.check: ("passed" if finding.passed else
                                f"not run: {finding.not_run}" if finding.not_run is not None else
                                f"{len(finding.warnings)} warning(s)") for finding in self.findings}


def run_checks(checks: Sequence[Check[F]], files: F, subject: str = "the run") -> Evidence:
    """Every check on ``files`` (a benchmark's reading of one run's files); a check that raises
    ``CannotCheck`` or ``RunError`` (a damaged file) did not run, and says why."""
    findings = []
    for check in checks:
        try:
            findings.append(Finding(check.name, list(check.find(files))))
        except (CannotCheck, RunError) as exc:
            findings.append(Finding(check.name, not_run=str(exc)))
    return Evidence(findings, subject)
