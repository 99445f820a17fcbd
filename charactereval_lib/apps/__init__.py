"""The applications built on the pipeline, each over every registered benchmark: ``batch`` (many
models from one config, with ``batch_ray`` for its Ray tasks) and ``reproduction`` (a paper's
numbers recomputed from released files). The command line reaches them through ``pipeline``.
"""
