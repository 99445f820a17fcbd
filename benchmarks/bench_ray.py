"""Ray engine benchmark: ``score --engine ray`` with N CPU workers vs the single-process scorer,
and ``generate --backend hf --engine ray`` vs the single-process hf backend.

    python benchmarks/bench_ray.py [--data-dir DIR] [--rows 300] [--workers 2] [--modes fast,faithful]
                                   [--generation 48] [--address ADDRESS]

The same rows (whole official samples, about ``--rows``, with the synthetic reply of
``bench_scoring.py``) of one run are scored twice per mode, into two copies of the run: in this
process (``LocalEngine``) and on a local Ray cluster with ``--workers`` workers, with a tiny
RANDOM reward model (4 layers, hidden 256) whose tokenizer is trained on the data. Reported per
mode: scoring seconds (model loading excluded on both sides), the set-up seconds of each side
(model load; cluster start + workers loading), rows/s, the speed ratio ray/local, Ray's own cost
per row (one Ray worker vs this process with as many torch threads, ``--local-threads 1``), and
whether every record is bitwise the same.

Generation (``--generation N``, 0 to skip): the S3 requests of the first N samples, greedy, 16
new tokens, batches of 8, with the tiny RANDOM chat model of the tests (2 layers, hidden 32),
generated in this process and by ``--workers`` Ray workers: generation seconds, set-up seconds,
requests/s, the ratio, and whether every record (timings aside) is the same.

On a machine with as many cores as workers the local scorer already uses every core (torch's
threads), while each Ray worker gets one, so expect overhead (shipping rows and records, one
driver loop), not a speed-up: Ray pays off with one worker per GPU or per machine.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def write_run(run_dir: Path, data, sample_rows: list[tuple[int, str, str]]) -> None:
    """``rows.jsonl`` of the chosen (id, metric_en) pairs with the benchmark's synthetic reply."""
    from bench_scoring import FILLER

    from charactereval_lib.charactereval.protocol import METRIC_BY_EN

    samples = data.by_id()
    run_dir.mkdir(parents=True)
    with open(run_dir / "rows.jsonl", "w", encoding="utf-8") as out:
        for sample_id, metric_en, _text in sample_rows:
            sample = samples[sample_id]
            row = {
                "id": sample_id,
                "role": sample.role,
                "metric_en": metric_en,
                "metric_zh": METRIC_BY_EN[metric_en].metric_zh,
                "model_output": sample.role + "\uff1a" + FILLER,
            }
            out.write(json.dumps(row, ensure_ascii=False) + "\n")


