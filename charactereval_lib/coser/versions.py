"""The two CoSER protocol versions as one typed settings object.

``coser-paper`` is the paper-era code (commit 93c1474, ``eval_reproduce.py``); ``coser-head``
is upstream HEAD (624efc5, ``main.py``). Every behavioural difference between them is an
explicit field here, so a run records exactly which rule it followed; docs/coser-versions.md
lists each with the commit that introduced it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal


@dataclass(frozen=True)
class ProtocolVersion:
    name: str
    commit: str
    # Actor prompt: which key of test_set `key_characters[]` holds the inner thoughts. HEAD reads
    # `motivation`, which the test set never has, so its prompts carry no thoughts (d7cee90).
    thought_key: Literal["thought", "motivation"]
    # Simulation: the stored/broadcast actor message gets a `Name: ` prefix (paper only).
    store_speaker_prefix: bool
    # NSP prompt: HEAD appends an `===Output Format===` block (958f962).
    nsp_output_format: bool
    # NSP reply parsing: paper `split(':')[0]`; HEAD `extract_nsp` regex, then the split.
    nsp_parser: Literal["split", "extract_nsp"]
    # On an invalid NSP prediction HEAD re-appends the NSP system prompt as a user message.
    nsp_reinject_system_prompt: bool
    # remove_inner_thoughts also drops <role_thinking>/<system_thinking>/< think> blocks (958f962).
    strip_thinking_tags: bool
    # Model-name rule for the name suffix that agent.py appends (the reply starts with the name).
    name_suffix_rule: Literal["paper", "head"]
    # Model-name rule for dropping the output example (CoSER fine-tuned actors).
    no_output_example_rule: Literal["paper", "head"]
    # Paper reseeds random(42) at the start of each test file; HEAD only at import.
    reseed_per_test_file: bool
    # Score: HEAD clips each dimension score at 100 (0e11992); paper has no upper clip.
    score_upper_clip: bool
    # Judge: model asked to repair unparseable JSON (None = the judge model itself, 297ffff).
    fix_json_model: str | None
    # Calls per LLM request before giving up (paper `nth_generation > 10`: 11; HEAD max_retry=5: 6).
    max_attempts: int
    # Judge max_tokens (paper GPT-4o path 8192; HEAD default 8196, 297ffff).
    judge_max_tokens: int
    # Per-model averages: paper rounds to 3 decimals and adds TTR; HEAD neither.
    round_averages: bool
    averages_include_ttr: bool

    def record(self) -> dict[str, Any]:
        """The settings as a JSON-able dict, for a run's manifest."""
        return asdict(self)


COSER_PAPER = ProtocolVersion(
    name="coser-paper",
    commit="93c147462592e372dba03afbdf37f5d0d667f8cc",
    thought_key="thought",
    store_speaker_prefix=True,
    nsp_output_format=False,
    nsp_parser="split",
    nsp_reinject_system_prompt=False,
    strip_thinking_tags=False,
    name_suffix_rule="paper",
    no_output_example_rule="paper",
    reseed_per_test_file=True,
    score_upper_clip=False,
    fix_json_model="claude-3-5-sonnet-20240620",
    max_attempts=11,
    judge_max_tokens=8192,
    round_averages=True,
    averages_include_ttr=True,
)

COSER_HEAD = ProtocolVersion(
    name="coser-head",
    commit="624efc50db7be3a4e37cec6a1c58ed434dc9f2ce",
    thought_key="motivation",
    store_speaker_prefix=False,
    nsp_output_format=True,
    nsp_parser="extract_nsp",
    nsp_reinject_system_prompt=True,
    strip_thinking_tags=True,
    name_suffix_rule="head",
    no_output_example_rule="head",
    reseed_per_test_file=False,
    score_upper_clip=True,
    fix_json_model=None,
    max_attempts=6,
    judge_max_tokens=8196,
    round_averages=False,
    averages_include_ttr=False,
)

VERSIONS = {v.name: v for v in (COSER_PAPER, COSER_HEAD)}
DEFAULT_VERSION = COSER_PAPER.name


def get_version(name: str) -> ProtocolVersion:
    """The named protocol version (``coser-paper`` or ``coser-head``)."""
    try:
        return VERSIONS[name]
    except KeyError:
        raise ValueError(f"unknown CoSER protocol version {name!r}; choose one of {sorted(VERSIONS)}") from None
