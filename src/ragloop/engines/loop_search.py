"""A RetrievalLoop as the search of another engine: :class:`RetrievalLoopRetriever` (a
retriever, what RAGLoop's offline retrieval is over a knowledge base) and
:class:`LinkedSearch` (a search tool, what AgentLoop's offline searches are). Each runs
:meth:`RetrievalLoop.offline <ragloop.RetrievalLoop.offline>`: a hybrid search and its hop
along the link graph."""

from __future__ import annotations

from collections.abc import Sequence

from ragloop.core.records import Chunk, Scope
from ragloop.engines.retrieval import RetrievalLoop
from ragloop.kb.knowledge_base import KnowledgeBase, KnowledgeBaseRetriever


class RetrievalLoopRetriever:
    """A :class:`~ragloop.Retriever` that runs a :class:`~ragloop.RetrievalLoop` per query and
    returns the best ``top_k`` chunks of the evidence it gathered."""

    def __init__(self, loop: RetrievalLoop) -> None:
        self.loop = loop

    @classmethod
    def offline(cls, kb: KnowledgeBase | KnowledgeBaseRetriever) -> RetrievalLoopRetriever:
        """Over :meth:`RetrievalLoop.offline <ragloop.RetrievalLoop.offline>` of ``kb``."""
        return cls(RetrievalLoop.offline(kb))

    def retrieve(self, query: str, top_k: int = 5) -> list[Chunk]:
        return self.loop.run(query).chunks[:top_k]

    async def aretrieve(self, query: str, top_k: int = 5) -> list[Chunk]:
        return (await self.loop.arun(query)).chunks[:top_k]


class LinkedSearch:
    """The offline AgentLoop's search tool over a knowledge base: every search runs
    :meth:`RetrievalLoop.offline <ragloop.RetrievalLoop.offline>` within the collections the
    call names and returns the best ``limit`` chunks of its evidence. One loop per scope, so
    its caches serve every search. Over a knowledge base's retriever, searches keep to that
    retriever's collections, mode and filters (:meth:`KnowledgeBaseRetriever.within
    <ragloop.KnowledgeBaseRetriever.within>`)."""

    def __init__(self, kb: KnowledgeBase | KnowledgeBaseRetriever) -> None:
        self.base = kb.retriever() if isinstance(kb, KnowledgeBase) else kb
        self.kb = self.base.kb
        self._loops: dict[tuple[str, ...] | None, RetrievalLoop] = {}

    async def __call__(
        self,
        query: str,
        *,
        limit: int = 5,
        collection: str | None = None,
        collections: Sequence[str] | None = None,
    ) -> list[Chunk]:
        retriever = self.base.within(collection, collections)
        scope = Scope.of(retriever.collection).collections
        if scope not in self._loops:
            self._loops[scope] = RetrievalLoop.offline(retriever)
        return (await self._loops[scope].arun(query)).chunks[:limit]
