"""Judge throughput against a local OpenAI-compatible judge with a fixed latency.

Measures, in one run and against one server process (the mock server as a deterministic judge):
  (a) ours: ``pipeline.judge_score`` (judge messages built from the specs, the openai backend
      through the engine, every reply graded and written to judge_scores.jsonl, the manifest);
  (b) raw:  a minimal aiohttp client sending the same payloads with the same concurrency (the
      ceiling here; it neither parses grades nor writes anything);
  (c) SDK:  the openai SDK's client sending them the way the openai backend did before issue 23.
Prints requests/s of each, ours/raw (target >= 0.95) and the client CPU time per request. Module
imports and loading the official data are done beforehand. Uses real rows (offline replies to
the real samples) when CHARACTEREVAL_DATA_DIR is set, synthetic ones otherwise.

    python benchmarks/bench_judge.py [--requests 3000] [--concurrency 64] [--latency 0.2]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_generation import measure, run_raw, run_sdk, start_server, synthetic_data

from charactereval_lib import pipeline
from charactereval_lib.charactereval import judge, layout
from charactereval_lib.charactereval.data import DATA_DIR_ENV, OfficialData, load_official_data
from charactereval_lib.engine.generation.base import build_payload
from charactereval_lib.engine.storage import artifacts

MODEL = "bench-judge"


def rows_data(count: int) -> tuple[OfficialData, str]:
    """Samples for at least ``count`` judge rows: the real test set (8,032 rows), or synthetic
    samples with one metric each."""
    if os.environ.get(DATA_DIR_ENV):
        return load_official_data(), "real rows"
    data = synthetic_data(count)
    data.id2metric = {str(s.id): (("Fluency", "对话流利度"),) for s in data.samples}
    return data, "synthetic rows"


def prepare_run(path: Path, data: OfficialData, count: int) -> layout.CharacterEvalRun:
    """A run whose rows.jsonl holds ``count`` rows (offline replies, S5). ``count`` samples are
    enough: each real one has 1.76 rows on average (33 of 4,564 none), each synthetic one 1."""
    pipeline.generate(path, pipeline.GenerateSettings(backend="offline", model="demo", limit=count), data=data)
    pipeline.transform(path, data=data)
    run = layout.CharacterEvalRun.resolve(path)
    artifacts.write_jsonl_atomic(run.rows, run.read_rows()[:count])
    return run


def run_ours(run: layout.CharacterEvalRun, data: OfficialData, base_url: str, concurrency: int) -> int:
    """The whole judge stage through the pipeline; returns the rows graded with a valid answer."""
    settings = pipeline.JudgeSettings(judge_model=MODEL, base_url=base_url, api_key_env="", concurrency=concurrency,
                                      max_attempts=3)
    summary = pipeline.judge_score(run, settings, data=data).summary
    return summary.graded - summary.invalid


def main() -> None:
    """Measure both clients against one server process and print the ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--latency", type=float, default=0.2)
    parser.add_argument("--json", metavar="FILE", help="also write the figures here")
    args = parser.parse_args()
    load_at_start = os.getloadavg()

    data, source = rows_data(args.requests)
    with tempfile.TemporaryDirectory() as tmp:
        run = prepare_run(Path(tmp) / "run", data, args.requests)
        count = len(run.read_rows())
        params = pipeline.JudgeSettings(judge_model=MODEL).decoding()
        payloads = [build_payload(MODEL, item.messages, params)
                    for item in judge.judge_items(run, data, judge.load_specs())]
        server, base_url = start_server(args.latency, "--default-action", "judge")
        try:
            results = [
                measure("ours (pipeline.judge_score)", lambda: run_ours(run, data, base_url, args.concurrency), count),
                measure("raw aiohttp client", lambda: run_raw(base_url, payloads, args.concurrency), count),
                measure("openai SDK client (before)", lambda: run_sdk(base_url, payloads, args.concurrency), count),
            ]
        finally:
            server.terminate()
            server.wait(10)

    ideal = args.concurrency / args.latency
    print(f"{count} judge requests ({source}), concurrency {args.concurrency}, server latency "
          f"{args.latency * 1000:.0f} ms, ideal {ideal:.0f} req/s, {os.cpu_count()} CPU cores (load average "
          f"{os.getloadavg()[0]:.1f}: other work competes for them), server in its own process")
    for r in results:
        print(f"  {r['label']:<32} {r['rate']:8.1f} req/s  wall {r['wall_s']:6.1f} s  "
              f"{r['rate'] / ideal:6.1%} of ideal  client CPU {r['cpu_ms']:.2f} ms/request")
    ratio = results[0]["rate"] / results[1]["rate"]
    print(f"ours / raw = {ratio:.3f}  (target >= 0.95); the openai SDK client / raw = "
          f"{results[2]['rate'] / results[1]['rate']:.3f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"source": source, "requests": count, "concurrency": args.concurrency,
                                               "latency_s": args.latency, "cpu_count": os.cpu_count(),
                                               "load_average_1_5_15_at_start": [round(x, 2) for x in load_at_start],
                                               "load_average_1_5_15_at_end": [round(x, 2) for x in os.getloadavg()],
                                               "results": results, "ours_over_raw": ratio,
                                               "sdk_over_raw": results[2]["rate"] / results[1]["rate"]}, indent=2) + "\n")


if __name__ == "__main__":
    main()
