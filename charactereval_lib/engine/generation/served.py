"""Served identity: the model a server says answered each call, against the model a run declared.

An OpenAI-compatible server names in every completion the model that produced it (``model``)
and, some, the configuration that served it (``system_fingerprint``). Every record of a model call
keeps both, ``ServedCounts`` counts them per role of a run, and eligibility, the anchor and the
reports read those counts beside the declared name: a run whose every role a local mock answered
must not pass for GPT-4o because its settings say GPT-4o.

Same model (``same_model``). A served name is the declared model when the two are equal once a
router's provider prefix is dropped from the one side that has it (``openai/gpt-4o-2024-08-06``
is ``gpt-4o-2024-08-06``; two different prefixes stay different), or when one is a documented
alias of the other's dated snapshot (``ALIASES``, each with its source). Any other difference is
another model, however alike the names look.

What a run shows (``RoleServed``): a role answered by another model than declared is a reason
(``mismatch``: one line naming both; the boards leave such a run out); a role with replies whose
server named no model is a caveat (``caveat``: "served model not reported").

During a run (``ServedGuard``): the replies of one role of one run come from one served model.
The first reply that names another model than the role's earlier replies (those of earlier
sessions included) stops the session before it is recorded (``ServedModelChanged``, a
``RunAborted``): every reply received until then stays, the request stays pending, and the run
resumes only against a server that serves the model its replies came from. A run holding two
served models could not say which of them its number measures.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from charactereval_lib.engine.generation.base import STATUS_OK, RunAborted

# A documented alias and the dated snapshot it stands for; kept small, each entry sourced. OpenAI's
# model pages list each model's snapshots and aliases; which snapshot an alias points to is stated
# in OpenAI's developer forum ("Where can I check the model alias updates",
# community.openai.com/t/1357643: gpt-4o -> gpt-4o-2024-08-06, gpt-4o-mini -> gpt-4o-mini-2024-07-18).
# - gpt-4o: also the CoSER paper's GPT-4o, whose version footnote names snapshot 2024-08-06.
# - gpt-4o-mini: also seed 004 G01 (upstream's default next-speaker model since 297ffff).
ALIASES = {"gpt-4o": "gpt-4o-2024-08-06", "gpt-4o-mini": "gpt-4o-mini-2024-07-18"}
NOT_REPORTED = "served model not reported"


def _snapshot(name: str) -> str:
    return ALIASES.get(name, name)


def same_model(declared: str, served: str) -> bool:
    """Whether ``served`` (what a server reported) names the ``declared`` model (module docstring)."""
    if declared == served:
        return True
    if ("/" in declared) != ("/" in served):
        # A router's provider prefix on one side only: the model is what follows it.
        declared, served = declared.split("/", 1)[-1], served.split("/", 1)[-1]
    return _snapshot(declared) == _snapshot(served)


@dataclass
class ServedCounts:
    """What the servers reported for the calls of one role: model names and system fingerprints
    with their counts, and how many answered calls named no model."""

    models: Counter = field(default_factory=Counter)
    fingerprints: Counter = field(default_factory=Counter)
    not_reported: int = 0

    def add(self, model: str | None, fingerprint: str | None = None) -> None:
        """Count one answered call."""
        if model:
            self.models[model] += 1
        else:
            self.not_reported += 1
        if fingerprint:
            self.fingerprints[fingerprint] += 1

    def add_record(self, record: Mapping[str, Any]) -> None:
        """Count a call record that carries what its server reported (``model``,
        ``system_fingerprint``); a failed call answered nothing and is not counted."""
        if record.get("status") == STATUS_OK:
            self.add(record.get("model"), record.get("system_fingerprint"))

    def merge(self, other: ServedCounts) -> ServedCounts:
        self.models.update(other.models)
        self.fingerprints.update(other.fingerprints)
        self.not_reported += other.not_reported
        return self

    @property
    def calls(self) -> int:
        return sum(self.models.values()) + self.not_reported

    def as_dict(self) -> dict[str, Any]:
        return {"models": dict(self.models), "system_fingerprints": dict(self.fingerprints),
                "model_not_reported": self.not_reported}

    @classmethod
    def from_dict(cls, value: Mapping[str, Any] | None) -> ServedCounts:
        value = value or {}
        return cls(Counter(value.get("models") or {}), Counter(value.get("system_fingerprints") or {}),
                   int(value.get("model_not_reported") or 0))

    @classmethod
    def of_records(cls, records: Iterable[Mapping[str, Any]]) -> ServedCounts:
        counts = cls()
        for record in records:
            counts.add_record(record)
        return counts


@dataclass(frozen=True)
class RoleServed:
    """One role of a run: the model it declares and what its servers reported. ``role`` names it
    as a sentence does ("the actor", "the judge")."""

    role: str
    declared: str | None
    counts: ServedCounts

    def others(self) -> dict[str, int]:
        """Served names that are not the declared model, with their counts."""
        if self.declared is None:
            return {}
        return {name: n for name, n in self.counts.models.most_common() if not same_model(self.declared, name)}

    def mismatch(self) -> str | None:
        """One line naming the declared model and the other served ones; None when they agree."""
        others = self.others()
        if not others:
            return None
        named = " and ".join(f"{name!r} for {count:,}" for name, count in others.items())
        return f"{self.role} was declared {self.declared!r} but its server reported {named} of {self.counts.calls:,} replies"

    def caveat(self) -> str | None:
        """The "served model not reported" caveat, when some answered calls named no model."""
        missing = self.counts.not_reported
        if not missing:
            return None
        return (f"{NOT_REPORTED}: {missing:,} of {self.counts.calls:,} replies of {self.role} came from a server "
                f"that named no model, so nothing shows they came from {self.declared!r}")

    def served_as_declared(self) -> bool:
        """Some reply named the declared model and none named another."""
        return bool(self.counts.models) and not self.others()


def mismatches(roles: Iterable[RoleServed]) -> list[str]:
    return [line for role in roles if (line := role.mismatch())]


def caveats(roles: Iterable[RoleServed]) -> list[str]:
    """The "served model not reported" caveats of a run's roles, for warning boxes and board rows."""
    return [line for role in roles if (line := role.caveat())]


def as_sentence(line: str) -> str:
    """A reason or caveat line as a warning box's sentence (capitalised, with a full stop)."""
    return f"{line[:1].upper()}{line[1:]}."


class ServedModelChanged(RunAborted):
    """A reply named another served model than the earlier replies of its role in this run."""


class ServedGuard:
    """Keeps the replies of one role of one run to one served model (module docstring):
    ``earlier`` are the names the run's recorded replies were served by."""

    def __init__(self, what: str, earlier: Iterable[str] = ()) -> None:
        self.what = what
        self.seen: list[str] = list(dict.fromkeys(name for name in earlier if name))

    def check(self, model: str | None) -> None:
        """Accept a reply served by ``model`` (None: not reported, nothing to check), or raise
        ``ServedModelChanged`` naming both models."""
        if not model or any(same_model(seen, model) for seen in self.seen):
            return
        if self.seen:
            raise ServedModelChanged(
                f"{self.what}: the server now reports the model {model!r}, but this run's earlier replies were served "
                f"by {', '.join(map(repr, self.seen))}; one run holds the replies of one served model, so this reply "
                "was not recorded and the session stopped (resume against the server that served the earlier "
                "replies, or start a new RUN directory)")
        self.seen.append(model)
