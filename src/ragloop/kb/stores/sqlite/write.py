"""Writes of the SQLite store: a batch of documents replaced in one transaction (each table's
rows by one ``executemany``), deletions, metadata updates, the phrase index and the links.
Where a chunk is written: :meth:`Writes.replace_documents`."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from itertools import chain
from typing import Any

import numpy as np

from ragloop.kb.index.bm25 import (
    pack_batch,
    renumber,
)
from ragloop.kb.stores.base import (
    ChunkRecord,
    DocumentRecord,
    Link,
    PreviousHashes,
)
from ragloop.kb.stores.sqlite.database import Database, guarded
from ragloop.kb.stores.sqlite.schema import INDEX_PHRASES, vector_blob


class Writes(Database):
    """Every write of text and links (vectors: :mod:`.dense`)."""

    @guarded
    def replace_documents(
        self, documents: Sequence[tuple[DocumentRecord, list[ChunkRecord]]], links: Sequence[Link]
    ) -> PreviousHashes:
        """Replace documents in one transaction (a commit costs more than a document's rows),
        then add the links given. Each table's rows of the whole batch go in by one
        ``executemany`` (a handful of statements a batch instead of six a document: 471
        instead of 60,388 for 20,000 documents); a source given twice keeps its last
        version. Returns what each had stored before (its content hash, None: new)."""
        latest = {(doc.collection, doc.source): (doc, chunks) for doc, chunks in documents}
        batch = list(latest.values())
        with self._write() as conn:
            model = self._model(conn)
            packed = iter(self._packed_terms(conn, [c for _, chunks in batch for c in chunks]))
            stored = self._stored_documents(conn, list(latest))
            previous: PreviousHashes = dict.fromkeys(latest)
            previous.update({key: content_hash for key, (_, content_hash) in stored.items()})
            self._delete_ids(conn, [document_id for document_id, _ in stored.values()])
            # the row numbers SQLite would give, chosen here so each table's rows go in together
            (document_id,) = conn.execute("SELECT coalesce(max(id), 0) FROM documents").fetchone()
            # never a row number given before (a deleted chunk's: the vector graph keys
            # vectors by row number), so past the highest ever given, recorded in meta
            (pk,) = conn.execute(
                "SELECT max(coalesce((SELECT max(pk) FROM chunks), 0), coalesce((SELECT "
                "CAST(value AS INTEGER) FROM meta WHERE key = 'chunk_pks_given'), 0))"
            ).fetchone()
            documents_rows, chunk_rows, vector_rows = _batch_rows(
                batch, document_id, pk, packed, None if model is None else model[0]
            )
            conn.executemany(
                "INSERT INTO documents (id, collection, source, title, content_hash, metadata, "
                "updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                documents_rows,
            )
            conn.executemany(
                "INSERT INTO chunks (pk, id, document_id, position, content, heading_path, "
                "text_hash, metadata, terms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                chunk_rows,
            )
            conn.execute(
                "INSERT OR REPLACE INTO meta VALUES ('chunk_pks_given', ?)",
                (str(pk + len(chunk_rows)),),
            )
            self._index_phrases(conn, pk + 1, pk + len(chunk_rows))
            conn.executemany("INSERT OR IGNORE INTO vectors VALUES (?, ?, ?)", vector_rows)
            self._insert_links(conn, links)
        return previous

    def _index_phrases(self, conn: sqlite3.Connection, first: int, last: int) -> None:
        """Index the phrases of chunks ``first`` to ``last`` (just written), or record that
        the phrase index lacks them. Only the title links read the phrase index, so it is
        filled when a phrase is first looked up (:meth:`_complete_phrases`) and kept full from
        then on: an ingest without links does not write it (a fifth of such an ingest's time
        at 300,000 chunks). Every chunk from meta 'phrases_from' on lacks its phrases, every
        one before has them."""
        lacking = self._meta(conn, "phrases_from")
        # a row number below 'phrases_from' is given again only after every chunk from it on
        # was deleted, so the chunks from the smaller of the two on are the ones lacking
        start = first if lacking is None else min(int(lacking), first)
        if self._phrases_wanted:
            conn.execute(INDEX_PHRASES, (start,))
            conn.execute("DELETE FROM meta WHERE key = 'phrases_from'")
        elif last >= first:
            conn.execute("INSERT OR REPLACE INTO meta VALUES ('phrases_from', ?)", (str(start),))

    def _complete_phrases(self) -> None:
        """Index the phrases of the chunks written without them, and keep the phrase index
        full from now on (a read-only file is searched as it is)."""
        self._phrases_wanted = True
        conn = self._conn()
        if self.read_only or self._meta(conn, "phrases_from") is None:
            return
        with self._transaction(conn):
            lacking = self._meta(conn, "phrases_from")  # again, under the write lock
            if lacking is not None:
                conn.execute(INDEX_PHRASES, (int(lacking),))
                conn.execute("DELETE FROM meta WHERE key = 'phrases_from'")

    @staticmethod
    def _stored_documents(
        conn: sqlite3.Connection, keys: list[tuple[str, str]]
    ) -> dict[tuple[str, str], tuple[int, str]]:
        """The id and content hash of the stored documents among ``(collection, source)``
        keys."""
        by_collection: dict[str, list[str]] = {}
        for collection, source in keys:
            by_collection.setdefault(collection, []).append(source)
        found: dict[tuple[str, str], tuple[int, str]] = {}
        for collection, sources in by_collection.items():
            for start in range(0, len(sources), 500):
                part = sources[start : start + 500]
                rows = conn.execute(
                    "SELECT id, source, content_hash FROM documents WHERE collection = ? AND "
                    f"source IN ({','.join('?' * len(part))})",
                    (collection, *part),
                )
                found.update({(collection, source): (i, h) for i, source, h in rows})
        return found

    @staticmethod
    def _delete_ids(conn: sqlite3.Connection, ids: list[int]) -> None:
        """Delete documents (their chunks and links go by cascade) and their phrase-index
        rows, which no foreign key reaches."""
        for start in range(0, len(ids), 500):
            part = ids[start : start + 500]
            marks = ",".join("?" * len(part))
            conn.execute(
                "DELETE FROM chunks_fts WHERE rowid IN "
                f"(SELECT pk FROM chunks WHERE document_id IN ({marks}))",
                part,
            )
            conn.execute(f"DELETE FROM documents WHERE id IN ({marks})", part)

    def _delete(self, conn: sqlite3.Connection, source: str, collection: str | None) -> int:
        where = "source = ?" + (" AND collection = ?" if collection is not None else "")
        params: tuple[str, ...] = (source,) if collection is None else (source, collection)
        ids = [row[0] for row in conn.execute(f"SELECT id FROM documents WHERE {where}", params)]
        self._delete_ids(conn, ids)
        return len(ids)

    @guarded
    def update_document_metadata(self, collection: str, updates: dict[str, dict[str, Any]]) -> None:
        """Merge keys into documents' metadata. Not through _write(): no index holds document
        metadata (filters read it from the rows), so nothing needs reloading."""
        if not updates:
            return
        with self._transaction(self._conn()) as conn:
            conn.executemany(
                "UPDATE documents SET metadata = json_patch(metadata, ?) "
                "WHERE collection = ? AND source = ?",
                [(json.dumps(keys), collection, source) for source, keys in updates.items()],
            )

    @guarded
    def delete_document(self, source: str, collection: str | None = None) -> int:
        with self._write() as conn:
            return self._delete(conn, source, collection)

    @guarded
    def add_links(self, links: Sequence[Link]) -> None:
        if links:
            with self._write() as conn:
                self._insert_links(conn, links)

    @staticmethod
    def _insert_links(conn: sqlite3.Connection, links: Sequence[Link]) -> None:
        conn.executemany(
            "INSERT OR IGNORE INTO links SELECT a.pk, b.pk, ? FROM chunks a, chunks b "
            "WHERE a.id = ? AND b.id = ?",
            [(link.mention, link.chunk_id, link.target_id) for link in links],
        )

    def _packed_terms(self, conn: sqlite3.Connection, chunks: list[ChunkRecord]) -> list[bytes]:
        """Each chunk's term frequencies packed with this store's term ids, from the ingest
        worker's count (``counted_terms``) or counted here in the same form."""
        terms, blobs = pack_batch([c.index_text for c in chunks if c.counted_terms is None])
        here = iter(blobs)
        counted = [c.counted_terms or (terms, next(here)) for c in chunks]
        # a list of terms is shared by the chunks counted together
        lists = {id(found[0]): found[0] for found in counted}
        self._look_up_terms(conn, chain.from_iterable(lists.values()), add=True)
        ids = self._vocabulary.__getitem__
        numbered = {
            key: np.fromiter(map(ids, words), dtype=np.uint32, count=len(words))
            for key, words in lists.items()
        }
        return [renumber(blob, numbered[id(words)]) for words, blob in counted]


def _batch_rows(
    batch: list[tuple[DocumentRecord, list[ChunkRecord]]],
    document_id: int,
    pk: int,
    packed: Iterator[bytes],
    model_id: str | None,
) -> tuple[list[tuple[Any, ...]], ...]:
    """The rows of the documents, chunks and vectors tables for a batch, with
    row numbers after ``document_id`` and ``pk`` and the chunks' term frequencies ``packed``."""
    now = datetime.now(UTC).isoformat()
    documents: list[tuple[Any, ...]] = []
    chunks: list[tuple[Any, ...]] = []
    vectors: list[tuple[Any, ...]] = []
    for doc, records in batch:
        document_id += 1
        documents.append(
            (document_id, doc.collection, doc.source, doc.title, doc.content_hash,
             json.dumps(doc.metadata), now)
        )  # fmt: skip
        for chunk in records:
            pk += 1
            chunks.append(
                (pk, chunk.id, document_id, chunk.position, chunk.content,
                 json.dumps(chunk.heading_path), chunk.text_hash, json.dumps(chunk.metadata),
                 next(packed))
            )  # fmt: skip
            if model_id is not None and chunk.vector is not None:
                vectors.append((model_id, chunk.text_hash, vector_blob(chunk.vector)))
    return documents, chunks, vectors
