"""The PostgreSQL store: chunks, a tsvector keyword index, pgvector HNSW vectors and the link
graph in one schema of a PostgreSQL (>= 13) database with pgvector (>= 0.5).

:class:`PostgresKnowledgeBase` is the same :class:`~ragloop.KnowledgeBase` (ingestion, chunking,
fusion, the retriever) over a :class:`PostgresStore`. Connections come from a psycopg 3 pool,
one per thread at a time, checked before use so a restarted server is reconnected to.

- Writes: one transaction per batch of documents, a statement per step for the whole batch,
  serialised per source by advisory locks taken in key order, retried on deadlock; the chunks'
  vectors also go into the embedding cache (``embeddings``, keyed by model id and text hash).
  Numbered migrations are recorded in ``_ragloop_migrations``.
- Keyword search: BM25 in SQL (k1 1.2, b 0.75 and the idf of FTS5, as the other stores) over
  a postings table filled from each chunk's ``to_tsvector('english')`` (Snowball stemming,
  stopwords dropped); a GIN index on the tsvector serves phrase lookups. Document frequencies
  are counted on the query's postings, the corpus size and length come from sharded counters:
  exact, without a row every writer waits for. The score is divided by the highest score the
  query could reach (every term at saturation), the normalisation of every store, so it lies
  in [0, 1]. Why not ``ts_rank_cd`` on the GIN index: see :mod:`.postgres_schema`.
- Vector search: cosine distance in an HNSW index (``vector_cosine_ops``), created when the
  embedding model is recorded, and built again after a fill of many vectors at once
  (:meth:`PostgresStore.filling_vectors`); filters are applied in the same query, with
  pgvector 0.8's iterative scan so a narrow collection still fills ``top_k``. Score: 1 -
  distance, clipped.
- Hybrid search is fused in Python by the knowledge base, as for every store: fusing in one SQL
  statement was measured slower (benchmarks/bench_postgres.py: 111 against 78 ms p50 at 100,000
  chunks).
"""

from __future__ import annotations

import contextlib
import inspect
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

from ragloop.core.errors import KnowledgeBaseNotFound, StoreError
from ragloop.core.records import Chunk, Scope
from ragloop.core.text import tokenize
from ragloop.retrieval.bm25 import query_words
from ragloop.retrieval.knowledge_base import KnowledgeBase
from ragloop.retrieval.postgres_schema import (
    BM25_QUERY,
    CHUNK_COLUMNS,
    COUNTER_SLOTS,
    DELETE_DOCUMENTS,
    FILTER_COLUMNS,
    FLUSH_PENDING_TSVECTORS,
    FROM_CHUNKS,
    HNSW_MAX_DIMENSIONS,
    INSERT_CHUNKS,
    INSERT_DOCUMENTS,
    LOCK_SOURCES,
    MIGRATION_LOCK,
    MIGRATIONS,
    TEXT_CONFIG,
    migrate,
    pgvector_version,
    set_search_path,
)
from ragloop.retrieval.store import (
    ChunkRecord,
    CollectionInfo,
    DocumentRecord,
    Link,
    StoreStats,
    index_text,
)

try:
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import conninfo_to_dict, make_conninfo
    from psycopg.types.json import Jsonb
    from psycopg_pool import ConnectionPool

    _MISSING: ImportError | None = None
except ImportError as error:  # the postgres extra is not installed
    _MISSING = error

T = TypeVar("T")

_RETRIES = 5  # attempts of a write transaction the server broke off to end a deadlock
BULK_VECTORS = 2_000  # vectors added at once from which the HNSW index is built after them
MAX_BUILD_MEMORY_MB = 1_024  # the most maintenance_work_mem an index build asks for


