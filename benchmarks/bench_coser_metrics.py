"""ROUGE-L of CoSER simulations: ``coser.metrics.rouge_l`` (numpy) against the ``rouge`` package's
pure-Python one (what the workbench used before issue 23), on real texts.

The texts are the released simulations of the paper-era result files (``upstream/rebuttal-d77a6d2/
exp/evaluation/id_set_*.json`` in $COSER_DATA_DIR: 7 models x 100 scenes) against their scenes'
reference conversations, as ``coser import`` computes them. Both implementations run on the same
``--scenes`` texts (default: all 700), in this process; the benchmark prints seconds per scene of
each, the ratio, and whether every value is bit-for-bit the same. Needs the ``rouge`` package (the
test extra) for the "before" side; without it only ours is timed.

    python benchmarks/bench_coser_metrics.py [--scenes 700] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from charactereval_lib.coser.data import load_test_set, locate_data_dir
from charactereval_lib.coser.judge import reference_str
from charactereval_lib.coser.metrics import rouge_l
from charactereval_lib.coser.official import CASES_KEYS, _model_section, _pick
from charactereval_lib.coser.versions import COSER_PAPER

RELEASED = Path("upstream") / "rebuttal-d77a6d2" / "exp" / "evaluation"


def released_pairs() -> list[tuple[str, str]]:
    """(simulation text, reference text) of every released scene, file by file."""
    root = locate_data_dir()
    scenes = {s.key: s for s in load_test_set(root)}
    pairs = []
    for path in sorted((root / RELEASED).glob("id_set_*.json")):
        _, cases = _pick(json.loads(path.read_text(encoding="utf-8")), CASES_KEYS, str(path))
        try:
            _, section = _model_section(cases, None, str(path))
        except Exception:  # the *-no_length_penalty files hold no actor section
            continue
        pairs += [(case["simulation_text"], reference_str(scenes[key].raw["dialogues"], COSER_PAPER))
                  for key, case in section.items()]
    return pairs


def package_rouge_l(hypothesis: str, reference: str) -> float:
    from rouge import Rouge

    return float(Rouge(metrics=["rouge-l"]).get_scores(hypothesis, reference)[0]["rouge-l"]["f"])


def timed(fn, pairs) -> tuple[list[float], float]:
    started = time.process_time()
    values = [fn(h, r) for h, r in pairs]
    return values, time.process_time() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scenes", type=int, default=700)
    parser.add_argument("--json", metavar="FILE", help="also write the figures here")
    args = parser.parse_args()
    load_at_start = os.getloadavg()
    pairs = released_pairs()[: args.scenes]
    ours, ours_s = timed(rouge_l, pairs)
    result = {"scenes": len(pairs), "cpu_count": os.cpu_count(),
              "load_average_1_5_15_at_start": [round(x, 2) for x in load_at_start],
              "ours_cpu_s": round(ours_s, 2), "ours_ms_per_scene": round(1000 * ours_s / len(pairs), 2)}
    try:
        import rouge  # noqa: F401
    except ImportError:
        print("the rouge package is not installed (test extra): only ours was timed")
    else:
        before, before_s = timed(package_rouge_l, pairs)
        result.update(package_cpu_s=round(before_s, 2), package_ms_per_scene=round(1000 * before_s / len(pairs), 2),
                      speedup=round(before_s / ours_s, 1),
                      bitwise_equal=sum(repr(a) == repr(b) for a, b in zip(ours, before)))
    result["load_average_1_5_15_at_end"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
