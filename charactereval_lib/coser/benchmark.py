"""CoSER's declaration in the benchmark registry (``engine.registry.benchmarks``).

Its stages and settings live in the pipeline (``charactereval_lib.pipeline.coser``), named here
by reference and imported on first use; its commands are ``charactereval coser ...``.
"""

from __future__ import annotations

from typing import Any

from charactereval_lib.coser.versions import VERSIONS
from charactereval_lib.engine.registry.benchmarks import Benchmark, Notebook, Option, Reproduction

NAME = "coser"
# What a run holds besides run.json (``coser.run`` writes them): every turn, every scene's
# simulation, every critique, and the summary.
TURNS = "coser_turns.jsonl"
SCENES = "coser_scenes.jsonl"
JUDGEMENTS = "coser_judgements.jsonl"
SUMMARY = "coser_summary.json"


def recognises(manifest: dict[str, Any]) -> bool:
    return manifest.get("benchmark") == NAME


PIPELINE = "charactereval_lib.pipeline.coser"
BENCHMARK = Benchmark(
    name=NAME,
    title="CoSER",
    protocol_versions=tuple(sorted(VERSIONS)),
    recognises=recognises,
    readers="`charactereval coser summarize`, `coser report` and `coser compare`",
    command="coser",
    settings={"run": f"{PIPELINE}:CoserRunSettings", "summarize": f"{PIPELINE}:CoserSummarizeSettings",
              "report": f"{PIPELINE}:CoserReportSettings"},
    stages={"run": f"{PIPELINE}:coser_run", "summarize": f"{PIPELINE}:coser_summarize",
            "report": f"{PIPELINE}:coser_report"},
    data={"fetch": f"{PIPELINE}:coser_data_fetch", "verify": f"{PIPELINE}:coser_data_verify",
          "locate": "charactereval_lib.coser.data:locate_data_dir"},
    notebooks={"coser-report": Notebook("coser_report.ipynb"),
               "coser-compare": Notebook("coser_compare.ipynb", several=True)},
    board="charactereval_lib.coser.eligibility:SPEC",
    explorer="charactereval_lib.coser.explorer:explorer",
    report="report.html",
    batch="charactereval_lib.pipeline.coser_batch:CoserPlan",
    reproduction=Reproduction(f"{PIPELINE}:coser_reproduction", "CoSER given-circumstance acting",
                              options=(Option("no_metrics", "skip BLEU/ROUGE-L (the slow part)", flag=True),),
                              notes="charactereval_lib.coser.reproduce:notes",
                              file_columns="charactereval_lib.coser.reproduce:file_columns",
                              sections="charactereval_lib.coser.reproduce:sections"),
)
