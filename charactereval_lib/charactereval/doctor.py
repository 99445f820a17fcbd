"""Protocol self-check on the full official data: every fact the seeds establish, recomputed.

The first checks are the protocol's own counts (samples, rows, messages, the profile text's
digest); the rest are seed 000's data edge cases (§2) and S7's profile facts, which say which
of the protocol's corner rules the official data exercises (a context of one line, a line with
several colons, a speaker named inside the role's name) and so which a change must keep.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from charactereval_lib.charactereval.data import DataError, OfficialData
from charactereval_lib.charactereval.paper_table import PAPER_LATEX
from charactereval_lib.charactereval.prompts import ProtocolError, build_messages, parse_context, profile_text
from charactereval_lib.charactereval.protocol import COLON, METRIC_BY_EN

EXPECTED_SAMPLES = 4564
EXPECTED_NO_METRIC_IDS = 33
EXPECTED_ROWS = 8032
EXPECTED_ROWS_PER_METRIC = {
    "Emp": 744, "ED": 737, "CS": 734, "PU": 724, "HL": 724, "PB": 720,
    "KA": 718, "Cons": 715, "KE": 714, "Coh": 708, "KH": 486, "Flu": 308,
}  # fmt: skip
EXPECTED_ROLE_FIRST = 2077
EXPECTED_MESSAGES_RANGE = (3, 51)
EXPECTED_PROFILES_SHA256 = "198d40264a5109b1ed974da4274fa5d1bc711f01df4d5c62c5af53bb14d370c2"
# Seed 000 §2 and seed 001 rows 1, 3, 6 and 7.
EXPECTED_METRICS_PER_ID = {1: 2801, 2: 962, 3: 346, 4: 189, 5: 89, 6: 52, 7: 37, 8: 22, 9: 13, 10: 16, 11: 4}
EXPECTED_SINGLE_LINE = 529
# (fewest, most, mean to two decimals) lines of a context.
EXPECTED_CONTEXT_LINES = (1, 50, 6.87)
EXPECTED_SEVERAL_COLONS = 174
EXPECTED_LONGEST_CONTEXT = 1684
EXPECTED_TRAILING_SPACE = 3
EXPECTED_NOVELS = 24
EXPECTED_ROLES = (77, 78)
EXPECTED_PROFILE_VALUE_TYPES = {"str": 1130, "list": 163, "dict": 87}
EXPECTED_DOUBLE_QUOTED = 9
EXPECTED_PROFILE_REPR_LENGTHS = (175, 2579)
# Literals the reward model's slow tokenizer cuts out as special tokens, and its template's tags.
SPECIAL_LITERALS = ("<s>", "</s>", "<unk>", "<RoleInfo>", "<Context>", "<Response>", "<Dimension>")


@dataclass(frozen=True)
class Check:
    name: str
    expected: Any
    actual: Any

    @property
    def ok(self) -> bool:
        return self.expected == self.actual


def profiles_sha256(profiles: dict[str, Any]) -> str:
    """SHA-256 of ``role\\tstr(profile)\\n`` over roles in sorted order: pins the S7 text."""
    text = "".join(f"{role}\t{profile_text(profiles[role])}\n" for role in sorted(profiles))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _strings(value: Any) -> list[str]:
    """Every string leaf of a profile value (nested lists and dicts included)."""
    if isinstance(value, str):
        return [value]
    children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    return [leaf for child in children for leaf in _strings(child)]


def _context_checks(data: OfficialData) -> list[Check]:
    """Seed 000 §2: the shape of the contexts, line by line (S2 reads them)."""
    lines_per_context = []
    several_colons = no_colon = empty_line = empty_value = 0
    bracketed: set[tuple[int, str]] = set()
    inside_role: set[int] = set()
    for s in data.samples:
        lines = s.context.split("\n")
        lines_per_context.append(len(lines))
        for line in lines:
            several_colons += line.count(COLON) > 1
            no_colon += COLON not in line
            empty_line += line == ""
            speaker, _, value = line.partition(COLON)
            empty_value += COLON in line and not value
            if speaker != s.role:
                if any(b in speaker for b in "（）()"):
                    bracketed.add((s.id, speaker))
                if speaker in s.role:
                    inside_role.add(s.id)
    count = len(lines_per_context)
    return [
        Check("metrics per scored id (ids with 1, 2, ... metrics)", EXPECTED_METRICS_PER_ID,
              dict(sorted(Counter(len(m) for m in data.id2metric.values()).items()))),
        Check("ids with a metric listed twice", 0, sum(len(m) != len(set(m)) for m in data.id2metric.values())),
        Check("single-line contexts (3-message requests)", EXPECTED_SINGLE_LINE, lines_per_context.count(1)),
        Check("lines per context (fewest, most, mean)", EXPECTED_CONTEXT_LINES,
              (min(lines_per_context), max(lines_per_context), round(sum(lines_per_context) / count, 2))
              if count else None),
        Check("lines with several full-width colons", EXPECTED_SEVERAL_COLONS, several_colons),
        Check("longest context (characters)", EXPECTED_LONGEST_CONTEXT, max((len(s.context) for s in data.samples),
                                                                            default=None)),
        Check("lines without a full-width colon, empty lines, lines with nothing after it", (0, 0, 0),
              (no_colon, empty_line, empty_value)),
        Check("contexts with a carriage return or a tab", 0,
              sum("\r" in s.context or "\t" in s.context for s in data.samples)),
        Check("contexts ending in a space (kept in the last message)", EXPECTED_TRAILING_SPACE,
              sum(s.context.endswith(" ") for s in data.samples)),
        Check("contexts holding a special-token literal or template tag", 0,
              sum(any(t in s.context for t in SPECIAL_LITERALS) for s in data.samples)),
        Check("other speakers with brackets in their name", 1, len(bracketed)),
        Check("samples where another speaker's name is part of the role's name", 2, len(inside_role)),
        Check("novels", EXPECTED_NOVELS, len({s.novel_name for s in data.samples})),
    ]


def _profile_checks(data: OfficialData) -> list[Check]:
    """S7: what the profiles' repr has to get right (seed 000 §S7, seed 001 row 6)."""
    profiles = data.profiles
    leaves = [leaf for profile in profiles.values() for leaf in _strings(profile)]
    lengths = [len(profile_text(p)) for p in profiles.values()]
    return [
        Check("characters used (of the profiles)", EXPECTED_ROLES, (len({s.role for s in data.samples}), len(profiles))),
        Check("profile values by type", EXPECTED_PROFILE_VALUE_TYPES,
              dict(Counter(type(v).__name__ for p in profiles.values() for v in p.values()).most_common())),
        Check("profile strings repr puts in double quotes (holding ' only)", EXPECTED_DOUBLE_QUOTED,
              sum("'" in leaf and '"' not in leaf for leaf in leaves)),
        Check("profile strings repr escapes (backslash, both quotes, unprintable)", 0,
              sum("\\" in leaf or ("'" in leaf and '"' in leaf) or not leaf.isprintable() for leaf in leaves)),
        Check("profile repr length (shortest, longest)", EXPECTED_PROFILE_REPR_LENGTHS,
              (min(lengths), max(lengths)) if lengths else None),
    ]


