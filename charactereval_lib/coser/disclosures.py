"""What a reader must be told wherever CoSER judge scores are shown (seed 004 I03-I10, T04-T06,
T12): how well the judge agrees with people, when the judge grades its own model or family,
which actors upstream de-repeats, and what the reproduction leaves out.

Reports, comparisons, ``coser summarize``, the reproduction and the board all take their lines
from here, so the wording and the numbers (read from the shipped paper tables) are one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from charactereval_lib.coser.facts import judge_agreement

# Model families by name prefix (the name after a router's last "/", lower case). A judge tends
# to favour its own outputs and its family's; the family is the vendor's line of models.
FAMILIES = (
    ("OpenAI", ("gpt-", "gpt4", "chatgpt", "o1", "o3", "o4")),
    ("Anthropic Claude", ("claude",)),
    ("Google Gemini", ("gemini", "gemma")),
    ("DeepSeek", ("deepseek",)),
    ("Qwen", ("qwen", "qwq")),
    ("Meta Llama", ("llama",)),
    ("Mistral", ("mistral", "mixtral", "ministral", "codestral")),
)


def agreement_line() -> str:
    """The judge-human agreement of the paper's own check (Table 5)."""
    a = judge_agreement()
    return (f"Judge scores: in the CoSER paper's own check the GPT-4o judge agreed with human raters on "
            f"{a['judge']:.1f}% of the compared pairs, less often than BLEU ({a['BLEU']:.1f}%) and ROUGE-L "
            f"({a['ROUGE-L']:.1f}%) did (the paper's Table 5; its human labels are not released, so the agreement "
            "cannot be measured again here).")


def _bare(model: str | None) -> str:
    return (model or "").rsplit("/", 1)[-1].strip().lower()


def family(model: str | None) -> str | None:
    """The model's family by name prefix (``FAMILIES``), None when unknown."""
    name = _bare(model)
    return next((label for label, prefixes in FAMILIES if name.startswith(prefixes)), None)


def self_preference(actor: str | None, judge: str | None) -> str | None:
    """The warning for a run whose actor is the judge's model or of its family (None: neither)."""
    if not actor or not judge:
        return None
    same = _bare(actor) == _bare(judge)
    shared = family(actor)
    if not same and (shared is None or shared != family(judge)):
        return None
    what = "is the judge's own model" if same else f"is of the judge's model family ({shared})"
    return (f"Self-preference: the actor {actor!r} {what}, the judge being {judge!r}. A judge tends to favour its "
            "own and its family's replies: in the CoSER paper human raters placed GPT-4o third where the GPT-4o "
            "judge placed it first, which the authors attribute to self-preference. Compare this run with runs of "
            "other families with that in mind.")


def repetition_line(actor_rules: Mapping[str, Any] | None) -> str | None:
    """The asymmetric de-repetition rule, as it applied to this run's actor (None: not recorded)."""
    if not actor_rules or "fix_repetition" not in actor_rules:
        return None
    side = ("were passed through it" if actor_rules["fix_repetition"] else
            "were not (its name is a GPT or Claude model's, or the rule was switched off)")
    return ("Asymmetric rule: upstream removes repeated passages from the replies of every actor except GPT and "
            f"Claude models (fix_repeation) before they are stored and judged; this run's actor replies {side}. "
            "Runs on the two sides of the rule are not judged on equally treated text.")


BOARD_SELF_PREFERENCE = ("A row whose actor is the judge's model or of its family (GPT-4o judged by GPT-4o, the "
                         "paper's anchor row included) is graded by a judge that tends to favour it; the run's "
                         "report says so.")

PARTIAL = ("A partial reproduction: the workbench reproduces the given-circumstance acting scores of the paper's "
           "main table (four judged dimensions, their average, BLEU and ROUGE-L) and their in-domain and "
           "out-of-domain halves. It does not reproduce the win rates against GPT-3.5 and GPT-4o, the "
           "retrieval-augmented runs, the human evaluation or the judge-human agreement (their labels are not "
           "released), nor the paper's other benchmarks.")


def run_disclosures(manifest: Mapping[str, Any]) -> list[str]:
    """What applies to one run's judge scores: self-preference (where the actor is the judge's
    model or family) and the de-repetition rule as it applied to the actor. ``agreement_line``
    applies to every run and is shown once beside them."""
    coser = manifest.get("coser") or {}
    models = coser.get("models") or {}
    actor_rules = (((coser.get("identity") or {}).get("roles") or {}).get("actor") or {}).get("rules")
    lines = [self_preference(models.get("actor"), models.get("judge")), repetition_line(actor_rules)]
    return [line for line in lines if line]
