"""Protocol self-check on the full official data: every fact the seeds establish, recomputed."""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass
from typing import Any

from charactereval_lib.charactereval.data import OfficialData
from charactereval_lib.charactereval.prompts import ProtocolError, build_messages, parse_context, profile_text
from charactereval_lib.charactereval.protocol import METRIC_BY_EN

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
    ]
