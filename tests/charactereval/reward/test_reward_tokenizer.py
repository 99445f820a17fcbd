"""S6 tokenization on a sentencepiece model trained by the tests (synthetic text): the
special-literal rules of the transformers 4.36 slow tokenizer, flags read from the files, and
eos + left truncation."""

from __future__ import annotations

import json
import shutil

import pytest
import sentencepiece as spm
from hypothesis import given, settings
from hypothesis import strategies as st

from _reward_support import trained_tokenizer_dir
from charactereval_lib.charactereval.reward.errors import TokenizerError
from charactereval_lib.charactereval.reward.tokenizer import Segment, load_tokenizer


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(trained_tokenizer_dir())


@pytest.fixture(scope="module")
def sp(tok) -> spm.SentencePieceProcessor:
    return tok.sp


def plain(sp: spm.SentencePieceProcessor, text: str) -> list[int]:
    """What a piece of text tokenizes to when no literal is special in it."""
    return [sp.piece_to_id(p) for p in sp.encode(text, out_type=str)]


def test_trained_model_has_the_baichuan_options(sp):
    assert [sp.id_to_piece(i) for i in range(3)] == ["<unk>", "<s>", "</s>"]
    assert sp.pad_id() == -1
    # No dummy prefix, whitespace kept as is, bytes for unseen characters.
    assert sp.encode("x", out_type=str)[0] in ("x", "<0x78>")
    assert plain(sp, "  a  ")[:2] == plain(sp, " ") * 2
    assert all(sp.id_to_piece(i).startswith("<0x") for i in plain(sp, "\U0002a6a5"))


@pytest.mark.parametrize(
    "text, segments",
    [
        # Space on both sides: special.
        ("a </s> b", [("a ", False), ("</s>", True), (" b", False)]),
        # Glued on the left: appended to the left text, tokenized as characters.
        ("a</s> b", [("a</s>", False), (" b", False)]),
        # Glued on the right only: absorbs the right text.
        ("a </s>b", [("a ", False), ("</s>b", False)]),
        # At the edges, an empty neighbour does not count.
        ("</s>", [("</s>", True)]),
        ("</s> x", [("</s>", True), (" x", False)]),
        ("</s>x", [("</s>x", False)]),
        ("x</s>", [("x</s>", False)]),
        # Consecutive literals: the first glues to its left, the second then has an empty left
        # neighbour and a spaced right one, so it stays special.
        ("a</s></s> b", [("a</s>", False), ("</s>", True), (" b", False)]),
        # The first glues to the second (right neighbour), which is then no longer a literal.
        ("x <s></s> y", [("x ", False), ("<s></s>", False), (" y", False)]),
        ("<s> <s>", [("<s>", True), (" ", False), ("<s>", True)]),
        # <unk> next to CJK text is glued; with spaces it stays special.
        ("长<unk>", [("长<unk>", False)]),
        (" <unk> 长", [(" ", False), ("<unk>", True), (" 长", False)]),
        # Only the ASCII space counts: newline and U+3000 glue.
        ("a\n</s>", [("a\n</s>", False)]),
        ("a\u3000</s> b", [("a\u3000</s>", False), (" b", False)]),
        # The CharacterEval markers are plain text.
        ("<RoleInfo>\n\n", [("<RoleInfo>\n\n", False)]),
        ("", []),
    ],
)
def test_special_literal_segmentation(tok, sp, text, segments):
    assert tok.segments(text) == [Segment(t, s) for t, s in segments]
    ids_by_literal = {"<unk>": 0, "<s>": 1, "</s>": 2}
    expected = []
    for t, special in segments:
        expected += [ids_by_literal[t]] if special else plain(sp, t)
    assert tok.encode_ids(text) == expected


def test_merges_never_cross_a_special_literal(tok, sp):
    text = "一 </s> 一"
    assert tok.encode_ids(text) == plain(sp, "一 ") + [2] + plain(sp, " 一")


def _copy_with_flags(tmp_path, **flags):
    out = tmp_path / "tok"
    shutil.copytree(trained_tokenizer_dir(), out)
    for name in ("special_tokens_map.json", "tokenizer_config.json"):
        path = out / name
        raw = json.loads(path.read_text(encoding="utf-8"))
        for key in ("bos_token", "eos_token", "unk_token"):
            if isinstance(raw.get(key), dict):
                raw[key].update(flags)
        path.write_text(json.dumps(raw), encoding="utf-8")
    return out


def test_flags_are_read_from_the_checkpoint_files(tmp_path, sp):
    """Without single_word a glued literal stays special; lstrip/rstrip eat whitespace."""
    loose = load_tokenizer(_copy_with_flags(tmp_path / "a", single_word=False))
    assert loose.encode_ids("a</s>b") == plain(sp, "a") + [2] + plain(sp, "b")
    stripping = load_tokenizer(_copy_with_flags(tmp_path / "b", single_word=False, lstrip=True, rstrip=True))
    assert stripping.encode_ids("a  </s>\n b") == plain(sp, "a") + [2] + plain(sp, "b")


