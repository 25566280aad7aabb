"""The PostgreSQL store: chunks, a tsvector keyword index, pgvector HNSW vectors and the link
graph in one schema of a PostgreSQL (>= 13) database with pgvector (>= 0.5).

:class:`PostgresKnowledgeBase` is the same :class:`~ragloop.KnowledgeBase` (ingestion, chunking,
fusion, the retriever) over a :class:`PostgresStore`. Connections come from a psycopg 3 pool,
one per thread at a time, checked before use so a restarted server is reconnected to.

- Writes: one transaction per batch of documents, its chunks copied in binary into a staging
  table and merged by one statement, serialised per source by advisory locks taken in key
  order, retried on deadlock; the chunks' vectors also go into the embedding cache
  (``embeddings``, keyed by model id and text hash). Numbered migrations are recorded in
  ``_ragloop_migrations``.
- Keyword search: BM25 (k1 1.2, b 0.75 and the idf of FTS5, as the other stores) over postings
  kept in blocks (:mod:`.postings`), filled from each chunk's ``to_tsvector('english')``
  (Snowball stemming, stopwords dropped) and added up in numpy; a GIN index on the tsvector
  serves phrase lookups. Document frequencies are the blocks' counts, the corpus size and length
  come from sharded counters: exact, without a row every writer waits for. The score is divided
  by the highest score the query could reach (every term at saturation), the normalisation of
  every store, so it lies in [0, 1]. Why not ``ts_rank_cd`` on the GIN index: see
  :mod:`.schema`.
- Vector search: cosine distance in an HNSW index (``vector_cosine_ops``) over
  ``chunk_vectors`` (a row per chunk that has a vector: storing one leaves the chunk's row as
  it is), created when the embedding model is recorded, and built again after a fill of many
  vectors at once (:meth:`PostgresStore.filling_vectors`); filters are applied in the same
  query, with pgvector 0.8's iterative scan so a narrow collection still fills ``top_k``.
  Score: 1 - distance, clipped.
- Hybrid search is fused in Python by the knowledge base, as for every store (with BM25 added
  up in Python there is nothing to fuse in SQL; fusing both in one statement was measured no
  faster when BM25 ran in SQL: 48 against 50 ms p50 at 100,000 chunks).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

from ragloop.kb.embedding.cache import cache_key
from ragloop.kb.knowledge_base import KnowledgeBase
from ragloop.kb.stores.base import WritesInBatches, content_hash
from ragloop.kb.stores.postgres.reads import PostgresReads
from ragloop.kb.stores.postgres.writes import PostgresWrites


class PostgresStore(PostgresWrites, PostgresReads, WritesInBatches):
    """A :class:`~ragloop.kb.stores.base.Store` in a PostgreSQL schema (created if missing).

    ``dsn`` is a libpq connection string or URL (``postgresql://user:pw@host:5432/db``).
    ``schema`` holds the tables, so one database can hold several knowledge bases.
    ``create=False`` refuses to create a missing schema (read commands use it). The pool keeps
    ``pool_min_size`` to ``pool_max_size`` connections; ``hnsw_m`` and ``hnsw_ef_construction``
    shape the vector index when it is built, ``ef_search`` is the candidate list of a query
    (raised to ``top_k`` when that is larger).

    Query vectors go into the embedding cache too (:class:`~ragloop.kb.stores.base.
    SharedQueryVectors`), keyed apart from chunk texts (a query may be embedded differently
    from a passage), so every server of the database embeds a query once.
    """

    @property
    def conninfo(self) -> str:
        """The connection string this store connects with (its password included): for the
        other connections a process makes to this database (a server's traces and run
        counts)."""
        return self._conninfo

    def cached_query_vector(self, model_id: str, query: str) -> list[float] | None:
        return self.cached_vectors(model_id, [_query_hash(query)]).get(_query_hash(query))

    def cache_query_vector(self, model_id: str, query: str, vector: Sequence[float]) -> None:
        self.cache_vectors(model_id, {_query_hash(query): vector})


def _query_hash(query: str) -> str:
    """A query's key in the embedding cache: the hash of its normalised text, marked as a
    query's (never the hash of a chunk's text, whose vector may differ)."""
    return "query:" + content_hash(cache_key(query))


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
