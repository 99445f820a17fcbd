"""CoSER in ``charactereval batch``: the default plan's entries and stages (``run:``,
``summarize:``, ``report:``), plus what the default plan lacks: a pre-flight check and a
comparison.

The pre-flight runs for every CoSER entry before the first model of the batch starts, whatever
its benchmark, so that a CoSER endpoint that is down fails the batch in seconds instead of
after a CharacterEval model has run for an hour: each entry's role settings (models and their
rules), its data (the pinned test set and the critic prompts it reads), each role's API key
variable and each distinct endpoint. Two or more finished CoSER models get a comparison
(``coser compare``, with the first model's report settings).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from charactereval_lib.engine import faults
from charactereval_lib.engine.generation.base import ConfigError
from charactereval_lib.engine.registry.batching import BatchPlan, StagesModel
from charactereval_lib.engine.storage import runs
from charactereval_lib.engine.storage.pinned import DataError
from charactereval_lib.pipeline.coser import CoserReportSettings, coser_scenes


class CoserPlan(BatchPlan):
    def preflight(self, models: Sequence[StagesModel], config: Any) -> list[str]:
        """One line per problem: role settings, data, API key variables, endpoints."""
        from charactereval_lib.coser.simulation import ROLES
        from charactereval_lib.engine.generation.openai_backend import read_api_key

        problems: list[str] = []
        endpoints: dict[str, str] = {}
        for model in models:
            where = f"{config.path}: model {model.name!r}"
            settings = model.settings["run"]
            try:
                simulation = settings.simulation_settings()
                coser_scenes(settings, model.data_dir)
            except (DataError, ConfigError, runs.RunError, ValueError, OSError) as exc:
                problems.append(f"{where}: {exc}")
                continue
            if settings.backend != "openai":
                continue
            keys: dict[str, list[str]] = {}
            for role in ROLES:
                spec = simulation.role(role)
                keys.setdefault(spec.api_key_env, []).append(role)
                if spec.base_url:
                    endpoints.setdefault(spec.base_url, where)
            for key_env, roles in keys.items():
                try:
                    read_api_key(key_env)
                except ConfigError as exc:
                    problems.append(f"{where}: the {', '.join(roles)} role(s): {exc}")
        for base_url, where in endpoints.items():
            found = faults.endpoint_problem(base_url)
            if found:
                problems.append(f"{where}: {found}")
        return problems

    def compare(self, models: Sequence[StagesModel], config: Any) -> str:
        from charactereval_lib.pipeline.coser import coser_compare

        run_dirs = [runs.RunDir.resolve(config.output_dir / model.name) for model in models]
        report = models[0].settings.get("report") or CoserReportSettings()
        return str(coser_compare(run_dirs, config.comparison_dir, report).html)
