"""Conformance on the full official data: the seeds' facts and S3 rules for all 4,564 samples."""

from __future__ import annotations

import pytest

from charactereval_lib.charactereval.doctor import run_checks
from charactereval_lib.charactereval.prompts import build_messages

INSTRUCTION_HEAD = "\n现在请你扮演一个角色扮演专家。请你根据上述信息扮演"


@pytest.fixture(scope="module")
def checks(official_data):
    return {c.name: c for c in run_checks(official_data)}


@pytest.mark.parametrize(
    "name, expected",
    [
        ("test samples", 4564),
        ("unique sample ids", 4564),
        ("test ids without metrics", 33),
        ("id2metric ids that are not test ids", 0),
        ("(id, metric) rows", 8032),
        ("rows per metric", {"Emp": 744, "ED": 737, "CS": 734, "PU": 724, "HL": 724, "PB": 720, "KA": 718,
                             "Cons": 715, "KE": 714, "Coh": 708, "KH": 486, "Flu": 308}),
        ("samples where the role speaks first", 2077),
        ("messages per request (min, max)", (3, 51)),
        ("profile repr SHA-256 (S7)", "198d40264a5109b1ed974da4274fa5d1bc711f01df4d5c62c5af53bb14d370c2"),
        ("protocol assertion violations", 0),
        ("non-role lines dropped by S3", 0),
        # Seed 000 §2 and S7; seed 001 rows 1, 3, 6 and 7.
        ("metrics per scored id (ids with 1, 2, ... metrics)",
         {1: 2801, 2: 962, 3: 346, 4: 189, 5: 89, 6: 52, 7: 37, 8: 22, 9: 13, 10: 16, 11: 4}),
        ("ids with a metric listed twice", 0),
        ("single-line contexts (3-message requests)", 529),
        ("lines per context (fewest, most, mean)", (1, 50, 6.87)),
        ("lines with several full-width colons", 174),
        ("longest context (characters)", 1684),
        ("lines without a full-width colon, empty lines, lines with nothing after it", (0, 0, 0)),
        ("contexts with a carriage return or a tab", 0),
        ("contexts ending in a space (kept in the last message)", 3),
        ("contexts holding a special-token literal or template tag", 0),
        ("other speakers with brackets in their name", 1),
        ("samples where another speaker's name is part of the role's name", 2),
        ("novels", 24),
        ("characters used (of the profiles)", (77, 78)),
        ("profile values by type", {"str": 1130, "list": 163, "dict": 87}),
        ("profile strings repr puts in double quotes (holding ' only)", 9),
        ("profile strings repr escapes (backslash, both quotes, unprintable)", 0),
        ("profile repr length (shortest, longest)", (175, 2579)),
    ],
)
def test_doctor_fact(checks, name, expected):
    # The literal here is the seeds' number, so the test fails if doctor's constant ever drifts.
    assert checks[name].actual == expected
    assert checks[name].ok


def reconstruct_context(messages, role, profile):
    """Rebuild the context from the messages by the rules of S3, independently of the builder."""
    first, ack = messages[0]["content"], messages[1]["content"]
    assert first == str(profile) + INSTRUCTION_HEAD + role + "进行对话。\n"
    lines = []
    plain_ack = "好的！现在我来扮演" + role + "。"
    if ack != plain_ack:
        assert ack.startswith(plain_ack + "我首先发话：")
        lines.append(role + "：" + ack[len(plain_ack + "我首先发话："):])
    for user, assistant in zip(messages[2:-1:2], messages[3:-1:2]):
        assert assistant["content"].startswith(role + "：")
        assert not user["content"].startswith(role + "：")
        lines += [user["content"], assistant["content"]]
    return "\n".join(lines + [messages[-1]["content"]])


def test_every_request_follows_s3(official_data):
    role_first = 0
    for sample in official_data.samples:
        profile = official_data.profiles[sample.role]
        messages = build_messages(sample.id, sample.role, sample.context, profile).messages
        roles = [m["role"] for m in messages]
        assert roles == ["user", "assistant"] * (len(roles) // 2) + ["user"], sample.id
        assert all(set(m) == {"role", "content"} for m in messages)
        assert reconstruct_context(messages, sample.role, profile) == sample.context, sample.id
        role_first += messages[1]["content"] != "好的！现在我来扮演" + sample.role + "。"
    assert role_first == 2077


def test_every_role_has_a_profile_and_one_is_unused(official_data):
    used = {s.role for s in official_data.samples}
    assert len(official_data.profiles) == 78
    assert len(used) == 77 and used < set(official_data.profiles)
