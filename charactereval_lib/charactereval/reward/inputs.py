"""Protocol step S6 (text): the reward model's input text for one (sample, metric) row."""

from __future__ import annotations

from typing import Any

from charactereval_lib.charactereval.prompts import profile_text
from charactereval_lib.charactereval.protocol import RM_CONTEXT, RM_DIMENSION, RM_RESPONSE, RM_ROLEINFO


def build_rm_text(profile: dict[str, Any], context: str, model_output: str, metric_zh: str) -> str:
    """S6: ``"<RoleInfo>\\n\\n" + str(profile) + "\\n\\n<Context>\\n\\n" + context +
    "\\n\\n<Response>\\n\\n" + model_output + "\\n\\n<Dimension>\\n\\n" + metric_zh``.

    Plain concatenation, nothing stripped: the raw context string (not the S3 messages), the
    S5 first line of the reply (its "role：" prefix kept), the metric's Chinese name as in
    id2metric. The profile text is S7's ``str(dict)``."""
    return (
        RM_ROLEINFO
        + profile_text(profile)
        + RM_CONTEXT
        + context
        + RM_RESPONSE
        + model_output
        + RM_DIMENSION
        + metric_zh
    )
