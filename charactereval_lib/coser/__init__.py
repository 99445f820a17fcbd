"""CoSER given-circumstance acting (GCA): the protocol core of the second benchmark.

Modules: ``versions`` (the two protocol versions), ``data`` (pinned test set and upstream
prompt file), ``upstream`` (critic prompts read with ``ast``), ``prompts`` (agent prompts and
random streams), ``text`` (upstream string rules), ``judge`` (critic prompts, simulation text,
JSON validation, scores, averages), ``metrics`` (BLEU, ROUGE-L).
"""
