"""Generation throughput against a local OpenAI-compatible server with a fixed latency.

Measures, in one run and against one server process:
  (a) ours:       the openai backend through the engine (records written to a run directory);
  (b) raw:        a minimal aiohttp client with the same concurrency (the ceiling here);
  (b') SDK:       the openai SDK's client with the same concurrency, as the openai backend used it
                  before issue 23 (the transport it replaced: what choosing the lean one gained);
  (c) sequential: one request at a time with the openai client, like the official script
                  (a few dozen requests, extrapolated);
  (d) engine only: the same engine with the offline backend sleeping the same latency, no HTTP
                  (how much of the gap to (b) is the engine and how much the HTTP client).
Prints requests/s, ours/raw, ours/sequential, the fraction of the ideal concurrency/latency rate
and the client CPU time per request. Times include each client's setup and, for ours, building
the S3 messages, the manifest and every record written; module imports are done beforehand.
Uses the real S3 messages when CHARACTEREVAL_DATA_DIR is set, synthetic ones otherwise.

    python benchmarks/bench_generation.py [--requests 3000] [--concurrency 64] [--latency 0.2]
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
import openai

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from charactereval_lib.charactereval.data import DATA_DIR_ENV, OfficialData, Sample, load_official_data
from charactereval_lib.charactereval.protocol import COLON
from charactereval_lib.charactereval.requests import generation_task, make_requests
from charactereval_lib.engine.generation.base import DecodingParams, build_payload
from charactereval_lib.engine.generation.engine import generate_async, run_generation
from charactereval_lib.engine.generation.offline import OfflineBackend
from charactereval_lib.engine.generation.openai_backend import OpenAIBackend
from charactereval_lib.engine.generation.retry import RetryPolicy
from charactereval_lib.engine.storage import artifacts, runs

MODEL = "bench-model"


def synthetic_data(count: int) -> OfficialData:
    """Samples shaped like the real ones (a profile, a dozen dialogue lines), none of their text."""
    profile = {"姓名": "甲", "性别": "男", "经历": "一段虚构的经历。" * 40}
    lines = [("乙" if i % 2 else "甲") + "：" + "这是一句合成的台词。" * 3 for i in range(12)]
    lines.append("乙：最后一句？")
    samples = [Sample(i, "甲", "合成小说", "\n".join(lines)) for i in range(count)]
    return OfficialData(Path("synthetic"), samples, {"甲": profile}, {})


def load_data(count: int) -> tuple[OfficialData, str]:
    """``count`` samples, cycling through the test set if it is shorter, each with its own id."""
    if not os.environ.get(DATA_DIR_ENV):
        return synthetic_data(count), "synthetic messages"
    real = load_official_data()
    samples = [Sample(i, s.role, s.novel_name, s.context) for i, s in zip(range(count), itertools.cycle(real.samples))]
    return OfficialData(real.data_dir, samples, real.profiles, real.id2metric, real.sha256), "real S3 messages"


def start_server(latency: float, *extra: str) -> tuple[subprocess.Popen, str]:
    """The mock server in its own process (``extra``: more of its flags, e.g. a judge mode)."""
    process = subprocess.Popen(
        [sys.executable, "-m", "charactereval_lib.testing.mockserver", "--latency", str(latency), *extra],
        stdout=subprocess.PIPE, text=True, cwd=Path(__file__).resolve().parent.parent,
    )
    line = process.stdout.readline()
    if not line.startswith("listening on "):
        process.kill()
        raise RuntimeError(f"mock server did not start: {line!r}")
    return process, line.split()[-1]


def measure(label: str, func, count: int) -> dict:
    cpu, wall = time.process_time(), time.perf_counter()
    done = func()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    if done != count:
        raise RuntimeError(f"{label}: {done} of {count} requests completed")
    return {"label": label, "requests": count, "wall_s": wall, "rate": count / wall, "cpu_ms": 1000 * cpu / count}


def run_ours(base_url: str, data: OfficialData, concurrency: int) -> int:
    backend = OpenAIBackend(MODEL, DecodingParams.resolve(), base_url=base_url, concurrency=concurrency, api_key_env="",
                            policy=RetryPolicy(max_attempts=3))

    async def main(run_dir: Path) -> None:
        try:
            await generate_async(run_dir, make_requests(data.samples, data), backend, generation_task(data), progress=False)
        finally:
            await backend.aclose()

    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(main(Path(tmp)))
        records = artifacts.read_jsonl(Path(tmp) / runs.GENERATIONS).records
        return sum(1 for r in records if r["status"] == "ok")


def run_engine_only(data: OfficialData, concurrency: int, latency: float) -> int:
    backend = OfflineBackend(MODEL, DecodingParams.resolve(), separator=COLON, concurrency=concurrency, latency_s=latency)
    with tempfile.TemporaryDirectory() as tmp:
        run_generation(Path(tmp), make_requests(data.samples, data), backend, generation_task(data), progress=False)
        return sum(1 for r in artifacts.read_jsonl(Path(tmp) / runs.GENERATIONS).records if r["status"] == "ok")


def run_raw(base_url: str, payloads: list[dict], concurrency: int) -> int:
    async def main() -> int:
        limit = asyncio.Semaphore(concurrency)
        connector = aiohttp.TCPConnector(limit=concurrency)
        async with aiohttp.ClientSession(connector=connector) as session:
            async def one(payload: dict) -> bool:
                async with limit:
                    async with session.post(f"{base_url}/chat/completions", json=payload,
                                            headers={"Authorization": "Bearer bench"}) as response:
                        body = await response.json()
                        return response.status == 200 and isinstance(body["choices"][0]["message"]["content"], str)

            return sum(await asyncio.gather(*(one(p) for p in payloads)))

    return asyncio.run(main())


def run_sdk(base_url: str, payloads: list[dict], concurrency: int) -> int:
    """The openai SDK's client as the openai backend used it before issue 23 (its aiohttp
    transport, the low-level post of the exact payload, no retries): the transport's "before"."""
    async def main() -> int:
        limit = asyncio.Semaphore(concurrency)
        client = openai.AsyncOpenAI(api_key="bench", base_url=base_url, max_retries=0,
                                    http_client=openai.DefaultAioHttpClient())
        try:
            async def one(payload: dict) -> bool:
                async with limit:
                    body = await client.post("/chat/completions", cast_to=object, body=payload)
                    return isinstance(body["choices"][0]["message"]["content"], str)

            return sum(await asyncio.gather(*(one(p) for p in payloads)))
        finally:
            await client.close()

    return asyncio.run(main())


