"""BLEU and ROUGE-L of a simulation against the original conversation (HEAD reports both).

They are separate metrics, never part of the 4-dimension average. BLEU uses NLTK's word
tokenizer on lowercased text and sentence BLEU without smoothing; the tokenizer needs NLTK's
``punkt_tab`` sentence-tokenizer data, which no package on PyPI ships. Without it BLEU is
reported as unavailable (``BleuUnavailable``), never approximated with another tokenizer.
ROUGE-L is the F-score of the ``rouge`` package.
"""

from __future__ import annotations

BLEU_UNAVAILABLE = (
    "BLEU unavailable: NLTK's punkt_tab tokenizer data is not installed (no PyPI package ships it; "
    "install it with nltk.download('punkt_tab') where allowed)"
)


class BleuUnavailable(RuntimeError):
    """NLTK's tokenizer data is missing, so BLEU cannot be computed as upstream does."""


def bleu(hypothesis: str, reference: str) -> float:
    """Metric "BLEU": NLTK sentence BLEU (default 4-gram weights, no smoothing) of the
    lowercased, NLTK-tokenized texts, in [0, 1]."""
    from nltk import word_tokenize
    from nltk.translate.bleu_score import sentence_bleu

    try:
        hyp = word_tokenize(hypothesis.lower())
        ref = word_tokenize(reference.lower())
    except LookupError:
        raise BleuUnavailable(BLEU_UNAVAILABLE) from None
    return float(sentence_bleu([ref], hyp))


def rouge_l(hypothesis: str, reference: str) -> float:
    """Metric "ROUGE-L": the F-score of ``rouge.Rouge`` (the package upstream uses)."""
    from rouge import Rouge

    return float(Rouge(metrics=["rouge-l"]).get_scores(hypothesis, reference)[0]["rouge-l"]["f"])
