"""The CharacterEval reward model (BaichuanCharRM) and its tokenizer in plain PyTorch.

- ``inputs``: S6 text template.
- ``tokenizer``: S6 tokenization (sentencepiece with the transformers 4.36 slow-tokenizer rules).
- ``model``: S8 forward pass, faithful (the official op sequence) and fast (batched, verified).
- ``checkpoint``: config and weights from a Hugging Face directory, every key and shape checked.
- ``scorer``: scoring runs (``charactereval score``).
- ``download`` / ``tiny``: fetch the real checkpoint, or make a meaningless tiny one for demos.
"""
