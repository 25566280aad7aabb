"""BM25 over a precomputed, in-memory sparse index (the approach of bm25s), shared by stores.

Why not SQLite FTS5's ``bm25()``: it scores every document matching any query term, and a
question's words match much of a corpus. At 100k chunks FTS5 took about 50 ms a query against
under 1 ms for bm25s (BENCHMARKS.md). Here each (term, chunk) weight
``tf * (k1 + 1) / (tf + k1 * (1 - b + b * len / avglen))`` is computed once when the index is
built, times the term's idf; a query adds up its terms' postings and takes the top k. Stores
persist each chunk's term frequencies and rebuild this index after writes.

Terms are the text's tokens without stopwords, Snowball-stemmed (English, PyStemmer). Scores are
normalised by the best score the query could reach (every term at saturation), as every store
does, with FTS5's idf ``log((N - n + 0.5) / (n + 0.5))`` floored at 1e-6.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from ragloop.components.text import STOPWORDS, stem_words, tokenize
from ragloop.retrieval.store import BM25_B, BM25_K1

K1 = BM25_K1
B = BM25_B


def stems(text: str) -> list[str]:
    """Every token of a text, Snowball-stemmed (stopwords kept: for phrase matching)."""
    return stem_words(tokenize(text))


def analyze(text: str) -> list[str]:
    """The index terms of a text: tokens, stopwords dropped, Snowball-stemmed."""
    return stem_words([t for t in tokenize(text) if t not in STOPWORDS])


def query_words(query: str) -> list[str]:
    """The query's words that carry meaning (no stopwords), each once, unstemmed."""
    return list(dict.fromkeys(t for t in tokenize(query) if t not in STOPWORDS))


def term_frequencies(text: str) -> Counter[str]:
    return Counter(analyze(text))


Postings = tuple["npt.NDArray[np.uint32]", "npt.NDArray[np.uint32]"]  # (term ids, counts)


def pack(frequencies: dict[int, int]) -> bytes:
    """A chunk's term ids and frequencies as bytes (uint32 ids, then uint32 counts)."""
    ids = np.fromiter(frequencies.keys(), dtype=np.uint32, count=len(frequencies))
    counts = np.fromiter(frequencies.values(), dtype=np.uint32, count=len(frequencies))
    return ids.tobytes() + counts.tobytes()


def unpack(blob: bytes) -> Postings:
    """What :func:`pack` wrote; raises ``ValueError`` on bytes it cannot have written."""
    if len(blob) % 8:
        raise ValueError(f"a term-frequency blob of {len(blob)} bytes (not pairs of uint32)")
    both = np.frombuffer(blob, dtype=np.uint32)
    half = len(both) // 2
    return both[:half], both[half:]


@dataclass
class BM25Index:
    """Postings sorted by term: ``docs[ptr[t]:ptr[t+1]]`` hold term ``t`` with ``weights``.

    A posting's weight already includes its term's idf (both are fixed once the index is
    built), so a query only adds up weights.
    """

    n_docs: int
    ptr: npt.NDArray[np.int64]
    docs: npt.NDArray[np.int32]
    weights: npt.NDArray[np.float32]
    idfs: npt.NDArray[np.float64]

    @classmethod
    def build(cls, chunks: Sequence[Postings], vocabulary: int) -> BM25Index:
        """From each chunk's (term ids, frequencies), in the stores' chunk order."""
        n_docs = len(chunks)
        sizes = np.fromiter((len(ids) for ids, _ in chunks), dtype=np.int64, count=n_docs)
        if not n_docs or not sizes.sum():
            return cls(n_docs, np.zeros(vocabulary + 1, dtype=np.int64),
                       np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.float32),
                       np.zeros(vocabulary, dtype=np.float64))  # fmt: skip
        terms = np.concatenate([ids for ids, _ in chunks]).astype(np.int64)
        if int(terms.max()) >= vocabulary:  # a damaged index must not allocate by its ids
            raise ValueError(f"term id {int(terms.max())} is beyond the vocabulary ({vocabulary})")
        tfs = np.concatenate([counts for _, counts in chunks]).astype(np.float32)
        docs = np.repeat(np.arange(n_docs, dtype=np.int32), sizes)
        lengths = np.bincount(docs, weights=tfs, minlength=n_docs).astype(np.float32)
        average = float(lengths.mean()) or 1.0
        norm = K1 * (1 - B + B * lengths[docs] / average)
        counts = np.bincount(terms, minlength=vocabulary)
        # FTS5's idf, log((N - n + 0.5) / (n + 0.5)), floored at 1e-6
        idfs = np.maximum(np.log((n_docs - counts + 0.5) / (counts + 0.5)), 1e-6)
        weights = (tfs * (K1 + 1) / (tfs + norm) * idfs[terms]).astype(np.float32)
        order = np.argsort(terms, kind="stable")
        ptr = np.zeros(len(counts) + 1, dtype=np.int64)
        np.cumsum(counts, out=ptr[1:])
        return cls(n_docs, ptr, docs[order], weights[order], idfs)

    def document_frequency(self, term: int) -> int:
        if term < 0 or term + 1 >= len(self.ptr):
            return 0
        return int(self.ptr[term + 1] - self.ptr[term])

    def search(
        self, terms: Sequence[int], top_k: int, mask: npt.NDArray[np.bool_] | None = None
    ) -> list[tuple[int, float, float]]:
        """The ``top_k`` chunks for the query's term ids: (chunk index, normalised score, raw
        BM25), best first; chunks outside ``mask`` and without any term are left out."""
        present = [t for t in dict.fromkeys(terms) if self.document_frequency(t)]
        if not present or top_k < 1:
            return []
        scores = np.zeros(self.n_docs, dtype=np.float32)
        for term in present:
            start, end = self.ptr[term], self.ptr[term + 1]
            scores[self.docs[start:end]] += self.weights[start:end]
        if mask is not None:
            scores[~mask] = 0.0
        top = _top_indices(scores, top_k)
        ceiling = float(self.idfs[present].sum()) * (K1 + 1)
        return [(int(i), min(1.0, float(scores[i]) / ceiling), float(scores[i])) for i in top]


def _top_indices(scores: npt.NDArray[np.float32], k: int) -> npt.NDArray[np.intp]:
    """Indices of the ``k`` highest positive scores, best first, index order on ties.

    A full partition of a corpus-sized array costs more than the scoring itself (and degrades
    when most scores tie at zero), so candidates are first cut at a fraction of the best
    score, lowered until at least ``k`` pass: exact, since every score above the cut is kept.
    """
    best = float(scores.max())
    if best <= 0.0:
        return np.zeros(0, dtype=np.intp)
    for fraction in (0.5, 0.25):
        candidates = np.flatnonzero(scores >= best * fraction)
        if len(candidates) >= k:
            break
    else:
        candidates = np.flatnonzero(scores > 0)
    if len(candidates) > k:  # keep everything tied with the k-th score, then sort
        kth = np.partition(scores[candidates], len(candidates) - k)[len(candidates) - k]
        candidates = candidates[scores[candidates] >= kth]
    return candidates[np.lexsort((candidates, -scores[candidates]))][:k]
