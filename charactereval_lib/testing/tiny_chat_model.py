"""A tiny randomly initialised Llama with a BPE tokenizer trained here and a chat template:
nothing downloaded. Shared by the hf backend tests, the real-server test and bench_ray.py (which
runs from a runtime install, without the tests' support code)."""

from __future__ import annotations

from pathlib import Path

import torch
import transformers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from charactereval_lib.charactereval.requests import make_requests
from charactereval_lib.testing.synthetic import synthetic_chat_data

# "</s>" first, so the end-of-sequence id is 0 (the silent model below relies on it).
SPECIALS = ["</s>", "<s>", "<pad>", "<|user|>", "<|assistant|>"]
TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}</s>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def build_tokenizer(path: Path) -> transformers.PreTrainedTokenizerFast:
    data = synthetic_chat_data(16)
    corpus = [str(p) for p in data.profiles.values()] + [m["content"] for r in make_requests(data.samples, data)
                                                            for m in r.messages]
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(corpus, trainers.BpeTrainer(vocab_size=400, special_tokens=SPECIALS,
                                                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tokenizer, bos_token="<s>", eos_token="</s>",
                                                pad_token="<pad>")
    fast.chat_template = TEMPLATE
    fast.save_pretrained(path)
    return fast


def build_model(path: Path, tokenizer, *, silent: bool = False, max_positions: int = 2048) -> None:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=max_positions, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )
    model = transformers.LlamaForCausalLM(config)
    if silent:
        # A zero final norm makes every logit 0, so greedy picks id 0, the end token, at once.
        with torch.no_grad():
            model.model.norm.weight.zero_()
    model.save_pretrained(path)
