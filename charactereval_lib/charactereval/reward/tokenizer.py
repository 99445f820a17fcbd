"""Protocol step S6 (tokenization): the reward model's tokenizer with ``sentencepiece`` only.

The official scorer calls ``tokenizer.encode(text, add_special_tokens=False)`` on Baichuan's slow
tokenizer under transformers 4.36.2, appends the eos id and keeps the last 4096 ids. What that
computes, reproduced here from the observable rules (not from its code):

1. The text is cut around every occurrence of a special literal (``<unk>``, ``<s>``, ``</s>``),
   leftmost first, dropping empty pieces, so two adjacent literals are direct neighbours.
2. Walking the pieces left to right, each piece that is (still) exactly a literal applies its
   AddedToken flags to its neighbours as they are *at that moment* (earlier steps may already
   have emptied or extended them): ``rstrip`` strips the whitespace that starts the right
   neighbour, ``lstrip`` the whitespace that ends the left one; with ``single_word``, a literal
   whose left neighbour is non-empty and does not end with an ASCII space is appended to that
   neighbour and stops being special; failing that, one whose right neighbour is non-empty and
   does not start with an ASCII space absorbs that neighbour and stops being special.
3. Every remaining non-empty piece that is a literal becomes its id; every other piece is
   encoded alone with ``encode(out_type=str)`` and mapped with ``piece_to_id`` (merges never cross
   a cut). The sentencepiece model's own options (byte fallback, no dummy prefix, identity
   normalization) apply through the library call; nothing is added or stripped here.

The flags come from the checkpoint's ``tokenizer_config.json`` and ``special_tokens_map.json``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sentencepiece as spm

from charactereval_lib.charactereval.protocol import RM_EOS_ID, RM_MAX_TOKENS
from charactereval_lib.charactereval.reward.errors import TokenizerError

TOKENIZER_MODEL = "tokenizer.model"
TOKENIZER_CONFIG = "tokenizer_config.json"
SPECIAL_TOKENS_MAP = "special_tokens_map.json"

# The order in which transformers registers special tokens; when two attributes name the same
# literal (Baichuan's pad_token is "</s>", like eos_token) the first one's flags win.
SPECIAL_ATTRIBUTES = (
    "bos_token",
    "eos_token",
    "unk_token",
    "sep_token",
    "pad_token",
    "cls_token",
    "mask_token",
)
# Baichuan's tokenizer class defaults when a file does not name the token at all.
DEFAULT_LITERALS = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}


@dataclass(frozen=True)
class SpecialLiteral:
    """A special token's text and the AddedToken flags that decide when it stays special."""

    content: str
    id: int
    single_word: bool = False
    lstrip: bool = False
    rstrip: bool = False


@dataclass(frozen=True)
class Segment:
    text: str
    special: bool


class RMTokenizer:
    """Sentencepiece model + special-literal rules; see the module docstring for the semantics."""

    def __init__(
        self,
        sp: spm.SentencePieceProcessor,
        literals: tuple[SpecialLiteral, ...],
        *,
        eos_id: int = RM_EOS_ID,
        max_tokens: int = RM_MAX_TOKENS,
        source: str = "",
    ) -> None:
        self.sp = sp
        self.literals = literals
        self.eos_id = eos_id
        self.max_tokens = max_tokens
        self.source = source
        self._by_content = {lit.content: lit for lit in literals}
        # Longest first so that, at one position, the longest literal wins (a trie match).
        alternatives = sorted((lit.content for lit in literals), key=len, reverse=True)
        self._pattern = re.compile("|".join(re.escape(a) for a in alternatives)) if alternatives else None

    @property
    def vocab_size(self) -> int:
        return self.sp.get_piece_size()

    def segments(self, text: str) -> list[Segment]:
        """Steps 1-2 of the module docstring: cut on literals, then apply their flags."""
        pieces = split_on_literals(text, self._pattern)
        for i, piece in enumerate(pieces):
            literal = self._by_content.get(piece)
            if literal is None:
                continue
            left = pieces[i - 1] if i > 0 else ""
            right = pieces[i + 1] if i + 1 < len(pieces) else ""
            # The single_word tests look at the neighbours as they were before stripping, and
            # gluing appends to the (stripped) left piece but takes the unstripped right one.
            if literal.rstrip and right:
                pieces[i + 1] = right.lstrip()
            if literal.lstrip and left:
                pieces[i - 1] = left.rstrip()
            # The test is on the ASCII space only; a newline or U+3000 does not count.
            if literal.single_word and left and not left.endswith(" "):
                pieces[i - 1] += piece
                pieces[i] = ""
            elif literal.single_word and right and not right.startswith(" "):
                pieces[i] = piece + right
                pieces[i + 1] = ""
        return [Segment(p, p in self._by_content) for p in pieces if p]

    def encode_ids(self, text: str) -> list[int]:
        """S6: ``tokenizer.encode(text, add_special_tokens=False)`` of the official scorer."""
        ids: list[int] = []
        for segment in self.segments(text):
            if segment.special:
                ids.append(self._by_content[segment.text].id)
                continue
            for piece in self.sp.encode(segment.text, out_type=str):
                # A piece spelled like a literal maps to the literal's id, as the official
                # added-token lookup does before falling back to the sentencepiece vocabulary.
                literal = self._by_content.get(piece)
                ids.append(literal.id if literal is not None else self.sp.piece_to_id(piece))
        return ids

    def rm_input_ids(self, text: str) -> tuple[list[int], bool]:
        """S6: ``encode_ids(text) + [eos]``, then the LAST ``max_tokens`` ids (left truncation,
        so the final eos always stays). Returns the ids and whether anything was cut."""
        return truncate_left(self.encode_ids(text) + [self.eos_id], self.max_tokens)


