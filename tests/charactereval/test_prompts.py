"""S2/S3/S7 on synthetic contexts: every edge case the seeds name, plus properties."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from charactereval_lib.charactereval.prompts import ProtocolError, Turn, build_messages, count_dropped_lines, parse_context, profile_text, system_text

PROFILE = {"姓名": "甲", "口头禅": "it's", "朋友": ["乙", {"丙": "邻居"}]}
INSTRUCTION = "\n现在请你扮演一个角色扮演专家。请你根据上述信息扮演甲进行对话。\n"


def contents(built):
    return [(m["role"], m["content"]) for m in built.messages]


# --- S2 ------------------------------------------------------------------------------------


def test_parse_splits_on_first_fullwidth_colon_only():
    assert parse_context("乙：时间：三点：整") == [Turn("乙", "时间：三点：整")]


def test_parse_ignores_ascii_colon_and_line_without_colon():
    assert parse_context("a: b\n无冒号") == [Turn("a: b", ""), Turn("无冒号", "")]


def test_parse_keeps_spaces_and_carriage_returns():
    assert parse_context(" 乙 ：  你好 \r\n甲：\r") == [Turn(" 乙 ", "  你好 \r"), Turn("甲", "\r")]


def test_parse_splits_on_newline_only():
    # \r, \u2028 and friends are not line breaks for the protocol (no splitlines()).
    assert parse_context("乙：一\r二\u2028三") == [Turn("乙", "一\r二\u2028三")]


@given(st.lists(st.tuples(st.text(alphabet="甲乙 a\r：:", max_size=6), st.text(alphabet="你好：\r x", max_size=8)), min_size=1, max_size=8))
def test_parse_round_trips_lines_with_a_colon(pairs):
    lines = [speaker.replace("：", "") + "：" + value for speaker, value in pairs]
    turns = parse_context("\n".join(lines))
    assert len(turns) == len(lines)
    assert [t.speaker + "：" + t.value for t in turns] == lines


# --- S7 ------------------------------------------------------------------------------------


def test_profile_text_is_python_repr_with_quote_rules():
    text = profile_text({"a": "it's", "b": 'say "hi"', "c": "both ' and \"", "d": ["x", {"e": 1}]})
    assert text == """{'a': "it's", 'b': 'say "hi"', 'c': 'both \\' and "', 'd': ['x', {'e': 1}]}"""


def test_system_text_is_profile_then_instruction_with_trailing_newline():
    assert system_text("甲", PROFILE) == str(PROFILE) + INSTRUCTION


# --- S3 ------------------------------------------------------------------------------------


def test_non_role_speaks_first():
    built = build_messages(7, "甲", "乙：你好\n甲：嗯\n乙：再见", PROFILE)
    assert contents(built) == [
        ("user", str(PROFILE) + INSTRUCTION),
        ("assistant", "好的！现在我来扮演甲。"),
        ("user", "乙：你好"),
        ("assistant", "甲：嗯"),
        ("user", "乙：再见"),
    ]
    assert built.dropped_lines == 0


def test_role_speaks_first_goes_into_the_acknowledgement_without_prefix():
    built = build_messages(7, "甲", "甲：我先说：真的\n乙：请讲", PROFILE)
    assert contents(built)[1:] == [
        ("assistant", "好的！现在我来扮演甲。我首先发话：我先说：真的"),
        ("user", "乙：请讲"),
    ]


def test_single_line_context_gives_three_messages():
    built = build_messages(7, "甲", "乙：只有一句", PROFILE)
    assert [m["role"] for m in built.messages] == ["user", "assistant", "user"]
    assert built.messages[-1]["content"] == "乙：只有一句"


def test_trailing_spaces_and_carriage_returns_are_kept():
    built = build_messages(7, "甲", "乙：你好\r\n甲：嗯 \n乙：再见  ", PROFILE)
    assert contents(built)[2:] == [("user", "乙：你好\r"), ("assistant", "甲：嗯 "), ("user", "乙：再见  ")]


def test_several_non_role_speakers_keep_their_own_prefixes():
    built = build_messages(7, "甲", "乙：一\n甲：二\n丙（笑）：三\n甲：四\n丁：五", PROFILE)
    assert contents(built)[2:] == [
        ("user", "乙：一"),
        ("assistant", "甲：二"),
        ("user", "丙（笑）：三"),
        ("assistant", "甲：四"),
        ("user", "丁：五"),
    ]


def test_non_role_name_that_is_a_substring_of_the_role_is_not_the_role():
    built = build_messages(7, "史强", "强：喂\n史强：嗯\n强：走", {"姓名": "史强"})
    assert [m["role"] for m in built.messages] == ["user", "assistant", "user", "assistant", "user"]
    assert built.messages[2]["content"] == "强：喂"


def test_line_without_colon_becomes_speaker_with_empty_value():
    built = build_messages(7, "甲", "旁白没有冒号\n甲：嗯\n乙：好", PROFILE)
    assert built.messages[2]["content"] == "旁白没有冒号："


def test_consecutive_non_role_lines_drop_the_earlier_as_official():
    built = build_messages(7, "甲", "乙：一\n丙：二\n甲：三\n乙：四\n丙：五", PROFILE)
    assert contents(built)[2:] == [("user", "丙：二"), ("assistant", "甲：三"), ("user", "丙：五")]
    assert built.dropped_lines == 2


def test_role_speaking_twice_in_a_row_is_an_error_naming_the_sample():
    with pytest.raises(ProtocolError, match=r"sample 42: role '甲' speaks twice in a row \(context lines 2 and 3\)"):
        build_messages(42, "甲", "乙：一\n甲：二\n甲：三\n乙：四", PROFILE)


def test_role_speaking_first_then_again_is_an_error():
    with pytest.raises(ProtocolError, match="sample 5: role '甲' speaks twice in a row"):
        build_messages(5, "甲", "甲：一\n甲：二\n乙：三", PROFILE)


def test_role_speaking_last_is_an_error_naming_the_sample():
    with pytest.raises(ProtocolError, match=r"sample 9: the last context line \(line 4\) is spoken by the role"):
        build_messages(9, "甲", "乙：一\n甲：二\n乙：三\n甲：四", PROFILE)


def test_single_line_spoken_by_role_is_an_error():
    with pytest.raises(ProtocolError, match="sample 3: the last context line"):
        build_messages(3, "甲", "甲：只有我", PROFILE)


def test_role_name_with_braces_is_inserted_verbatim():
    built = build_messages(1, "{x}", "乙：一", {})
    assert built.messages[0]["content"] == "{}\n现在请你扮演一个角色扮演专家。请你根据上述信息扮演{x}进行对话。\n"
    assert built.messages[1]["content"] == "好的！现在我来扮演{x}。"


speaker = st.sampled_from(["甲", "乙", "丙"])


@given(st.lists(st.tuples(speaker, st.text(alphabet="好的 \r：", max_size=4)), min_size=1, max_size=12))
def test_messages_alternate_and_end_with_user_whenever_valid(turns):
    context = "\n".join(s + "：" + v for s, v in turns)
    try:
        built = build_messages(1, "甲", context, PROFILE)
    except ProtocolError:
        speakers = [s for s, _ in turns]
        assert speakers[-1] == "甲" or any(a == b == "甲" for a, b in zip(speakers, speakers[1:]))
        return
    roles = [m["role"] for m in built.messages]
    assert roles == ["user", "assistant"] * (len(roles) // 2) + ["user"]
    role_lines = [v for s, v in turns[1:] if s == "甲"]
    assert [m["content"] for m in built.messages[3::2]] == ["甲：" + v for v in role_lines]
    assert built.dropped_lines == count_dropped_lines(parse_context(context), "甲")
    # Every line is either sent or counted as dropped.
    sent_lines = len(role_lines) * 2 + 1 + (1 if turns[0][0] == "甲" else 0)
    assert sent_lines + built.dropped_lines == len(turns)
