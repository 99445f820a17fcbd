"""The CharacterEval protocol as constants: version, metrics, dimensions and fixed strings.

Every string here is a fact of the official protocol (the generation script's prompts, S3, and
the reward model's input template, S6) and must be reproduced byte for byte. A change to a protocol
step that can move a score bumps PROTOCOL_VERSION. What the seeds leave to the platform (decoding,
retries, and whether S5 removes a reasoning model's leading ``<think>`` block, seed 001 row 10
and U11) is no step of the protocol: each run records its own choice beside the version, resumes
only under it, and the board separates runs by it (docs/platform-rules.md#thinking-blocks).
"""

from __future__ import annotations

from dataclasses import dataclass

PROTOCOL_VERSION = "charactereval-1.0"

# Full-width colon (U+FF1A) separates speaker and utterance in contexts and prompts.
COLON = "\uff1a"


@dataclass(frozen=True)
class Dimension:
    key: str
    name: str


CHARACTER_CONSISTENCY = Dimension("character_consistency", "Character Consistency")
CONVERSATIONAL_ABILITY = Dimension("conversational_ability", "Conversational Ability")
ROLEPLAY_ATTRACTIVENESS = Dimension("roleplay_attractiveness", "Role-playing Attractiveness")
DIMENSIONS: tuple[Dimension, ...] = (
    CONVERSATIONAL_ABILITY,
    CHARACTER_CONSISTENCY,
    ROLEPLAY_ATTRACTIVENESS,
)


@dataclass(frozen=True)
class Metric:
    metric_en: str
    metric_zh: str
    abbr: str
    dimension: Dimension


# Names exactly as in id2metric; abbreviations as in the paper; dimensions as in Table 4.
METRICS: tuple[Metric, ...] = (
    Metric("Fluency", "对话流利度", "Flu", CONVERSATIONAL_ABILITY),
    Metric("Coherence", "对话连贯性", "Coh", CONVERSATIONAL_ABILITY),
    Metric("Consistency", "对话一致性", "Cons", CONVERSATIONAL_ABILITY),
    Metric("Exposure", "知识曝光度", "KE", CHARACTER_CONSISTENCY),
    Metric("Accuracy", "知识准确率", "KA", CHARACTER_CONSISTENCY),
    Metric("Hallucination", "知识幻觉性", "KH", CHARACTER_CONSISTENCY),
    Metric("Behavior", "行为一致性", "PB", CHARACTER_CONSISTENCY),
    Metric("Utterance", "言语一致性", "PU", CHARACTER_CONSISTENCY),
    Metric("Humanlikeness", "类人程度", "HL", ROLEPLAY_ATTRACTIVENESS),
    Metric("Communication_skills", "交流技巧", "CS", ROLEPLAY_ATTRACTIVENESS),
    Metric("Diversity", "表现多样性", "ED", ROLEPLAY_ATTRACTIVENESS),
    Metric("Empathy", "共情度", "Emp", ROLEPLAY_ATTRACTIVENESS),
)
METRIC_BY_EN: dict[str, Metric] = {m.metric_en: m for m in METRICS}


def metrics_of(dimension: Dimension) -> tuple[Metric, ...]:
    return tuple(m for m in METRICS if m.dimension == dimension)


# S3 strings are joined by concatenation around the role name (never str.format: a name could
# hold braces). First user message: profile repr + INSTRUCTION_HEAD + role + INSTRUCTION_TAIL.
INSTRUCTION_HEAD = "\n现在请你扮演一个角色扮演专家。请你根据上述信息扮演"
INSTRUCTION_TAIL = "进行对话。\n"
# First assistant message: ACK_HEAD + role + ACK_TAIL, then ROLE_SPEAKS_FIRST + the role's first
# utterance (without its "name：" prefix) when the role speaks first.
ACK_HEAD = "好的！现在我来扮演"
ACK_TAIL = "。"
ROLE_SPEAKS_FIRST = "我首先发话："

# S6: the reward-model input template, filled by plain concatenation.
RM_ROLEINFO = "<RoleInfo>\n\n"
RM_CONTEXT = "\n\n<Context>\n\n"
RM_RESPONSE = "\n\n<Response>\n\n"
RM_DIMENSION = "\n\n<Dimension>\n\n"
RM_MAX_TOKENS = 4096
RM_EOS_ID = 2

# S5: the failure marker that API generation scripts write; dropped like None.
ERROR_OUTPUT = "ERROR"

# The paper's 13th column cannot be reproduced: its questionnaire, labels and code were never released.
MBTI_NOT_REPRODUCED = (
    "not reproduced: the MBTI questionnaire, the 54 ground-truth labels, the prompts and "
    "the scoring code were never released"
)
