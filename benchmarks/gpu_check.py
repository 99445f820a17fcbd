"""A prepared GPU check of the reward-model scorer: the real BaichuanCharRM shape, random weights.

    python benchmarks/gpu_check.py                      # on a CUDA machine (< 8 minutes on one H200)
    python benchmarks/gpu_check.py --tiny --device cpu  # the same code path, tiny shape (CI)
    python benchmarks/gpu_check.py --make-lengths --data-dir DIR   # rebuild the length table
    python benchmarks/gpu_check.py --anchor models/BaichuanCharRM [--data-dir DIR]  # the anchor, real weights

Nothing is downloaded and no data is needed on the GPU machine:

1. The model has the real shape (hidden 5120, 40 layers, 40 heads, intermediate 13696,
   vocabulary 125696, bf16; about 28 GB of weights) and RANDOM weights, created directly on the
   device (a meta-device skeleton, then every tensor allocated and initialised in place there),
   so no 28 GB host copy and no checkpoint. Its scores are meaningless; its arithmetic and cost
   are the real ones.
2. Input lengths come from ``benchmarks/rm_input_lengths.json``: for each official sample, the
   token count of each of its RM inputs and the length of the token prefix its rows share
   (profile + context + reply; the metric name comes last). It was computed from the official
   data with a sentencepiece tokenizer trained on that data (vocabulary 8000, the stand-in that
   ``rm make-tiny --from-data`` uses; Baichuan's own tokenizer is not available offline) and the
   synthetic reply of ``bench_scoring.py``. It holds integers only, no text.
3. A stratified sample of whole samples (strata: quantiles of the mean row length; drawn
   round-robin across strata so that any prefix of the order is itself stratified, which keeps
   a run stopped by ``--max-minutes`` representative) gets random token ids with those exact
   lengths and prefix structure (the rows of a sample share their first ``prefix`` ids).
4. Each batch of whole samples is scored faithful and then fast through the scorer's own loop
   (``scorer.score_rows``), timed; then rows/s per mode, bitwise-equal fraction and largest
   difference in bf16 grid steps (``scorer.compare_modes``), peak device memory, projected
   minutes for all rows of the table, and the achieved fraction of the bf16 peak.
5. Finally the CUDA test of the hf generation backend runs in a subprocess
   (``pytest tests/engine/generation/test_generation_hf.py -k cuda``), with what time is left.

``--anchor RM_DIR`` runs the CharacterEval anchor instead, end to end, where the real weights
and the five released generations are (``charactereval rm download``, ``charactereval data
fetch --with-results``): each released file imported, scored by the checkpoint in faithful mode
on ``--device`` (default cuda), summarised, and its 12 metric means set beside Table 4 by the
board's rule (within 0.0005, no interval; ``reproduce.anchor_verdict``). It prints one line per
released generation (its SHA-256, rows, metric means within the tolerance, the largest delta, and
each mean outside it), then ``anchor REPRODUCED`` or ``anchor NOT REPRODUCED`` with the count of
the 60 means within the tolerance, writes ``benchmarks/results/gpu_check_anchor_<device>.json``
and exits 0 only when reproduced. Scoring the 40,160 rows takes the time
``gpu_check`` projects for 8,032 rows, five times; a test checkpoint (``rm make-tiny``) runs the
same path and never reproduces it (its scores are meaningless).

``--max-minutes`` (default 7.5) bounds the whole run: batches stop starting once the deadline
nears, a batch in progress is cut at the deadline, and what was measured is still printed and
written (``"stopped_early": true``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

LENGTHS = Path(__file__).with_name("rm_input_lengths.json")
RESULTS = Path(__file__).with_name("results")
EOS_ID = 2
# The first ids of a vocabulary are <unk>, <s>, </s>; random inputs use the rest.
FIRST_ORDINARY_ID = 3
# H200 SXM dense bf16 tensor-core peak (no sparsity), TFLOP/s.
H200_BF16_PEAK_TFLOPS = 989.0
# Seconds kept for the hf CUDA test and writing results when deciding to start another batch.
HF_TEST_RESERVE_S = 75.0


@dataclass(frozen=True)
class Shape:
    vocab: int
    hidden: int
    intermediate: int
    layers: int
    heads: int


REAL = Shape(vocab=125696, hidden=5120, intermediate=13696, layers=40, heads=40)
TINY = Shape(vocab=512, hidden=64, intermediate=176, layers=2, heads=8)


# The deadline's clock (a test replaces it with one that runs faster).
clock = time.monotonic


class OutOfTime(Exception):
    """Raised from inside the scoring loop when the deadline passes mid-batch."""


# --- the length table -----------------------------------------------------------------------


def make_length_table(data_dir: Path, out: Path) -> dict[str, Any]:
    """Tokenize every official RM input (synthetic reply) with a tokenizer trained on the data
    and keep only the integers: per sample, its rows' lengths and their shared prefix length."""
    from bench_scoring import FILLER, build_rows

    from charactereval_lib.charactereval.data import load_official_data
    from charactereval_lib.charactereval.reward.tiny import make_tiny
    from charactereval_lib.charactereval.reward.tokenizer import load_tokenizer

    data = load_official_data(data_dir)
    with tempfile.TemporaryDirectory() as tmp:
        # A one-layer model: only the tokenizer trained on the data's text is used.
        rm_dir = make_tiny(Path(tmp) / "rm", data_dir=data_dir, layers=1, hidden=16, heads=2, vocab_size=8000, shards=1)
        tokenizer = load_tokenizer(rm_dir)
        by_sample: dict[int, list[list[int]]] = {}
        for sample_id, _metric, text in build_rows(data):
            by_sample.setdefault(sample_id, []).append(tokenizer.rm_input_ids(text)[0])
    samples = []
    for rows in by_sample.values():
        # A lone row shares its prefix with nobody.
        prefix = len(os.path.commonprefix(rows)) if len(rows) > 1 else 0
        samples.append([prefix, [len(r) for r in rows]])
    table = {
        "what": "per official sample: [shared token prefix of its RM inputs, [token count of each RM input]]",
        "tokenizer": "sentencepiece, vocabulary 8000, trained on the official data (stand-in for Baichuan's)",
        "reply": f"role + '\\uff1a' + {FILLER!r} (synthetic; the same for every metric of a sample)",
        "max_tokens": tokenizer.max_tokens,
        "rows": sum(len(r) for _, r in samples),
        "tokens": sum(sum(r) for _, r in samples),
        "samples": samples,
    }
    out.write_text(json.dumps(table, separators=(",", ":")) + "\n", encoding="utf-8")
    return table


