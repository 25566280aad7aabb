"""The PostgreSQL store's keyword index: postings kept in blocks, scored by BM25 in Python.

A block holds the postings of one lexeme for the chunks of one collection whose pk falls in one
segment of :data:`SEGMENT_SIZE` consecutive pks: ``n`` entries of 8 bytes, each two big-endian
uint32, ``(pk % SEGMENT_SIZE) << 16 | tf`` and the chunk's number of terms. A query reads one
row per query lexeme (its blocks concatenated in SQL, and their count of entries: the lexeme's
document frequency), and numpy adds up the BM25 weights.

Why blocks, not a row per posting (what the store had): at 100,000 chunks the row-per-posting
table was a third of the database (a row of about 60 bytes and an index entry as large, for
each of 13 million postings) and a query summed its postings in SQL, 46 ms p50 (SQLite's
in-memory index: 0.6 ms); a question's common words hold tens of thousands of postings each,
so that time grew with the corpus. Ingest wrote one B-tree row per posting. Blocks are written
once per lexeme and batch (appended to: a segment fills over a few batches), a query reads a few
hundred rows per lexeme whatever the corpus' size, and the scoring is a few array operations
(BENCHMARKS.md, bench_postgres).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Sequence

import numpy as np
import numpy.typing as npt

from ragloop.kb.index.bm25 import top_indices
from ragloop.kb.stores.base import BM25_B, BM25_K1
from ragloop.kb.stores.postgres.postings_cache import LexemePostings

SEGMENT_BITS = 12
SEGMENT_SIZE = 1 << SEGMENT_BITS  # consecutive chunk pks whose postings share a block
MAX_TF = 0xFFFF  # a term frequency is stored in 16 bits (BM25 saturates long before)
ENTRY = np.dtype([("key", ">u4"), ("length", ">u4")])


def entry_sql(pk: str, tf: str, n_terms: str) -> str:
    """The SQL expression of one entry (bytea) for a chunk's pk, a term frequency and the
    chunk's number of terms."""
    return (
        f"int4send(((({pk} & {SEGMENT_SIZE - 1}) << 16) | least({tf}, {MAX_TF}))::integer)"
        f" || int4send({n_terms})"
    )


