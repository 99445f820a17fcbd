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
