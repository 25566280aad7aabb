"""Writes of the PostgreSQL store: a batch of documents in one transaction (a statement per
step for the whole batch), deletions, metadata, the embedding model and its HNSW index, vectors
and links."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from ragloop.core.errors import StoreError
from ragloop.kb.stores.base import (
    ChunkRecord,
    DocumentRecord,
    Link,
)
from ragloop.kb.stores.postgres.schema import (
    COUNTER_SLOTS,
    DELETE_DOCUMENTS,
    FLUSH_PENDING_TSVECTORS,
    HNSW_MAX_DIMENSIONS,
    INSERT_CHUNKS,
    INSERT_DOCUMENTS,
    LOCK_SOURCES,
    MIGRATION_LOCK,
)

if TYPE_CHECKING:
    import psycopg
from ragloop.kb.stores.postgres.connection import (
    PostgresDatabase,
    index_probes,
    json_text,
    plain_text,
    recorded_model,
    vector_text,
    vectors_stored,
)

BULK_VECTORS = 2_000  # vectors added at once from which the HNSW index is built after them
MAX_BUILD_MEMORY_MB = 1_024  # the most maintenance_work_mem an index build asks for


class PostgresWrites(PostgresDatabase):
    """Every write of the store."""

    def replace_documents(
        self, documents: Sequence[tuple[DocumentRecord, list[ChunkRecord]]], links: Sequence[Link]
    ) -> None:
        """Replace documents in one transaction, then add the links given. Each step is one
        statement for the whole batch (a handful a batch instead of ten a document); a source
        given twice keeps its last version."""
        latest = {
            (plain_text(doc.collection), plain_text(doc.source)): (doc, chunks)
            for doc, chunks in documents
        }

        def work(conn: psycopg.Connection[tuple[Any, ...]]) -> None:
            removed = (0, 0)
            if latest:
                conn.execute(LOCK_SOURCES, ([source for _, source in latest],))
                collections, sources = zip(*latest, strict=True)
                stored = conn.execute(
                    "SELECT d.id FROM documents d JOIN unnest(%s::text[], %s::text[]) "
                    "AS k (collection, source) USING (collection, source)",
                    (list(collections), list(sources)),
                    prepare=False,  # see delete_documents
                ).fetchall()
                removed = delete_documents(conn, [row[0] for row in stored])
            added = self._insert(conn, latest) if latest else (0, 0)
            self._insert_links(conn, links)
            if added[0]:
                conn.execute(FLUSH_PENDING_TSVECTORS)
            count_rows(conn, added[0] - removed[0], added[1] - removed[1])

        self._write(work)

    def _insert(
        self,
        conn: psycopg.Connection[tuple[Any, ...]],
        documents: dict[tuple[str, str], tuple[DocumentRecord, list[ChunkRecord]]],
    ) -> tuple[int, int]:
        """Insert documents (none stored) with their chunks, postings and cached vectors:
        (chunks, terms) added."""
        rows = conn.execute(
            INSERT_DOCUMENTS,
            [
                [key[0] for key in documents],
                [key[1] for key in documents],
                [plain_text(doc.title) for doc, _ in documents.values()],
                [doc.content_hash for doc, _ in documents.values()],
                [json_text(doc.metadata) for doc, _ in documents.values()],
            ],
        ).fetchall()
        ids = {(collection, source): id_ for id_, collection, source in rows}
        chunks = [
            (ids[key], key[0], chunk)
            for key, (_, doc_chunks) in documents.items()
            for chunk in doc_chunks
        ]
        model = self._recorded_model(conn)
        added = conn.execute(
            INSERT_CHUNKS,
            {
                "id": [chunk.id for _, _, chunk in chunks],
                "document_id": [document_id for document_id, _, _ in chunks],
                "collection": [collection for _, collection, _ in chunks],
                "position": [chunk.position for _, _, chunk in chunks],
                "content": [plain_text(chunk.content) for _, _, chunk in chunks],
                "heading_path": [json_text(chunk.heading_path) for _, _, chunk in chunks],
                "text_hash": [chunk.text_hash for _, _, chunk in chunks],
                "metadata": [json_text(chunk.metadata) for _, _, chunk in chunks],
                "embedding": [vector_text(chunk.vector) for _, _, chunk in chunks],
                "index_text": [plain_text(chunk.index_text) for _, _, chunk in chunks],
                "model_id": None if model is None else model[0],
            },
        ).fetchone()
        assert added is not None
        return int(added[0]), int(added[1])

    def delete_document(self, source: str, collection: str | None = None) -> int:
        def work(conn: psycopg.Connection[tuple[Any, ...]]) -> int:
            conn.execute(LOCK_SOURCES, ([plain_text(source)],))
            where = "source = %s" + (" AND collection = %s" if collection is not None else "")
            params = [plain_text(source)] + ([] if collection is None else [plain_text(collection)])
            ids = [
                row[0] for row in conn.execute(f"SELECT id FROM documents WHERE {where}", params)
            ]
            chunks, terms = delete_documents(conn, ids)
            count_rows(conn, -chunks, -terms)
            return len(ids)

        return self._write(work)

    def update_document_metadata(self, collection: str, updates: dict[str, dict[str, Any]]) -> None:
        """Merge keys into documents' metadata, in one transaction."""
        if not updates:
            return
        with self._connection() as conn, conn.transaction(), conn.cursor() as cursor:
            cursor.executemany(
                "UPDATE documents SET metadata = metadata || %s::jsonb "
                "WHERE collection = %s AND source = %s",
                [(json.dumps(keys), collection, source) for source, keys in updates.items()],
            )

    def set_embedding_model(self, model_id: str, dimension: int) -> None:
        """Record the model (once; another one is refused) and build the HNSW index for it."""
        if self.embedding_model() == (model_id, dimension):
            return

        def work(conn: psycopg.Connection[tuple[Any, ...]]) -> None:
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
            current = recorded_model(conn)
            if current is not None and current != (model_id, dimension):
                raise StoreError(
                    f"this knowledge base holds vectors of {current[0]} ({current[1]}-d); "
                    f"it cannot mix in {model_id} ({dimension}-d)"
                )
            if current is not None:
                return
            conn.execute(
                "INSERT INTO meta VALUES ('embedding_model', %s), ('dimension', %s)",
                (model_id, str(dimension)),
            )
            if 0 < dimension <= HNSW_MAX_DIMENSIONS:
                from psycopg import sql  # the postgres extra, there when a store is open

                conn.execute(
                    sql.SQL("ALTER TABLE chunks ALTER COLUMN embedding TYPE vector({dim})").format(
                        dim=sql.Literal(dimension)
                    )
                )
                self._create_vector_index(conn)

        self._write(work)

    def _create_vector_index(self, conn: psycopg.Connection[tuple[Any, ...]]) -> None:
        from psycopg import sql  # the postgres extra, there when a store is open

        conn.execute(
            sql.SQL(
                "CREATE INDEX IF NOT EXISTS chunks_embedding ON chunks USING hnsw "
                "(embedding vector_cosine_ops) WITH (m = {m}, ef_construction = {ef})"
            ).format(m=sql.Literal(self.hnsw_m), ef=sql.Literal(self.hnsw_ef_construction))
        )

    @contextlib.contextmanager
    def filling_vectors(self, count: int) -> Iterator[None]:
        """Around adding the vectors of ``count`` chunks (ingestion's embedding phase). When
        they are many (``BULK_VECTORS`` or more, and at least a quarter of the vectors already
        indexed) the HNSW index is dropped first and built once they are all in: at 5,000
        chunks, inserting into the graph vector by vector cost 1.7 ms a vector, building it
        0.2 ms. Searches meanwhile scan every vector (exact, slower). However the fill ends
        (an error, Ctrl-C) the index is built before it returns; a process killed outright
        leaves it to the next fill, which always ends with the index in place."""
        model = self.embedding_model()
        if model is None or not 0 < model[1] <= HNSW_MAX_DIMENSIONS:
            yield
            return
        if count >= BULK_VECTORS:  # only then is the table counted: a seq scan
            with self._connection() as conn:
                rebuild = 4 * count >= vectors_stored(conn)
            if rebuild:
                self._write(lambda conn: conn.execute("DROP INDEX IF EXISTS chunks_embedding"))
        try:
            yield
        finally:
            self._write(self._build_vector_index)

    def _build_vector_index(self, conn: psycopg.Connection[tuple[Any, ...]]) -> None:
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        exists = conn.execute("SELECT to_regclass('chunks_embedding') IS NOT NULL").fetchone()
        if exists and exists[0]:
            return
        # pgvector builds the graph in memory when it fits (else far slower, on disk): the
        # vectors and their neighbour lists, given about 1 kB a vector for the latter
        model = recorded_model(conn)
        vector_bytes = 4 * (model[1] if model else 0) + 1024
        needed_mb = min(MAX_BUILD_MEMORY_MB, 1 + vectors_stored(conn) * vector_bytes // 2**20)
        conn.execute(
            "SELECT set_config('maintenance_work_mem', %s, true) "
            "WHERE pg_size_bytes(current_setting('maintenance_work_mem')) < pg_size_bytes(%s)",
            (f"{needed_mb}MB", f"{needed_mb}MB"),
        )
        self._create_vector_index(conn)

    def cache_vectors(self, model_id: str, items: dict[str, Sequence[float]]) -> None:
        if not items:
            return

        def work(conn: psycopg.Connection[tuple[Any, ...]]) -> None:
            with conn.cursor() as cursor:
                cursor.executemany(
                    "INSERT INTO embeddings VALUES (%s, %s, %b::vector) ON CONFLICT DO NOTHING",
                    [(model_id, h, [float(x) for x in v]) for h, v in items.items()],
                )

        from psycopg.errors import ReadOnlySqlTransaction  # the postgres extra, there when open

        with contextlib.suppress(ReadOnlySqlTransaction):
            self._write(work)  # a read-only replica still answers queries

    def add_vectors(self, model_id: str, vectors: dict[str, Sequence[float]]) -> None:
        """Vectors of stored chunks (by text hash), and into the embedding cache, in one
        transaction."""
        if not vectors:
            return
        items = [(h, [float(x) for x in v]) for h, v in vectors.items()]

        def work(conn: psycopg.Connection[tuple[Any, ...]]) -> None:
            with conn.cursor() as cursor:
                cursor.executemany(
                    "UPDATE chunks SET embedding = %b::vector "
                    "WHERE text_hash = %s AND embedding IS NULL",
                    [(v, h) for h, v in items],
                )
                cursor.executemany(
                    "INSERT INTO embeddings VALUES (%s, %s, %b::vector) ON CONFLICT DO NOTHING",
                    [(model_id, h, v) for h, v in items],
                )

        self._write(work)

    def add_links(self, links: Sequence[Link]) -> None:
        if links:
            self._write(lambda conn: self._insert_links(conn, links))

    @staticmethod
    def _insert_links(conn: psycopg.Connection[tuple[Any, ...]], links: Sequence[Link]) -> None:
        if not links:
            return
        conn.execute(
            "INSERT INTO links (chunk_pk, target_pk, mention) "
            "SELECT a.pk, b.pk, l.mention FROM unnest(%s::text[], %s::text[], %s::text[]) "
            "AS l (source_id, target_id, mention) "
            "JOIN chunks a ON a.id = l.source_id JOIN chunks b ON b.id = l.target_id "
            "ON CONFLICT DO NOTHING",
            (
                [link.chunk_id for link in links],
                [link.target_id for link in links],
                [plain_text(link.mention) for link in links],
            ),
            prepare=False,  # see delete_documents
        )


def delete_documents(conn: psycopg.Connection[tuple[Any, ...]], ids: list[int]) -> tuple[int, int]:
    """Delete documents by id with their chunks, postings and links: (chunks, terms) removed.
    Planned each time, never prepared (as the other statements joining a batch's arrays to a
    table): psycopg prepares a statement run five times, and PostgreSQL may then keep a
    generic plan made while the tables were small (a scan of every posting for each document
    replaced: 75 ms a document at 10,000 chunks)."""
    if not ids:
        return 0, 0
    with index_probes(conn):
        gone = conn.execute(DELETE_DOCUMENTS, {"ids": ids}, prepare=False).fetchone()
    assert gone is not None
    return int(gone[0]), int(gone[1])


def count_rows(conn: psycopg.Connection[tuple[Any, ...]], chunks: int, terms: int) -> None:
    """Add to the corpus counters, in the row of this connection's slot (so concurrent writers
    rarely wait for each other; the statement comes last, so the row is held only to commit)."""
    if not chunks and not terms:
        return
    conn.execute(
        "INSERT INTO corpus_counters VALUES (pg_backend_pid() %% %s, %s, %s) "
        "ON CONFLICT (slot) DO UPDATE SET chunks = corpus_counters.chunks + excluded.chunks, "
        "terms = corpus_counters.terms + excluded.terms",
        (COUNTER_SLOTS, chunks, terms),
    )
