"""``generate --backend hf --engine ray``: the hf backend's batches on Ray actors (S4 of local
models, scaled out), written by the driver only.

- The driver builds the prompts and batches exactly as the single-process backend does
  (``HFPrompts``: same chat template, context check, length-sorted batches), so each request
  gets the same digest, the same prompt tokens and, with greedy decoding, the same reply on
  the same device type; a run can be resumed by either engine (same ``identity()``).
- One actor per worker loads the model once (a replica per GPU with ``gpus_per_worker`` 1)
  and generates whole batches with the hf backend's own ``generate_batch``.
- The engine (``generation.engine``) decides what is pending and appends every result as it
  streams back; a worker that dies has its batches re-sent (``engine.ray_cluster``), and a
  killed driver loses only the batches in flight, which the next run generates.
- Sampling (a temperature or preset) is seeded per worker, so its replies differ from one
  process's; greedy decoding draws nothing.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
from collections.abc import AsyncGenerator, Callable, Sequence
from typing import Any

from charactereval_lib.engine.generation.backends import BackendOptions
from charactereval_lib.engine.generation.base import DecodingParams, GenerationRequest, GenerationResult, RunAborted
from charactereval_lib.engine.generation.hf import Batch, HFPrompts, hf_identity
from charactereval_lib.engine.ray_cluster import ActorPool, RaySettings, WorkerInfo, worker_device


class GenerationWorker:
    """The actor: one replica of the model, loaded once; generates whole batches."""

    def __init__(self, model: str, params: DecodingParams, options: BackendOptions) -> None:
        from charactereval_lib.engine.generation.hf import HFBackend

        self.backend = HFBackend(model, params, device=worker_device(options.device), dtype=options.dtype,
                                 batch_size=options.batch_size, trust_remote_code=options.trust_remote_code,
                                 max_context=options.max_context)
        self.backend.seed()

    def info(self) -> WorkerInfo:
        return WorkerInfo.here(self.backend.device)

    def describe(self) -> dict[str, Any]:
        return self.backend.describe()

    def generate(self, batch: Batch) -> list[GenerationResult]:
        return self.backend.generate_batch(batch)


class RayHFBackend:
    """A ``Backend`` for ``engine.run_generation``: the workers start (and load the model) here;
    ``aclose`` stops them and a cluster started here."""

    name = "hf"

    def __init__(
        self,
        model: str,
        params: DecodingParams,
        options: BackendOptions,
        ray: RaySettings,
        on_result: Callable[[list[WorkerInfo], int], None] | None = None,
    ) -> None:
        # The tokenizer side first: a model without a chat template fails before any cluster.
        self.prompts = HFPrompts(model, params, batch_size=options.batch_size,
                                 trust_remote_code=options.trust_remote_code, max_context=options.max_context)
        self.model_name = model
        self.params = params
        self.options = options
        self.pool = ActorPool(ray, what="generation", fatal=RunAborted, stranded=RunAborted, on_result=on_result)
        self._stack = contextlib.ExitStack()
        with self._stack:
            self._stack.enter_context(self.pool.running(GenerationWorker, model, params, options))
            self._worker = self.pool.ray.get(self.pool.handles[0].describe.remote())
            self._stack = self._stack.pop_all()
        # The driver waits for the cluster in one thread of its own (see stream).
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="ray-generate")

    def identity(self) -> dict[str, Any]:
        return hf_identity(self.model_name, self.params, self.options.dtype)

    def describe(self) -> dict[str, Any]:
        """The first worker's hf description (template digest, loaded dtype, versions) with the
        engine, the devices the workers resolved (``auto``: cuda where Ray gave a GPU) and each
        worker's node and device."""
        return {**self._worker, "device": ",".join(self.pool.devices()), "engine": "ray",
                "ray": self.pool.describe()}

    async def stream(self, requests: Sequence[GenerationRequest]) -> AsyncGenerator[GenerationResult, None]:
        rejected, batches = self.prompts.plan(requests)
        for result in rejected:
            yield result
        stop = threading.Event()
        finished = self.pool.results(batches, "generate", stop)
        loop = asyncio.get_running_loop()
        try:
            while True:
                item = await loop.run_in_executor(self._executor, next, finished, None)
                if item is None:
                    return
                for result in item[1]:
                    yield result
        finally:
            # Ctrl-C, SIGTERM or an error: the waiting thread returns within ray_cluster.WAIT_S.
            stop.set()

    def stats(self) -> dict[str, Any]:
        return {}

    async def aclose(self) -> None:
        self._executor.shutdown(wait=True)
        self._stack.close()
