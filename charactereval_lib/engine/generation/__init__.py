"""Generation (S4): the model under test answers the S3 messages of each test sample.

Holds `backends` (a backend by name); `base` (what every backend shares: requests, decoding
parameters, results); `context` (prompt length against the context window); `engine` (the generation
run: what still needs a reply, every outcome recorded); `estimate` (token and cost estimates before
a paid run); `hf` (the local Hugging Face backend); `http_client` (the OpenAI-compatible backend's
HTTP session); `offline` (the offline backend, for demos, tests and CI); `openai_backend` (the
OpenAI-compatible backend); `ray_hf` (the hf backend's batches on Ray actors); `retry` (concurrent
requests with retries and adaptive concurrency); `served` (served identity: the model a server says
answered each call); `hub`.

Floor 3 of the engine (generation). May import: `validation`, `stats`, `anchor`, `thinking`,
`progress`, `resources`, `storage/`, `faults`, `outdir`, `ray_cluster`. Never: `grading/`,
`registry/`, `reports/`, `leaderboard/`, nor a benchmark package, `pipeline`, `apps` or `cli`
(tests/engine/test_engine_layers.py).
"""
