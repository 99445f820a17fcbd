"""Prompt length against the model's context window, checked before a request is sent.

A prompt that cannot fit fails the same way on every attempt (a server answers 400 or 500, a
local model crashes inside its position embedding), so it is recorded at once as its own error
class, ``PromptTooLong``, with ``attempts`` 0: it was never sent. The rule is the one OpenAI and
vLLM apply: prompt tokens + ``max_tokens`` must not exceed the context. Tokens are counted with
the model's own tokenizer and chat template, exactly as the hf backend builds its input.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from charactereval_lib.engine.generation.base import ConfigError, GenerationResult, error_result

PROMPT_TOO_LONG = "PromptTooLong"

# Where model configs keep their number of positions (Llama/Qwen, GPT-2, ChatGLM, others).
_CONFIG_FIELDS = ("max_position_embeddings", "n_positions", "seq_length", "max_sequence_length")


def chat_prompt_ids(tokenizer: Any, messages: list[dict[str, str]]) -> list[int]:
    """The token ids a chat model sees for ``messages``: its chat template with the generation
    prompt. The template already wrote any BOS it wants, so no special tokens are added."""
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def config_context(config: Any) -> tuple[int | None, str | None]:
    """The model's number of positions from its config, and the field it came from."""
    for name in _CONFIG_FIELDS:
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value, name
    return None, None


@dataclass(frozen=True)
class ContextWindow:
    max_context: int
    max_tokens: int
    # Where max_context came from, for the error message (e.g. "--max-context").
    source: str

    def __post_init__(self) -> None:
        if self.max_context < 1:
            raise ConfigError(f"max_context must be at least 1 token, got {self.max_context}")

    def reject(self, request_id: int, sha: str, prompt_tokens: int) -> GenerationResult | None:
        """A PromptTooLong error result when the prompt and max_tokens do not fit, else None."""
        if prompt_tokens + self.max_tokens <= self.max_context:
            return None
        message = (f"prompt of {prompt_tokens} tokens + max_tokens {self.max_tokens} > context of "
                   f"{self.max_context} tokens ({self.source}); not generated")
        return error_result(request_id, sha, PROMPT_TOO_LONG, message, attempts=0,
                            details={"prompt_tokens": prompt_tokens, "max_tokens": self.max_tokens,
                                     "max_context": self.max_context})
