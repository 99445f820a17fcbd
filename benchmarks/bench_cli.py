"""CLI start-up: how long ``charactereval --help`` and each command's ``--help`` take to print.

Each is a fresh process (``python -m charactereval_lib.cli ... --help``), timed wall-clock from
start to exit, interleaved over ``--repeat`` rounds; the median and the best are reported, beside
a bare ``python -c pass`` (the interpreter's own start-up) and the time of importing the CLI
module alone. With ``--baseline-python`` (the interpreter of another install, e.g. a checkout of
an older commit with its own environment) the same commands are timed with it in the same
rounds, and the ratios printed. Target (issue 22): under 0.5 s for every command's help.

    python benchmarks/bench_cli.py [--repeat 5] [--baseline-python PATH] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

COMMANDS = (
    [], ["generate"], ["transform"], ["score"], ["summarize"], ["report"], ["compare"], ["batch"],
    ["data", "fetch"], ["rm", "download"], ["coser", "run"], ["coser", "summarize"], ["coser", "report"],
)


def timed(argv: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--baseline-python", metavar="PATH", help="also time this interpreter's charactereval")
    parser.add_argument("--json", metavar="FILE", help="also write the figures here")
    args = parser.parse_args()
    pythons = {"ours": sys.executable, **({"baseline": args.baseline_python} if args.baseline_python else {})}
    cases = {"python -c pass": ["-c", "pass"], "import charactereval_lib.cli": ["-c", "import charactereval_lib.cli"]}
    cases.update({" ".join(["charactereval", *c, "--help"]): ["-m", "charactereval_lib.cli", *c, "--help"]
                  for c in COMMANDS})
    out = Path(args.json).resolve() if args.json else None
    load_at_start = os.getloadavg()
    times: dict[str, dict[str, list[float]]] = {who: {name: [] for name in cases} for who in pythons}
    # The child must not import this checkout by accident: run it from a neutral directory.
    neutral = Path("/")
    os.chdir(neutral)
    for _ in range(args.repeat):
        for name, argv in cases.items():
            for who, python in pythons.items():
                times[who][name].append(timed([python, *argv]))
    result = {"cpu_count": os.cpu_count(), "load_average_1_5_15_at_start": [round(x, 2) for x in load_at_start],
              "load_average_1_5_15_at_end": [round(x, 2) for x in os.getloadavg()], "repeat": args.repeat,
              "pythons": pythons, "seconds": {}}
    print(f"{os.cpu_count()} CPU cores, load average {load_at_start[0]:.1f} at start; median (best) of {args.repeat}")
    for name in cases:
        row = {who: {"median": round(statistics.median(t[name]), 3), "best": round(min(t[name]), 3)}
               for who, t in times.items()}
        result["seconds"][name] = row
        line = f"  {name:<42} ours {row['ours']['median']:.3f} s ({row['ours']['best']:.3f})"
        if "baseline" in row:
            line += (f"  baseline {row['baseline']['median']:.3f} s ({row['baseline']['best']:.3f})  "
                     f"ours/baseline {row['ours']['median'] / row['baseline']['median']:.2f}")
        print(line)
    helps = [r["ours"]["median"] for name, r in result["seconds"].items() if name.endswith("--help")]
    result["slowest_help_median_s"] = max(helps)
    print(f"slowest --help (median): {max(helps):.3f} s  (target < 0.5 s)")
    if out:
        out.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
