"""Grading engine: model-graded judging and string graders with openai/evals semantics.

Modules: `choices` (choice strings, answer suffixes, reply parsing, scores), `strings`
(match, includes, fuzzy match, JSON match), `fill` (prompt filling), `spec` (YAML specs,
judge messages, reply records), `metaeval` (run aggregation, metascore), `agreement`
(agreement statistics with cluster-bootstrap intervals), `battles` (pairwise judging in both
presentation orders, panels of judges), `errors` (exception types).
"""
