"""Run storage: where a run's files live and how they are written and read.

Holds `artifacts` (whole files written atomically, JSON Lines read and appended); `manifest` (the
typed, versioned `run.json` and its upgrades); `runs` (`RunDir`: a run's artifact paths, manifest,
writer lock and readers); `jobs` (the one resumable job over keyed JSON Lines records); `pinned`
(files pinned to an upstream commit: digests, verification, download); `workspace` (the data
directory each benchmark uses, remembered per workspace).

Floor 1 of the engine (run storage). May import: `validation`, `stats`, `anchor`, `thinking`,
`progress`, `resources`. Never: `faults`, `outdir`, `ray_cluster`, `generation/`, `grading/`,
`registry/`, `reports/`, `leaderboard/`, nor a benchmark package, `pipeline`, `apps` or `cli`
(tests/engine/test_engine_layers.py).
"""
