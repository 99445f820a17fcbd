"""The two CoSER protocol versions as one typed settings object.

``coser-paper`` is the paper-era code (commit 93c1474, ``eval_reproduce.py``); ``coser-head``
is upstream HEAD (624efc5, ``main.py``). Every behavioural difference between them is an
explicit field here, so a run records exactly which rule it followed; docs/coser-versions.md
lists each with the commit that introduced it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Literal

# The roles whose models a protocol version fixes (the actor is the model under test).
FIXED_ROLES = {"env": "environment", "nsp": "next-speaker", "judge": "judge"}


def names_snapshot(snapshot: str, vendor: str, model: str | None) -> bool:
    """Whether a declared ``model`` names the dated ``snapshot``: exactly, bare or with its
    ``vendor``'s router prefix (seed 004 L01: ``openai/gpt-4o-2024-08-06`` through a router pinned
    to OpenAI); a moving alias does not say which snapshot answered, so it does not."""
    return model in (snapshot, f"{vendor}/{snapshot}")


@dataclass(frozen=True)
class Deviation:
    """A registered deviation from the paper's own setup: what the paper ran in ``role``, what the
    version runs instead, and why (seed 004 A11, F05, X12)."""

    role: str
    paper: str
    runs: str
    reason: str


@dataclass(frozen=True)
class RoleModels:
    """The environment, next-speaker and judge models a protocol version fixes: dated snapshots,
    never a moving alias (an alias does not say which snapshot answered). ``vendor`` is the API
    that serves them: its own host, or a router pinned to it (``openai/<snapshot>`` is the same
    model there). CLI and pipeline defaults, the "comparable with the paper" label and the board's
    fixed-models rule all read this one declaration."""

    env: str
    nsp: str
    judge: str
    vendor: str = "openai"
    deviations: tuple[Deviation, ...] = ()

    def of(self, role: str) -> str:
        return getattr(self, role)

    def accepts(self, role: str, model: str | None) -> bool:
        """Whether ``model`` names the fixed model of ``role`` (``names_snapshot``)."""
        return names_snapshot(self.of(role), self.vendor, model)

    def paper_model(self, role: str) -> str:
        """The model the paper ran in ``role``: the fixed one unless a deviation says otherwise."""
        return next((d.paper for d in self.deviations if d.role == role), self.of(role))


# The paper's environment and judge: GPT-4o, snapshot 2024-08-06 (the paper's version footnote;
# upstream's README asks for it as the judge). Its next-speaker model was the CoSER-70B fine-tune
# (by inference the paper-era experiment name `llama3-1210-8epc`, docs/coser-versions.md); both versions run gpt-4o-mini instead, as the
# earlier platform did (seed 004 F03-F05, G01, H03).
NSP_DEVIATION = Deviation(
    role="nsp", paper="CoSER-70B", runs="gpt-4o-mini-2024-07-18",
    reason="upstream's own default next-speaker model since 297ffff (2025-02-24) is gpt-4o-mini (the alias of "
           "snapshot 2024-07-18, G01); CoSER-70B is 141 GB of weights that every user would have to serve "
           "themselves (G03). The earlier platform made the same choice (seed 004 F05, G01); "
           "the paper's table was made with CoSER-70B, so the next-speaker model is a caveat beside the anchor")
PAPER_ROLE_MODELS = RoleModels(env="gpt-4o-2024-08-06", nsp="gpt-4o-mini-2024-07-18", judge="gpt-4o-2024-08-06",
                               deviations=(NSP_DEVIATION,))


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
    # The environment, next-speaker and judge models the version fixes (recorded per role in a
    # run's identity, so not part of ``record``).
    models: RoleModels

    def record(self) -> dict[str, Any]:
        """The settings as a JSON-able dict, for a run's manifest."""
        return {k: v for k, v in asdict(self).items() if k != "models"}


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
    models=PAPER_ROLE_MODELS,
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
    # HEAD's main.py defaults are the aliases gpt-4o and gpt-4o-mini; the version pins the
    # snapshots they stood for (the judge's is the one upstream's README asks for).
    models=PAPER_ROLE_MODELS,
)

VERSIONS = {v.name: v for v in (COSER_PAPER, COSER_HEAD)}
DEFAULT_VERSION = COSER_PAPER.name


def get_version(name: str) -> ProtocolVersion:
    """The named protocol version (``coser-paper`` or ``coser-head``)."""
    try:
        return VERSIONS[name]
    except KeyError:
        raise ValueError(f"unknown CoSER protocol version {name!r}; choose one of {sorted(VERSIONS)}") from None
