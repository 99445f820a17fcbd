"""The applications built on the pipeline, each over every registered benchmark: ``batch`` (many
models from one config; ``batch_ray`` runs its models as Ray tasks, and ``batch_stages`` holds what
both run: the config, the outcome and one model's stages) and ``reproduction`` (a paper's numbers
recomputed from released files). The command line reaches them through ``pipeline``.
"""
