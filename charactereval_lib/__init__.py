"""CharacterEval workbench: a faithful, fast reproduction of the CharacterEval role-play benchmark."""

__version__ = "0.1.0"
# The command-line program, which also signs the output folders it writes (``engine.outdir``).
PROGRAM = "charactereval"
