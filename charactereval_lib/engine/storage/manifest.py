"""The typed, versioned model of a run's ``run.json`` (the manifest), and its upgrades.

``runs.update_manifest`` writes the manifest; every stage adds its section (generation,
transform, scoring, judge scoring, a CoSER run's identity, dry runs, imports, battles). The
keys readers rely on are typed (here what every run has, each benchmark's own sections beside
its code); every other key is kept as written (``extra="allow"``), so reading never loses what a
stage recorded.

Layout versions (``manifest_schema``):

1. no ``manifest_schema`` key (runs made before the typed pipeline API): the top-level
   ``protocol_version`` was stamped on every write, so it is the protocol of every stage.
2. ``manifest_schema`` itself, and the protocol version of each stage in its section
   (``generation.protocol_version``, ``scoring.protocol_version``), since a run refuses a stage
   of another version.

A manifest of an older layout is upgraded in memory when read (``upgrade``), never rewritten on
read: the next stage that writes the run writes the current layout.
"""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, model_validator

from charactereval_lib.engine.validation import Document, problem

# The layout ``runs.update_manifest`` writes.
MANIFEST_SCHEMA = 2
# Sections that carry their stage's protocol version from layout 2 on.
STAGES_WITH_PROTOCOL = ("generation", "scoring")


def upgrade(raw: dict[str, Any]) -> dict[str, Any]:
    """``raw`` in the current layout (a new dict; ``raw`` itself is left as read)."""
    if raw.get("manifest_schema", 1) != 1:
        # The current layout, a newer one or a damaged value: the model names what it cannot read.
        return raw
    manifest = dict(raw)
    version = manifest.get("protocol_version")
    for stage in STAGES_WITH_PROTOCOL:
        section = manifest.get(stage)
        if isinstance(section, dict) and version is not None and "protocol_version" not in section:
            manifest[stage] = {**section, "protocol_version": version}
    manifest["manifest_schema"] = MANIFEST_SCHEMA
    return manifest


class Section(Document):
    """A stage's section: the keys readers rely on are typed, the rest kept as written."""

    model_config = ConfigDict(extra="allow")


class GenerationSection(Section):
    backend: str | None = None
    model: str | None = None
    protocol_version: str | None = None
    status: str | None = None
    # What a resumed generation must match (``engine.generation.engine.check_resume``).
    identity: dict[str, Any] | None = None
    parameters: dict[str, Any] | None = None
    data_sha256: dict[str, Any] | None = None
    state: dict[str, Any] | None = None
    sessions: list[dict[str, Any]] = []


class Manifest(Document):
    """``run.json`` in the current layout (``MANIFEST_SCHEMA``; validate what ``upgrade``
    returns): what every run has. A benchmark types its own sections in a subclass
    (``charactereval.documents``, ``coser.documents``); sections no model types (dry runs,
    imports, battles, verification) are kept as written."""

    model_config = ConfigDict(extra="allow")

    manifest_schema: int = MANIFEST_SCHEMA
    # None in runs written before manifests named their benchmark: which one that is, the
    # benchmarks say (``Benchmark.recognises``), and a benchmark's subclass may default it.
    benchmark: str | None = None
    protocol_version: str | None = None
    created_at: str | None = None
    updated_at: str | None = None
    package_version: str | None = None
    git_commit: str | None = None
    python: str | None = None
    generation: GenerationSection | None = None

    @model_validator(mode="after")
    def _readable_layout(self) -> Manifest:
        if self.manifest_schema > MANIFEST_SCHEMA:
            raise problem(f"layout {self.manifest_schema} is newer than this workbench reads ({MANIFEST_SCHEMA}); "
                          "upgrade the workbench", at="manifest_schema")
        return self
