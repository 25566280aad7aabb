"""The PostgreSQL store's schema and statements: numbered migrations, the chunk and postings
writes (kept apart from :mod:`ragloop.kb.stores.postgres.store`, which runs them).

Keyword search reads ``postings_blocks`` (:mod:`.postings`: per lexeme, collection and segment
of chunk pks, the postings as packed bytes), filled from each chunk's
``to_tsvector('english')`` when it is written. A tsvector + GIN index alone was measured first:
PostgreSQL then scores every chunk holding any query term (an OR of a question's words matched
45% of a 10,000-chunk corpus), reading and unnesting each chunk's tsvector, 400 ms a query at
10,000 chunks, and ``ts_rank_cd`` (no idf) still 80 ms. The GIN index stays for phrase lookups
(the title link graph) and a deleted chunk's lexemes.

A batch of chunks is copied (``COPY ... FROM STDIN (FORMAT BINARY)``) into a temporary staging
table, then merged into the tables by one statement: the chunks, their tsvectors, the postings
blocks and the embedding cache, in the batch's transaction.
"""

from __future__ import annotations

from typing import Any

from ragloop.core.errors import StoreError
from ragloop.kb.stores.postgres.postings import SEGMENT_BITS, SEGMENT_SIZE, entry_sql

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
    (
        3,
        # postings in blocks (.postings), the rows of the former table packed into them; the
        # entries are stored out of line uncompressed (EXTERNAL): read without inflating
        f"""
        CREATE TABLE postings_blocks (
            lexeme text NOT NULL,
            collection text NOT NULL,
            segment bigint NOT NULL,
            n integer NOT NULL,
            entries bytea NOT NULL,
            PRIMARY KEY (lexeme, collection, segment) INCLUDE (n)
        );
        ALTER TABLE postings_blocks ALTER COLUMN entries SET STORAGE EXTERNAL;
        INSERT INTO postings_blocks (lexeme, collection, segment, n, entries)
        SELECT lexeme, collection, chunk_pk >> {SEGMENT_BITS}, count(*),
               string_agg({entry_sql("chunk_pk", "tf", "n_terms")}, ''::bytea ORDER BY chunk_pk)
        FROM postings GROUP BY 1, 2, 3;
        DROP TABLE postings;
        """,
    ),
    (
        4,
        # the vectors in a table of their own, keyed by chunk: storing a chunk's vector used to
        # update its row, which PostgreSQL writes again whole with an entry in every index of
        # chunks (the GIN index of its lexemes too), the old row left for a vacuum (60,000
        # chunks: 10.4 s and 644 MB, against 8.0 s and 545 MB). The HNSW index moves with
        # them, with the options it was built with
        """
        CREATE TABLE chunk_vectors (
            chunk_pk bigint PRIMARY KEY REFERENCES chunks (pk) ON DELETE CASCADE,
            embedding vector NOT NULL
        );
        INSERT INTO chunk_vectors (chunk_pk, embedding)
        SELECT pk, embedding FROM chunks WHERE embedding IS NOT NULL ORDER BY pk;
        DO $migration$
        DECLARE
            dimension integer := (SELECT value::integer FROM meta WHERE key = 'dimension');
            options text[] := (
                SELECT reloptions FROM pg_class WHERE oid = to_regclass('chunks_embedding')
            );
        BEGIN
            DROP INDEX IF EXISTS chunks_embedding;
            IF dimension BETWEEN 1 AND 2000 THEN
                EXECUTE format(
                    'ALTER TABLE chunk_vectors ALTER COLUMN embedding TYPE vector(%s)', dimension
                );
                IF options IS NOT NULL THEN
                    SET LOCAL maintenance_work_mem = '1GB';
                    EXECUTE format(
                        'CREATE INDEX chunks_embedding ON chunk_vectors '
                        'USING hnsw (embedding vector_cosine_ops) WITH (%s)',
                        array_to_string(options, ', ')
                    );
                END IF;
            END IF;
        END
        $migration$;
        DROP INDEX IF EXISTS chunks_missing_vector;
        DROP INDEX IF EXISTS chunks_missing_vector_order;
        ALTER TABLE chunks DROP COLUMN embedding;
        CREATE INDEX chunks_text_hash ON chunks (text_hash);
        """,
    ),
    (
        5,
        # every write counted, so a process knows its cached postings are of this state
        # (.postings_cache)
        """
        ALTER TABLE corpus_counters ADD COLUMN writes bigint NOT NULL DEFAULT 0;
        """,
    ),
    (
        6,
        # each collection's chunks and terms, in slots as the corpus counters: a search scoped
        # to collections takes BM25's chunk count and average length from its collections
        # alone (the whole corpus' told a scoped caller what the others hold)
        """
        CREATE TABLE collection_counters (
            collection text NOT NULL,
            slot integer NOT NULL,
            chunks bigint NOT NULL,
            terms bigint NOT NULL,
            PRIMARY KEY (collection, slot)
        );
        INSERT INTO collection_counters (collection, slot, chunks, terms)
        SELECT collection, 0, count(*), coalesce(sum(n_terms), 0) FROM chunks GROUP BY 1;
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
    "c.collection, d.source, d.title, d.metadata, d.content_hash"
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
# Documents removed with their chunks (links go by cascade, the embedding cache stays).
# Returns, per postings block the chunks held, the offsets of the chunks removed from it, and
# in every row each collection's chunks and terms removed (for the counters); the blocks are
# then rewritten without them (:func:`.writes.remove_postings`).
DELETE_DOCUMENTS = f"""
    WITH gone AS (
        DELETE FROM chunks WHERE document_id = ANY (%(ids)s)
        RETURNING pk, collection, tsv, n_terms
    ), gone_documents AS (
        DELETE FROM documents WHERE id = ANY (%(ids)s)
    ), per_collection AS (
        SELECT collection, count(*) AS chunks, coalesce(sum(n_terms), 0) AS terms
        FROM gone GROUP BY collection
    ), totals AS (
        SELECT array_agg(collection) AS collections, array_agg(chunks) AS chunks,
               array_agg(terms) AS terms
        FROM per_collection
    )
    SELECT totals.collections, totals.chunks, totals.terms,
           b.lexeme, b.collection, b.segment, b.offsets
    FROM totals LEFT JOIN (
        SELECT t.lexeme, g.collection, g.pk >> {SEGMENT_BITS} AS segment,
               array_agg((g.pk & {SEGMENT_SIZE - 1})::integer) AS offsets
        FROM gone g, unnest(tsvector_to_array(g.tsv)) t (lexeme)
        GROUP BY 1, 2, 3
    ) b ON true
    ORDER BY b.lexeme, b.collection, b.segment
"""
# The blocks given by key, locked in key order (as the appends take them).
LOCK_BLOCKS = """
    SELECT p.lexeme, p.collection, p.segment, p.entries FROM postings_blocks p
    JOIN unnest(%s::text[], %s::text[], %s::bigint[]) AS k (lexeme, collection, segment)
        USING (lexeme, collection, segment)
    ORDER BY p.lexeme, p.collection, p.segment
    FOR UPDATE OF p
"""
REWRITE_BLOCKS = """
    UPDATE postings_blocks p SET n = k.n, entries = k.entries
    FROM unnest(%s::text[], %s::text[], %s::bigint[], %s::integer[], %s::bytea[])
        AS k (lexeme, collection, segment, n, entries)
    WHERE p.lexeme = k.lexeme AND p.collection = k.collection AND p.segment = k.segment
"""
DROP_EMPTY_BLOCKS = """
    DELETE FROM postings_blocks p
    USING unnest(%s::text[], %s::text[], %s::bigint[]) AS k (lexeme, collection, segment)
    WHERE p.lexeme = k.lexeme AND p.collection = k.collection AND p.segment = k.segment
      AND p.n = 0
"""
INSERT_DOCUMENTS = """
    INSERT INTO documents (collection, source, title, content_hash, metadata)
    SELECT collection, source, title, content_hash, metadata::jsonb
    FROM unnest(%s::text[], %s::text[], %s::text[], %s::text[], %s::text[])
        AS d (collection, source, title, content_hash, metadata)
    RETURNING id, collection, source
"""
# The staging table a batch's chunks are copied into (one per connection, emptied at commit).
STAGING_COLUMNS = (
    ("n", "int8"),
    ("id", "text"),
    ("document_id", "int8"),
    ("collection", "text"),
    ("position", "int4"),
    ("content", "text"),
    ("heading_path", "text"),
    ("text_hash", "text"),
    ("metadata", "text"),
    ("embedding", "vector"),
    ("index_text", "text"),
)
CREATE_STAGING = (
    "CREATE TEMP TABLE IF NOT EXISTS chunks_in ("
    + ", ".join(f"{name} {kind}" for name, kind in STAGING_COLUMNS)
    + ") ON COMMIT DELETE ROWS"
)
COPY_STAGING = (
    f"COPY chunks_in ({', '.join(name for name, _ in STAGING_COLUMNS)}) FROM STDIN (FORMAT BINARY)"
)
# The staging table of the vectors of stored chunks (by text hash), as COPY_STAGING's.
CREATE_VECTOR_STAGING = (
    "CREATE TEMP TABLE IF NOT EXISTS vectors_in (text_hash text, embedding vector) "
    "ON COMMIT DELETE ROWS"
)
COPY_VECTOR_STAGING = "COPY vectors_in (text_hash, embedding) FROM STDIN (FORMAT BINARY)"
# The staged chunks in the order given (their pk follows it), each with its tsvector and the
# number of its terms (OFFSET 0 keeps the planner from pulling the subquery up, which parsed
# each text twice: 1.7 times the parsing time); the vectors given (from the embedding cache)
# beside them; their postings appended to the blocks, one row per block the batch touches, in
# key order (so two writers lock blocks in one order); the vectors given into the embedding
# cache when a model is recorded. Returns each collection's chunks and terms added.
MERGE_STAGING = f"""
    WITH new AS (
        INSERT INTO chunks (id, document_id, collection, position, content, heading_path,
                            text_hash, metadata, tsv, n_terms)
        SELECT r.id, r.document_id, r.collection, r.position, r.content, r.heading_path::jsonb,
               r.text_hash, r.metadata::jsonb, v.tsv,
               (SELECT coalesce(sum(coalesce(array_length(t.positions, 1), 1)), 0)
                FROM unnest(v.tsv) t)
        FROM chunks_in r,
            LATERAL (SELECT to_tsvector('{TEXT_CONFIG}', r.index_text) AS tsv OFFSET 0) v
        ORDER BY r.n
        RETURNING pk, id, collection, tsv, n_terms
    ), new_vectors AS (
        INSERT INTO chunk_vectors (chunk_pk, embedding)
        SELECT new.pk, r.embedding FROM new JOIN chunks_in r USING (id)
        WHERE r.embedding IS NOT NULL
    ), new_postings AS (
        INSERT INTO postings_blocks AS p (lexeme, collection, segment, n, entries)
        SELECT t.lexeme, new.collection, new.pk >> {SEGMENT_BITS}, count(*),
               string_agg({
    entry_sql("new.pk", "coalesce(array_length(t.positions, 1), 1)", "new.n_terms")
}, ''::bytea)
        FROM new, unnest(new.tsv) t
        GROUP BY 1, 2, 3 ORDER BY 1, 2, 3
        ON CONFLICT (lexeme, collection, segment)
        DO UPDATE SET n = p.n + excluded.n, entries = p.entries || excluded.entries
    ), new_cached AS (
        INSERT INTO embeddings (model_id, text_hash, embedding)
        SELECT %(model_id)s, text_hash, embedding FROM chunks_in
        WHERE %(model_id)s::text IS NOT NULL AND embedding IS NOT NULL
        ON CONFLICT DO NOTHING
    )
    SELECT collection, count(*), coalesce(sum(n_terms), 0) FROM new GROUP BY collection
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
# The query's lexemes, as the chunks' tsvectors have them (Snowball stemming, stopwords dropped).
QUERY_LEXEMES = f"SELECT tsvector_to_array(to_tsvector('{TEXT_CONFIG}', %s))"
# The blocks of the query's lexemes in scope but those the process holds already
# (.postings_cache): per lexeme its blocks, concatenated in order, with their segments, counts
# and collections (its document frequency in scope is their count of entries). A lexeme no
# chunk in scope holds has no row. Parameters: the lexemes, the lexemes held, and for a scoped
# query the collections.
_BLOCKS = """
    SELECT p.lexeme,
           string_agg(p.entries, ''::bytea ORDER BY p.collection, p.segment),
           array_agg(p.segment ORDER BY p.collection, p.segment),
           array_agg(p.n ORDER BY p.collection, p.segment),
           array_agg(p.collection ORDER BY p.collection, p.segment)
    FROM postings_blocks p
    WHERE p.lexeme = ANY (%(lexemes)s::text[]) AND p.lexeme <> ALL (%(held)s::text[]){scope}
    GROUP BY p.lexeme
"""
_WRITES = "SELECT coalesce(sum(writes), 0)::int8 FROM corpus_counters"
# The chunk count, the average length (from the counters: of the corpus, or of the scope's
# collections) and the count of writes (:mod:`.postings_cache`).
_TOTALS = """
    SELECT greatest(coalesce(sum(chunks), 0), 1)::float8,
           greatest(coalesce(sum(terms), 0)::float8 / greatest(coalesce(sum(chunks), 0), 1), 1),
           {writes}
    FROM {counters}
"""
_KEYWORD_QUERY = """
    WITH totals (chunks, average_length, writes) AS ({totals}),
         blocks (lexeme, entries, segments, counts, collections) AS ({blocks})
    SELECT totals.*, blocks.* FROM totals LEFT JOIN blocks ON true
"""
# The totals with the blocks, one round trip a query: over the whole corpus, and over the
# collections of a scope (BM25's statistics are the scope's: nothing outside it moves a score)
KEYWORD_QUERY = _KEYWORD_QUERY.format(
    totals=_TOTALS.format(writes="coalesce(sum(writes), 0)::int8", counters="corpus_counters"),
    blocks=_BLOCKS.format(scope=""),
)
SCOPED_KEYWORD_QUERY = _KEYWORD_QUERY.format(
    totals=_TOTALS.format(
        writes=f"({_WRITES})",
        counters="collection_counters WHERE collection = ANY (%(collections)s::text[])",
    ),
    blocks=_BLOCKS.format(scope=" AND p.collection = ANY (%(collections)s::text[])"),
)
# Each collection's chunks and terms added (removed: negative) and the count of writes, in the
# rows of this connection's slot; collections in order, so two writers lock rows in one order.
COUNT_ROWS = """
    WITH per_collection AS (
        INSERT INTO collection_counters AS c (collection, slot, chunks, terms)
        SELECT k.collection, pg_backend_pid() %% %(slots)s, k.chunks, k.terms
        FROM unnest(%(collections)s::text[], %(chunks)s::int8[], %(terms)s::int8[])
            AS k (collection, chunks, terms)
        ORDER BY k.collection
        ON CONFLICT (collection, slot) DO UPDATE
        SET chunks = c.chunks + excluded.chunks, terms = c.terms + excluded.terms
    )
    INSERT INTO corpus_counters AS t
    VALUES (pg_backend_pid() %% %(slots)s, %(all_chunks)s, %(all_terms)s, 1)
    ON CONFLICT (slot) DO UPDATE SET chunks = t.chunks + excluded.chunks,
        terms = t.terms + excluded.terms, writes = t.writes + 1
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
