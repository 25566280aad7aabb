"""The PostgreSQL store's schema and statements: numbered migrations, the chunk and postings
inserts and the BM25 query (kept apart from :mod:`ragloop.kb.stores.postgres.store`, which runs
them).

Keyword search reads a ``postings`` table (lexeme, chunk, term frequency, chunk length) filled
from each chunk's ``to_tsvector('english')`` when it is written. A tsvector + GIN index alone
was measured first: PostgreSQL then scores every chunk holding any query term (an OR of a
question's words matched 45% of a 10,000-chunk corpus), reading and unnesting each chunk's
tsvector, 400 ms a query at 10,000 chunks, and ``ts_rank_cd`` (no idf) still 80 ms; the postings
are a B-tree range per query lexeme and answered in 7 ms. The GIN index stays for phrase
lookups (the title link graph).
"""

from __future__ import annotations

from typing import Any

from ragloop.core.errors import StoreError
from ragloop.kb.stores.base import BM25_B, BM25_K1

try:
    import psycopg
    from psycopg import sql
except ImportError:  # the postgres extra is not installed: store_postgres says so when used
    pass

TEXT_CONFIG = "english"
HNSW_MAX_DIMENSIONS = 2000  # pgvector indexes at most 2,000-d vectors
COUNTER_SLOTS = 16  # writers update one of these counter rows each, never one hot row
MIGRATION_LOCK = 0x7261676C6F6F70  # "ragloop": one migration at a time per server

MIGRATIONS: list[tuple[int, str]] = [
    (
        1,
        """
        CREATE TABLE documents (
            id bigserial PRIMARY KEY,
            collection text NOT NULL,
            source text NOT NULL,
            title text NOT NULL,
            content_hash text NOT NULL,
            metadata jsonb NOT NULL DEFAULT '{}',
            updated_at timestamptz NOT NULL DEFAULT now(),
            UNIQUE (collection, source)
        );
        CREATE INDEX documents_source ON documents (source);
        CREATE TABLE chunks (
            pk bigserial PRIMARY KEY,
            id text NOT NULL UNIQUE,
            document_id bigint NOT NULL REFERENCES documents (id) ON DELETE CASCADE,
            collection text NOT NULL,
            position integer NOT NULL,
            content text NOT NULL,
            heading_path jsonb NOT NULL DEFAULT '[]',
            text_hash text NOT NULL,
            metadata jsonb NOT NULL DEFAULT '{}',
            tsv tsvector NOT NULL,
            n_terms integer NOT NULL,
            embedding vector
        );
        CREATE INDEX chunks_document ON chunks (document_id);
        CREATE INDEX chunks_collection ON chunks (collection);
        CREATE INDEX chunks_tsv ON chunks USING gin (tsv);
        CREATE TABLE postings (
            lexeme text NOT NULL,
            chunk_pk bigint NOT NULL,
            collection text NOT NULL,
            tf integer NOT NULL,
            n_terms integer NOT NULL,
            PRIMARY KEY (lexeme, chunk_pk) INCLUDE (collection, tf, n_terms)
        );
        CREATE TABLE embeddings (
            model_id text NOT NULL,
            text_hash text NOT NULL,
            embedding vector NOT NULL,
            PRIMARY KEY (model_id, text_hash)
        );
        CREATE TABLE links (
            chunk_pk bigint NOT NULL REFERENCES chunks (pk) ON DELETE CASCADE,
            target_pk bigint NOT NULL REFERENCES chunks (pk) ON DELETE CASCADE,
            mention text NOT NULL,
            PRIMARY KEY (chunk_pk, target_pk)
        );
        CREATE INDEX links_target ON links (target_pk);
        CREATE TABLE corpus_counters (
            slot integer PRIMARY KEY,
            chunks bigint NOT NULL,
            terms bigint NOT NULL
        );
        CREATE TABLE meta (key text PRIMARY KEY, value text NOT NULL);
        """,
    ),
    (
        2,
        # the chunks waiting for a vector, found by index: storing a vector looks its chunks up
        # by text hash, and the embedding phase reads them in order; without these every one
        # scanned the whole table (7 ms a vector at 10,000 chunks, growing with the table).
        # Partial: a chunk leaves them when its vector is stored, so they stay small
        """
        CREATE INDEX chunks_missing_vector ON chunks (text_hash) WHERE embedding IS NULL;
        CREATE INDEX chunks_missing_vector_order ON chunks (pk) WHERE embedding IS NULL;
        """,
    ),
]

