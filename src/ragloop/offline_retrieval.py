"""The retrieval loop wired with the best offline components (no LLM, no network).

Kept apart from ``ragloop.offline`` (the wiring of RAGLoop and AgentLoop) so the two can be
merged side by side; :meth:`ragloop.RetrievalLoop.offline` calls :func:`offline_retrieval_loop`.
"""

from __future__ import annotations

from typing import Any

from ragloop.components.cost import DefaultCostEstimator
from ragloop.components.refiners import EntityBridgeRefiner
from ragloop.components.understanding import Glossary, HeuristicUnderstander
from ragloop.core.retrieval_records import QueryShape
from ragloop.engines.retrieval import RetrievalLoop, RetrievalLoopConfig
from ragloop.retrieval.embedding_cache import SemanticEmbeddingCache
from ragloop.retrieval.knowledge_base import KnowledgeBase, KnowledgeBaseRetriever
from ragloop.retrieval.routing import RetrievalRouter


def offline_retrieval_loop(
    kb: KnowledgeBase | KnowledgeBaseRetriever,
    *,
    glossary: Glossary | None = None,
    **config: Any,
) -> RetrievalLoop:
    """A :class:`~ragloop.RetrievalLoop` over ``kb`` for multi-hop questions, offline:

    - :class:`~ragloop.HeuristicUnderstander` (with the ``glossary``, if given);
    - :class:`~ragloop.RetrievalRouter` sending every query to hybrid search (bm25 when the
      knowledge base has no embedder): routing keyword-shaped queries to bm25 and semantic ones
      to dense search lost recall on every benchmark set, hybrid never did;
    - :class:`~ragloop.EntityBridgeRefiner`, which follows the names the passages mention
      through the knowledge base's link graph, and ``follow_links=1``: the chunks the best new
      chunk names join the evidence right after it;
    - ``max_iterations=2``: on HotpotQA and MuSiQue a second hop helps, a third no longer does
      (BENCHMARKS.md);
    - ``direct_first=True``: the question's own search ranks first; a hop (a link, the second
      search) moves up a chunk that search found too, and adds the chunks only it found after
      its results, so no hop that goes astray pushes the question's best chunks down (pydocs
      questions: page@5 as one search's; HotpotQA: recall@5 of both gold passages up, see
      BENCHMARKS.md);
    - ``top_k=20`` chunks per search: documents often span several chunks, and with 10 the
      first ten of the evidence held fewer distinct documents than one search's top ten
      (FiQA: recall@10 2.9 points below one-shot search; with 20, within noise);
    - a :class:`~ragloop.SemanticEmbeddingCache` shared by the loop's runs, and the
      :class:`~ragloop.DefaultCostEstimator`.

    ``config`` holds :class:`~ragloop.RetrievalLoopConfig` fields and overrides these defaults.
    """
    retriever = kb.retriever() if isinstance(kb, KnowledgeBase) else kb
    if not isinstance(retriever, KnowledgeBaseRetriever):
        raise TypeError(f"kb must be a KnowledgeBase or its retriever, got {type(kb).__name__}")
    settings = {
        "max_iterations": 2,
        "follow_links": 1,
        "top_k": 20,
        "direct_first": True,
        **config,
    }
    return RetrievalLoop(
        retriever,
        config=RetrievalLoopConfig(**settings),
        understander=HeuristicUnderstander(glossary),
        router=RetrievalRouter(retriever, routes=dict.fromkeys(QueryShape, "hybrid")),
        refiner=EntityBridgeRefiner(),
        embedding_cache=SemanticEmbeddingCache(),
        cost_estimator=DefaultCostEstimator(),
    )