def truncate_left(ids: list[int], max_tokens: int) -> tuple[list[int], bool]:
    if len(ids) > max_tokens:
        return ids[-max_tokens:], True
    return ids, False


def split_on_literals(text: str, pattern: re.Pattern[str] | None) -> list[str]:
    """Cut ``text`` around each literal occurrence (leftmost, non-overlapping), keeping the
    literals as their own pieces and dropping empty pieces."""
    if pattern is None:
        return [text] if text else []
    pieces: list[str] = []
    start = 0
    for match in pattern.finditer(text):
        if match.start() > start:
            pieces.append(text[start : match.start()])
        pieces.append(match.group())
        start = match.end()
    if start < len(text):
        pieces.append(text[start:])
    return pieces


def _read_json(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise TokenizerError(f"{path}: malformed JSON at line {exc.lineno} column {exc.colno}") from None
    if not isinstance(obj, dict):
        raise TokenizerError(f"{path}: expected a JSON object, got {type(obj).__name__}")
    return obj


def _literal_spec(value: Any, where: str) -> tuple[str, dict[str, bool]] | None:
    """(content, flags) from a special-token entry: a plain string has no flags set (that is
    what Baichuan's tokenizer makes of one); an AddedToken dict carries its own."""
    if value is None:
        return None
    if isinstance(value, str):
        return value, {}
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        flags = {k: bool(value.get(k, False)) for k in ("single_word", "lstrip", "rstrip")}
        return value["content"], flags
    raise TokenizerError(f"{where}: not a token string or AddedToken object: {value!r}")


def read_literals(model_dir: Path, sp: spm.SentencePieceProcessor) -> tuple[SpecialLiteral, ...]:
    """The special literals and their flags. ``special_tokens_map.json`` overrides
    ``tokenizer_config.json`` key by key (as transformers loads them); ids are the literals'
    sentencepiece ids."""
    config = _read_json(model_dir / TOKENIZER_CONFIG)
    special_map = _read_json(model_dir / SPECIAL_TOKENS_MAP)
    specs: list[tuple[str, dict[str, bool], str]] = []
    for attr in SPECIAL_ATTRIBUTES:
        if attr in special_map:
            value, where = special_map[attr], f"{model_dir / SPECIAL_TOKENS_MAP}: {attr}"
        elif attr in config:
            value, where = config[attr], f"{model_dir / TOKENIZER_CONFIG}: {attr}"
        else:
            value, where = DEFAULT_LITERALS.get(attr), f"{model_dir}: default {attr}"
        spec = _literal_spec(value, where)
        if spec is not None:
            specs.append((*spec, where))
    extra = special_map.get("additional_special_tokens", config.get("additional_special_tokens")) or []
    for value in extra:
        spec = _literal_spec(value, f"{model_dir}: additional_special_tokens")
        if spec is not None:
            specs.append((*spec, f"{model_dir}: additional_special_tokens"))
    literals: dict[str, SpecialLiteral] = {}
    # Newer tokenizer files list their added tokens with ids and flags; transformers registers
    # those first, so their flags win over the special-token attributes for the same text.
    decoder = config.get("added_tokens_decoder") or {}
    if not isinstance(decoder, dict):
        raise TokenizerError(f"{model_dir / TOKENIZER_CONFIG}: added_tokens_decoder is not an object")
    for key in sorted(decoder, key=lambda k: int(k)):
        where = f"{model_dir / TOKENIZER_CONFIG}: added_tokens_decoder[{key}]"
        spec = _literal_spec(decoder[key], where)
        if spec is None or not spec[0]:
            continue
        if sp.piece_to_id(spec[0]) != int(key):
            raise TokenizerError(f"{where}: {spec[0]!r} has id {sp.piece_to_id(spec[0])} in {TOKENIZER_MODEL}, not {key}")
        literals.setdefault(spec[0], SpecialLiteral(spec[0], int(key), **spec[1]))
    for content, flags, where in specs:
        if content in literals or not content:
            continue
        piece_id = sp.piece_to_id(content)
        # piece_to_id answers the unk id for text it does not know; only "<unk>" itself may.
        if piece_id == sp.unk_id() and content != sp.id_to_piece(sp.unk_id()):
            raise TokenizerError(f"{where}: special token {content!r} is not in {TOKENIZER_MODEL}")
        literals[content] = SpecialLiteral(content, piece_id, **flags)
    return tuple(literals.values())


def load_tokenizer(model_dir: str | Path, *, max_tokens: int = RM_MAX_TOKENS) -> RMTokenizer:
    """The reward model's tokenizer from a checkpoint directory (``tokenizer.model`` plus the
    two JSON files that carry the special tokens' flags)."""
    model_dir = Path(model_dir)
    model_path = model_dir / TOKENIZER_MODEL
    if not model_path.exists():
        raise TokenizerError(f"{model_path}: missing")
    sp = spm.SentencePieceProcessor()
    try:
        sp.Load(str(model_path))
    except (OSError, RuntimeError) as exc:
        raise TokenizerError(f"{model_path}: not a sentencepiece model ({exc})") from None
    literals = read_literals(model_dir, sp)
    eos = next((lit for lit in literals if lit.content == "</s>"), None)
    if eos is not None and eos.id != RM_EOS_ID:
        raise TokenizerError(f"{model_path}: '</s>' has id {eos.id}, the protocol appends id {RM_EOS_ID}")
    return RMTokenizer(sp, literals, eos_id=RM_EOS_ID, max_tokens=max_tokens, source=str(model_dir))
