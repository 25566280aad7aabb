"""RetrievalRouter: pick a knowledge base's search mode (bm25, dense, hybrid) from the query's
shape, and search by it (seed 004's router over a hybrid retriever)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ragloop.core.errors import ConfigError
from ragloop.core.protocols import Embedder
from ragloop.core.records import Chunk
from ragloop.core.records.retrieval import QueryShape, UnderstoodQuery
from ragloop.kb.knowledge_base import (
    SEARCH_MODES,
    KnowledgeBase,
    KnowledgeBaseRetriever,
    SearchMode,
)
from ragloop.kb.search import Searching

DEFAULT_ROUTES: dict[QueryShape, SearchMode] = {
    QueryShape.KEYWORD: "bm25",
    QueryShape.SEMANTIC: "dense",
    QueryShape.HYBRID: "hybrid",
}
VECTOR_ROUTES = frozenset({"dense", "hybrid"})


class RetrievalRouter:
    """Routes a query to a search mode of a knowledge base, by its shape.

    ``retriever`` is a :class:`~ragloop.KnowledgeBase` or one of its retrievers (whose
    collection and filters scope every search). ``routes`` overrides the shape-to-mode table
    (keyword -> bm25, semantic -> dense, hybrid -> hybrid). A knowledge base without an embedder
    routes everything to bm25.
    """

    def __init__(
        self,
        retriever: KnowledgeBase | KnowledgeBaseRetriever,
        *,
        routes: Mapping[QueryShape | str, SearchMode] | None = None,
    ) -> None:
        if isinstance(retriever, KnowledgeBase):
            retriever = retriever.retriever()
        if not isinstance(retriever, KnowledgeBaseRetriever):
            raise ConfigError(
                "retriever",
                "must be a KnowledgeBase or a KnowledgeBaseRetriever, "
                f"got {type(retriever).__name__}",
            )
        self.retriever = retriever
        self.kb = retriever.kb
        self.routes = dict(DEFAULT_ROUTES)
        for shape, mode in (routes or {}).items():
            if mode not in SEARCH_MODES:
                raise ConfigError("routes", f"{shape}: {mode!r} is not one of {SEARCH_MODES}")
            try:
                self.routes[QueryShape(shape)] = mode
            except ValueError:
                raise ConfigError("routes", f"{shape!r} is not a query shape") from None

    def route(self, query: UnderstoodQuery) -> str:
        mode = self.routes[query.shape]
        return mode if self.kb.embedder is not None else "bm25"

    def query_embedder(self, route: str) -> Embedder | None:
        if route not in VECTOR_ROUTES or self.kb.embedder is None:
            return None
        return _QueryVectors(self.kb, self.kb.embedder)

    def search(
        self, query: str, *, route: str, top_k: int, vector: Sequence[float] | None = None
    ) -> list[Chunk]:
        if route not in SEARCH_MODES:
            raise ConfigError("route", f"must be one of {', '.join(SEARCH_MODES)}, got {route!r}")
        r = self.retriever
        return self.kb.search(
            query,
            top_k=top_k,
            collection=r.collection,
            mode=route,
            filters=r.filters,
            vector=vector,
        )


class _QueryVectors:
    """The knowledge base's embedder for queries, behind the knowledge base's own query-vector
    caches (in memory, and persisted in its file), which sit below the loop's cache."""

    def __init__(self, kb: Searching, embedder: Embedder) -> None:
        self.kb = kb
        self.model_id = embedder.model_id
        self.dimension = embedder.dimension

    def embed(self, texts: list[str]) -> list[list[float]]:
        return [self.kb.query_vector(text) for text in texts]

    embed_query = embed
