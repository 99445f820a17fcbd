"""Reports: notebooks executed and rendered, and what every report shows.

Holds `notebook` (a parameterised notebook executed with papermill and rendered to standalone HTML);
`kit` (the report kit every notebook shares: tables, warnings, rendered-by line, comparisons);
`plots` (figure building blocks: canvases, PNG output, CJK fonts, the radar); `texttable`
(plain-text tables and `fmt`, a number as every table shows it); `reproduction` (the reproduction
document as its report shows it); `evidence`; `template/` (the HTML template of rendered reports).

Floor 5 of the engine (reports). May import: `validation`, `stats`, `anchor`, `thinking`,
`progress`, `resources`, `storage/`, `faults`, `outdir`, `ray_cluster`, `generation/`, `grading/`,
`registry/`. Never: `leaderboard/`, nor a benchmark package, `pipeline`, `apps` or `cli`
(tests/engine/test_engine_layers.py).
"""
