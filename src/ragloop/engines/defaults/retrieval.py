"""RetrievalLoop's default parts for multi-hop questions, offline: what
:meth:`RetrievalLoop.offline <ragloop.RetrievalLoop.offline>` is built from.

- :class:`~ragloop.HeuristicUnderstander` (with the ``glossary``, if given; with ``model=``, an
  :class:`~ragloop.LLMUnderstander` instead);
- :class:`~ragloop.RetrievalRouter` sending every query to hybrid search (bm25 when the
  knowledge base has no embedder): routing keyword-shaped queries to bm25 and semantic ones to
  dense search lost recall on every benchmark set, hybrid never did;
- :class:`~ragloop.EntityBridgeRefiner`, which follows the names the passages mention through
  the knowledge base's link graph, and ``follow_links=1``: the chunks the best new chunk names
  join the evidence right after it;
- ``max_iterations=2``: on HotpotQA and MuSiQue a second hop helps, a third no longer does
  (BENCHMARKS.md);
- ``direct_first=True``: the question's own search ranks first; a hop (a link, the second
  search) moves up a chunk that search found too, and adds the chunks only it found after its
  results (unless a link and the second search both found one), so no hop that goes astray
  pushes the question's best chunks down (pydocs questions: page@5 as one search's; HotpotQA:
  recall@5 of both gold passages up, see BENCHMARKS.md);
- ``top_k=20`` chunks per search: documents often span several chunks, and with 10 the first
  ten of the evidence held fewer distinct documents than one search's top ten (FiQA: recall@10
  2.9 points below one-shot search; with 20, within noise);
- a :class:`~ragloop.SemanticEmbeddingCache` shared by the loop's runs, and the
  :class:`~ragloop.DefaultCostEstimator`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Unpack

from ragloop.components.cost import DefaultCostEstimator
from ragloop.components.refiners import EntityBridgeRefiner
from ragloop.components.understanding import HeuristicUnderstander, LLMUnderstander
from ragloop.core.errors import ConfigError, check_options
from ragloop.core.protocols import (
    CostEstimator,
    EmbeddingCache,
    QueryRefiner,
    QueryUnderstander,
    Router,
)
from ragloop.core.records.retrieval import QueryShape
from ragloop.engines.options import RetrievalLoopConfig, RetrievalLoopOptions
from ragloop.kb.embedding.cache import SemanticEmbeddingCache
from ragloop.kb.knowledge_base import KnowledgeBase, KnowledgeBaseRetriever
from ragloop.kb.routing import RetrievalRouter

# what retrieval_parts sets where RetrievalLoopConfig's defaults are not the best offline
OFFLINE_DEFAULTS: dict[str, Any] = {
    "max_iterations": 2,
    "follow_links": 1,
    "top_k": 20,
    "direct_first": True,
}


@dataclass
class RetrievalParts:
    """What a RetrievalLoop is built from: its constructor's arguments."""

    retriever: KnowledgeBaseRetriever
    config: RetrievalLoopConfig
    understander: QueryUnderstander
    router: Router
    refiner: QueryRefiner
    embedding_cache: EmbeddingCache
    cost_estimator: CostEstimator


def retrieval_parts(
    kb: KnowledgeBase | KnowledgeBaseRetriever, **options: Unpack[RetrievalLoopOptions]
) -> RetrievalParts:
    """The parts of a RetrievalLoop over ``kb`` (a knowledge base or one of its retrievers).
    ``options`` hold :class:`~ragloop.RetrievalLoopConfig` fields, which override
    :data:`OFFLINE_DEFAULTS`, or a whole ``config=``; ``glossary=`` and ``model=`` go to the
    understander. An unknown name is a :class:`~ragloop.ConfigError`."""
    check_options(options, RetrievalLoopOptions.__annotations__, owner="RetrievalLoop.offline")
    settings: dict[str, Any] = dict(options)
    model = settings.pop("model", None)
    glossary = settings.pop("glossary", None)
    config = settings.pop("config", None)
    retriever = kb.retriever() if isinstance(kb, KnowledgeBase) else kb
    if not isinstance(retriever, KnowledgeBaseRetriever):
        raise ConfigError(
            "kb", f"must be a KnowledgeBase or its retriever, got {type(kb).__name__}"
        )
    if config is not None and settings:
        raise ConfigError("config", "pass either config=RetrievalLoopConfig(...) or its fields")
    if config is None:
        config = RetrievalLoopConfig(**{**OFFLINE_DEFAULTS, **settings})
    elif not isinstance(config, RetrievalLoopConfig):
        raise ConfigError("config", f"must be a RetrievalLoopConfig, got {config!r}")
    understander: QueryUnderstander = (
        HeuristicUnderstander(glossary)
        if model is None
        else LLMUnderstander(model, glossary=glossary)
    )
    return RetrievalParts(
        retriever,
        config=config,
        understander=understander,
        router=RetrievalRouter(retriever, routes=dict.fromkeys(QueryShape, "hybrid")),
        refiner=EntityBridgeRefiner(),
        embedding_cache=SemanticEmbeddingCache(exact=retriever.kb.query_vector_cache),
        cost_estimator=DefaultCostEstimator(),
    )