def run_sequential(base_url: str, payloads: list[dict]) -> int:
    client = openai.OpenAI(api_key="bench", base_url=base_url, max_retries=0)
    done = 0
    for payload in payloads:
        response = client.chat.completions.create(**payload)
        done += isinstance(response.choices[0].message.content, str)
    client.close()
    return done


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--sequential", type=int, default=40, help="requests for the sequential loop")
    parser.add_argument("--json", metavar="FILE", help="also write the figures here")
    args = parser.parse_args()
    load_at_start = os.getloadavg()

    data, source = load_data(args.requests)
    params = DecodingParams.resolve()
    payloads = [build_payload(MODEL, r.messages, params) for r in make_requests(data.samples, data)]
    server, base_url = start_server(args.latency)
    try:
        results = [
            measure("ours (engine + openai backend)", lambda: run_ours(base_url, data, args.concurrency),
                    args.requests),
            measure("raw aiohttp client", lambda: run_raw(base_url, payloads, args.concurrency), args.requests),
            measure("openai SDK client (the transport before)", lambda: run_sdk(base_url, payloads, args.concurrency),
                    args.requests),
            measure("sequential (official-style loop)", lambda: run_sequential(base_url, payloads[: args.sequential]),
                    args.sequential),
            measure("engine only (offline backend, no HTTP)",
                    lambda: run_engine_only(data, args.concurrency, args.latency), args.requests),
        ]
    finally:
        server.terminate()
        server.wait(10)

    ideal = args.concurrency / args.latency
    print(f"{args.requests} requests ({source}), concurrency {args.concurrency}, server latency "
          f"{args.latency * 1000:.0f} ms, ideal {ideal:.0f} req/s, {os.cpu_count()} CPU cores, server in its own process")
    for r in results:
        print(f"  {r['label']:<40} {r['rate']:8.1f} req/s  wall {r['wall_s']:6.1f} s  "
              f"{r['rate'] / ideal:6.1%} of ideal  client CPU {r['cpu_ms']:.2f} ms/request")
    ours, raw, sdk, sequential, _ = (r["rate"] for r in results)
    print(f"ours / raw        = {ours / raw:.3f}  (target >= 0.95)")
    print(f"SDK client / raw  = {sdk / raw:.3f}")
    print(f"ours / sequential = {ours / sequential:.1f}x  (target >= 50x; sequential extrapolated from "
          f"{args.sequential} requests)")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "source": source, "requests": args.requests, "concurrency": args.concurrency, "latency_s": args.latency,
            "cpu_count": os.cpu_count(), "load_average_1_5_15_at_start": [round(x, 2) for x in load_at_start],
            "load_average_1_5_15_at_end": [round(x, 2) for x in os.getloadavg()], "results": results,
            "ours_over_raw": ours / raw, "sdk_over_raw": sdk / raw, "ours_over_sequential": ours / sequential,
        }, indent=2) + "\n")


if __name__ == "__main__":
    main()