def test_special_tokens_map_overrides_tokenizer_config(tmp_path, sp):
    out = _copy_with_flags(tmp_path, single_word=True)
    raw = json.loads((out / "special_tokens_map.json").read_text(encoding="utf-8"))
    raw["eos_token"]["single_word"] = False
    (out / "special_tokens_map.json").write_text(json.dumps(raw), encoding="utf-8")
    tok = load_tokenizer(out)
    assert tok.encode_ids("a</s>") == plain(sp, "a") + [2]
    assert tok.encode_ids("a<s>") == plain(sp, "a<s>")


def test_added_tokens_decoder_flags_win(tmp_path, sp):
    out = _copy_with_flags(tmp_path, single_word=True)
    path = out / "tokenizer_config.json"
    raw = json.loads(path.read_text(encoding="utf-8"))
    raw["added_tokens_decoder"] = {"2": {"content": "</s>", "single_word": False, "lstrip": False, "rstrip": False}}
    path.write_text(json.dumps(raw), encoding="utf-8")
    tok = load_tokenizer(out)
    assert tok.encode_ids("a</s>") == plain(sp, "a") + [2]  # no longer single_word
    assert tok.encode_ids("a<s>") == plain(sp, "a<s>")  # the others keep their flags
    raw["added_tokens_decoder"] = {"5": {"content": "</s>"}}
    path.write_text(json.dumps(raw), encoding="utf-8")
    with pytest.raises(TokenizerError, match=r"'</s>' has id 2 in tokenizer.model, not 5"):
        load_tokenizer(out)


def test_pad_token_string_does_not_override_eos_flags(tok):
    # Baichuan's special_tokens_map has pad_token "</s>" as a bare string (no flags); eos comes
    # first, so "</s>" keeps single_word.
    assert {lit.content: lit.single_word for lit in tok.literals} == {"<s>": True, "</s>": True, "<unk>": True}


def test_rm_input_ids_appends_eos_and_truncates_on_the_left(tok):
    text = "一二三四" * 400
    full = tok.encode_ids(text)
    short = load_tokenizer(trained_tokenizer_dir(), max_tokens=50)
    ids, truncated = short.rm_input_ids(text)
    assert truncated and len(ids) == 50 and ids[-1] == 2
    assert ids == (full + [2])[-50:]
    ids, truncated = tok.rm_input_ids("一二")
    assert not truncated and ids == tok.encode_ids("一二") + [2]
    # Exactly at the limit nothing is cut.
    exact = load_tokenizer(trained_tokenizer_dir(), max_tokens=len(full) + 1)
    assert exact.rm_input_ids(text) == (full + [2], False)


def reference_segments(text: str) -> list[tuple[str, bool]]:
    """An independent, deliberately plain restatement of the rule for single_word literals
    without strip flags: cut with re.split, drop empties, then walk left to right."""
    import re

    parts = [p for p in re.split(r"(<unk>|<s>|</s>)", text) if p]
    literal = [p in ("<unk>", "<s>", "</s>") for p in parts]
    for i in range(len(parts)):
        if not literal[i] or parts[i] not in ("<unk>", "<s>", "</s>"):
            continue
        if i > 0 and parts[i - 1] != "" and parts[i - 1][-1] != " ":
            parts[i - 1] = parts[i - 1] + parts[i]
            literal[i - 1] = False
            parts[i] = ""
            literal[i] = False
        elif i + 1 < len(parts) and parts[i + 1] != "" and parts[i + 1][0] != " ":
            parts[i] = parts[i] + parts[i + 1]
            literal[i] = False
            parts[i + 1] = ""
            literal[i + 1] = False
    return [(p, f) for p, f in zip(parts, literal) if p]


_PIECES = list("一二三abc <>/s\n\u3000x") + ["</s>", "<s>", "<unk>", " </s> ", "<", "s>"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(_PIECES), max_size=25).map("".join))
def test_segments_agree_with_a_plain_restatement(tok, sp, text):
    segments = tok.segments(text)
    assert [(s.text, s.special) for s in segments] == reference_segments(text)
    assert "".join(s.text for s in segments) == text
    expected = []
    for seg in segments:
        expected += [{"<unk>": 0, "<s>": 1, "</s>": 2}[seg.text]] if seg.special else plain(sp, seg.text)
    assert tok.encode_ids(text) == expected


def test_text_without_literals_is_plain_sentencepiece(tok, sp):
    text = "角色\uff1a（笑）好。  it's 2024\n\n<Dimension>\n\n共情度"
    assert tok.encode_ids(text) == sp.encode(text)


def test_errors_name_the_file(tmp_path):
    with pytest.raises(TokenizerError, match="tokenizer.model: missing"):
        load_tokenizer(tmp_path)
    (tmp_path / "tokenizer.model").write_bytes(b"not a model")
    with pytest.raises(TokenizerError, match="not a sentencepiece model"):
        load_tokenizer(tmp_path)
    out = tmp_path / "t2"
    shutil.copytree(trained_tokenizer_dir(), out)
    (out / "special_tokens_map.json").write_text("{broken", encoding="utf-8")
    with pytest.raises(TokenizerError, match="special_tokens_map.json: malformed JSON"):
        load_tokenizer(out)