# Columns that filters may name directly; any other key is looked up in the chunk's metadata,
# then the document's (as the chunk's metadata overrides the document's in search results).
FILTER_COLUMNS = {
    "collection": "c.collection",
    "source": "d.source",
    "title": "d.title",
    "position": "c.position",
}
CHUNK_COLUMNS = (
    "c.pk, c.id, c.position, c.content, c.heading_path, c.metadata, "
    "c.collection, d.source, d.title, d.metadata"
)
FROM_CHUNKS = "FROM chunks c JOIN documents d ON d.id = c.document_id"
# The writes of a batch of documents, a statement per step whatever the batch's size (a
# statement per document cost a round trip and a plan each). Sources are locked in the order
# of their keys, so two writers of overlapping batches never wait for each other in a circle.
LOCK_SOURCES = """
    SELECT count(pg_advisory_xact_lock(k.key)) FROM (
        SELECT DISTINCT hashtextextended(s.source, 0) AS key FROM unnest(%s::text[]) AS s (source)
        ORDER BY key
    ) k
"""
# Documents removed with their chunks and postings (postings have no foreign key: they are
# found by (lexeme, chunk) from the deleted chunks' tsvectors); links go by cascade, the
# embedding cache stays. Returns the chunks and terms removed (for the corpus counters).
DELETE_DOCUMENTS = """
    WITH gone AS (
        DELETE FROM chunks WHERE document_id = ANY (%(ids)s) RETURNING pk, tsv, n_terms
    ), gone_postings AS (
        DELETE FROM postings p
        USING (SELECT pk, unnest(tsvector_to_array(tsv)) AS lexeme FROM gone) x
        WHERE p.lexeme = x.lexeme AND p.chunk_pk = x.pk
    ), gone_documents AS (
        DELETE FROM documents WHERE id = ANY (%(ids)s)
    )
    SELECT count(*), coalesce(sum(n_terms), 0) FROM gone
"""
INSERT_DOCUMENTS = """
    INSERT INTO documents (collection, source, title, content_hash, metadata)
    SELECT collection, source, title, content_hash, metadata::jsonb
    FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[], %s::text[])
        AS d (collection, source, title, content_hash, metadata)
    RETURNING id, collection, source
"""
# The chunks in the order given (their pk follows it), each with its tsvector and the number
# of its terms (OFFSET 0 keeps the planner from pulling the subquery up, which parsed each
# text twice: 1.7 times the parsing time); the postings from the same tsvectors, in index
# order (the statement 12% faster); the vectors given into the embedding cache when a model
# is recorded. Returns the chunks and terms added.
INSERT_CHUNKS = f"""
    WITH new AS (
        INSERT INTO chunks (id, document_id, collection, position, content, heading_path,
                            text_hash, metadata, tsv, n_terms, embedding)
        SELECT r.id, r.document_id, r.collection, r.position, r.content, r.heading_path::jsonb,
               r.text_hash, r.metadata::jsonb, v.tsv,
               (SELECT coalesce(sum(coalesce(array_length(t.positions, 1), 1)), 0)
                FROM unnest(v.tsv) t),
               r.embedding::vector
        FROM unnest(%(id)s::text[], %(document_id)s::bigint[], %(collection)s::text[],
                    %(position)s::integer[], %(content)s::text[], %(heading_path)s::text[],
                    %(text_hash)s::text[], %(metadata)s::text[], %(embedding)s::text[],
                    %(index_text)s::text[])
            WITH ORDINALITY AS r (id, document_id, collection, position, content, heading_path,
                                  text_hash, metadata, embedding, index_text, n),
            LATERAL (SELECT to_tsvector('{TEXT_CONFIG}', r.index_text) AS tsv OFFSET 0) v
        ORDER BY r.n
        RETURNING pk, collection, tsv, n_terms, text_hash, embedding
    ), new_postings AS (
        INSERT INTO postings (lexeme, chunk_pk, collection, tf, n_terms)
        SELECT t.lexeme, new.pk, new.collection, coalesce(array_length(t.positions, 1), 1),
               new.n_terms
        FROM new, unnest(new.tsv) t ORDER BY t.lexeme, new.pk
    ), new_cached AS (
        INSERT INTO embeddings (model_id, text_hash, embedding)
        SELECT %(model_id)s, text_hash, embedding FROM new
        WHERE %(model_id)s::text IS NOT NULL AND embedding IS NOT NULL
        ON CONFLICT DO NOTHING
    )
    SELECT count(*), coalesce(sum(n_terms), 0) FROM new
"""
# New chunks' tsvectors wait in the GIN index's pending list (fastupdate) until it passes
# gin_pending_list_limit (4 MB), and every phrase lookup reads the whole list: ingestion's
# link search does one per new name, 2 ms each with a full list. Moving the batch's entries
# into the index at its end keeps the list short: the text phase of an ingest of 20,000 chunks
# ran 15-20% faster. Only the index's owner (or a superuser) may; other writers skip it.
FLUSH_PENDING_TSVECTORS = """
    SELECT gin_clean_pending_list(i.oid) FROM pg_class i
    WHERE i.oid = 'chunks_tsv'::regclass AND pg_has_role(i.relowner, 'USAGE')
"""
# BM25 over the postings of the query's lexemes: a B-tree range per lexeme, no row of chunks
# read until the top is known. Document frequencies are counted on the same postings (over
# every collection, as the corpus size and average length from the counters are). Parameters:
# the query text, the collections (NULL: all), the inner limit (NULL when metadata filters
# must see every candidate), the scope's, the limit.
BM25_QUERY = f"""
    WITH corpus AS (
        SELECT greatest(coalesce(sum(chunks), 0), 1)::float8 AS n,
               greatest(coalesce(sum(terms), 0)::float8 / greatest(coalesce(sum(chunks), 0), 1),
                        1) AS avgdl
        FROM corpus_counters
    ),
    hits AS MATERIALIZED (
        SELECT p.lexeme, p.chunk_pk, p.collection, p.tf::float8 AS tf, p.n_terms
        FROM postings p
        WHERE p.lexeme = ANY (tsvector_to_array(to_tsvector('{TEXT_CONFIG}', %s)))
    ),
    idf AS (
        SELECT h.lexeme, greatest(ln((corpus.n - count(*) + 0.5) / (count(*) + 0.5)), 1e-6) AS idf
        FROM hits h, corpus GROUP BY h.lexeme, corpus.n
    ),
    top AS (
        SELECT h.chunk_pk, sum(i.idf * h.tf * {BM25_K1 + 1} / (h.tf + {BM25_K1}
                               * (1 - {BM25_B} + {BM25_B} * h.n_terms / corpus.avgdl))) AS raw
        FROM hits h JOIN idf i USING (lexeme), corpus
        WHERE %s::text[] IS NULL OR h.collection = ANY (%s::text[])
        GROUP BY h.chunk_pk
        ORDER BY raw DESC, h.chunk_pk
        LIMIT %s
    )
    SELECT t.raw, (SELECT sum(idf) FROM idf) * {BM25_K1 + 1}, {CHUNK_COLUMNS}
    FROM top t JOIN chunks c ON c.pk = t.chunk_pk JOIN documents d ON d.id = c.document_id
    WHERE {{scope}}
    ORDER BY t.raw DESC, c.pk
    LIMIT %s
"""


