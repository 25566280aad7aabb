"""The decoded postings of the lexemes a process searched, kept for its next queries.

A keyword query over a million chunks reads a few megabytes of postings from PostgreSQL (a
question's common words each hold hundreds of thousands: 415,000 postings for the median
HotpotQA question at 1,000,000 chunks) and decodes them: 33 of its 37 ms p50. Those words
recur from question to question, so the process keeps each lexeme's postings, decoded into
chunk pks and BM25 term weights (pk as uint32 when it fits, weight as float32: 8 bytes a
posting), with each posting's term frequency and chunk length (6 bytes more, what a scoped
query weighs its collections' postings from), in a cache bounded in bytes, least recently used
out first.

The weights hold the corpus's size and average length, and every write changes the postings,
so the cache is only valid for one state of the knowledge base: every write adds one to the
``writes`` column of ``corpus_counters`` in its own transaction, each query reads that count
in the same statement as the blocks, and a count other than the cache's empties it (the lexemes
it asked the cache for are then read from PostgreSQL). Every server of a fleet sees every
write this way. Only an unscoped query fills the cache (it reads every collection's blocks);
a collection scope is then a slice of each cached lexeme, weighed at the scope's average
length.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Collection
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt


@dataclass(frozen=True)
class LexemePostings:
    """One lexeme's postings in some collections, in collection order, the postings of
    ``collections[i]`` from ``starts[i]`` to ``starts[i + 1]``: each one's chunk ``pks``, term
    frequency (``tfs``), chunk length (``lengths``) and BM25 weight without the idf at the
    average length it was read for (``weights``). A scope of some collections weighs their
    postings again from the frequencies and lengths, at its own average length."""

    pks: npt.NDArray[np.integer]
    weights: npt.NDArray[np.float32]
    tfs: npt.NDArray[np.uint16]
    lengths: npt.NDArray[np.uint32]
    collections: tuple[str, ...]
    starts: npt.NDArray[np.int64]

    def __len__(self) -> int:
        return len(self.pks)

    @property
    def nbytes(self) -> int:
        arrays = (self.pks, self.weights, self.tfs, self.lengths, self.starts)
        return sum(int(array.nbytes) for array in arrays)

    def in_scope(
        self, collections: Collection[str]
    ) -> tuple[npt.NDArray[np.integer], npt.NDArray[np.uint16], npt.NDArray[np.uint32]]:
        """The (pks, term frequencies, chunk lengths) of the postings in these collections."""
        parts = [
            slice(int(self.starts[i]), int(self.starts[i + 1]))
            for i, name in enumerate(self.collections)
            if name in collections
        ]
        if len(parts) == len(self.collections):
            return self.pks, self.tfs, self.lengths
        arrays = (self.pks, self.tfs, self.lengths)
        pks, tfs, lengths = (
            np.concatenate([array[part] for part in parts] or [array[:0]]) for array in arrays
        )
        return pks, tfs, lengths


class PostingsCache:
    """Lexeme -> :class:`LexemePostings` for one count of writes (which only grows), at most
    ``max_bytes``."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.writes: int | None = None
        self.nbytes = 0
        self._entries: OrderedDict[str, LexemePostings] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def entries(self, lexemes: list[str]) -> tuple[int | None, dict[str, LexemePostings]]:
        """The count of writes the cache is of, and the postings it holds of these lexemes
        (the query asks PostgreSQL for the others' blocks, and for these too when its count
        of writes turns out to be another)."""
        with self._lock:
            found = {lexeme: self._entries[lexeme] for lexeme in lexemes if lexeme in self._entries}
            for lexeme in found:
                self._entries.move_to_end(lexeme)
            return self.writes, found

    def put(self, lexeme: str, postings: LexemePostings, writes: int) -> None:
        if postings.nbytes > self.max_bytes:
            return
        with self._lock:
            if self.writes is not None and writes < self.writes:  # read before a later write
                return
            if writes != self.writes:
                self._clear(writes)
            old = self._entries.pop(lexeme, None)
            if old is not None:
                self.nbytes -= old.nbytes
            self._entries[lexeme] = postings
            self.nbytes += postings.nbytes
            while self.nbytes > self.max_bytes:
                _, dropped = self._entries.popitem(last=False)
                self.nbytes -= dropped.nbytes

    def _clear(self, writes: int) -> None:
        self._entries.clear()
        self.nbytes = 0
        self.writes = writes
