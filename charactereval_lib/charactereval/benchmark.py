"""CharacterEval's declaration in the benchmark registry (``engine.registry.benchmarks``).

Its stages live in the pipeline (``charactereval_lib.pipeline``), named here by reference and
imported on first use; its commands are the command line's own top-level ones (``generate``,
``transform``, ``score``, ``summarize``, ``report``, ...), so it declares no subcommand.
"""

from __future__ import annotations

from typing import Any

from charactereval_lib.charactereval import layout
from charactereval_lib.charactereval.protocol import PROTOCOL_VERSION
from charactereval_lib.engine.registry.benchmarks import Benchmark, Notebook, Option, Reproduction

NAME = "charactereval"


def recognises(manifest: dict[str, Any]) -> bool:
    """A CharacterEval manifest: no other benchmark named (runs written before manifests named
    their benchmark), and a CharacterEval protocol version."""
    version = str(manifest.get("protocol_version", ""))
    return manifest.get("benchmark", NAME) == NAME and version.startswith("charactereval-")


def owns(run: layout.CharacterEvalRun) -> bool:
    """A run directory of this benchmark: its manifest names no other benchmark, or it has
    generations without a manifest yet."""
    if run.manifest_path.exists():
        return run.manifest().get("benchmark", NAME) == NAME
    return run.generations.exists()


BENCHMARK = Benchmark(
    name=NAME,
    title="CharacterEval",
    protocol_versions=(PROTOCOL_VERSION,),
    recognises=recognises,
    owns=owns,
    readers="`charactereval summarize`, `report`, `compare`, `battle` and `panel`",
    settings={"summarize": "charactereval_lib.pipeline.settings:SummarizeSettings",
              "report": "charactereval_lib.pipeline.settings:ReportSettings"},
    stages={"summarize": "charactereval_lib.pipeline.charactereval:summarize",
            "report": "charactereval_lib.pipeline.charactereval:report"},
    data={"fetch": "charactereval_lib.pipeline.data:data_fetch",
          "verify": "charactereval_lib.pipeline.data:data_verify",
          "locate": "charactereval_lib.charactereval.data:locate_data_dir"},
    notebooks={"analyse": Notebook("analyse.ipynb", data=True),
               "compare": Notebook("compare.ipynb", several=True, data=True),
               "generate": Notebook("generate.ipynb", data=True, existing=False),
               "score": Notebook("score.ipynb", data=True)},
    board="charactereval_lib.charactereval.eligibility:SPEC",
    board_inputs="charactereval_lib.pipeline.charactereval:optional_data",
    explorer="charactereval_lib.charactereval.explorer:explorer",
    report="report.html",
    batch="charactereval_lib.pipeline.charactereval_batch:CharacterEvalPlan",
    reproduction=Reproduction("charactereval_lib.pipeline.charactereval:reproduction", "CharacterEval",
                              options=(Option("rm", "the reward-model checkpoint that scores the replies",
                                              metavar="DIR"),
                                       Option("device", "torch device for the reward model (e.g. cuda)")),
                              keywords=("data", "files"),
                              notes="charactereval_lib.charactereval.reproduce:notes",
                              file_columns="charactereval_lib.charactereval.reproduce:file_columns",
                              sections="charactereval_lib.charactereval.reproduce:sections"),
    errors=("charactereval_lib.charactereval.prompts:ProtocolError",
            "charactereval_lib.charactereval.reward.errors:CheckpointError",
            "charactereval_lib.charactereval.reward.errors:TokenizerError",
            "charactereval_lib.charactereval.reward.errors:DownloadError"),
)