def set_search_path(conn: psycopg.Connection[Any], schema: str, *, local: bool) -> None:
    """Put the schema first on the search path, keeping where pgvector lives after it."""
    conn.execute(
        "SELECT set_config('search_path', quote_ident(%s) || ', ' || "
        "current_setting('search_path'), %s)",
        (schema, local),
    )


def pgvector_version(conn: psycopg.Connection[Any]) -> tuple[int, ...]:
    """pgvector's version in this database, () when it is not enabled."""
    row = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
    return () if row is None else tuple(int(p) for p in str(row[0]).split(".")[:2] if p.isdigit())


def ensure_pgvector(conn: psycopg.Connection[Any]) -> tuple[int, ...]:
    """Enable pgvector when it is not (it needs the right to); returns its version."""
    if not pgvector_version(conn):
        try:
            with conn.transaction():
                conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
        except psycopg.Error as error:
            raise StoreError(
                "pgvector is not enabled in this database and could not be enabled "
                f"({error.diag.message_primary or error}); a superuser can run: "
                "CREATE EXTENSION vector"
            ) from None
    version = pgvector_version(conn)
    if version < (0, 5):
        raise StoreError(
            f"pgvector {'.'.join(map(str, version))} has no HNSW index; ragloop needs 0.5+"
        )
    return version


def migrate(conn: psycopg.Connection[Any], schema: str) -> tuple[int, ...]:
    """Create the schema or bring it up to date, one migration at a time per server, in one
    transaction; returns pgvector's version. ``conn`` is in autocommit mode."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
        version = ensure_pgvector(conn)
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
        set_search_path(conn, schema, local=True)
        conn.execute(
            "CREATE TABLE IF NOT EXISTS _ragloop_migrations ("
            "version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        done = {row[0] for row in conn.execute("SELECT version FROM _ragloop_migrations")}
        for number, script in MIGRATIONS:
            if number not in done:
                conn.execute(script)
                conn.execute("INSERT INTO _ragloop_migrations (version) VALUES (%s)", (number,))
    return version
