"""The shared engine: what every benchmark uses, knowing none by name.

Grouped by concern into loose modules and subpackages, on floors from the bottom up: 0 foundations:
`validation`, `stats`, `anchor`, `thinking`, `progress`, `resources`; 1 run storage: `storage/`; 2
run services: `faults`, `outdir`, `ray_cluster`; 3 generation: `generation/`; 4 grading and the
registry: `grading/`, `registry/`; 5 reports: `reports/`; 6 the leaderboard: `leaderboard/`. A part
imports only its own floor or below, without a circle; the engine imports no benchmark package,
`pipeline`, `apps` or `cli` (tests/engine/test_engine_layers.py).
"""
