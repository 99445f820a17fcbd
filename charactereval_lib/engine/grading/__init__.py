"""Grading engine: model-graded judging and string graders with openai/evals semantics.

Modules: `choices` (choice strings, answer suffixes, reply parsing, scores), `strings`
(match, includes, fuzzy match, JSON match), `fill` (prompt filling), `spec` (YAML specs,
judge messages, reply records), `metaeval` (run aggregation, metascore), `agreement`
(agreement statistics with cluster-bootstrap intervals), `battles` (pairwise judging in both
presentation orders, panels of judges), `errors` (exception types).

Floor 4 of the engine (grading and the registry). May import: `validation`, `stats`, `anchor`,
`thinking`, `progress`, `resources`, `storage/`, `faults`, `outdir`, `ray_cluster`, `generation/`;
beside it on its floor, `registry/`, without a circle. Never: `reports/`, `leaderboard/`, nor a
benchmark package, `pipeline`, `apps` or `cli` (tests/engine/test_engine_layers.py).
"""
