"""Served identity (issue 39 item 1, ``engine.generation.served``): which served names are the declared
model, how a run's roles say so, and the guard that keeps one run's replies to one served model.
Units only; the runs that record it are in the generation, judge, CoSER and leaderboard tests."""

from __future__ import annotations

from collections import Counter

import pytest

from charactereval_lib.engine.generation.served import (
    ALIASES,
    RoleServed,
    ServedCounts,
    ServedGuard,
    ServedModelChanged,
    same_model,
)


@pytest.mark.parametrize(("declared", "served", "same"), [
    ("gpt-4o-2024-08-06", "gpt-4o-2024-08-06", True),
    # A router's provider prefix on one side only is no difference (seed 004 L01's spelling).
    ("openai/gpt-4o-2024-08-06", "gpt-4o-2024-08-06", True),
    ("gpt-4o-2024-08-06", "openai/gpt-4o-2024-08-06", True),
    # A documented alias of the same dated snapshot, with or without the prefix.
    ("gpt-4o", "gpt-4o-2024-08-06", True),
    ("openai/gpt-4o-mini-2024-07-18", "gpt-4o-mini", True),
    # Anything else is another model.
    ("gpt-4o", "gpt-4o-2024-11-20", False),
    ("gpt-4o-2024-08-06", "gpt-4o-mini-2024-07-18", False),
    ("openai/gpt-4o-2024-08-06", "azure/gpt-4o-2024-08-06", False),
    ("mock-actor", "mock-served-model", False),
    ("Qwen/Qwen2-7B-Instruct", "Qwen/Qwen2-7B", False),
])
def test_same_model_drops_a_one_sided_router_prefix_and_reads_the_alias_table(declared, served, same):
    assert same_model(declared, served) is same


def test_the_alias_table_maps_aliases_to_dated_snapshots():
    assert ALIASES and all(snapshot.startswith(alias + "-20") for alias, snapshot in ALIASES.items())


def test_counts_come_from_answered_calls_and_survive_their_dict():
    records = [{"status": "ok", "model": "m", "system_fingerprint": "fp_1"},
               {"status": "ok", "model": "m", "system_fingerprint": "fp_2"},
               {"status": "ok", "model": None},
               {"status": "error", "model": None, "error": {"class": "APITimeoutError"}}]
    counts = ServedCounts.of_records(records)
    assert (counts.models, counts.fingerprints, counts.not_reported, counts.calls) == (
        Counter({"m": 2}), Counter({"fp_1": 1, "fp_2": 1}), 1, 3)
    assert ServedCounts.from_dict(counts.as_dict()) == counts
    assert counts.as_dict() == {"models": {"m": 2}, "system_fingerprints": {"fp_1": 1, "fp_2": 1},
                                "model_not_reported": 1}


def test_a_role_names_both_models_in_one_line_and_a_silent_server_is_a_caveat():
    mock = RoleServed("the actor", "mock-actor", ServedCounts(Counter({"mock-served-model": 12, "mock-actor": 1})))
    assert mock.mismatch() == ("the actor was declared 'mock-actor' but its server reported 'mock-served-model' for "
                               "12 of 13 replies")
    assert mock.caveat() is None and not mock.served_as_declared()
    silent = RoleServed("the judge", "gpt-4o-2024-08-06", ServedCounts(not_reported=4))
    assert silent.mismatch() is None
    assert silent.caveat() == ("served model not reported: 4 of 4 replies of the judge came from a server that named "
                               "no model, so nothing shows they came from 'gpt-4o-2024-08-06'")
    routed = RoleServed("the actor", "openai/gpt-4o-2024-08-06", ServedCounts(Counter({"gpt-4o-2024-08-06": 3})))
    assert routed.mismatch() is None and routed.served_as_declared()


def test_the_guard_keeps_a_run_to_the_served_model_of_its_first_reply():
    guard = ServedGuard("generate", ["openai/m-2024-01-01", None])
    guard.check("m-2024-01-01")  # the same model without the router's prefix
    guard.check(None)  # not reported: nothing to check
    with pytest.raises(ServedModelChanged) as exc:
        guard.check("other")
    message = str(exc.value)
    assert "\n" not in message and "'other'" in message and "'openai/m-2024-01-01'" in message
    assert "this reply was not recorded" in message
    fresh = ServedGuard("the actor role")
    fresh.check("a")
    with pytest.raises(ServedModelChanged, match="the actor role: the server now reports the model 'b'"):
        fresh.check("b")
