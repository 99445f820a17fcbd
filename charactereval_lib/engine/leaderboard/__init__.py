"""The leaderboard: boards any benchmark reuses and the static site that shows them.

Holds `board` (boards any benchmark reuses: eligibility rules, the anchor gate, ranks with ties);
`site` (the static site: boards, a page per run, the sample explorer); `details` (a sample's detail
in the explorer, as typed sections); `sitecache`; `assets/` (the site's script and styles).

Floor 6 of the engine (the leaderboard). May import: `validation`, `stats`, `anchor`, `thinking`,
`progress`, `resources`, `storage/`, `faults`, `outdir`, `ray_cluster`, `generation/`, `grading/`,
`registry/`, `reports/`. Nothing of the engine imports it; it imports no benchmark package,
`pipeline`, `apps` or `cli` (tests/engine/test_engine_layers.py).
"""
