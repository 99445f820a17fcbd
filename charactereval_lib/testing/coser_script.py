"""Deterministic CoSER actors, environment, NSP and judge for the local mock server.

``scripted_reply(payload)`` recognises the role from the request's first message and answers
from the SHA-256 of the whole request, so the same request always gets the same reply (a resumed
run equals an uninterrupted one) and the replies exercise the protocol: the NSP sometimes names
the current speaker, says ``random`` or an unknown name (fallbacks), ends the scene after a
varying number of turns; the judge answers valid JSON. ``faulty_judge`` adds the judge faults the
platform must survive. ``refusal_plan`` makes the mock server decline some actor (or Environment,
NSP) turns (a refusal, a content filter or a moderation 403), the way a provider does. The replies mean
nothing.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
from collections.abc import Callable, Sequence
from typing import Any

DIMENSIONS = ("Storyline Consistency", "Anthropomorphism", "Character Fidelity", "Storyline Quality")
_NAMES = re.compile(r"Choose a name from this list: (\[.*?\])\.")


def _digest(payload: dict[str, Any]) -> bytes:
    text = json.dumps(payload.get("messages"), ensure_ascii=False, sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).digest()


def _dimension(system: str) -> str:
    return max(DIMENSIONS, key=system.count)


def role_of(payload: dict[str, Any]) -> str:
    """Which CoSER role a request is for, from its first message: ``repair``, ``judge``,
    ``nsp``, ``env`` or ``actor``."""
    messages = payload.get("messages") or [{"content": ""}]
    first = messages[0]["content"]
    if first.startswith("I will provide you with a JSON string"):
        return "repair"
    if first.startswith("You are a literary critic"):
        return "judge"
    if first.startswith("Your task is to predict the next speaker"):
        return "nsp"
    if first.startswith("You are ") and " for a role-playing game" in first.split("\n")[0]:
        return "env"
    return "actor"


def refusal_plan(actions: Sequence[str], *, share: int = 3, refused_attempts: int = 1,
                 roles: Sequence[str] = ("actor",)) -> Callable[[str, int, dict[str, Any]], str]:
    """A ``MockServer`` plan: one request in ``share`` of the given ``roles`` (chosen by its key)
    is declined on its first ``refused_attempts`` attempts with one of ``actions`` (e.g.
    ``refusal``, ``finish_filter``, ``filter400``, ``moderation403``, or ``403`` for a failure
    that is not a refusal), picked by its key too; every other request is answered normally."""

    def plan(key: str, attempt: int, payload: dict[str, Any]) -> str:
        index = int(key[:8], 16)
        if role_of(payload) in roles and index % share == 0 and attempt <= refused_attempts:
            return actions[(index // share) % len(actions)]
        return "ok"

    return plan


def scripted_reply(payload: dict[str, Any], *, faulty_judge: bool = False) -> str:
    messages = payload.get("messages") or [{"content": ""}]
    first = messages[0]["content"]
    h = _digest(payload)
    role = role_of(payload)
    if role == "repair":
        # The repair call: return the critique it was sent, mended.
        dimension = next((d for d in DIMENSIONS if d in first), DIMENSIONS[0])
        return json.dumps({dimension: {"flaws": [{"instance": "repaired", "type": "x", "severity": 2}]}})
    if role == "judge":
        dimension = _dimension(first)
        first_attempt = payload.get("temperature") == 0
        if faulty_judge and first_attempt and h[0] % 3 == 0:
            return "My critique: {\"" + dimension + "\": {\"flaws\": [ {broken"  # repaired by the repair call
        if faulty_judge and first_attempt and h[0] % 3 == 1:
            other = DIMENSIONS[(DIMENSIONS.index(dimension) + 1) % 4]
            return json.dumps({other: {"flaws": []}})  # the wrong dimension: retried at temperature 1
        flaws = [{"instance": f"flaw {i}", "type": "t", "severity": 1 + (h[i] % 4)} for i in range(h[1] % 4)]
        return "```json\n" + json.dumps({dimension: {"flaws": flaws}}) + "\n```"
    if role == "nsp":
        names = ast.literal_eval(_NAMES.search(first).group(1))
        predictions = sum(m["role"] == "assistant" for m in messages)
        if predictions >= 5 + h[2] % 10:
            return "<END CHAT>"
        pick = h[3] % (len(names) + 2)
        return names[pick] if pick < len(names) else ("random" if pick == len(names) else "Nobody")
    if role == "env":
        return f"(the wind shifts {h[:3].hex()})"
    name = first[len("You are "):].split(" from ")[0]
    return f"[I must stay calm {h[:2].hex()}] (looks up) Line {h[2:5].hex()} from {name}."
