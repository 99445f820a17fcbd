"""CharacterEval workbench: a faithful, fast reproduction of the CharacterEval role-play benchmark."""

__version__ = "0.1.0"