def decode(
    entries: bytes, segments: Sequence[int], counts: Sequence[int]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """The (pks, term frequencies, chunk lengths) of concatenated blocks, given each block's
    segment and number of entries in order."""
    found = np.frombuffer(entries, dtype=ENTRY)
    if len(found) != sum(counts):
        raise ValueError(f"{len(found)} postings where the blocks count {sum(counts)}")
    keys = found["key"].astype(np.int64)
    bases = np.repeat(np.asarray(segments, dtype=np.int64) << SEGMENT_BITS, counts)
    return (
        bases + (keys >> 16),
        (keys & MAX_TF).astype(np.float64),
        found["length"].astype(np.float64),
    )


def idf(document_frequency: int, chunks: float) -> float:
    """FTS5's idf, ``log((N - n + 0.5) / (n + 0.5))``, floored at 1e-6 (as every store)."""
    return max(math.log((chunks - document_frequency + 0.5) / (document_frequency + 0.5)), 1e-6)


def lexeme_postings(
    entries: bytes,
    segments: Sequence[int],
    counts: Sequence[int],
    collections: Sequence[str],
    average_length: float,
) -> LexemePostings:
    """One lexeme's blocks (in collection order, each with its segment, count and collection)
    decoded into chunk pks, term frequencies, chunk lengths and BM25 term weights without the
    idf, for this average length."""
    pks, tf, length = decode(entries, segments, counts)
    names: list[str] = []
    starts = [0]
    for name, count in zip(collections, counts, strict=True):
        if not names or names[-1] != name:
            names.append(name)
            starts.append(starts[-1])
        starts[-1] += count
    if len(pks) and int(pks.max()) < 2**32:  # half the memory in the cache
        pks = pks.astype(np.uint32)
    return LexemePostings(
        pks,
        term_weights(tf, length, average_length),
        tf.astype(np.uint16),
        length.astype(np.uint32),
        tuple(names),
        np.asarray([0, *starts[1:]], np.int64),
    )


def term_weights(
    tfs: npt.NDArray[np.number], lengths: npt.NDArray[np.number], average_length: float
) -> npt.NDArray[np.float32]:
    """BM25 term weights without the idf, ``tf * (k1 + 1) / (tf + k1 * (1 - b + b * len /
    avglen))``, computed in float64 whatever the arrays hold: the postings read and those
    held in the cache weigh the same, bit for bit."""
    tf = tfs.astype(np.float64)
    norm = BM25_K1 * (1 - BM25_B + BM25_B * lengths.astype(np.float64) / average_length)
    return (tf * (BM25_K1 + 1) / (tf + norm)).astype(np.float32)


def in_scope(
    postings: LexemePostings, collections: Collection[str], average_length: float
) -> tuple[npt.NDArray[np.integer], npt.NDArray[np.float32]]:
    """The (pks, weights without the idf) of a held lexeme's postings in these collections,
    weighed at their average length."""
    pks, tfs, lengths = postings.in_scope(collections)
    return pks, term_weights(tfs, lengths, average_length)


def score(
    lexemes: Iterable[tuple[npt.NDArray[np.integer], npt.NDArray[np.float32]]], chunks: float
) -> tuple[npt.NDArray[np.integer], npt.NDArray[np.float32], float]:
    """BM25 of every chunk in scope holding a query lexeme: (pks, weights) of its postings,
    to be added up by :func:`totals`, and the highest score the query could reach (every
    lexeme at saturation), which normalises.

    ``lexemes``: per query lexeme that a chunk in scope holds, in the query's order (the order
    the weights are added up in, so a score does not depend on where the postings came
    from), its postings in scope: pks and weights without the idf. Its document frequency is
    their number, and ``chunks`` the number of chunks in scope: a scope's statistics are its
    own. The arrays stay as compact as the cache holds them (uint32 pks, float32 weights): at
    1,000,000 chunks a question adds up 415,000 postings."""
    pk_parts: list[npt.NDArray[np.integer]] = []
    weight_parts: list[npt.NDArray[np.float32]] = []
    ceiling = 0.0
    for pks, weights in lexemes:
        weight = idf(len(pks), chunks)
        ceiling += weight * (BM25_K1 + 1)
        pk_parts.append(pks)
        weight_parts.append(weights * np.float32(weight))
    if not pk_parts:
        return np.zeros(0, np.int64), np.zeros(0, np.float32), ceiling
    return np.concatenate(pk_parts), np.concatenate(weight_parts), ceiling


def totals(
    pks: npt.NDArray[np.integer], weights: npt.NDArray[np.floating]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """Each chunk's summed score: (distinct pks ascending, their scores). A chunk-pk-sized
    accumulator, not a sort: adding 300,000 postings this way takes a millisecond."""
    if not len(pks):
        return np.zeros(0, np.int64), np.zeros(0, np.float64)
    first = int(pks.min())
    summed = np.asarray(np.bincount(pks - pks.dtype.type(first), weights=weights), np.float64)
    held = np.flatnonzero(summed > 0).astype(np.int64)
    return held + first, summed[held]


def best(
    pks: npt.NDArray[np.int64], scores: npt.NDArray[np.float64], top_k: int
) -> list[tuple[int, float]]:
    """The ``top_k`` (pk, score), best first, lower pk first on ties."""
    if not len(scores):
        return []
    top = top_indices(scores, top_k)
    return [(int(pks[i]), float(scores[i])) for i in top]


def in_score_order(
    pks: npt.NDArray[np.int64], scores: npt.NDArray[np.float64]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]]:
    """Every (pk, score), best first, lower pk first on ties (for filters seen in SQL)."""
    order = np.lexsort((pks, -scores))
    return pks[order], scores[order]


def without(entries: bytes, offsets: Iterable[int]) -> bytes:
    """A block's entries without those of the chunks at ``offsets`` (pk % SEGMENT_SIZE)."""
    found = np.frombuffer(entries, dtype=ENTRY)
    gone = np.fromiter(offsets, dtype=np.int64)
    keep = ~np.isin(found["key"].astype(np.int64) >> 16, gone)
    return found[keep].tobytes()