def rm_shape(rm_dir: Path) -> dict:
    """The shape of a given checkpoint, as the results record the tiny one's."""
    config = json.loads((rm_dir / "config.json").read_text(encoding="utf-8"))
    return {"layers": config["num_hidden_layers"], "hidden": config["hidden_size"],
            "heads": config["num_attention_heads"], "vocab": config["vocab_size"], "checkpoint": str(rm_dir)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data-dir", default=os.environ.get("CHARACTEREVAL_DATA_DIR"))
    parser.add_argument("--rows", type=int, default=300, help="about this many rows, whole samples (default 300)")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--modes", default="fast,faithful")
    parser.add_argument("--local-threads", type=int, default=0, help="torch threads of the single-process scorer (0: torch's default)")
    parser.add_argument("--generation", type=int, default=48, metavar="N",
                        help="also generate the requests of the first N samples both ways (0: skip; default 48)")
    parser.add_argument("--out", help="also write the results as JSON here")
    parser.add_argument("--address", help="an existing Ray cluster (default: each Ray side starts a local one, counted "
                                          "in its set-up)")
    parser.add_argument("--rm", metavar="DIR", help="score with this checkpoint instead of making the tiny one (its shape "
                                                    "is recorded from its config.json)")
    args = parser.parse_args()
    if not args.data_dir:
        print("benchmark needs the official data: pass --data-dir or set CHARACTEREVAL_DATA_DIR", file=sys.stderr)
        return 2

    import torch
    from bench_scoring import build_rows, pick_subset

    from charactereval_lib.charactereval import layout
    from charactereval_lib.charactereval.data import load_official_data
    from charactereval_lib.charactereval.reward import scorer
    from charactereval_lib.charactereval.reward.ray_scorer import RayEngine, RaySettings
    from charactereval_lib.charactereval.reward.tiny import make_tiny
    from charactereval_lib.engine.storage import artifacts

    if args.local_threads:
        torch.set_num_threads(args.local_threads)
    data = load_official_data(args.data_dir)
    rows = build_rows(data)
    chosen = [rows[i] for i in pick_subset(rows, args.rows)]
    results: dict = {
        "machine": {
            "cpus": os.cpu_count(),
            "torch_threads_local": torch.get_num_threads(),
            "torch_threads_per_ray_worker": 1,
            "load_average_at_start": os.getloadavg()[0],
        },
        "model": rm_shape(Path(args.rm)) if args.rm else {"layers": 4, "hidden": 256, "heads": 8, "vocab": 8000},
        "rows": len(chosen),
        "samples": len({r[0] for r in chosen}),
        "workers": args.workers,
        "modes": {},
    }
    with tempfile.TemporaryDirectory(prefix="bench-ray-") as tmp:
        tmp = Path(tmp)
        rm_dir = Path(args.rm) if args.rm else make_tiny(tmp / "rm", data_dir=args.data_dir, layers=4, hidden=256,
                                                         heads=8, vocab_size=8000)
        for mode in args.modes.split(","):
            settings = scorer.ScorerSettings(mode=mode, device="cpu", progress=False)
            timings = {}
            records = {}
            # One Ray worker does the local scorer's work plus Ray's: the difference is Ray's cost.
            engines = {
                "local": scorer.LocalEngine,
                "ray_1_worker": lambda: RayEngine(RaySettings(address=args.address, workers=1)),
                "ray": lambda: RayEngine(RaySettings(address=args.address, workers=args.workers)),
            }
            for name, make_engine in engines.items():
                run_dir = tmp / f"{mode}-{name}"
                write_run(run_dir, data, chosen)
                engine = make_engine()
                start = time.perf_counter()
                report = scorer.score_run(run_dir, rm_dir, data, settings, engine)
                wall = time.perf_counter() - start
                assert report.scored == len(chosen), (name, report.scored)
                timings[name] = {
                    "scoring_seconds": report.seconds,
                    "setup_seconds": wall - report.seconds,
                    "rows_per_s": report.scored / report.seconds,
                }
                records[name] = {(r["id"], r["metric_en"]): r for r in artifacts.read_jsonl(run_dir / layout.SCORES).records}
            local, one, ray = timings["local"], timings["ray_1_worker"], timings["ray"]
            results["modes"][mode] = {
                **timings,
                "speedup_ray_vs_local": local["scoring_seconds"] / ray["scoring_seconds"],
                "ray_vs_local_ms_per_row": 1000 * (ray["scoring_seconds"] - local["scoring_seconds"]) / len(chosen),
                "ray_1_worker_overhead_ms_per_row": 1000 * (one["scoring_seconds"] - local["scoring_seconds"]) / len(chosen),
                "bitwise_equal_records": records["local"] == records["ray"] == records["ray_1_worker"],
            }
            r = results["modes"][mode]
            print(
                f"{mode:8s}: local {local['rows_per_s']:.1f} rows/s, ray x1 {one['rows_per_s']:.1f}, ray x{args.workers} "
                f"{ray['rows_per_s']:.1f} (ratio x{args.workers}/local {r['speedup_ray_vs_local']:.2f}; ray x1 costs "
                f"{r['ray_1_worker_overhead_ms_per_row']:+.1f} ms/row; set-up local {local['setup_seconds']:.1f} s, "
                f"ray {ray['setup_seconds']:.1f} s); bitwise equal: {r['bitwise_equal_records']}"
            )
        if args.generation:
            results["generation"] = bench_generation(data, tmp, args.generation, args.workers, args.address)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=2) + "\n", encoding="utf-8")
        print(f"wrote {args.out}")
    equal = [m["bitwise_equal_records"] for m in results["modes"].values()]
    equal += [results["generation"]["equal_records"]] if "generation" in results else []
    return 0 if all(equal) else 1


def bench_generation(data, tmp: Path, samples: int, workers: int, address: str | None) -> dict:
    """The hf backend in this process vs on ``workers`` Ray workers, through ``pipeline.generate``."""
    from charactereval_lib import pipeline
    from charactereval_lib.engine.storage import artifacts, runs
    from charactereval_lib.testing.tiny_chat_model import build_model, build_tokenizer

    model = tmp / "chat-model"
    # Room for the longest real prompt in this tokenizer's (data-blind) tokens.
    build_model(model, build_tokenizer(model), max_positions=32768)
    timings, records = {}, {}
    for name, engine in (("local", {}), ("ray", {"engine": "ray", "workers": workers, "address": address})):
        settings = pipeline.GenerateSettings(backend="hf", model=str(model), max_tokens=16, batch_size=8, dtype="float32",
                                             limit=samples, **engine)
        start = time.perf_counter()
        session = pipeline.generate(tmp / f"generate-{name}", settings, data=data).session
        wall = time.perf_counter() - start
        assert session.ok == samples, (name, session.line())
        timings[name] = {"generation_seconds": session.elapsed_s, "setup_seconds": wall - session.elapsed_s,
                         "requests_per_s": session.ok / session.elapsed_s}
        records[name] = sorted((json.dumps({k: v for k, v in r.items() if k not in ("latency_s", "elapsed_s")}, sort_keys=True)
                                for r in artifacts.read_jsonl(tmp / f"generate-{name}" / runs.GENERATIONS).records))
    local, ray = timings["local"], timings["ray"]
    result = {"requests": samples, "max_tokens": 16, "batch_size": 8, "model": {"layers": 2, "hidden": 32}, **timings,
              "speedup_ray_vs_local": local["generation_seconds"] / ray["generation_seconds"],
              "equal_records": records["local"] == records["ray"]}
    print(f"generate: local {local['requests_per_s']:.1f} req/s, ray x{workers} {ray['requests_per_s']:.1f} "
          f"(ratio {result['speedup_ray_vs_local']:.2f}; set-up local {local['setup_seconds']:.1f} s, ray "
          f"{ray['setup_seconds']:.1f} s); same records: {result['equal_records']}")
    return result


if __name__ == "__main__":
    sys.exit(main())
