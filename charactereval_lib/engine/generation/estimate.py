"""A rough token and cost estimate before a paid run (``generate --dry-run``).

Character-based, no tokenizer: each CJK character counts as one token and every four other
characters as one, plus a few tokens of chat formatting per message. Real tokenizers differ
(roughly 0.7-1.5 tokens per Chinese character), so treat the figures as ±50%.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from charactereval_lib.engine.generation.base import GenerationRequest

# Chat formatting tokens per message and per request (role markers, separators).
PER_MESSAGE_TOKENS = 4
PER_REQUEST_TOKENS = 3
# Replies are usually one role-play line; only the upper bound uses max_tokens.
TYPICAL_OUTPUT_TOKENS = 100


def _is_cjk(char: str) -> bool:
    code = ord(char)
    return (
        0x3000 <= code <= 0x30FF  # CJK punctuation, kana
        or 0x3400 <= code <= 0x4DBF  # extension A
        or 0x4E00 <= code <= 0x9FFF  # unified ideographs
        or 0xF900 <= code <= 0xFAFF  # compatibility ideographs
        or 0xFF00 <= code <= 0xFFEF  # full-width forms (the ： of every line)
        or 0x20000 <= code <= 0x2FA1F  # supplementary ideographs
    )


def estimate_tokens(text: str) -> int:
    cjk = sum(1 for char in text if _is_cjk(char))
    return cjk + math.ceil((len(text) - cjk) / 4)


def estimate_request_tokens(messages: Iterable[dict[str, str]]) -> int:
    return PER_REQUEST_TOKENS + sum(PER_MESSAGE_TOKENS + estimate_tokens(m["content"]) for m in messages)


@dataclass(frozen=True)
class CostEstimate:
    requests: int
    input_tokens: int
    output_tokens_typical: int
    output_tokens_max: int
    price_in: float | None
    price_out: float | None

    def cost(self, output_tokens: int) -> float | None:
        if self.price_in is None or self.price_out is None:
            return None
        return (self.input_tokens * self.price_in + output_tokens * self.price_out) / 1e6

    def lines(self) -> list[str]:
        out = [
            f"estimate (character-based, no tokenizer, about ±50%) for the {self.requests} request(s) to send: "
            f"~{self.input_tokens:,} input tokens, ~{self.output_tokens_typical:,} output tokens at "
            f"{TYPICAL_OUTPUT_TOKENS} per reply (at most {self.output_tokens_max:,} at max_tokens)"
        ]
        typical, most = self.cost(self.output_tokens_typical), self.cost(self.output_tokens_max)
        if typical is not None and most is not None:
            out.append(
                f"estimated cost: ~${typical:,.2f} (at most ${most:,.2f}) at ${self.price_in:g}/M input and "
                f"${self.price_out:g}/M output tokens"
            )
        else:
            out.append("pass --price-in and --price-out (USD per million tokens) for a cost estimate")
        return out


def estimate_cost(
    requests: Sequence[GenerationRequest], max_tokens: int, *, price_in: float | None = None, price_out: float | None = None
) -> CostEstimate:
    return CostEstimate(
        requests=len(requests),
        input_tokens=sum(estimate_request_tokens(r.messages) for r in requests),
        output_tokens_typical=len(requests) * min(TYPICAL_OUTPUT_TOKENS, max_tokens),
        output_tokens_max=len(requests) * max_tokens,
        price_in=price_in,
        price_out=price_out,
    )
