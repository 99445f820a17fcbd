"""CoSER given-circumstance acting (GCA): the second benchmark, from its data to its reports.

Protocol: ``versions`` (the two protocol versions), ``data`` (pinned test set and upstream
prompt file), ``upstream`` (critic prompts read with ``ast``), ``prompts`` (agent prompts and
random streams), ``text`` (upstream string rules), ``simulation`` (acting a scene turn by turn,
then judging it), ``judge`` (critic prompts, simulation text, JSON validation, scores, averages),
``metrics`` (BLEU, ROUGE-L). Runs: ``run`` (presets, the crash-safe loop, statistics),
``official`` (an official result file imported as a run), ``reproduce`` (the released files
recomputed beside the paper). Reading runs: ``report`` and ``figures`` (the reports),
``eligibility`` and ``explorer`` (the leaderboard).
"""