def load_length_table(path: Path) -> dict[str, Any]:
    try:
        table = json.loads(path.read_text(encoding="utf-8"))
        samples = [(int(p), [int(n) for n in rows]) for p, rows in table["samples"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SystemExit(f"gpu_check: cannot read the length table {path}: {exc}") from None
    if not samples or any(not rows or p >= min(rows) + (len(rows) == 1) for p, rows in samples):
        raise SystemExit(f"gpu_check: {path}: malformed table (empty, or a prefix not shorter than its rows)")
    table["samples"] = samples
    return table


def stratified_order(samples: list[tuple[int, list[int]]], rows: int, strata: int, seed: int) -> list[int]:
    """Indices of whole samples, about ``rows`` rows: samples binned into ``strata`` quantiles of
    mean row length, shuffled within each bin, then taken round-robin across bins."""
    by_length = sorted(range(len(samples)), key=lambda i: (sum(samples[i][1]) / len(samples[i][1]), i))
    strata = max(1, min(strata, len(samples)))
    rng = random.Random(seed)
    bins = [by_length[k * len(by_length) // strata : (k + 1) * len(by_length) // strata] for k in range(strata)]
    for b in bins:
        rng.shuffle(b)
    order: list[int] = []
    taken = 0
    for position in range(max(len(b) for b in bins)):
        for b in bins:
            if position < len(b) and taken < rows:
                order.append(b[position])
                taken += len(samples[b[position]][1])
    return order


def random_ids(samples, order, vocab: int, seed: int) -> list[tuple[int, list[list[int]]]]:
    """Random token ids with each chosen sample's lengths and shared prefix, ending in eos."""
    rng = random.Random(seed)

    def draw(n: int) -> list[int]:
        return [rng.randrange(FIRST_ORDINARY_ID, vocab) for _ in range(n)]

    out = []
    for index in order:
        prefix_len, lengths = samples[index]
        prefix = draw(prefix_len)
        out.append((index, [prefix + draw(n - prefix_len - 1) + [EOS_ID] for n in lengths]))
    return out


# --- the model --------------------------------------------------------------------------------


def random_model_on_device(shape: Shape, device: str, seed: int, std: float = 0.02):
    """BaichuanCharRM with random weights, every tensor allocated and initialised on ``device``
    (no host copy). N(0, std) like Baichuan's initializer_range; norm weights 1, so activations
    stay in range over 40 layers and the sigmoids spread over many bf16 steps."""
    import torch

    from charactereval_lib.charactereval.reward.checkpoint import expected_shapes
    from charactereval_lib.charactereval.reward.model import DTYPE, BaichuanCharRM, RMConfig

    config = RMConfig(
        vocab_size=shape.vocab,
        hidden_size=shape.hidden,
        intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
    )
    with torch.device("meta"):
        model = BaichuanCharRM(config)
    generator = torch.Generator(device=device).manual_seed(seed)
    state = {}
    with torch.no_grad():
        for key, size in expected_shapes(config).items():
            tensor = torch.empty(size, dtype=DTYPE, device=device)
            if key.endswith("norm.weight"):
                tensor.fill_(1.0)
            else:
                tensor.normal_(0.0, std, generator=generator)
            state[key] = tensor
    model.load_state_dict(state, strict=True, assign=True)
    return model.eval().requires_grad_(False)


def matmul_gflop_per_token(shape: Shape) -> float:
    """2 FLOP per weight of every matrix product a token goes through (the embedding is a
    lookup); attention's own products add a few percent that grow with length."""
    per_layer = 4 * shape.hidden**2 + 3 * shape.hidden * shape.intermediate
    return 2 * (shape.layers * per_layer + shape.hidden) / 1e9


class IdsTokenizer:
    """Stands in for the tokenizer in ``scorer.score_rows``: a row's "text" is the key of its
    prepared ids (which end in eos, which score_rows appends itself)."""

    eos_id = EOS_ID

    def __init__(self, ids: dict[str, list[int]], max_tokens: int) -> None:
        self.ids = ids
        self.max_tokens = max_tokens

    def encode_ids(self, text: str) -> list[int]:
        return self.ids[text][:-1]


# --- the check --------------------------------------------------------------------------------


def run_hf_test(seconds: float) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "pytest", "tests/engine/generation/test_generation_hf.py", "-k", "cuda", "-q", "-rA", "-p", "no:cacheprovider"]
    if seconds < 20:
        return {"command": " ".join(cmd[2:]), "outcome": "not run (no time left)"}
    try:
        done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=seconds)
    except subprocess.TimeoutExpired:
        return {"command": " ".join(cmd[2:]), "outcome": f"timed out after {seconds:.0f} s"}
    tail = (done.stdout + done.stderr).strip().splitlines()[-15:]
    outcome = "passed" if done.returncode == 0 and "passed" in tail[-1] else ("skipped" if done.returncode == 0 else "failed")
    return {"command": " ".join(cmd[2:]), "returncode": done.returncode, "outcome": outcome, "tail": tail}


def device_info(device: str) -> dict[str, Any]:
    import torch

    info = {"device": device, "torch": torch.__version__, "python": platform.python_version(), "host_cpus": os.cpu_count()}
    if device.startswith("cuda"):
        props = torch.cuda.get_device_properties(torch.device(device))
        info.update(name=props.name, memory_gib=props.total_memory / 2**30, capability=f"{props.major}.{props.minor}", cuda=torch.version.cuda)
    else:
        info.update(threads=torch.get_num_threads())
    return info


def check(args: argparse.Namespace) -> tuple[dict[str, Any], int]:
    import torch

    from charactereval_lib.charactereval.reward.scorer import FAITHFUL, FAST, RowInput, ScorerSettings, compare_modes, score_rows

    start = clock()
    deadline = start + args.max_minutes * 60
    shape = TINY if args.tiny else REAL
    table = load_length_table(args.lengths)
    samples = table["samples"]
    cuda = args.device.startswith("cuda")
    if cuda and not torch.cuda.is_available():
        raise SystemExit(f"gpu_check: --device {args.device}: CUDA is not available (use --tiny --device cpu for the CPU path)")
    weights_bytes = 2 * sum(math.prod(size) for size in _shapes(shape).values())
    if cuda:
        free, _total = torch.cuda.mem_get_info(torch.device(args.device))
        if free < weights_bytes * 1.15:
            raise SystemExit(f"gpu_check: {args.device} has {free / 2**30:.1f} GiB free; the weights alone need {weights_bytes / 2**30:.1f} GiB")
    result: dict[str, Any] = {
        "what": "BaichuanCharRM shape with RANDOM weights built on the device; real RM input lengths and shared-prefix structure",
        "machine": device_info(args.device),
        "shape": shape.__dict__,
        "tiny": args.tiny,
        "weights_gib": weights_bytes / 2**30,
        "length_table": {"path": str(args.lengths.relative_to(ROOT) if args.lengths.is_relative_to(ROOT) else args.lengths),
                         "rows": table["rows"], "tokens": table["tokens"], "tokenizer": table["tokenizer"]},
        "max_minutes": args.max_minutes,
        "stopped_early": False,
    }

    t = clock()
    model = random_model_on_device(shape, args.device, args.seed)
    if cuda:
        torch.cuda.synchronize()
    result["build_seconds"] = clock() - t

    order = stratified_order(samples, args.rows, args.strata, args.seed)
    chosen = random_ids(samples, order, shape.vocab, args.seed)
    max_tokens = table["max_tokens"]
    ids: dict[str, list[int]] = {}
    batches: list[list[RowInput]] = [[]]
    for index, rows in chosen:
        if len(batches[-1]) >= args.batch_rows:
            batches.append([])
        for j, row_ids in enumerate(rows):
            key = f"{index}/{j}"
            ids[key] = row_ids
            batches[-1].append(RowInput(id=index, metric_en=str(j), text=key, input_sha256=""))
    tokenizer = IdsTokenizer(ids, max_tokens)
    settings = {mode: ScorerSettings(mode=mode, device=args.device, progress=False) for mode in (FAITHFUL, FAST)}

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize()

    # Kernel selection, cuBLAS handles and the mask buffer, outside the timings: the first sample.
    for mode in (FAITHFUL, FAST):
        score_rows(batches[0][:2], tokenizer, model, settings[mode], "random", lambda record: None)
    sync()
    if cuda:
        torch.cuda.reset_peak_memory_stats(torch.device(args.device))

    sigmoids: dict[str, dict[str, float]] = {FAITHFUL: {}, FAST: {}}
    seconds = {FAITHFUL: 0.0, FAST: 0.0}
    reserve = 0.0 if args.no_hf_test else HF_TEST_RESERVE_S
    for batch in batches:
        if clock() > deadline - reserve:
            result["stopped_early"] = True
            break
        for mode in (FAITHFUL, FAST):
            got = sigmoids[mode]

            def emit(record: dict[str, Any], got=got) -> None:
                got[f"{record['id']}/{record['metric_en']}"] = record["sigmoid"]
                if clock() > deadline:
                    raise OutOfTime

            sync()
            t = clock()
            try:
                score_rows(batch, tokenizer, model, settings[mode], "random", emit)
            except OutOfTime:
                result["stopped_early"] = True
                break
            finally:
                sync()
                seconds[mode] += clock() - t
        if result["stopped_early"]:
            break

    # Only rows both modes finished are compared and counted.
    both = [k for k in sigmoids[FAITHFUL] if k in sigmoids[FAST]]
    n_rows = len(both)
    n_tokens = sum(len(ids[k]) for k in both)
    gflop = args.gflop_per_token or matmul_gflop_per_token(shape)
    measured: dict[str, Any] = {"rows": n_rows, "samples": len({k.split("/")[0] for k in both}), "tokens": n_tokens}
    for mode in (FAITHFUL, FAST):
        rows_done = len(sigmoids[mode])
        s = seconds[mode]
        measured[mode] = {
            "rows": rows_done,
            "tokens": sum(len(ids[k]) for k in sigmoids[mode]),
            "seconds": s,
            "rows_per_s": rows_done / s if s else None,
            "projected_minutes_all_rows": table["rows"] * s / rows_done / 60 if rows_done else None,
        }
        tok = measured[mode]["tokens"]
        # Faithful computes every token; fast skips shared prefixes and the last layer's other
        # positions, so its figure is "effective" (as if it had computed them all).
        measured[mode]["bf16_peak_fraction" if mode == FAITHFUL else "bf16_peak_fraction_effective"] = (
            tok * gflop * 1e9 / s / (args.peak_tflops * 1e12) if s else None
        )
    if n_rows:
        measured["fast_vs_faithful_speedup"] = (
            measured[FAST]["rows_per_s"] / measured[FAITHFUL]["rows_per_s"] if measured[FAITHFUL]["rows_per_s"] else None
        )
        faithful = [sigmoids[FAITHFUL][k] for k in both]
        measured["equality"] = compare_modes(faithful, [sigmoids[FAST][k] for k in both])
        measured["sigmoid_spread"] = {"min": min(faithful), "max": max(faithful), "distinct": len(set(faithful))}
        measured["non_finite"] = sum(1 for v in faithful if not math.isfinite(v))
    result["gflop_per_token"] = gflop
    result["peak_tflops"] = args.peak_tflops
    result["scoring"] = measured
    if cuda:
        dev = torch.device(args.device)
        result["memory_gib"] = {
            "weights": weights_bytes / 2**30,
            "peak_allocated_while_scoring": torch.cuda.max_memory_allocated(dev) / 2**30,
            "peak_reserved_while_scoring": torch.cuda.max_memory_reserved(dev) / 2**30,
        }
    del model
    if cuda:
        torch.cuda.empty_cache()
    if not args.no_hf_test:
        result["hf_cuda_test"] = run_hf_test(min(180.0, deadline - clock()))
    result["total_seconds"] = clock() - start
    failed = n_rows == 0 or measured.get("non_finite", 0) > 0 or result.get("hf_cuda_test", {}).get("outcome") == "failed"
    return result, 1 if failed else 0


def _shapes(shape: Shape) -> dict[str, tuple[int, ...]]:
    from charactereval_lib.charactereval.reward.checkpoint import expected_shapes
    from charactereval_lib.charactereval.reward.model import RMConfig

    return expected_shapes(RMConfig(shape.vocab, shape.hidden, shape.intermediate, shape.layers, shape.heads))


def print_summary(result: dict[str, Any]) -> None:
    m = result["scoring"]
    print(f"machine: {result['machine'].get('name', result['machine']['device'])}  shape: {result['shape']}  build {result['build_seconds']:.1f} s")
    print(f"rows compared: {m['rows']} ({m['samples']} samples, {m['tokens']} tokens){'  STOPPED EARLY' if result['stopped_early'] else ''}")
    for mode in ("faithful", "fast"):
        r = m[mode]
        if not r["rows"]:
            print(f"  {mode:8s}: no rows")
            continue
        frac = r.get("bf16_peak_fraction", r.get("bf16_peak_fraction_effective"))
        label = "of bf16 peak" if mode == "faithful" else "of bf16 peak (effective)"
        print(
            f"  {mode:8s}: {r['rows_per_s']:.2f} rows/s, projected {r['projected_minutes_all_rows']:.1f} min for "
            f"{result['length_table']['rows']} rows, {100 * frac:.1f}% {label}"
        )
    if "equality" in m:
        e = m["equality"]
        print(
            f"  fast/faithful: {m['fast_vs_faithful_speedup']:.2f}x; bitwise equal {e['exact_equal']}/{e['rows']} "
            f"({100 * e['exact_equal_fraction']:.1f}%), largest difference {e['max_diff_grid_steps']} bf16 grid steps"
        )
    if "memory_gib" in result:
        mem = result["memory_gib"]
        print(f"  memory: weights {mem['weights']:.1f} GiB, peak allocated {mem['peak_allocated_while_scoring']:.1f} GiB")
    if "hf_cuda_test" in result:
        print(f"  hf backend CUDA test: {result['hf_cuda_test']['outcome']}")
    print(f"total {result['total_seconds']:.0f} s")


# --- the anchor (real weights) ------------------------------------------------------------------


def anchor_check(rm: Path, device: str, *, data_dir: Path | None = None, n_boot: int = 200,
                 data: Any = None, files: dict[str, Path] | None = None) -> tuple[dict[str, Any], int]:
    """The five released generations scored by the checkpoint ``rm`` and set beside Table 4 by the
    board's anchor rule (``data``/``files`` replace the official ones, e.g. synthetic ones)."""
    import torch

    from charactereval_lib.charactereval.reproduce import anchor_verdict
    from charactereval_lib.engine.storage.pinned import DataError
    from charactereval_lib.pipeline.charactereval import reproduction

    if not Path(rm, "config.json").is_file():
        raise SystemExit(f"gpu_check: --anchor {rm}: not a checkpoint directory (no config.json); "
                         "`charactereval rm download --dir DIR` fetches BaichuanCharRM")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit(f"gpu_check: --device {device}: CUDA is not available (--device cpu runs the same path)")
    start = clock()
    try:
        make = reproduction(data_dir=data_dir, rm=str(rm), device=device, n_boot=n_boot, data=data, files=files)
    except DataError as exc:
        raise SystemExit(f"gpu_check: {exc}") from None
    with tempfile.TemporaryDirectory() as staging:
        document = make(Path(staging))
    verdict = anchor_verdict(document)
    result = {"what": "the CharacterEval anchor: the five released generations scored by the checkpoint, each "
                      "metric mean against Table 4 (the board's rule)",
              "machine": device_info(device), "rm": str(rm), "meaningless": document["meaningless"],
              "files": document["files"], "verdict": verdict, "total_seconds": clock() - start}
    return result, 0 if verdict["reproduced"] else 1


def print_anchor(result: dict[str, Any]) -> None:
    verdict = result["verdict"]
    print(f"anchor: checkpoint {result['rm']} on {result['machine'].get('name', result['machine']['device'])}"
          + (f"  MEANINGLESS: {result['meaningless']}" if result["meaningless"] else ""))
    files = {f["model"]: f for f in result["files"]}
    for model, m in verdict["models"].items():
        f = files.get(model, {})
        largest = m["largest"]
        worst = f", largest |delta| {abs(largest['delta']):.4f} ({largest['metric']})" if largest else ""
        print(f"  {model}: {f.get('file')} sha256 {f.get('sha256')}, {f.get('rows')} rows, {m['within']}/{m['metrics']} "
              f"metric means within {verdict['tolerance']:g} of Table 4{worst}")
        for out in m["outside"]:
            got = "not scored" if out["recomputed"] is None else f"{out['recomputed']:.4f} ({out['delta']:+.4f})"
            print(f"    {out['metric']}: paper {out['paper']:.3f}, ours {got}")
    word = "REPRODUCED" if verdict["reproduced"] else "NOT REPRODUCED"
    print(f"anchor {word}: {verdict['within']}/{verdict['metrics']} metric means within {verdict['tolerance']:g} of "
          f"Table 4 ({result['total_seconds']:.0f} s)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tiny", action="store_true", help="tiny shape (2 layers, hidden 64): the CPU path CI tests")
    parser.add_argument("--device", default=None, help="default: cuda, or cpu with --tiny")
    parser.add_argument("--rows", type=int, default=None, help="about this many rows (whole samples); default 320, 12 with --tiny")
    parser.add_argument("--strata", type=int, default=8)
    parser.add_argument("--batch-rows", type=int, default=40, help="rows per timed batch (the deadline is checked between batches)")
    parser.add_argument("--max-minutes", type=float, default=7.5)
    parser.add_argument("--peak-tflops", type=float, default=H200_BF16_PEAK_TFLOPS, help="the device's dense bf16 peak (default H200)")
    parser.add_argument("--gflop-per-token", type=float, default=None, help="default: 2 x the matrix weights of the shape (25.2 for the real one)")
    parser.add_argument("--lengths", type=Path, default=LENGTHS)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-hf-test", action="store_true", help="skip pytest tests/engine/generation/test_generation_hf.py -k cuda")
    parser.add_argument("--out", type=Path, default=None, help="result JSON (default benchmarks/results/gpu_check_<device>.json)")
    parser.add_argument("--make-lengths", action="store_true", help="rebuild --lengths from the official data and exit")
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--anchor", type=Path, metavar="RM_DIR", default=None,
                        help="run the CharacterEval anchor with this checkpoint instead (module docstring)")
    parser.add_argument("--n-boot", type=int, default=200, help="bootstrap resamples of the anchor's summaries")
    args = parser.parse_args(argv)
    if args.anchor:
        device = args.device or "cuda"
        result, status = anchor_check(args.anchor, device, data_dir=args.data_dir, n_boot=args.n_boot)
        out = args.out or RESULTS / f"gpu_check_anchor_{device.replace(':', '')}.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        print_anchor(result)
        print(f"wrote {out}")
        return status
    if args.make_lengths:
        from charactereval_lib.charactereval.data import locate_data_dir

        table = make_length_table(locate_data_dir(args.data_dir), args.lengths)
        print(f"{args.lengths}: {table['rows']} rows, {len(table['samples'])} samples, {table['tokens']} tokens")
        return 0
    args.device = args.device or ("cpu" if args.tiny else "cuda")
    args.rows = args.rows or (12 if args.tiny else 320)
    kind = "tiny_" if args.tiny else ""
    out = args.out or RESULTS / f"gpu_check_{kind}{args.device.replace(':', '')}.json"
    result, status = check(args)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print_summary(result)
    print(f"wrote {out}")
    return status


if __name__ == "__main__":
    sys.exit(main())