class PostgresStore:
    """A :class:`~ragloop.retrieval.store.Store` in a PostgreSQL schema (created if missing).

    ``dsn`` is a libpq connection string or URL (``postgresql://user:pw@host:5432/db``).
    ``schema`` holds the tables, so one database can hold several knowledge bases.
    ``create=False`` refuses to create a missing schema (read commands use it). The pool keeps
    ``pool_min_size`` to ``pool_max_size`` connections; ``hnsw_m`` and ``hnsw_ef_construction``
    shape the vector index when it is built, ``ef_search`` is the candidate list of a query
    (raised to ``top_k`` when that is larger).
    """

    def __init__(
        self,
        dsn: str,
        *,
        schema: str = "ragloop",
        create: bool = True,
        pool_min_size: int = 1,
        pool_max_size: int = 10,
        connect_timeout_s: float = 10.0,
        hnsw_m: int = 16,
        hnsw_ef_construction: int = 64,
        ef_search: int = 40,
    ) -> None:
        if _MISSING is not None:
            raise StoreError(
                "the PostgreSQL store needs the postgres extra: pip install 'ragloop[postgres]'"
            ) from _MISSING
        self.schema = schema
        self.hnsw_m = hnsw_m
        self.hnsw_ef_construction = hnsw_ef_construction
        self.ef_search = ef_search
        self._model: tuple[str, int] | None = None
        params = conninfo_to_dict(dsn)
        params.setdefault("connect_timeout", str(max(1, round(connect_timeout_s))))
        params.setdefault("application_name", "ragloop")
        self._conninfo = make_conninfo("", **params)
        self.location = _describe(params, schema)
        self._iterative_scan = self._migrate(create)
        self._pool: ConnectionPool[psycopg.Connection[tuple[Any, ...]]] = ConnectionPool(
            self._conninfo,
            min_size=pool_min_size,
            max_size=pool_max_size,
            open=False,
            configure=self._configure,
            check=ConnectionPool.check_connection,
            name=f"ragloop-{schema}",
        )
        try:
            self._pool.open(wait=True, timeout=connect_timeout_s)
        except Exception as error:
            self._pool.close()
            raise StoreError(f"cannot open a connection pool to {self.location}: {error}") from None

    # -- connections, transactions, migrations ------------------------------------------------
    def _connect(self) -> psycopg.Connection[tuple[Any, ...]]:
        try:
            return psycopg.connect(self._conninfo, autocommit=True)
        except psycopg.OperationalError as error:
            reason = str(error).strip().splitlines()[-1] if str(error).strip() else "no reason"
            raise StoreError(f"cannot connect to PostgreSQL at {self.location}: {reason}") from None

    def _configure(self, conn: psycopg.Connection[Any]) -> None:
        set_search_path(conn, self.schema, local=False)
        conn.commit()

    def _migrate(self, create: bool) -> bool:
        """Create or upgrade the schema (only reads when it is up to date, so a read-only
        replica opens too); returns whether pgvector has iterative index scans."""
        with self._connect() as conn:
            row = conn.execute(
                "SELECT to_regclass(quote_ident(%s) || '._ragloop_migrations')::text",
                (self.schema,),
            ).fetchone()
            applied = None
            if row is not None and row[0] is not None:
                applied = conn.execute(f"SELECT max(version) FROM {row[0]}").fetchone()
            elif not create:
                raise KnowledgeBaseNotFound(
                    f"no ragloop knowledge base in {self.location}; create one with: "
                    "ragloop ingest PATH --kb DSN"
                )
            if applied is not None and applied[0] == MIGRATIONS[-1][0]:
                return pgvector_version(conn) >= (0, 8)
            return migrate(conn, self.schema) >= (0, 8)

    @contextlib.contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[tuple[Any, ...]]]:
        """A pooled connection. A database failure while it is in use (a dropped table, a
        cancelled statement, a server gone mid-query, no free connection in time) is raised
        as :class:`StoreError`, the store's documented error, with the server's message."""
        try:
            with self._pool.connection() as conn:
                yield conn
        except psycopg.Error as error:
            reason = str(error).strip().splitlines()[0] if str(error).strip() else "no reason"
            kind = type(error).__name__
            raise StoreError(f"PostgreSQL at {self.location} failed ({kind}): {reason}") from error

    def _write(self, work: Callable[[psycopg.Connection[tuple[Any, ...]]], T]) -> T:
        """Run ``work`` in one transaction, again when the server breaks a deadlock with it."""
        for attempt in range(_RETRIES):
            try:
                with self._connection() as conn, conn.transaction():
                    return work(conn)
            except StoreError as error:
                broken = (psycopg.errors.DeadlockDetected, psycopg.errors.SerializationFailure)
                if not isinstance(error.__cause__, broken) or attempt == _RETRIES - 1:
                    raise
        raise AssertionError("unreachable")

    def close(self) -> None:
        self._pool.close()

    # -- documents -----------------------------------------------------------------------------
    def document_hash(self, collection: str, source: str) -> str | None:
        with self._connection() as conn:
            row = conn.execute(
                "SELECT content_hash FROM documents WHERE collection = %s AND source = %s",
                (collection, source),
            ).fetchone()
        return row[0] if row else None

    def replace_document(
        self, doc: DocumentRecord, chunks: list[ChunkRecord], links: Sequence[Link] = ()
    ) -> list[str]:
        """Replace a document, its chunks, vectors and the links given, in one transaction."""
        self.replace_documents([(doc, chunks)], links)
        return [c.id for c in chunks]

    def replace_documents(
        self, documents: Sequence[tuple[DocumentRecord, list[ChunkRecord]]], links: Sequence[Link]
    ) -> None:
        """Replace documents in one transaction, then add the links given. Each step is one
        statement for the whole batch (a handful a batch instead of ten a document); a source
        given twice keeps its last version."""
        latest = {
            (_text(doc.collection), _text(doc.source)): (doc, chunks) for doc, chunks in documents
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
                    prepare=False,  # see _delete_documents
                ).fetchall()
                removed = _delete_documents(conn, [row[0] for row in stored])
            added = self._insert(conn, latest) if latest else (0, 0)
            self._insert_links(conn, links)
            if added[0]:
                conn.execute(FLUSH_PENDING_TSVECTORS)
            _count(conn, added[0] - removed[0], added[1] - removed[1])

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
                [_text(doc.title) for doc, _ in documents.values()],
                [doc.content_hash for doc, _ in documents.values()],
                [_json(doc.metadata) for doc, _ in documents.values()],
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
                "content": [_text(chunk.content) for _, _, chunk in chunks],
                "heading_path": [_json(chunk.heading_path) for _, _, chunk in chunks],
                "text_hash": [chunk.text_hash for _, _, chunk in chunks],
                "metadata": [_json(chunk.metadata) for _, _, chunk in chunks],
                "embedding": [_vector(chunk.vector) for _, _, chunk in chunks],
                "index_text": [_text(chunk.index_text) for _, _, chunk in chunks],
                "model_id": None if model is None else model[0],
            },
        ).fetchone()
        assert added is not None
        return int(added[0]), int(added[1])

    def delete_document(self, source: str, collection: str | None = None) -> int:
        def work(conn: psycopg.Connection[tuple[Any, ...]]) -> int:
            conn.execute(LOCK_SOURCES, ([_text(source)],))
            where = "source = %s" + (" AND collection = %s" if collection is not None else "")
            params = [_text(source)] + ([] if collection is None else [_text(collection)])
            ids = [
                row[0] for row in conn.execute(f"SELECT id FROM documents WHERE {where}", params)
            ]
            chunks, terms = _delete_documents(conn, ids)
            _count(conn, -chunks, -terms)
            return len(ids)

        return self._write(work)

    def sources(self, collection: str) -> list[str]:
        with self._connection() as conn:
            rows = conn.execute(
                "SELECT source FROM documents WHERE collection = %s ORDER BY source",
                (collection,),
            ).fetchall()
        return [row[0] for row in rows]

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

    def documents(self, collection: str | None = None) -> list[DocumentRecord]:
        """The documents of a collection (every collection when None), by source."""
        where, params = (
            ("WHERE collection = %s", (collection,)) if collection is not None else ("", ())
        )
        with self._connection() as conn:
            rows = conn.execute(
                "SELECT collection, source, title, content_hash, metadata FROM documents "
                f"{where} ORDER BY collection, source",
                params,
            ).fetchall()
        return [DocumentRecord(*row) for row in rows]

    def get_chunks(self, ids: Sequence[str]) -> list[Chunk]:
        if not ids:
            return []
        with self._connection() as conn:
            rows = conn.execute(
                f"SELECT {CHUNK_COLUMNS} {FROM_CHUNKS} WHERE c.id = ANY (%s)", (list(ids),)
            ).fetchall()
        found = {row[1]: _to_chunk(row, 1.0) for row in rows}
        return [found[i] for i in ids if i in found]

    # -- search -------------------------------------------------------------------------------
    def _scope_sql(self, scope: Scope) -> tuple[str, list[Any]]:
        clauses: list[str] = ["true"]
        params: list[Any] = []
        if scope.collections is not None:
            clauses.append("c.collection = ANY (%s)")
            params.append(list(scope.collections))
        for key, wanted in scope.filters:
            values = (
                list(wanted) if isinstance(wanted, list | tuple | set | frozenset) else [wanted]
            )
            column = FILTER_COLUMNS.get(key)
            if column is None:
                clauses.append("coalesce(c.metadata -> %s, d.metadata -> %s) = ANY (%s)")
                params += [key, key, [Jsonb(v) for v in values]]
            elif key == "position":
                clauses.append(f"{column} = ANY (%s::integer[])")
                params.append([v for v in values if isinstance(v, int)])
            else:
                clauses.append(f"{column} = ANY (%s::text[])")
                params.append([str(v) for v in values])
        return " AND ".join(clauses), params

    def keyword_search(self, query: str, top_k: int, scope: Scope) -> list[Chunk]:
        terms = query_words(query)
        if not terms or scope.empty or top_k < 1:
            return []
        collections = None if scope.collections is None else list(scope.collections)
        where, scope_params = self._scope_sql(Scope(None, scope.filters))
        inner_limit = None if scope.filters else top_k
        with self._connection() as conn:
            rows = conn.execute(
                BM25_QUERY.format(scope=where),
                [" ".join(terms), collections, collections, inner_limit, *scope_params, top_k],
            ).fetchall()
        out = []
        for row in rows:
            raw, ceiling = float(row[0]), float(row[1])
            score = min(1.0, max(0.0, raw / ceiling)) if ceiling > 0 else 0.0
            chunk = _to_chunk(row[2:], score)
            chunk.metadata["scores"] = {"bm25": round(score, 6), "bm25_raw": round(raw, 6)}
            out.append(chunk)
        return out

    def vector_search(self, vector: Sequence[float], top_k: int, scope: Scope) -> list[Chunk]:
        if scope.empty or top_k < 1:
            return []
        query = [float(x) for x in vector]
        where, scope_params = self._scope_sql(scope)
        with self._connection() as conn:
            model = self._recorded_model(conn)
            if model is None or model[1] == 0:
                return []
            if len(query) != model[1] or not any(query):
                raise StoreError(
                    f"the query vector must be a non-zero {model[1]}-d vector, not {len(query)}-d"
                )
            settings = ["hnsw.ef_search", str(max(self.ef_search, top_k))]
            if self._iterative_scan:  # pgvector 0.8: walk on until top_k chunks pass the scope
                settings += ["hnsw.iterative_scan", "relaxed_order"]
            calls = ", ".join(["set_config(%s, %s, true)"] * (len(settings) // 2))
            conn.execute(f"SELECT {calls}", settings)
            rows = conn.execute(
                f"SELECT c.embedding <=> %b::vector AS distance, {CHUNK_COLUMNS} "
                f"{FROM_CHUNKS} WHERE c.embedding IS NOT NULL AND {where} "
                "ORDER BY distance LIMIT %s",
                [query, *scope_params, top_k],
            ).fetchall()
        rows.sort(key=lambda row: (row[0], row[1]))  # relaxed order: exact order restored here
        out = []
        for row in rows:
            score = min(1.0, max(0.0, 1.0 - float(row[0])))
            chunk = _to_chunk(row[1:], score)
            chunk.metadata["scores"] = {"dense": round(score, 6)}
            out.append(chunk)
        return out

    # -- embeddings ------------------------------------------------------------------------------
    def embedding_model(self) -> tuple[str, int] | None:
        with self._connection() as conn:
            return self._recorded_model(conn)

    def _recorded_model(self, conn: psycopg.Connection[tuple[Any, ...]]) -> tuple[str, int] | None:
        """The recorded model, remembered once recorded (it never changes after that)."""
        if self._model is None:
            self._model = _model(conn)
        return self._model

    def set_embedding_model(self, model_id: str, dimension: int) -> None:
        """Record the model (once; another one is refused) and build the HNSW index for it."""
        if self.embedding_model() == (model_id, dimension):
            return

        def work(conn: psycopg.Connection[tuple[Any, ...]]) -> None:
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
            current = _model(conn)
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
                conn.execute(
                    sql.SQL("ALTER TABLE chunks ALTER COLUMN embedding TYPE vector({dim})").format(
                        dim=sql.Literal(dimension)
                    )
                )
                self._create_vector_index(conn)

        self._write(work)

    def _create_vector_index(self, conn: psycopg.Connection[tuple[Any, ...]]) -> None:
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
                rebuild = 4 * count >= _vectors_stored(conn)
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
        model = _model(conn)
        vector_bytes = 4 * (model[1] if model else 0) + 1024
        needed_mb = min(MAX_BUILD_MEMORY_MB, 1 + _vectors_stored(conn) * vector_bytes // 2**20)
        conn.execute(
            "SELECT set_config('maintenance_work_mem', %s, true) "
            "WHERE pg_size_bytes(current_setting('maintenance_work_mem')) < pg_size_bytes(%s)",
            (f"{needed_mb}MB", f"{needed_mb}MB"),
        )
        self._create_vector_index(conn)

    def cached_vectors(self, model_id: str, hashes: Sequence[str]) -> dict[str, list[float]]:
        if not hashes:
            return {}
        with self._connection() as conn:
            rows = conn.execute(
                "SELECT text_hash, embedding::float4[] FROM embeddings "
                "WHERE model_id = %s AND text_hash = ANY (%s)",
                (model_id, list(dict.fromkeys(hashes))),
            ).fetchall()
        return {text_hash: list(vector) for text_hash, vector in rows}

    def cache_vectors(self, model_id: str, items: dict[str, Sequence[float]]) -> None:
        if not items:
            return

        def work(conn: psycopg.Connection[tuple[Any, ...]]) -> None:
            with conn.cursor() as cursor:
                cursor.executemany(
                    "INSERT INTO embeddings VALUES (%s, %s, %b::vector) ON CONFLICT DO NOTHING",
                    [(model_id, h, [float(x) for x in v]) for h, v in items.items()],
                )

        with contextlib.suppress(psycopg.errors.ReadOnlySqlTransaction):
            self._write(work)  # a read-only replica still answers queries

    def missing_vectors(self, model_id: str, limit: int) -> list[tuple[str, str]]:
        """Up to ``limit`` (text hash, index text) of chunks stored without a vector, each
        text once, in the order the chunks were stored (one model per knowledge base)."""
        with self._connection() as conn:
            rows = conn.execute(
                "SELECT c.text_hash, d.title, c.heading_path, c.content FROM chunks c "
                "JOIN documents d ON d.id = c.document_id WHERE c.embedding IS NULL "
                "ORDER BY c.pk LIMIT %s",
                (limit,),
            ).fetchall()
        found: dict[str, str] = {}
        for text_hash, title, heading_path, content in rows:
            found.setdefault(text_hash, index_text(title, heading_path, content))
        return list(found.items())

    def count_missing_vectors(self, model_id: str) -> int:
        with self._connection() as conn:
            row = conn.execute(
                "SELECT count(DISTINCT text_hash) FROM chunks WHERE embedding IS NULL"
            ).fetchone()
        return int(row[0]) if row else 0

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

    # -- links ------------------------------------------------------------------------------------
    def link_targets(self) -> list[tuple[str, str, str]]:
        """(name, chunk id, document key) for every document title and last heading."""
        with self._connection() as conn:
            rows = conn.execute(
                "SELECT d.title, c.id, c.collection, d.source, c.heading_path ->> -1 "
                f"{FROM_CHUNKS} ORDER BY c.pk"
            ).fetchall()
        targets: list[tuple[str, str, str]] = []
        for title, chunk_id, collection, source, heading in rows:
            key = f"{collection}\0{source}"
            targets.extend((str(name), chunk_id, key) for name in (title, heading) if name)
        return targets

    def chunks_with_phrase(self, phrase: str, limit: int) -> list[tuple[str, str, str]]:
        words = tokenize(phrase)
        if not words:
            return []
        with self._connection() as conn:
            rows = conn.execute(
                f"SELECT c.id, c.collection, d.source, c.content {FROM_CHUNKS} "
                f"WHERE c.tsv @@ phraseto_tsquery('{TEXT_CONFIG}', %s) ORDER BY c.pk LIMIT %s",
                (" ".join(words), limit),
            ).fetchall()
        return [(row[0], f"{row[1]}\0{row[2]}", row[3]) for row in rows]

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
                [_text(link.mention) for link in links],
            ),
            prepare=False,  # see _delete_documents
        )

    def links_from(
        self, chunk_ids: Sequence[str], collections: Sequence[str] | None = None
    ) -> list[Link]:
        if not chunk_ids or (collections is not None and not collections):
            return []
        scoped = (
            ""
            if collections is None
            else (" AND b.document_id IN (SELECT id FROM documents WHERE collection = ANY (%s))")
        )
        params: list[Any] = [list(chunk_ids)]
        if collections is not None:  # the target's collection, in the query
            params.append(list(collections))
        with self._connection() as conn:
            rows = conn.execute(
                "SELECT a.id, b.id, l.mention FROM links l JOIN chunks a ON a.pk = l.chunk_pk "
                f"JOIN chunks b ON b.pk = l.target_pk WHERE a.id = ANY (%s){scoped} "
                "ORDER BY a.pk, b.pk",
                params,
            ).fetchall()
        return [Link(*row) for row in rows]

    # -- bookkeeping ---------------------------------------------------------------------------
    def stats(self) -> StoreStats:
        with self._connection() as conn:
            collections = [
                CollectionInfo(name=name, documents=docs, chunks=chunks)
                for name, docs, chunks in conn.execute(
                    "SELECT d.collection, count(DISTINCT d.id), count(c.pk) FROM documents d "
                    "LEFT JOIN chunks c ON c.document_id = d.id GROUP BY d.collection "
                    "ORDER BY d.collection"
                )
            ]
            # the chunks that have a vector (embeddings is a cache by text, not the index)
            counts = conn.execute(
                "SELECT (SELECT count(*) FROM chunks WHERE embedding IS NOT NULL), "
                "(SELECT count(*) FROM links), "
                "(SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = %s AND c.relkind = 'r')",
                (self.schema,),
            ).fetchone()
            model = self._recorded_model(conn)
        assert counts is not None
        return StoreStats(
            documents=sum(c.documents for c in collections),
            chunks=sum(c.chunks for c in collections),
            vectors=counts[0],
            links=counts[1],
            collections=collections,
            embedding_model=model[0] if model else None,
            dimension=model[1] if model else None,
            size_bytes=int(counts[2] or 0),
            path=self.location,
        )


class PostgresKnowledgeBase(KnowledgeBase):
    """A :class:`~ragloop.KnowledgeBase` in PostgreSQL: ``PostgresKnowledgeBase(dsn)``.

    Store options (``schema``, ``create``, pool sizes, HNSW parameters) go to
    :class:`PostgresStore`; every other option is the knowledge base's (``embedder``,
    ``chunking``, ``rrf_k``, ...).
    """

    STORE_OPTIONS = frozenset(inspect.signature(PostgresStore).parameters) - {"dsn"}

    def __init__(self, dsn: str, **options: Any) -> None:
        store_options = {k: options.pop(k) for k in list(options) if k in self.STORE_OPTIONS}
        store = PostgresStore(dsn, **store_options)
        try:
            super().__init__(store=store, **options)
        except BaseException:
            store.close()
            raise


# -- helpers ---------------------------------------------------------------------------------------
def _model(conn: psycopg.Connection[tuple[Any, ...]]) -> tuple[str, int] | None:
    rows = dict(
        conn.execute(
            "SELECT key, value FROM meta WHERE key IN ('embedding_model', 'dimension')"
        ).fetchall()
    )
    if "embedding_model" not in rows:
        return None
    return str(rows["embedding_model"]), int(rows["dimension"])


def _vectors_stored(conn: psycopg.Connection[tuple[Any, ...]]) -> int:
    row = conn.execute("SELECT count(*) FROM chunks WHERE embedding IS NOT NULL").fetchone()
    return int(row[0]) if row else 0


def _delete_documents(conn: psycopg.Connection[tuple[Any, ...]], ids: list[int]) -> tuple[int, int]:
    """Delete documents by id with their chunks, postings and links: (chunks, terms) removed.
    Planned each time, never prepared (as the other statements joining a batch's arrays to a
    table): psycopg prepares a statement run five times, and PostgreSQL may then keep a
    generic plan made while the tables were small (a scan of every posting for each document
    replaced: 75 ms a document at 10,000 chunks)."""
    if not ids:
        return 0, 0
    with _index_probes(conn):
        gone = conn.execute(DELETE_DOCUMENTS, {"ids": ids}, prepare=False).fetchone()
    assert gone is not None
    return int(gone[0]), int(gone[1])


@contextlib.contextmanager
def _index_probes(conn: psycopg.Connection[tuple[Any, ...]]) -> Iterator[None]:
    """Joins in this block probe an index row by row: no hash or merge join. The planner cannot
    count the lexemes of the chunks a batch deletes (it guessed 13 million for 64,000) and
    hashed the whole postings table to find theirs (0.4-1.6 s a batch at 20,000 chunks, and
    growing with the table) instead of probing their primary key (0.3 s). The settings are
    local to the transaction, which an error inside the block rolls back."""
    conn.execute(
        "SELECT set_config('enable_hashjoin', 'off', true), "
        "set_config('enable_mergejoin', 'off', true)"
    )
    yield
    conn.execute("SET LOCAL enable_hashjoin TO DEFAULT")
    conn.execute("SET LOCAL enable_mergejoin TO DEFAULT")


def _count(conn: psycopg.Connection[tuple[Any, ...]], chunks: int, terms: int) -> None:
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


def _text(value: str) -> str:
    return value.replace("\x00", "")  # PostgreSQL text (and jsonb) cannot hold NUL


def _vector(vector: Iterable[float] | None) -> str | None:
    """A vector as pgvector's text form (the batch's vectors go in as one text array)."""
    return None if vector is None else "[" + ",".join(repr(float(x)) for x in vector) + "]"


def _json(value: Any) -> str:
    def clean(item: Any) -> Any:
        if isinstance(item, str):
            return _text(item)
        if isinstance(item, dict):
            return {clean(k): clean(v) for k, v in item.items()}
        if isinstance(item, list | tuple):
            return [clean(v) for v in item]
        return item

    return json.dumps(clean(value))


def _describe(params: dict[str, Any], schema: str) -> str:
    """Where the store is, for messages and stats: the connection without its password."""
    host = params.get("host") or "localhost"
    port = params.get("port") or "5432"
    user = f"{params['user']}@" if params.get("user") else ""
    return f"postgresql://{user}{host}:{port}/{params.get('dbname') or ''} (schema {schema})"


def _to_chunk(row: Sequence[Any], score: float) -> Chunk:
    (
        _pk,
        chunk_id,
        position,
        content,
        heading_path,
        chunk_meta,
        collection,
        source,
        title,
        doc_meta,
    ) = row
    metadata: dict[str, Any] = {**doc_meta, **chunk_meta}
    metadata.update(
        collection=collection, title=title, heading_path=list(heading_path), position=position
    )
    return Chunk(content=content, source=source, score=score, metadata=metadata, id=chunk_id)
