"""Default LLM-judge specs for the 12 CharacterEval metrics, one YAML file per metric.

Each spec grades one reply 1-5 (`cot_classify`, evals parser) and needs these sample fields:
`role` (the character's name), `profile` (the profile text, as the reward model sees it),
`context` (the dialogue so far) and `response` (the reply being judged). The texts were written
for this project from the paper's metric definitions and the annotation guide.

`battles/role_play.yaml` is the pairwise spec for battles (`engine.grading.battles`): it needs
`role`, `profile` and `context`; the battle functions add the two replies in both orders.
`best/role_play.yaml` picks the best of n replies in one prompt (`engine.grading.multicomp`,
evals' `best`): the same fields, the numbered replies in `response`, choices `from_n`.
"""

from __future__ import annotations

from pathlib import Path

from charactereval_lib.engine.grading.spec import ModelGradedSpec, load_spec

SPEC_DIR = Path(__file__).resolve().parent
BATTLE_SPEC = SPEC_DIR / "battles" / "role_play.yaml"
BEST_SPEC = SPEC_DIR / "best" / "role_play.yaml"
JUDGE_FIELDS = ("role", "profile", "context", "response")
BATTLE_FIELDS = ("role", "profile", "context")


def default_spec_path(metric_en: str) -> Path:
    """The shipped spec file of one metric (English name as in `protocol.METRICS`)."""
    path = SPEC_DIR / f"{metric_en}.yaml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in SPEC_DIR.glob("*.yaml")))
        raise KeyError(f"no default judge spec for metric {metric_en!r}; known: {known}")
    return path


def load_default_specs() -> dict[str, ModelGradedSpec]:
    """All shipped specs, keyed by English metric name."""
    return {path.stem: load_spec(path) for path in sorted(SPEC_DIR.glob("*.yaml"))}


def load_battle_spec() -> ModelGradedSpec:
    """The shipped pairwise spec (choices 1 / 2 / 0 = first / second / tie)."""
    return load_spec(BATTLE_SPEC)


def load_best_spec() -> ModelGradedSpec:
    """The shipped multicomp spec (choices 1..n: the position of the best reply)."""
    return load_spec(BEST_SPEC)
