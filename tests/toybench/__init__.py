"""A toy third benchmark, defined only here: it proves that a benchmark package outside the
library registers (``$CHARACTEREVAL_BENCHMARKS=tests.toybench:BENCHMARK``) and runs through the
library's own command line and ``batch`` without any library change.

It has a leaderboard board and explorer (``board.py``) and a notebook of its own
(``notebooks/``), found through its declaration.

Its protocol: each line of ``questions.jsonl`` in its data directory (``{"id", "question",
"answer"}``) is asked of the model under test through an OpenAI-compatible endpoint; a reply is
correct when it equals the answer. Its runs hold ``run.json``, ``answers.jsonl``,
``toy_summary.json`` and ``report.html``. Its reproduction (``reproduce.py``) marks released
answer files again beside a toy paper's accuracies.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from charactereval_lib.engine.registry.benchmarks import Benchmark, Notebook, Option, Reproduction

NAME = "toybench"
PROTOCOL_VERSION = "toybench-1"
STAGES = "tests.toybench.stages"
REPRODUCE = "tests.toybench.reproduce"


def recognises(manifest: dict[str, Any]) -> bool:
    return manifest.get("benchmark") == NAME


BENCHMARK = Benchmark(
    name=NAME,
    title="ToyBench",
    protocol_versions=(PROTOCOL_VERSION,),
    recognises=recognises,
    readers="`charactereval toybench summarize` and `toybench report`",
    command="toybench",
    command_help="a toy benchmark of the tests: run, summarize, report",
    settings={"run": f"{STAGES}:RunSettings", "summarize": f"{STAGES}:SummarizeSettings",
              "report": f"{STAGES}:ReportSettings"},
    stages={"run": f"{STAGES}:run", "summarize": f"{STAGES}:summarize", "report": f"{STAGES}:report"},
    notebooks={"toy-answers": Notebook("toy_answers.ipynb")},
    notebook_dir=Path(__file__).parent / "notebooks",
    board="tests.toybench.board:SPEC",
    explorer="tests.toybench.board:explorer",
    report="report.html",
    data={"locate": f"{STAGES}:locate"},
    reproduction=Reproduction(f"{REPRODUCE}:prepare", "ToyBench",
                              options=(Option("released", "the folder of released answer files (default: "
                                                          "DATA_DIR/released)", metavar="DIR"),),
                              notes=f"{REPRODUCE}:notes", file_columns=f"{REPRODUCE}:file_columns"),
)
