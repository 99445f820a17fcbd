"""The pipeline as typed Python calls: the one API behind the CLI, batch and notebooks.

Each stage takes a run (a name under ``./outputs`` or a path) and typed settings, does its work
through the engine and the protocol modules, and returns a result object carrying the counts a
caller prints. Settings are frozen pydantic models (``engine.registry.settings.Settings``) that also load from
YAML mappings, where an unknown key or a wrong type is a one-line error that names it. Nothing
here prints; nothing here parses a command line.

    from charactereval_lib import pipeline
    run = "outputs/demo"
    pipeline.generate(run, pipeline.GenerateSettings(backend="offline", model="demo", limit=20))
    pipeline.transform(run)
    pipeline.score(run, pipeline.ScoreSettings(rm="models/tiny-rm"))
    print(pipeline.summarize(run).summary["dimensions"])
    pipeline.report(run)

One module per concern: ``settings`` (the typed settings), ``outcomes`` (what stages return),
``charactereval`` (its stages), ``data`` (the official data, the doctor, the reward-model
checkpoint), ``judging`` (LLM judges, battles, best of n, meta-evaluation, panels), ``coser`` (CoSER's
settings and stages), ``board`` (the leaderboard) and ``apps`` (``batch`` and ``reproduce``, the
applications of ``charactereval_lib.apps``); every public name is re-exported here.
``charactereval_batch`` (CharacterEval's batch plan) is not: ``batch`` finds it through the
benchmark registry.
Stage bodies import the protocol and engine modules they use when they run: the command line
imports this package to build its parser, and ``--help`` must not pay for numpy, torch or the
HTTP clients.
"""

from __future__ import annotations

from charactereval_lib.engine.registry.settings import SettingsError
from charactereval_lib.engine.storage import runs
from charactereval_lib.pipeline.apps import batch, batch_config, batch_preflight, batch_summary_lines, reproduce
from charactereval_lib.pipeline.board import LeaderboardOutcome, leaderboard
from charactereval_lib.pipeline.charactereval import (
                                                 GenerateResult,
                                                 ImportOutcome,
                                                 ScoreOutcome,
                                                 TransformOutcome,
                                                 compare,
                                                 compare_problems,
                                                 export_official,
                                                 generate,
                                                 import_official,
                                                 overview,
                                                 report,
                                                 run_warnings,
                                                 score,
                                                 summarize,
                                                 transform,
)
from charactereval_lib.pipeline.coser import (
                                                 COSER_BACKENDS,
                                                 COSER_ROLES,
                                                 COSER_RULES,
                                                 CoserReportSettings,
                                                 CoserRunOutcome,
                                                 CoserRunSettings,
                                                 CoserSummarizeSettings,
                                                 coser_analysis,
                                                 coser_compare,
                                                 coser_data_dir,
                                                 coser_data_facts,
                                                 coser_data_fetch,
                                                 coser_data_use,
                                                 coser_data_verify,
                                                 coser_dry_run,
                                                 coser_import,
                                                 coser_report,
                                                 coser_run,
                                                 coser_summarize,
)
from charactereval_lib.pipeline.data import (
                                                 DataCheck,
                                                 DataUse,
                                                 DoctorOutcome,
                                                 data_fetch,
                                                 data_groups,
                                                 data_subset,
                                                 data_use,
                                                 data_verify,
                                                 doctor,
                                                 rm_check,
                                                 rm_download,
                                                 rm_make_tiny,
)
from charactereval_lib.pipeline.judging import (
                                                 COMPARED_EVAL_TYPES,
                                                 EVAL_TYPES_SUMMARY,
                                                 BattleOutcome,
                                                 BestOutcome,
                                                 EvalTypesOutcome,
                                                 JudgeOutcome,
                                                 MetaevalOutcome,
                                                 PanelOutcome,
                                                 RmTrainOutcome,
                                                 battle,
                                                 best,
                                                 convert_rm_train,
                                                 judge_score,
                                                 metaeval,
                                                 metaeval_eval_types,
                                                 panel,
)
from charactereval_lib.pipeline.outcomes import COMPARISON_HTML, COMPARISON_NOTEBOOK, FIGURES_DIR, REPORT_HTML, REPORT_NOTEBOOK, ReportOutcome, SummaryOutcome
from charactereval_lib.pipeline.settings import (
                                                 DEFAULT_BASELINES,
                                                 ENGINES,
                                                 GenerateSettings,
                                                 JudgeSettings,
                                                 PanelSettings,
                                                 ReportSettings,
                                                 ScoreSettings,
                                                 SummarizeSettings,
)

__all__ = [
    "BattleOutcome", "BestOutcome", "COMPARED_EVAL_TYPES", "COMPARISON_HTML", "COMPARISON_NOTEBOOK",
    "COSER_BACKENDS", "COSER_ROLES",
    "COSER_RULES", "CoserReportSettings", "CoserRunOutcome", "CoserRunSettings", "CoserSummarizeSettings",
    "DEFAULT_BASELINES", "DataCheck", "DataUse", "DoctorOutcome", "ENGINES", "EVAL_TYPES_SUMMARY", "FIGURES_DIR", "GenerateResult", "GenerateSettings",
    "EvalTypesOutcome", "ImportOutcome", "JudgeOutcome", "JudgeSettings", "LeaderboardOutcome", "MetaevalOutcome", "PanelOutcome",
    "PanelSettings", "REPORT_HTML", "REPORT_NOTEBOOK", "ReportOutcome", "ReportSettings", "RmTrainOutcome",
    "ScoreOutcome", "ScoreSettings", "SettingsError", "SummarizeSettings", "SummaryOutcome",
    "TransformOutcome", "batch", "batch_config", "batch_preflight", "batch_summary_lines", "battle", "best",
    "compare", "compare_problems", "convert_rm_train", "coser_analysis", "coser_compare",
    "coser_data_dir", "coser_data_facts", "coser_data_fetch", "coser_data_use", "coser_data_verify", "coser_dry_run", "coser_import", "coser_report",
    "coser_run", "coser_summarize", "data_fetch", "data_groups", "data_subset", "data_use", "data_verify", "doctor",
    "export_official", "generate", "import_official", "judge_score", "leaderboard", "metaeval", "metaeval_eval_types", "overview", "panel",
    "report", "reproduce", "rm_check", "rm_download", "rm_make_tiny", "run_warnings", "runs", "score", "summarize", "transform",
]