def paper_latex_check(path: str | Path) -> Check:
    """A copy of the paper's LaTeX source against the digest seeds 000 and 001 record for it: the
    provenance of the shipped Table 4 (``paper_table.PAPER_LATEX``)."""
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise DataError(f"{path}: cannot read the paper's {PAPER_LATEX['file']} (arXiv {PAPER_LATEX['arxiv']}, "
                        f"its e-print): {exc.strerror or exc}") from None
    return Check(f"paper LaTeX source {PAPER_LATEX['file']} (Table 4's provenance) SHA-256", PAPER_LATEX["sha256"],
                 hashlib.sha256(raw).hexdigest())


def run_checks(data: OfficialData) -> list[Check]:
    samples = data.samples
    ids = [s.id for s in samples]
    no_metric = [i for i in ids if str(i) not in data.id2metric]
    rows_per_metric: Counter[str] = Counter()
    for i in ids:
        for metric_en, _ in data.id2metric.get(str(i), ()):
            rows_per_metric[METRIC_BY_EN[metric_en].abbr] += 1
    role_first = sum(parse_context(s.context)[0].speaker == s.role for s in samples)
    message_counts = []
    violations = []
    dropped = 0
    for s in samples:
        try:
            built = build_messages(s.id, s.role, s.context, data.profiles[s.role])
        except ProtocolError as exc:
            violations.append(str(exc))
            continue
        message_counts.append(len(built.messages))
        dropped += built.dropped_lines
    orphan_metric_ids = sorted(set(data.id2metric) - {str(i) for i in ids})
    return [
        Check("test samples", EXPECTED_SAMPLES, len(samples)),
        Check("unique sample ids", EXPECTED_SAMPLES, len(set(ids))),
        Check("test ids without metrics", EXPECTED_NO_METRIC_IDS, len(no_metric)),
        Check("id2metric ids that are not test ids", 0, len(orphan_metric_ids)),
        Check("(id, metric) rows", EXPECTED_ROWS, sum(rows_per_metric.values())),
        Check("rows per metric", EXPECTED_ROWS_PER_METRIC, dict(rows_per_metric)),
        Check("samples where the role speaks first", EXPECTED_ROLE_FIRST, role_first),
        Check(
            "messages per request (min, max)",
            EXPECTED_MESSAGES_RANGE,
            (min(message_counts), max(message_counts)) if message_counts else None,
        ),
        Check("profile repr SHA-256 (S7)", EXPECTED_PROFILES_SHA256, profiles_sha256(data.profiles)),
        Check("protocol assertion violations", 0, len(violations)),
        Check("non-role lines dropped by S3", 0, dropped),
        *_context_checks(data),
        *_profile_checks(data),
    ]
