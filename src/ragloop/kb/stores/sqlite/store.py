"""The embedded store: one SQLite file with the chunks, an FTS5 keyword index, the vectors and
the link graph.

SQLite done properly: WAL journal (readers never block the writer), a busy timeout, foreign keys
on, one ``BEGIN IMMEDIATE`` transaction per batch of documents, numbered migrations recorded in
``_ragloop_migrations`` (applied under the write lock, so processes opening a new file at once
do not race; a file of a newer schema is refused). Vectors are float32 blobs keyed by (model id,
text hash), which makes the table the embedding cache too. Exact vector search runs in numpy
over a matrix loaded once and reloaded only when a write (by this process or another) bumps the
``generation`` counter.

Failures surface as :class:`~ragloop.kb.stores.base.StoreError` with SQLite's reason: a full
disk, a damaged file, tampered rows. A failed write leaves nothing behind, in the file or in
the caches. A file this process may not write (a read-only mount, another user's file) is opened
read-only: search works, writes are refused.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ragloop.core.records import Chunk, Scope
from ragloop.core.text import tokenize
from ragloop.kb.index.exact import exact_hits, exact_terms, term_patterns
from ragloop.kb.index.fusion import fuse
from ragloop.kb.stores.base import (
    CollectionInfo,
    DocumentRecord,
    Link,
    StoreStats,
    WritesInBatches,
    index_text,
)
from ragloop.kb.stores.rows import chunk_from_row, parse_json
from ragloop.kb.stores.sqlite.database import guarded
from ragloop.kb.stores.sqlite.dense import DenseSearch
from ragloop.kb.stores.sqlite.keyword import KeywordSearch
from ragloop.kb.stores.sqlite.schema import MIGRATIONS as MIGRATIONS
from ragloop.kb.stores.sqlite.schema import SCHEMA_VERSION as SCHEMA_VERSION
from ragloop.kb.stores.sqlite.schema import SELECT_CHUNKS
from ragloop.kb.stores.sqlite.write import Writes


class SQLiteStore(Writes, KeywordSearch, DenseSearch, WritesInBatches):
    """A :class:`~ragloop.kb.stores.base.Store` in one SQLite file (created if missing): the
    :class:`~.database.Database` with its writes (:mod:`.write`), keyword index
    (:mod:`.keyword`) and vectors (:mod:`.dense`)."""

    uses_counted_terms = True  # replace_documents stores ChunkRecord.counted_terms when given

    # -- documents ---------------------------------------------------------------------------
    @guarded
    def document_hash(self, collection: str, source: str) -> str | None:
        row = (
            self._conn()
            .execute(
                "SELECT content_hash FROM documents WHERE collection = ? AND source = ?",
                (collection, source),
            )
            .fetchone()
        )
        return row[0] if row else None

    @guarded
    def sources(self, collection: str) -> list[str]:
        rows = self._conn().execute(
            "SELECT source FROM documents WHERE collection = ? ORDER BY source", (collection,)
        )
        return [row[0] for row in rows]

    @guarded
    def documents(self, collection: str | None = None) -> list[DocumentRecord]:
        """The documents of a collection (every collection when None), by source."""
        where, params = (
            ("WHERE collection = ?", (collection,)) if collection is not None else ("", ())
        )
        rows = self._conn().execute(
            "SELECT collection, source, title, content_hash, metadata FROM documents "
            f"{where} ORDER BY collection, source",
            params,
        )
        return [
            DocumentRecord(coll, source, title, digest, parse_json(meta))
            for coll, source, title, digest, meta in rows
        ]

    @guarded
    def document_chunks(self, collection: str, source: str) -> list[Chunk]:
        """One document's chunks, in their order in it (none: no such document)."""
        rows = self._conn().execute(
            f"{SELECT_CHUNKS} WHERE d.collection = ? AND d.source = ? ORDER BY c.position",
            (collection, source),
        )
        return [chunk_from_row(row, 1.0) for row in rows]

    @guarded
    def get_chunks(self, ids: Sequence[str]) -> list[Chunk]:
        if not ids:
            return []
        marks = ",".join("?" * len(ids))
        rows = self._conn().execute(f"{SELECT_CHUNKS} WHERE c.id IN ({marks})", list(ids))
        found = {row[1]: chunk_from_row(row, 1.0) for row in rows}
        return [found[i] for i in ids if i in found]

    @guarded
    def load_indexes(
        self,
        *,
        keyword: bool = True,
        dense: bool = True,
        on_progress: Callable[[int, int], None] | None = None,
    ) -> None:
        """Load (or reload, after writes) the in-memory indexes a search reads, before it
        needs them: the knowledge base does it at the end of an ingest and while a query is
        embedded. ``on_progress`` is told (vectors added, vectors to add) while the vector
        graph of a large knowledge base is built or extended."""
        if keyword:
            self._keyword_index()
        if dense:
            self._dense_index(on_progress)

    @guarded
    def hybrid_search(
        self,
        query: str,
        vector: Sequence[float],
        top_k: int,
        scope: Scope,
        *,
        depth: int,
        k: int,
        weights: dict[str, float],
    ) -> list[Chunk]:
        """Keyword and vector search fused by reciprocal rank fusion on row numbers, so only
        the ``top_k`` fused rows are read (the knowledge base's generic fusion reads every
        row of both lists: ``2 * depth``). A query with exact terms
        (:mod:`ragloop.kb.index.exact`) reads every candidate's text to rank those holding
        them first."""
        rankings = {
            "bm25": [(pk, score) for pk, score, _ in self._keyword_hits(query, depth, scope)],
            "dense": self._vector_hits(vector, depth, scope),
        }
        terms = exact_terms(query)
        rows = None
        exact = None
        if terms:
            pks = list({pk for ranking in rankings.values() for pk, _ in ranking})
            rows = self._rows_by_pk(pks, scope)
            patterns = term_patterns(terms)
            held = {pk: exact_hits(patterns, _index_text(row)) for pk, row in rows.items()}
            exact = (held, len(terms))
        hits = fuse(rankings, top_k=top_k, k=k, weights=weights, exact=exact)
        return self._chunks(hits, scope, rows)

    # -- links ---------------------------------------------------------------------------------
    @guarded
    def link_targets(self) -> list[tuple[str, str, str]]:
        """(name, chunk id, document key) for every document title and last heading."""
        rows = self._conn().execute(
            "SELECT d.title, c.id, d.collection || char(0) || d.source, "
            "json_extract(c.heading_path, '$[#-1]') "
            "FROM chunks c JOIN documents d ON d.id = c.document_id ORDER BY c.pk"
        )
        targets: list[tuple[str, str, str]] = []
        for title, chunk_id, doc_key, heading in rows:
            targets.extend((str(name), chunk_id, doc_key) for name in (title, heading) if name)
        return targets

    @guarded
    def chunks_with_phrase(self, phrase: str, limit: int) -> list[tuple[str, str, str]]:
        words = tokenize(phrase)
        if not words:
            return []
        self._complete_phrases()
        match = '"' + " ".join(words).replace('"', "") + '"'
        rows = self._conn().execute(
            "SELECT c.id, d.collection || char(0) || d.source, c.content FROM chunks_fts f "
            "JOIN chunks c ON c.pk = f.rowid JOIN documents d ON d.id = c.document_id "
            "WHERE chunks_fts MATCH ? LIMIT ?",
            (match, limit),
        )
        return [tuple(row) for row in rows]

    @guarded
    def links_from(
        self, chunk_ids: Sequence[str], collections: Sequence[str] | None = None
    ) -> list[Link]:
        if not chunk_ids or (collections is not None and not collections):
            return []
        marks = ",".join("?" * len(chunk_ids))
        scoped, params = "", list(chunk_ids)
        if collections is not None:  # the target's collection, in the query
            scoped = (
                " AND b.document_id IN (SELECT id FROM documents WHERE collection IN "
                f"({','.join('?' * len(collections))}))"
            )
            params += list(collections)
        rows = self._conn().execute(
            "SELECT a.id, b.id, l.mention FROM links l JOIN chunks a ON a.pk = l.chunk_pk "
            f"JOIN chunks b ON b.pk = l.target_pk WHERE a.id IN ({marks}){scoped} "
            "ORDER BY a.pk, b.pk",
            params,
        )
        return [Link(*row) for row in rows]

    # -- bookkeeping --------------------------------------------------------------------------
    @guarded
    def stats(self) -> StoreStats:
        conn = self._conn()
        collections = [
            CollectionInfo(name=name, documents=docs, chunks=chunks or 0)
            for name, docs, chunks in conn.execute(
                "SELECT d.collection, count(DISTINCT d.id), count(c.pk) FROM documents d "
                "LEFT JOIN chunks c ON c.document_id = d.id GROUP BY d.collection "
                "ORDER BY d.collection"
            )
        ]
        model = self._model(conn)
        size = sum(p.stat().st_size for p in (self.path, Path(f"{self.path}-wal")) if p.exists())
        return StoreStats(
            documents=sum(c.documents for c in collections),
            chunks=sum(c.chunks for c in collections),
            # the chunks that have a vector of the knowledge base's model; the vectors table is
            # a cache by text, so it may also hold texts no chunk has any more
            vectors=conn.execute(
                "SELECT count(*) FROM chunks c JOIN vectors v "
                "ON v.text_hash = c.text_hash AND v.model_id = ?",
                (model[0] if model else "",),
            ).fetchone()[0],
            links=conn.execute("SELECT count(*) FROM links").fetchone()[0],
            collections=collections,
            embedding_model=model[0] if model else None,
            dimension=model[1] if model else None,
            size_bytes=size,
            path=str(self.path),
        )

    @guarded
    def integrity_check(self) -> str:
        """SQLite's ``PRAGMA integrity_check`` ("ok" when the file is sound)."""
        return str(self._conn().execute("PRAGMA integrity_check").fetchone()[0])


def _index_text(row: Sequence[Any]) -> str:
    """What keyword search indexed for a chunk row: title, headings, text."""
    return index_text(row[8], parse_json(row[4]), row[3])
