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

A search scoped to some collections takes N, each term's n and the average length from the
chunks of those collections alone (``within``), and weighs their postings at query time from
the term frequencies and lengths the index keeps beside the weights: with statistics of the
whole corpus, a caller limited to one collection read from its scores which words the others
hold (a term that no chunk in scope has still counted in the normalisation, and a term's idf
moved with every other collection's documents). Both ways compute a weight by the same
operations, so a scope that holds every chunk scores exactly as an unscoped search.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import filterfalse
from typing import Any, ClassVar

import numpy as np
import numpy.typing as npt

from ragloop.core.text import STOPWORDS, stem_words, tokenize
from ragloop.kb.stores.base import BM25_B, BM25_K1

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


def batch_term_frequencies(
    texts: Sequence[str], stems: dict[str, str] | None = None
) -> list[Counter[str]]:
    """``term_frequencies`` of each text, stemming each distinct word of the batch once, or
    never again when ``stems`` (word -> stem) already holds it (a caller that counts many
    batches keeps it: stemming was half of counting, PyStemmer's own cache holds 10,000 words).
    The per-token work runs in C (``map``, ``filterfalse``, ``Counter``), not in Python loops:
    counting terms is about a third of an ingest's time."""
    words = [tokenize(text) for text in texts]
    if stems is None:
        stems = {}
    new = [w for w in set().union(*words).difference(STOPWORDS) if w not in stems]
    stems.update(zip(new, stem_words(new), strict=True))
    return [Counter(map(stems.__getitem__, filterfalse(STOPWORDS.__contains__, w))) for w in words]


Postings = tuple["npt.NDArray[np.uint32]", "npt.NDArray[np.uint32]"]  # (term ids, counts)
# consecutive chunks: each one's number of distinct terms, then all their term ids and counts
PostingsBlock = tuple["npt.NDArray[np.int64]", "npt.NDArray[np.int32]", "npt.NDArray[np.uint16]"]
BLOCK = 8192  # chunks in a block


def pack(frequencies: dict[str, int], term_ids: dict[str, int]) -> bytes:
    """A chunk's term frequencies as bytes: the terms' ids (``term_ids``) as uint32, then the
    counts as uint32."""
    size = len(frequencies)
    ids = np.fromiter(map(term_ids.__getitem__, frequencies), dtype=np.uint32, count=size)
    counts = np.fromiter(frequencies.values(), dtype=np.uint32, count=size)
    return ids.tobytes() + counts.tobytes()


def pack_batch(
    texts: Sequence[str], stems: dict[str, str] | None = None
) -> tuple[list[str], list[bytes]]:
    """Term frequencies of many texts, compact for another process to store: the distinct
    terms, and each text's frequencies as :func:`pack` writes them with the terms' positions
    in that list for ids (tuples of bytes cross processes many times faster than dicts)."""
    counts = batch_term_frequencies(texts, stems)
    terms = list(set().union(*counts))
    positions = {term: i for i, term in enumerate(terms)}
    return terms, [pack(found, positions) for found in counts]


def renumber(blob: bytes, ids: npt.NDArray[np.uint32]) -> bytes:
    """A blob :func:`pack_batch` wrote, with each term's position replaced by its id
    (``ids``: the ids of its list of terms, in order)."""
    positions, counts = unpack(blob)
    return ids[positions].tobytes() + counts.tobytes()


def unpack(blob: bytes) -> Postings:
    """What :func:`pack` wrote; raises ``ValueError`` on bytes it cannot have written."""
    if len(blob) % 8:
        raise ValueError(f"a term-frequency blob of {len(blob)} bytes (not pairs of uint32)")
    both = np.frombuffer(blob, dtype=np.uint32)
    half = len(both) // 2
    return both[:half], both[half:]


def idfs_of(n_docs: int, counts: npt.NDArray[np.int64]) -> npt.NDArray[np.float64]:
    """FTS5's idf, ``log((N - n + 0.5) / (n + 0.5))``, floored at 1e-6, of each count."""
    return np.maximum(np.log((n_docs - counts + 0.5) / (counts + 0.5)), 1e-6)


def average_length(lengths: npt.NDArray[np.float32], within: npt.NDArray[np.bool_] | None) -> float:
    """The mean of chunk lengths (of those ``within``), 1 when there are none. Summed in
    float64, exact for whole numbers, so the same chunks give the same mean in any order."""
    count = len(lengths) if within is None else int(np.count_nonzero(within))
    total = float(np.sum(lengths, dtype=np.float64, where=True if within is None else within))
    return (total / count if count else 1.0) or 1.0


def term_weights(
    tfs: npt.NDArray[np.integer],
    lengths: npt.NDArray[np.float32],
    average: float,
    idfs: npt.NDArray[np.float64] | float,
) -> npt.NDArray[np.float32]:
    """BM25 weights of postings: ``tf * (k1 + 1) / (tf + k1 * (1 - b + b * len / avglen))``
    times the idf, in float32 (the operations of the index's build and of a scoped search)."""
    tf = tfs.astype(np.float32)
    norm = K1 * (1 - B + B * lengths / np.float32(average))
    weights = tf * (K1 + 1) / (tf + norm) * np.asarray(idfs).astype(np.float32)
    return weights.astype(np.float32, copy=False)  # float32 already: typed, not copied


@dataclass(frozen=True)
class Within:
    """The chunks whose statistics a scoped search takes (those of its collections), with
    the statistics: their number and average length. Made by :meth:`BM25Index.within`; a
    store keeps it for the scope's next searches (it holds for one state of the index)."""

    mask: npt.NDArray[np.bool_]
    n_docs: int
    average: float


@dataclass
class BM25Index:
    """Postings sorted by term: ``docs[ptr[t]:ptr[t+1]]`` hold term ``t`` with ``weights``.

    A posting's weight already includes its term's idf (both are fixed once the index is
    built), so a query only adds up weights. ``tfs`` (each posting's term frequency) and
    ``lengths`` (each chunk's number of terms) are what a scoped search weighs postings from.
    """

    n_docs: int
    ptr: npt.NDArray[np.int64]
    docs: npt.NDArray[np.int32]
    weights: npt.NDArray[np.float32]
    idfs: npt.NDArray[np.float64]
    tfs: npt.NDArray[np.uint16]
    lengths: npt.NDArray[np.float32]

    ARRAYS: ClassVar[tuple[str, ...]] = ("ptr", "docs", "weights", "idfs", "tfs", "lengths")

    @classmethod
    def build(cls, chunks: Sequence[Postings], vocabulary: int) -> BM25Index:
        """From each chunk's (term ids, frequencies), in the stores' chunk order."""
        return cls.from_blocks(_blocks(chunks), vocabulary)

    @classmethod
    def from_blocks(cls, blocks: Iterable[PostingsBlock], vocabulary: int) -> BM25Index:
        """From blocks of consecutive chunks, in the stores' chunk order.

        Memory stays near the size of the result (8 bytes a posting): the blocks are kept as
        compact arrays (6 bytes a posting), and the postings are put in term order by counting
        (each term's run is sized first, then every block writes into the runs and is freed),
        not by sorting all of them at once, which needs several corpus-sized temporaries.
        """
        kept: list[PostingsBlock] = []
        lengths_parts: list[npt.NDArray[np.float32]] = []
        counts = np.zeros(vocabulary, dtype=np.int64)
        for sizes, terms, tfs in blocks:
            if len(terms) and not 0 <= int(terms.min()) <= int(terms.max()) < vocabulary:
                raise ValueError(  # a damaged index must not allocate by its ids
                    f"term ids {int(terms.min())}..{int(terms.max())} are beyond the "
                    f"vocabulary ({vocabulary})"
                )
            counts += np.bincount(terms, minlength=vocabulary)
            local = np.repeat(np.arange(len(sizes)), sizes)
            lengths_parts.append(
                np.bincount(local, weights=tfs, minlength=len(sizes)).astype(np.float32)
            )
            kept.append((sizes, terms, tfs))
        lengths = np.concatenate(lengths_parts) if lengths_parts else np.zeros(0, np.float32)
        n_docs = len(lengths)
        ptr = np.zeros(vocabulary + 1, dtype=np.int64)
        np.cumsum(counts, out=ptr[1:])
        total = int(ptr[-1])
        idfs = idfs_of(n_docs, counts)
        docs = np.empty(total, dtype=np.int32)
        weights = np.empty(total, dtype=np.float32)
        tfs_sorted = np.empty(total, dtype=np.uint16)
        average = average_length(lengths, None)
        cursor = ptr[:-1].copy()  # where each term's next posting goes
        first_doc = 0
        while kept:
            sizes, terms, tfs = kept.pop(0)
            block_docs = np.repeat(
                np.arange(first_doc, first_doc + len(sizes), dtype=np.int32), sizes
            )
            first_doc += len(sizes)
            if not len(terms):
                continue
            block_weights = term_weights(tfs, lengths[block_docs], average, idfs[terms])
            # each posting's place in its term's run: the run's cursor plus its rank among
            # the block's postings of that term (a stable sort keeps chunk order)
            order = np.argsort(terms, kind="stable")
            sorted_terms = terms[order]
            starts = np.flatnonzero(np.r_[True, sorted_terms[1:] != sorted_terms[:-1]])
            run_sizes = np.diff(np.r_[starts, len(sorted_terms)])
            rank = np.arange(len(order)) - np.repeat(starts, run_sizes)
            places = cursor[sorted_terms] + rank
            docs[places] = block_docs[order]
            weights[places] = block_weights[order]
            tfs_sorted[places] = tfs[order]
            cursor[sorted_terms[starts]] += run_sizes
        return cls(n_docs, ptr, docs, weights, idfs, tfs_sorted, lengths)

    def arrays(self) -> dict[str, npt.NDArray[Any]]:
        """The index as named arrays, what :meth:`from_arrays` reads back."""
        return {name: getattr(self, name) for name in self.ARRAYS}

    @classmethod
    def from_arrays(cls, n_docs: int, arrays: dict[str, npt.NDArray[Any]]) -> BM25Index | None:
        """The index :meth:`arrays` gave; None when they do not hold together (a damaged
        file)."""
        try:
            index = cls(n_docs, *(arrays[name] for name in cls.ARRAYS))
        except KeyError:
            return None
        if not len(index.ptr) or len(index.ptr) != len(index.idfs) + 1:
            return None
        if not int(index.ptr[-1]) == len(index.docs) == len(index.weights) == len(index.tfs):
            return None
        if len(index.lengths) != n_docs:
            return None
        return index

    def document_frequency(self, term: int) -> int:
        if term < 0 or term + 1 >= len(self.ptr):
            return 0
        return int(self.ptr[term + 1] - self.ptr[term])

    def within(self, mask: npt.NDArray[np.bool_]) -> Within | None:
        """The statistics of the chunks of ``mask`` (a scope's collections) for
        :meth:`search`; None when it holds every chunk (the weights built are its own)."""
        n_docs = int(np.count_nonzero(mask))
        if n_docs == self.n_docs:
            return None
        return Within(mask, n_docs, average_length(self.lengths, mask))

    def search(
        self,
        terms: Sequence[int],
        top_k: int,
        mask: npt.NDArray[np.bool_] | None = None,
        within: Within | None = None,
    ) -> list[tuple[int, float, float]]:
        """The ``top_k`` chunks for the query's term ids: (chunk index, normalised score, raw
        BM25), best first; chunks outside ``mask`` and without any term are left out.

        ``within``: the chunks whose statistics count (a scope's collections, from
        :meth:`within`), None for every chunk. A chunk outside it scores nothing, and nothing
        about it (its terms, its length, that it exists) moves a score."""
        present = [t for t in dict.fromkeys(terms) if self.document_frequency(t)]
        if not present or top_k < 1:
            return []
        if within is None:
            scores = np.zeros(self.n_docs, dtype=np.float32)
            for term in present:
                start, end = self.ptr[term], self.ptr[term + 1]
                scores[self.docs[start:end]] += self.weights[start:end]
            idfs = self.idfs[present]
        else:
            scores, idfs = self._scoped_scores(present, within)
        if not len(idfs):
            return []
        if mask is not None:
            scores[~mask] = 0.0
        top = top_indices(scores, top_k)
        ceiling = float(idfs.sum()) * (K1 + 1)
        return [(int(i), min(1.0, float(scores[i]) / ceiling), float(scores[i])) for i in top]

    def _scoped_scores(
        self, present: list[int], within: Within
    ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float64]]:
        """Every chunk's BM25 over the statistics of the chunks ``within``, and the idfs of the
        terms they hold (a term none of them holds is not the query's, as in an index of those
        chunks alone). Costs more than an unscoped search: each term's postings in scope are
        picked, counted and weighed here, where the build weighed the others'."""
        held: list[tuple[npt.NDArray[np.int32], npt.NDArray[np.uint16]]] = []
        for term in present:
            start, end = self.ptr[term], self.ptr[term + 1]
            docs = self.docs[start:end]
            kept = within.mask[docs]
            if kept.any():
                held.append((docs[kept], self.tfs[start:end][kept]))
        counts = np.array([len(docs) for docs, _ in held], dtype=np.int64)
        idfs = idfs_of(within.n_docs, counts)
        scores = np.zeros(self.n_docs, dtype=np.float32)
        for (docs, tfs), idf in zip(held, idfs, strict=True):
            scores[docs] += term_weights(tfs, self.lengths[docs], within.average, idf)
        return scores, idfs


def top_indices(scores: npt.NDArray[np.floating[Any]], k: int) -> npt.NDArray[np.intp]:
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


def block(postings: Sequence[Postings]) -> PostingsBlock:
    """Consecutive chunks' postings as one block (counts above 65,535 are capped: BM25 has
    saturated long before)."""
    sizes = np.fromiter((len(ids) for ids, _ in postings), dtype=np.int64, count=len(postings))
    if not sizes.sum():
        return sizes, np.zeros(0, np.int32), np.zeros(0, np.uint16)
    terms = np.concatenate([ids for ids, _ in postings])
    if int(terms.max()) > np.iinfo(np.int32).max:
        raise ValueError(f"term id {int(terms.max())} is beyond any vocabulary")
    terms = terms.astype(np.int32)
    counts = np.concatenate([c for _, c in postings])
    return sizes, terms, np.minimum(counts, 65535).astype(np.uint16)


def _blocks(chunks: Sequence[Postings]) -> Iterator[PostingsBlock]:
    for start in range(0, len(chunks), BLOCK):
        yield block(chunks[start : start + BLOCK])
