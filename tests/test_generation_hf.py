"""The Hugging Face backend on a tiny randomly initialised Llama with a BPE tokenizer and a chat
template built here (nothing downloaded), through the engine."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: E402

from charactereval_lib.engine import runs  # noqa: E402
from charactereval_lib.engine.generation.backends import BackendOptions, make_backend  # noqa: E402
from charactereval_lib.charactereval.requests import generation_task, make_requests  # noqa: E402
from charactereval_lib.engine.generation.base import DecodingParams  # noqa: E402
from charactereval_lib.engine.generation.engine import run_generation  # noqa: E402
from tests.generation_support import expected_sha, synthetic_data  # noqa: E402

# "</s>" first, so the end-of-sequence id is 0 (the silent model below relies on it).
SPECIALS = ["</s>", "<s>", "<pad>", "<|user|>", "<|assistant|>"]
TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}</s>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
MAX_TOKENS = 6


def build_tokenizer(path: Path) -> transformers.PreTrainedTokenizerFast:
    data = synthetic_data(16)
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


def build_model(path: Path, tokenizer, *, silent: bool = False) -> None:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=2048, bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )
    model = transformers.LlamaForCausalLM(config)
    if silent:
        # A zero final norm makes every logit 0, so greedy picks id 0, the end token, at once.
        with torch.no_grad():
            model.model.norm.weight.zero_()
    model.save_pretrained(path)


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("tiny-llama")
    tokenizer = build_tokenizer(root / "random")
    assert tokenizer.eos_token_id == 0
    build_model(root / "random", tokenizer)
    tokenizer.save_pretrained(root / "silent")
    build_model(root / "silent", tokenizer, silent=True)
    return {"random": root / "random", "silent": root / "silent"}


def generate(model_dir: Path, run: Path, data, *, batch_size: int, params: DecodingParams | None = None):
    params = params or DecodingParams.resolve(max_tokens=MAX_TOKENS)
    backend = make_backend("hf", str(model_dir), params, BackendOptions(batch_size=batch_size, dtype="float32"))
    summary = run_generation(run, make_requests(data.samples, data), backend, generation_task(data), progress=False)
    latest = runs.latest_by_key(runs.read_jsonl(run / runs.GENERATIONS).records, "id")
    return backend, summary, {key[0]: record for key, record in latest.items()}


def test_prompt_is_the_chat_template_on_the_s3_messages_without_a_system_message(model_dirs):
    data = synthetic_data(2)
    backend = make_backend("hf", str(model_dirs["random"]), DecodingParams.resolve(max_tokens=MAX_TOKENS))
    request = make_requests(data.samples, data)[1]
    text = backend.tokenizer.decode(backend.prompt_ids(request))
    expected = "<s>" + "".join(f"<|{m['role']}|>{m['content']}</s>" for m in request.messages) + "<|assistant|>"
    assert text == expected
    assert "system" not in text and request.messages[0]["role"] == "user"


def test_batched_left_padded_greedy_equals_one_at_a_time(model_dirs, tmp_path):
    data = synthetic_data(7)  # prompts of four different lengths
    backend, summary, batched = generate(model_dirs["random"], tmp_path / "batched", data, batch_size=3)
    _, _, single = generate(model_dirs["random"], tmp_path / "single", data, batch_size=1)
    assert summary.ok == 7 and not summary.errors
    assert {i: r["model_output"] for i, r in batched.items()} == {i: r["model_output"] for i, r in single.items()}
    shas = expected_sha(data, str(model_dirs["random"]), DecodingParams.resolve(max_tokens=MAX_TOKENS))
    requests = {r.id: r for r in make_requests(data.samples, data)}
    for sample_id, record in batched.items():
        assert record["status"] == "ok" and record["request_sha256"] == shas[sample_id]
        assert record["usage"]["prompt_tokens"] == len(backend.prompt_ids(requests[sample_id]))
        # A random model rarely ends on its own: either it stopped or it used every token.
        finished = record["finish_reason"]
        assert (finished, record["usage"]["completion_tokens"] == MAX_TOKENS) in {("length", True), ("stop", False),
                                                                                 ("stop", True)}
        assert record["model"] == str(model_dirs["random"])
    # Length-sorted batches: the longest prompts share the first batch.
    assert sorted(r["batch_size"] for r in batched.values()) == [1, 3, 3, 3, 3, 3, 3]
    generation = runs.load_manifest(tmp_path / "batched")["generation"]
    assert generation["decoding"] == "greedy" and generation["dtype"] == "float32"
    assert generation["trust_remote_code"] is False and len(generation["chat_template_sha256"]) == 64


def test_an_immediate_end_token_is_an_empty_reply_kept_with_finish_stop(model_dirs, tmp_path):
    data = synthetic_data(3)
    _, summary, records = generate(model_dirs["silent"], tmp_path / "run", data, batch_size=2)
    assert summary.empty == 3
    for record in records.values():
        assert (record["status"], record["model_output"], record["finish_reason"]) == ("ok", "", "stop")
        assert record["usage"]["completion_tokens"] == 1


def test_sampling_with_a_seed_is_reproducible(model_dirs, tmp_path):
    data = synthetic_data(4)
    params = DecodingParams.resolve(temperature=1.0, top_p=0.9, seed=5, max_tokens=MAX_TOKENS)
    _, _, first = generate(model_dirs["random"], tmp_path / "a", data, batch_size=2, params=params)
    _, _, second = generate(model_dirs["random"], tmp_path / "b", data, batch_size=2, params=params)
    assert {i: r["model_output"] for i, r in first.items()} == {i: r["model_output"] for i, r in second.items()}
    assert runs.load_manifest(tmp_path / "a")["generation"]["decoding"] == "sampling"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")
def test_runs_on_cuda_in_bfloat16(model_dirs, tmp_path):
    data = synthetic_data(5)
    backend = make_backend("hf", str(model_dirs["random"]), DecodingParams.resolve(max_tokens=MAX_TOKENS),
                           BackendOptions(batch_size=2, dtype="bfloat16", device="cuda"))
    summary = run_generation(tmp_path / "run", make_requests(data.samples, data), backend, generation_task(data), progress=False)
    assert summary.ok == 5 and not summary.errors
    generation = runs.load_manifest(tmp_path / "run")["generation"]
    assert generation["loaded_dtype"] == "bfloat16" and generation["device"] == "cuda"
