"""The local Hugging Face backend: a causal LM from transformers, generating in batches.

Each request's S3 messages go through the tokenizer's own chat template with the generation
prompt added; no system message is added here (a template may insert its own default one, which
is that model's documented behaviour). Prompts are sorted by length and batched with left
padding, so a batch wastes little padding and the longest batch (the likeliest to run out of
memory) comes first. Decoding follows the model's own generation config (its
``generation_config.json``: sampling or not, temperature, top_p, top_k as its authors set them)
unless settings are given: temperature 0 asks for greedy decoding, a temperature or top_p for
sampling with it (the other value staying the model's). Seed 001 row 9 and U1: the paper gives no
decoding settings, the models' own defaults are the likeliest, and the values actually used are
recorded (``describe()["decoding_used"]``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import copy
import hashlib
import threading
import time
from collections.abc import AsyncGenerator, Sequence
from pathlib import Path
from typing import Any

from charactereval_lib.engine.generation.base import (
    STATUS_OK,
    ConfigError,
    DecodingParams,
    GenerationRequest,
    GenerationResult,
    build_payload,
    error_result,
    request_sha256,
)
from charactereval_lib.engine.generation.context import ContextWindow, chat_prompt_ids, config_context
from charactereval_lib.engine.generation.hub import check_hub_model

DTYPES = ("auto", "float32", "float16", "bfloat16")
# Requests generated together, each with its prompt's token ids.
Batch = list[tuple[GenerationRequest, list[int]]]


# What a decoding setting left unset means for the hf backend; part of the identity, so that a run
# made when unset meant greedy (before this rule) is not resumed under the model's defaults.
UNSET_DECODING = "the model's generation_config"


def hf_identity(model: str, params: DecodingParams, dtype: str) -> dict[str, Any]:
    """What a resumed hf run must keep, whichever engine (this process or Ray workers) runs it."""
    return {"backend": HFBackend.name, "model": model, "parameters": params.as_dict(), "dtype": dtype,
            "unset_decoding": UNSET_DECODING}


def check_model_path(model: str) -> None:
    """A model named by a path (absolute, or starting with ``./``, ``../`` or ``~``) that is not
    there is one line here, before transformers' import (seconds) and its Hub lookup, which
    would call the path an invalid repo id."""
    path = Path(model).expanduser()
    if (path.is_absolute() or model.startswith(("./", "../", "~"))) and not path.exists():
        raise ConfigError(f"{model}: no such model directory (a path; a Hugging Face Hub model is named "
                          "NAME or ORG/NAME)")


class HFPrompts:
    """The driver's side of local generation: the tokenizer's chat template on each request's
    messages, the context check, and the batches (sorted by prompt length, longest first).
    Both engines build their batches here, so a batch holds the same prompts, padded the same
    way, in this process and on a Ray worker."""

    def __init__(self, model: str, params: DecodingParams, *, batch_size: int, trust_remote_code: bool,
                 max_context: int | None) -> None:
        check_model_path(model)
        # A Hub id that is not there: one line in seconds, not the Hub client's retries.
        check_hub_model(model)
        from transformers import AutoConfig, AutoTokenizer

        if batch_size < 1:
            raise ConfigError(f"--batch-size must be at least 1, got {batch_size}")
        self.model_name = model
        self.params = params
        self.batch_size = batch_size
        self.tokenizer = AutoTokenizer.from_pretrained(model, trust_remote_code=trust_remote_code)
        if not getattr(self.tokenizer, "chat_template", None):
            raise ConfigError(f"{model}: the tokenizer has no chat template; the S3 messages need one")
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
        if self.pad_id is None:
            raise ConfigError(f"{model}: the tokenizer has neither a pad nor an eos token to pad batches with")
        # An explicit max_context wins: a rope-scaled model can go past its config's positions.
        if max_context is not None:
            positions, field = max_context, "max_context option"
        else:
            positions, field = config_context(AutoConfig.from_pretrained(model, trust_remote_code=trust_remote_code))
            field = f"{field} of the model config" if field else None
        self.context = ContextWindow(positions, params.max_tokens, field) if positions else None

    def ids(self, request: GenerationRequest) -> list[int]:
        return chat_prompt_ids(self.tokenizer, request.messages)

    def sha(self, request: GenerationRequest) -> str:
        return request_sha256(build_payload(self.model_name, request.messages, self.params))

    def plan(self, requests: Sequence[GenerationRequest]) -> tuple[list[GenerationResult], list[Batch]]:
        """A PromptTooLong result for each prompt that cannot fit, and the batches of the others."""
        rejected, prompts = [], []
        for request in requests:
            ids = self.ids(request)
            too_long = self.context.reject(request.id, self.sha(request), len(ids)) if self.context else None
            if too_long is not None:
                rejected.append(too_long)
            else:
                prompts.append((request, ids))
        prompts.sort(key=lambda item: len(item[1]), reverse=True)
        return rejected, [prompts[start : start + self.batch_size] for start in range(0, len(prompts), self.batch_size)]


class HFBackend:
    name = "hf"

    def __init__(
        self,
        model: str,
        params: DecodingParams,
        *,
        device: str = "cpu",
        dtype: str = "auto",
        batch_size: int = 8,
        trust_remote_code: bool = False,
        max_context: int | None = None,
    ) -> None:
        if dtype not in DTYPES:
            raise ConfigError(f"--dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
        # The prompts first: they check the model's path before transformers and torch are imported.
        self.prompts = HFPrompts(model, params, batch_size=batch_size, trust_remote_code=trust_remote_code,
                                 max_context=max_context)
        import torch
        from transformers import AutoModelForCausalLM

        self.model_name = model
        self.params = params
        self.device = device
        self.dtype = dtype
        self.batch_size = batch_size
        self.trust_remote_code = trust_remote_code
        self._torch = torch
        self.tokenizer = self.prompts.tokenizer
        self.pad_id = self.prompts.pad_id
        self.context = self.prompts.context
        self.model = AutoModelForCausalLM.from_pretrained(
            model, dtype=dtype if dtype == "auto" else getattr(torch, dtype), trust_remote_code=trust_remote_code
        ).to(device)
        self.model.eval()
        self._stop = threading.Event()
        # Always the same worker thread: torch keeps per-thread state (its intra-op thread pool),
        # and hopping between executor threads made each batch many times slower.
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="hf-generate")

    def identity(self) -> dict[str, Any]:
        return hf_identity(self.model_name, self.params, self.dtype)

    def describe(self) -> dict[str, Any]:
        import transformers

        template = self.tokenizer.chat_template
        return {
            **self.identity(),
            "device": self.device,
            "batch_size": self.batch_size,
            "trust_remote_code": self.trust_remote_code,
            "max_context": self.context.max_context if self.context else None,
            "decoding": "sampling" if self.generation_config().do_sample else "greedy",
            "decoding_used": self.decoding_used(),
            "chat_template_sha256": hashlib.sha256(str(template).encode("utf-8")).hexdigest(),
            "loaded_dtype": str(self.model.dtype).removeprefix("torch."),
            "transformers_version": transformers.__version__,
        }

    def generation_config(self) -> Any:
        """The model's own generation config with what was asked on top (module docstring):
        temperature 0 is greedy; a temperature or top_p samples with it; nothing asked keeps the
        model's choice. Always ``max_tokens`` new tokens."""
        config = copy.deepcopy(self.model.generation_config)
        config.max_new_tokens = self.params.max_tokens
        config.pad_token_id = self.pad_id
        temperature, top_p = self.params.temperature, self.params.top_p
        if temperature == 0:
            config.do_sample = False
        elif temperature is not None or top_p is not None:
            config.do_sample = True
            config.temperature = temperature if temperature is not None else config.temperature
            config.top_p = top_p if top_p is not None else config.top_p
        if not config.do_sample:
            # Sampling knobs do nothing under greedy decoding (and would only trigger warnings).
            config.temperature = config.top_p = config.top_k = None
        return config

    def decoding_used(self) -> dict[str, Any]:
        """The decoding values generate() actually runs with, and where they come from."""
        config = self.generation_config()
        asked = self.params.temperature is not None or self.params.top_p is not None
        return {"do_sample": bool(config.do_sample), "temperature": config.temperature, "top_p": config.top_p,
                "top_k": config.top_k, "num_beams": config.num_beams,
                "repetition_penalty": config.repetition_penalty, "max_new_tokens": config.max_new_tokens,
                "seed": self.params.seed,
                "source": f"asked, over {UNSET_DECODING}" if asked else UNSET_DECODING}

    def prompt_ids(self, request: GenerationRequest) -> list[int]:
        return self.prompts.ids(request)

    def _sha(self, request: GenerationRequest) -> str:
        return self.prompts.sha(request)

    async def stream(self, requests: Sequence[GenerationRequest]) -> AsyncGenerator[GenerationResult, None]:
        self._stop.clear()
        self.seed()
        rejected, batches = self.prompts.plan(requests)
        for result in rejected:
            yield result
        try:
            for batch in batches:
                results = await asyncio.get_running_loop().run_in_executor(self._executor, self.generate_batch, batch)
                if self._stop.is_set():
                    return
                for result in results:
                    yield result
        finally:
            # Ends a generate() still running in the worker thread at its next step.
            self._stop.set()

    def seed(self) -> None:
        """Sampling starts from the requested seed (greedy decoding draws nothing)."""
        if self.params.seed is not None:
            self._torch.manual_seed(self.params.seed)

    def generate_batch(self, batch: Batch) -> list[GenerationResult]:
        """One result per prompt. When generate() fails for the batch, each prompt is tried alone,
        so that one bad sample (a prompt the model cannot take, memory for one long input) is an
        error record for that sample and the others still get their replies."""
        try:
            return self._generate_together(batch)
        except Exception as exc:
            if len(batch) == 1:
                request = batch[0][0]
                message = f"{type(exc).__name__}: {exc}".splitlines()[0][:500]
                return [error_result(request.id, self._sha(request), type(exc).__name__, message, attempts=1,
                                     model=self.model_name, extra={"batch_size": 1})]
        results = []
        for one in batch:
            if self._stop.is_set():
                break
            results += self.generate_batch([one])
        return results

    def _generate_together(self, batch: Batch) -> list[GenerationResult]:
        from transformers import StoppingCriteria, StoppingCriteriaList

        torch = self._torch
        stop = self._stop

        class _Interrupted(StoppingCriteria):
            def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
                return torch.full((input_ids.shape[0],), stop.is_set(), dtype=torch.bool, device=input_ids.device)

        width = max(len(ids) for _, ids in batch)
        input_ids = torch.tensor([[self.pad_id] * (width - len(ids)) + ids for _, ids in batch], device=self.device)
        attention = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for _, ids in batch], device=self.device)
        config = self.generation_config()
        started = time.monotonic()
        with torch.inference_mode():
            output = self.model.generate(
                input_ids=input_ids, attention_mask=attention, generation_config=config,
                stopping_criteria=StoppingCriteriaList([_Interrupted()]),
            )
        latency = round(time.monotonic() - started, 4)
        eos = config.eos_token_id
        eos_ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        results = []
        for row, (request, ids) in enumerate(batch):
            new = output[row, width:].tolist()
            end = next((i for i, token in enumerate(new) if token in eos_ids), None)
            generated = new if end is None else new[: end + 1]
            reply = self.tokenizer.decode(generated, skip_special_tokens=True)
            results.append(
                GenerationResult(
                    id=request.id,
                    status=STATUS_OK,
                    model_output=reply,
                    request_sha256=self._sha(request),
                    finish_reason="stop" if end is not None else "length",
                    usage={"prompt_tokens": len(ids), "completion_tokens": len(generated),
                           "total_tokens": len(ids) + len(generated)},
                    latency_s=latency,
                    elapsed_s=latency,
                    model=self.model_name,
                    extra={"batch_size": len(batch)},
                )
            )
        return results

    def stats(self) -> dict[str, Any]:
        return {}

    async def aclose(self) -> None:
        self._stop.set()
        self._executor.shutdown(wait=True)
