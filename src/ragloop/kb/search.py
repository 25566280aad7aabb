"""Where a search happens: :meth:`Searching.search` (the body of
:meth:`KnowledgeBase.search <ragloop.KnowledgeBase.search>`): bm25, dense or hybrid; the query's
vector (embedded while the store loads its indexes, or from the cache); fusion by reciprocal rank
in the store when it can (:class:`~ragloop.kb.stores.base.FusedSearch`), else here; and
:class:`KnowledgeBaseRetriever`, a knowledge base as a retriever and a search tool."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

from ragloop.core.cache_writes import skip_failed_cache_write
from ragloop.core.errors import ConfigError, DenseSearchUnavailable
from ragloop.core.protocols import Embedder
from ragloop.core.records import Chunk, Scope
from ragloop.kb.embedding.cache import ExactEmbeddingCache
from ragloop.kb.embedding.embedders import embed_queries
from ragloop.kb.index.exact import exact_terms
from ragloop.kb.index.fusion import reciprocal_rank_fusion
from ragloop.kb.ingest.pipeline import check_vectors
from ragloop.kb.stores.base import FusedSearch, PreloadedIndexes, SharedQueryVectors, Store

logger = logging.getLogger("ragloop")

SearchMode = Literal["bm25", "dense", "hybrid"]
SEARCH_MODES: tuple[SearchMode, ...] = ("bm25", "dense", "hybrid")


class Searching:
    """The searches of a :class:`~ragloop.KnowledgeBase` (which sets these attributes)."""

    store: Store
    embedder: Embedder | None
    dense_off_reason: str
    rrf_k: int
    fusion_weights: dict[str, float]
    searches: int  # searches served since opened (what a loop spent, for evaluations)
    _query_vectors: ExactEmbeddingCache
    _searches_lock: threading.Lock
    _warned_hybrid: bool

    def search(
        self,
        query: str,
        *,
        top_k: int = 5,
        collection: str | Sequence[str] | None = None,
        mode: SearchMode = "hybrid",
        filters: dict[str, Any] | None = None,
        vector: Sequence[float] | None = None,
    ) -> list[Chunk]:
        """The ``top_k`` chunks most relevant to ``query``, best first, scores in [0, 1].

        ``collection`` is None (all), a name, or a list of names (``[]`` matches nothing);
        ``filters`` match metadata exactly (a value or a list of values). Hybrid search fuses
        the bm25 and dense rankings with reciprocal rank fusion; each signal's score and rank
        are kept in ``chunk.metadata["scores"]``. ``vector``, a query vector made by this
        knowledge base's embedder elsewhere (an embedding cache, a HyDE passage), replaces the
        embedding of ``query`` in dense and hybrid search.
        """
        if mode not in SEARCH_MODES:
            raise ConfigError("mode", f"must be one of {', '.join(SEARCH_MODES)}, got {mode!r}")
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
            raise ConfigError("top_k", f"must be an integer >= 1, got {top_k!r}")
        if not isinstance(query, str):
            raise TypeError(f"query must be a string, got {type(query).__name__}")
        scope = Scope.of(collection, filters)
        with self._searches_lock:
            self.searches += 1
        if mode == "bm25" or (mode == "hybrid" and self.embedder is None):
            if mode == "hybrid" and not self._warned_hybrid:
                logger.warning("hybrid search runs as bm25 only: %s", self.dense_off_reason)
                self._warned_hybrid = True
            return self.store.keyword_search(query, top_k, scope)
        if vector is None:
            vector = self._vector_with_indexes(query, mode)
        elif self.embedder is None:
            raise DenseSearchUnavailable(self.dense_off_reason)
        else:
            check_vectors([vector], 1, self.embedder.dimension)
            vector = list(vector)
        if mode == "dense":
            return self.store.vector_search(vector, top_k, scope)
        depth = max(top_k * 4, 40)
        if isinstance(self.store, FusedSearch):  # a store that fuses before reading rows
            return self.store.hybrid_search(
                query, vector, top_k, scope, depth=depth, k=self.rrf_k, weights=self.fusion_weights
            )
        rankings = {
            "bm25": self.store.keyword_search(query, depth, scope),
            "dense": self.store.vector_search(vector, depth, scope),
        }
        return reciprocal_rank_fusion(
            rankings,
            top_k=top_k,
            k=self.rrf_k,
            weights=self.fusion_weights,
            exact_terms=exact_terms(query),
        )

    async def asearch(self, query: str, **options: Any) -> list[Chunk]:
        import asyncio  # not at the top: a CLI search never needs the event loop's modules

        return await asyncio.to_thread(lambda: self.search(query, **options))

    def _vector_with_indexes(self, query: str, mode: SearchMode) -> list[float]:
        """The query's vector. When it must be embedded and the store loads indexes into
        memory (SQLite), the two run at once: the model's work and SQLite's reads release the
        GIL, so a process's first search (a CLI ``search``: model load, index load) takes
        about the longer of the two rather than their sum."""
        store = self.store
        embedder = self.embedder
        if not isinstance(store, PreloadedIndexes) or embedder is None:
            return self.query_vector(query)
        cached = self._query_vectors.lookup(embedder.model_id, query)
        if cached is not None:
            return cached
        with ThreadPoolExecutor(1, thread_name_prefix="ragloop-embed") as pool:
            embedding = pool.submit(self._embed_query, embedder, query)
            store.load_indexes(keyword=mode == "hybrid", dense=True)
            return embedding.result()

    @property
    def query_vector_cache(self) -> ExactEmbeddingCache:
        """The cache of the queries' embeddings (bounded), which this knowledge base's
        searches fill and other caches of the same vectors may share (the offline retrieval
        loops' semantic cache does: one copy of each vector however many engines run)."""
        return self._query_vectors

    def query_vector(self, query: str) -> list[float]:
        """The query's embedding, from the cache when this query was embedded before: in this
        process (in memory), or, for a store every process shares (PostgreSQL:
        :class:`~ragloop.kb.stores.base.SharedQueryVectors`), by any process. A search never
        writes to a knowledge base file."""
        if self.embedder is None:
            raise DenseSearchUnavailable(self.dense_off_reason)
        model_id = self.embedder.model_id
        vector = self._query_vectors.lookup(model_id, query)
        if vector is None and isinstance(self.store, SharedQueryVectors):
            vector = self.store.cached_query_vector(model_id, query)
            if vector is not None:
                self._query_vectors.store(model_id, query, vector)
        return vector if vector is not None else self._embed_query(self.embedder, query)

    def _embed_query(self, embedder: Embedder, query: str) -> list[float]:
        vector = embed_queries(embedder, [query])[0]
        check_vectors([vector], 1, embedder.dimension)
        self._query_vectors.store(embedder.model_id, query, vector)
        store = self.store
        if isinstance(store, SharedQueryVectors):
            skip_failed_cache_write(
                "the query-vector cache",
                lambda: store.cache_query_vector(embedder.model_id, query, vector),
            )
        return vector

    def retriever(
        self,
        collection: str | Sequence[str] | None = None,
        mode: SearchMode = "hybrid",
        filters: dict[str, Any] | None = None,
    ) -> KnowledgeBaseRetriever:
        """A :class:`~ragloop.Retriever` (sync and async) over this knowledge base."""
        if mode not in SEARCH_MODES:
            raise ConfigError("mode", f"must be one of {', '.join(SEARCH_MODES)}, got {mode!r}")
        return KnowledgeBaseRetriever(self, collection, mode, filters)


class KnowledgeBaseRetriever:
    """A knowledge base as a :class:`~ragloop.Retriever`, limited to a scope and a mode.

    ``search(query, *, limit, collection=None, collections=None)`` is the function form the
    AgentLoop takes; the collections it names are intersected with this retriever's own.
    """

    def __init__(
        self,
        kb: Searching,
        collection: str | Sequence[str] | None,
        mode: SearchMode,
        filters: dict[str, Any] | None,
    ) -> None:
        self.kb = kb
        self.collection = collection
        self.mode: SearchMode = mode
        self.filters = filters

    def retrieve(self, query: str, top_k: int = 5) -> list[Chunk]:
        return self.kb.search(
            query, top_k=top_k, collection=self.collection, mode=self.mode, filters=self.filters
        )

    async def aretrieve(self, query: str, top_k: int = 5) -> list[Chunk]:
        import asyncio

        return await asyncio.to_thread(self.retrieve, query, top_k)

    def within(
        self, collection: str | None = None, collections: Sequence[str] | None = None
    ) -> KnowledgeBaseRetriever:
        """This retriever kept to the ``collection`` (or ``collections``) a search tool call
        names, as far as they are among its own; with neither, this retriever itself. Mode
        and filters stay."""
        requested = [collection] if collection is not None else collections
        if requested is None:
            return self
        own = Scope.of(self.collection).collections
        narrowed = [c for c in requested if own is None or c in own]
        return KnowledgeBaseRetriever(self.kb, narrowed, self.mode, self.filters)

    def search(
        self,
        query: str,
        *,
        limit: int = 5,
        collection: str | None = None,
        collections: Sequence[str] | None = None,
    ) -> list[Chunk]:
        """A search tool over this retriever (AgentLoop's function form): the best ``limit``
        chunks for ``query`` within the collections the call names (see :meth:`within`)."""
        return self.within(collection, collections).retrieve(query, top_k=limit)
