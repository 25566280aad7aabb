"""Writes of the PostgreSQL store: a batch of documents in one transaction (its chunks and
vectors copied in with ``COPY`` and merged by one statement), deletions, metadata, the embedding
model and its HNSW index, vectors and links."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from ragloop.core.errors import StoreError
from ragloop.kb.stores.base import (
    ChunkRecord,
    DocumentRecord,
    Link,
    PreviousHashes,
)
from ragloop.kb.stores.postgres import postings
from ragloop.kb.stores.postgres.schema import (
    COPY_STAGING,
    COPY_VECTOR_STAGING,
    COUNT_ROWS,
    COUNTER_SLOTS,
    CREATE_STAGING,
    CREATE_VECTOR_STAGING,
    DELETE_DOCUMENTS,
    DROP_EMPTY_BLOCKS,
    FLUSH_PENDING_TSVECTORS,
    HNSW_MAX_DIMENSIONS,
    INSERT_DOCUMENTS,
    LOCK_BLOCKS,
    LOCK_SOURCES,
    MERGE_STAGING,
    MIGRATION_LOCK,
    REWRITE_BLOCKS,
    STAGING_COLUMNS,
)

if TYPE_CHECKING:
    import psycopg
from ragloop.kb.stores.postgres.connection import (
    PostgresDatabase,
    as_vector,
    index_probes,
    json_text,
    plain_text,
    recorded_model,
    vectors_stored,
)

logger = logging.getLogger("ragloop")
Totals = dict[str, tuple[int, int]]  # collection -> (chunks, terms)

BULK_VECTORS = 2_000  # vectors added at once from which the HNSW index is built after them
# ... when they are at least this share of the vectors stored: inserting into the graph cost
# 1.7-5.7 ms a vector (20,000 stored), building it 0.2-0.3 ms a vector stored
REBUILD_SHARE = 1 / 8


class PostgresWrites(PostgresDatabase):
    """Every write of the store."""

    def replace_documents(
        self, documents: Sequence[tuple[DocumentRecord, list[ChunkRecord]]], links: Sequence[Link]
    ) -> PreviousHashes:
        """Replace documents in one transaction, then add the links given. Each step is one
        statement for the whole batch (a handful a batch instead of ten a document); a source
        given twice keeps its last version. Returns what each had stored before (its content
        hash, None: new)."""
        latest = {
            (plain_text(doc.collection), plain_text(doc.source)): (doc, chunks)
            for doc, chunks in documents
        }

        def work(conn: psycopg.Connection[tuple[Any, ...]]) -> PreviousHashes:
            removed: Totals = {}
            previous: PreviousHashes = dict.fromkeys(latest)
            if latest:
                conn.execute(LOCK_SOURCES, ([source for _, source in latest],))
                collections, sources = zip(*latest, strict=True)
                stored = conn.execute(
                    "SELECT d.id, d.collection, d.source, d.content_hash FROM documents d "
                    "JOIN unnest(%s::text[], %s::text[]) AS k (collection, source) "
                    "USING (collection, source)",
                    (list(collections), list(sources)),
                    prepare=False,  # see delete_documents
                ).fetchall()
                previous.update({(c, s): h for _, c, s, h in stored})
                removed = delete_documents(conn, [row[0] for row in stored])
            added = self._insert(conn, latest) if latest else {}
            self._insert_links(conn, links)
            if any(chunks for chunks, _ in added.values()):
                conn.execute(FLUSH_PENDING_TSVECTORS)
            if latest:  # links alone change no postings
                count_rows(conn, added, removed)
            return previous

        return self._write(work)

    def _insert(
        self,
        conn: psycopg.Connection[tuple[Any, ...]],
        documents: dict[tuple[str, str], tuple[DocumentRecord, list[ChunkRecord]]],
    ) -> Totals:
        """Insert documents (none stored) with their chunks, postings and cached vectors:
        each collection's (chunks, terms) added."""
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
        # the merge sorts a batch's postings (64 a chunk) by block: in memory, not in files
        # (4 MB, the default, spilled to disk: the text phase of 30,000 chunks took 5% longer)
        conn.execute("SET LOCAL work_mem = '64MB'")
        conn.execute(CREATE_STAGING)
        staged = ((ids[key], key[0], c) for key, (_, chunks) in documents.items() for c in chunks)
        with conn.cursor() as cursor, cursor.copy(COPY_STAGING) as copy:
            copy.set_types([kind for _, kind in STAGING_COLUMNS])
            for n, (document_id, collection, chunk) in enumerate(staged):
                copy.write_row(
                    (
                        n,
                        chunk.id,
                        document_id,
                        collection,
                        chunk.position,
                        plain_text(chunk.content),
                        json_text(chunk.heading_path),
                        chunk.text_hash,
                        json_text(chunk.metadata),
                        None if chunk.vector is None else as_vector(chunk.vector),
                        plain_text(chunk.index_text),
                    )
                )
        model = self._recorded_model(conn)
        added = conn.execute(
            MERGE_STAGING, {"model_id": None if model is None else model[0]}, prepare=False
        ).fetchall()
        return {collection: (int(chunks), int(terms)) for collection, chunks, terms in added}

    def delete_document(self, source: str, collection: str | None = None) -> int:
        def work(conn: psycopg.Connection[tuple[Any, ...]]) -> int:
            conn.execute(LOCK_SOURCES, ([plain_text(source)],))
            where = "source = %s" + (" AND collection = %s" if collection is not None else "")
            params = [plain_text(source)] + ([] if collection is None else [plain_text(collection)])
            ids = [
                row[0] for row in conn.execute(f"SELECT id FROM documents WHERE {where}", params)
            ]
            if ids:
                count_rows(conn, {}, delete_documents(conn, ids))
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
                    sql.SQL(
                        "ALTER TABLE chunk_vectors ALTER COLUMN embedding TYPE vector({dim})"
                    ).format(dim=sql.Literal(dimension))
                )
                self._create_vector_index(conn)

        self._write(work)

    def _create_vector_index(self, conn: psycopg.Connection[tuple[Any, ...]]) -> None:
        from psycopg import sql  # the postgres extra, there when a store is open

        conn.execute(
            sql.SQL(
                "CREATE INDEX IF NOT EXISTS chunks_embedding ON chunk_vectors USING hnsw "
                "(embedding vector_cosine_ops) WITH (m = {m}, ef_construction = {ef})"
            ).format(m=sql.Literal(self.hnsw_m), ef=sql.Literal(self.hnsw_ef_construction))
        )

    @contextlib.contextmanager
    def filling_vectors(self, count: int) -> Iterator[None]:
        """Around adding the vectors of ``count`` chunks (ingestion's embedding phase). When
        they are many (``BULK_VECTORS`` or more, and at least an eighth of the vectors already
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
                rebuild = count >= REBUILD_SHARE * vectors_stored(conn)
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
        vectors = vectors_stored(conn)
        graph_mb = 1 + vectors * vector_bytes // 2**20
        if graph_mb > self.index_build_memory_mb:
            # measured at 1,000,000 384-d vectors with 1,024 MB: 530,000 vectors in 7 minutes,
            # in memory, then 20 more minutes for the rest, on disk
            logger.warning(
                "the HNSW index over %s vectors needs about %s MB to be built in memory; "
                "[kb.postgres] index_build_memory_mb is %s, so most of it is built on disk, "
                "several times slower (raise it, if the server has the memory)",
                f"{vectors:,}",
                f"{graph_mb:,}",
                f"{self.index_build_memory_mb:,}",
            )
        needed_mb = min(self.index_build_memory_mb, graph_mb)
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
                    "INSERT INTO embeddings VALUES (%s, %s, %b) ON CONFLICT DO NOTHING",
                    [(model_id, h, as_vector(v)) for h, v in items.items()],
                )

        from psycopg.errors import ReadOnlySqlTransaction  # the postgres extra, there when open

        with contextlib.suppress(ReadOnlySqlTransaction):
            self._write(work)  # a read-only replica still answers queries

    def add_vectors(self, model_id: str, vectors: dict[str, Sequence[float]]) -> None:
        """Vectors of stored chunks (by text hash), and into the embedding cache, in one
        transaction: copied into a staging table, then two statements (a statement a vector,
        as before, spent 1.2 ms a vector only turning Python lists into SQL arrays). Each goes
        into ``chunk_vectors``, a row per chunk, leaving the chunk's own row as it is. The
        vectors' insertion into the HNSW graph is most of what is left: 1.7-3 ms a vector
        here, hence the rebuild after a large fill (:meth:`filling_vectors`)."""
        if not vectors:
            return

        def work(conn: psycopg.Connection[tuple[Any, ...]]) -> None:
            conn.execute(CREATE_VECTOR_STAGING)
            with conn.cursor() as cursor, cursor.copy(COPY_VECTOR_STAGING) as copy:
                copy.set_types(["text", "vector"])
                for text_hash, vector in vectors.items():
                    copy.write_row((text_hash, as_vector(vector)))
            # the chunks of each text by index, not every chunk; each locked, so a chunk
            # another writer deletes meanwhile is skipped (its vector would have no chunk)
            with index_probes(conn):
                conn.execute(
                    "INSERT INTO chunk_vectors (chunk_pk, embedding) "
                    "SELECT c.pk, v.embedding FROM vectors_in v JOIN chunks c "
                    "ON c.text_hash = v.text_hash FOR KEY SHARE OF c "
                    "ON CONFLICT (chunk_pk) DO NOTHING",
                    prepare=False,
                )
            conn.execute(
                "INSERT INTO embeddings (model_id, text_hash, embedding) "
                "SELECT %s, text_hash, embedding FROM vectors_in ON CONFLICT DO NOTHING",
                (model_id,),
                prepare=False,
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


def delete_documents(conn: psycopg.Connection[tuple[Any, ...]], ids: list[int]) -> Totals:
    """Delete documents by id with their chunks, postings and links: each collection's
    (chunks, terms) removed.
    Planned each time, never prepared (as the other statements joining a batch's arrays to a
    table): psycopg prepares a statement run five times, and PostgreSQL may then keep a
    generic plan made while the tables were small (a scan of every posting for each document
    replaced: 75 ms a document at 10,000 chunks)."""
    if not ids:
        return {}
    rows = conn.execute(DELETE_DOCUMENTS, {"ids": ids}, prepare=False).fetchall()
    blocks = {(row[3], row[4], row[5]): row[6] for row in rows if row[3] is not None}
    if blocks:
        remove_postings(conn, blocks)
    if not rows or rows[0][0] is None:  # no chunk removed
        return {}
    collections, chunks, terms = rows[0][:3]
    return {name: (int(n), int(t)) for name, n, t in zip(collections, chunks, terms, strict=True)}


def remove_postings(
    conn: psycopg.Connection[tuple[Any, ...]], blocks: dict[tuple[str, str, int], list[int]]
) -> None:
    """Rewrite postings blocks without the entries of deleted chunks (``blocks``: the offsets
    to drop from each block, by key); a block left empty goes."""
    keys = [list(column) for column in zip(*blocks, strict=True)]
    with index_probes(conn):
        held = conn.execute(LOCK_BLOCKS, keys, prepare=False).fetchall()
        kept = [
            (
                lexeme,
                collection,
                segment,
                postings.without(entries, blocks[lexeme, collection, segment]),
            )
            for lexeme, collection, segment, entries in held
        ]
        columns = [list(column) for column in zip(*kept, strict=True)] if kept else [[]] * 4
        conn.execute(
            REWRITE_BLOCKS,
            [
                *columns[:3],
                [len(entries) // postings.ENTRY.itemsize for entries in columns[3]],
                columns[3],
            ],
            prepare=False,
        )
        conn.execute(DROP_EMPTY_BLOCKS, columns[:3], prepare=False)


def count_rows(conn: psycopg.Connection[tuple[Any, ...]], added: Totals, removed: Totals) -> None:
    """Add to each collection's counters and the corpus' (``added`` less ``removed``), and one
    to the count of writes (which tells every process its cached postings are of an earlier
    state), in the rows of this connection's slot (so concurrent writers rarely wait for each
    other; the statement comes last, so the rows are held only to commit)."""
    changes = {
        name: (
            added.get(name, (0, 0))[0] - removed.get(name, (0, 0))[0],
            added.get(name, (0, 0))[1] - removed.get(name, (0, 0))[1],
        )
        for name in sorted({*added, *removed})
    }
    changes = {name: change for name, change in changes.items() if change != (0, 0)}
    conn.execute(
        COUNT_ROWS,
        {
            "slots": COUNTER_SLOTS,
            "collections": list(changes),
            "chunks": [chunks for chunks, _ in changes.values()],
            "terms": [terms for _, terms in changes.values()],
            "all_chunks": sum(chunks for chunks, _ in changes.values()),
            "all_terms": sum(terms for _, terms in changes.values()),
        },
    )
