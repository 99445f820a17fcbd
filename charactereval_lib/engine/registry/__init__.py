"""The registry: what the engine learns from each benchmark, which declares itself.

Holds `benchmarks` (the benchmark registry: every benchmark declares itself; the engine knows none
by name); `settings` (the frozen, YAML-loadable base of every stage's settings); `batching` (what
`batch` needs of a benchmark: its batch plan).

Floor 4 of the engine (grading and the registry). May import: `validation`, `stats`, `anchor`,
`thinking`, `progress`, `resources`, `storage/`, `faults`, `outdir`, `ray_cluster`, `generation/`;
beside it on its floor, `grading/`, without a circle. Never: `reports/`, `leaderboard/`, nor a
benchmark package, `pipeline`, `apps` or `cli` (tests/engine/test_engine_layers.py).
"""
