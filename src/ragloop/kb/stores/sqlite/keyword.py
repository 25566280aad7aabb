"""Keyword search in the SQLite store: the BM25 index over each chunk's term frequencies
(:mod:`ragloop.kb.index.bm25`), built from the rows, saved beside the file, and reloaded when
a write changed the file."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

from ragloop.core.records import Chunk, Scope
from ragloop.kb.index import saved_arrays
from ragloop.kb.index.bm25 import (
    BM25Index,
    PostingsBlock,
    Within,
    analyze,
    block,
    unpack,
)
from ragloop.kb.stores.sqlite.database import guarded, snapshot
from ragloop.kb.stores.sqlite.indexes import IndexRows, SavedIndexes, row_block
from ragloop.kb.stores.sqlite.schema import BLOCK

SCOPES_KEPT = 16  # the collection scopes an index keeps the statistics of


@dataclass
class _KeywordIndex:
    generation: int
    rows: IndexRows
    bm25: BM25Index
    saved: bool = False  # mapped from the file saved beside the knowledge base
    # per collection scope: which rows it holds (None: all) and their statistics, for this
    # state of the index (a server's keys ask the same few scopes again and again)
    scopes: dict[frozenset[str], tuple[npt.NDArray[np.bool_] | None, Within | None]] = field(
        default_factory=dict
    )

    def scoped(
        self, collections: Sequence[str] | None
    ) -> tuple[npt.NDArray[np.bool_] | None, Within | None]:
        """The rows of these collections (None: every row) and their statistics (None: those
        of every row)."""
        if collections is None:
            return None, None
        key = frozenset(collections)
        found = self.scopes.get(key)
        if found is None:
            codes = np.zeros(len(self.rows.names), dtype=bool)
            codes[[code for code, name in enumerate(self.rows.names) if name in key]] = True
            mask = codes[self.rows.collections]
            within = self.bm25.within(mask)
            found = (None if within is None else mask, within)
            if len(self.scopes) >= SCOPES_KEPT:
                self.scopes.clear()
            self.scopes[key] = found
        return found


class KeywordSearch(SavedIndexes):
    """The keyword index of the store and the searches over it."""

    _keyword: _KeywordIndex | None = None

    def _keyword_index(self) -> _KeywordIndex:
        """The BM25 index, rebuilt when a write changed the file: mapped from the file saved
        beside the knowledge base for this state of it, else built from the rows and saved."""
        generation = self._generation()
        index = self._keyword
        if index is not None and index.generation == generation:
            return index
        conn = self._conn()
        with snapshot(conn):  # the state and the rows from one state of the file
            generation = self._generation()
            state = self._meta(conn, "text_state")
            path = self._saved_path("keyword", state)
            index = self._saved_keyword(path, generation) or self._build_keyword(conn, generation)
        if not index.saved and self._save(path, "keyword", index.rows, index.bm25.arrays(), {}):
            # searched from the saved copy, as every later process does: its pages are the
            # kernel's to drop and read again, where the built arrays would stay resident
            index = self._saved_keyword(path, generation) or index
        self._keyword = index
        return index

    def _build_keyword(self, conn: sqlite3.Connection, generation: int) -> _KeywordIndex:
        """Rows are read a block at a time and kept as compact arrays, never as a list of
        every row."""
        vocabulary, words = conn.execute(
            "SELECT coalesce(max(id), 0) + 1, count(*) FROM vocabulary"
        ).fetchone()
        if vocabulary > 2 * words + 1024:  # ids are dense; a damaged one must not size arrays
            raise ValueError(f"vocabulary id {vocabulary - 1} for {words} words")
        cursor = conn.execute(
            "SELECT c.pk, d.collection, c.terms FROM chunks c "
            "JOIN documents d ON d.id = c.document_id ORDER BY c.pk"
        )
        parts: list[tuple[npt.NDArray[np.int64], npt.NDArray[np.int32]]] = []
        names: dict[str, int] = {}

        def blocks() -> Iterator[PostingsBlock]:
            while rows := cursor.fetchmany(BLOCK):
                parts.append(row_block(rows, names))
                yield block([unpack(row[2]) for row in rows])

        bm25 = BM25Index.from_blocks(blocks(), vocabulary)
        return _KeywordIndex(generation, IndexRows.read(parts, names), bm25)

    def _saved_keyword(self, path: Path | None, generation: int) -> _KeywordIndex | None:
        saved = self._load_saved(path)
        if saved is None:
            return None
        arrays, _, rows = saved
        if not set(BM25Index.ARRAYS) <= set(arrays):  # saved before scoped statistics: rebuilt
            return None
        bm25 = BM25Index.from_arrays(len(rows.pks), arrays)
        if bm25 is None:
            saved_arrays.damaged(path, "its postings do not hold together")
            return None
        return _KeywordIndex(generation, rows, bm25, saved=True)

    @guarded
    def keyword_search(self, query: str, top_k: int, scope: Scope) -> list[Chunk]:
        hits = [
            (pk, score, {"bm25": round(score, 6), "bm25_raw": round(raw, 6)})
            for pk, score, raw in self._keyword_hits(query, top_k, scope)
        ]
        return self._chunks(hits, scope)

    def _keyword_hits(self, query: str, top_k: int, scope: Scope) -> list[tuple[int, float, float]]:
        """(row pk, normalised score, raw BM25) of the ``top_k`` best rows, best first."""
        terms = analyze(query)
        if not terms or scope.empty or top_k < 1:
            return []
        index = self._keyword_index()
        ids = self._term_ids(self._conn(), terms, add=False)
        in_collections, within = index.scoped(scope.collections)  # whose statistics count
        mask = in_collections
        if scope.filters:
            mask = self._filters_mask(index.rows, scope, in_collections)
        hits = index.bm25.search([ids[t] for t in terms if t in ids], top_k, mask, within)
        return [(int(index.rows.pks[i]), score, raw) for i, score, raw in hits]
