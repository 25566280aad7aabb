"""The public face of the defaults: one call to get an engine that answers from a knowledge base.

With no model, every engine gets the LLM-free components (see ``docs/offline.md``); with a model
(a :class:`~ragloop.ChatModel`, e.g. from ``ragloop.resolve_model``), the LLM components take
their place. :func:`rag_loop`, :func:`agent_loop` and :func:`offline_retrieval_loop` are the
engines' ``offline`` constructors; the parts they plug in are chosen in
:mod:`ragloop.engines.defaults`. :func:`answered_retrieval_loop` is RetrievalLoop answered by
one RAGLoop iteration, and :data:`ENGINES` the builders ``ragloop ask --engine NAME`` offers.
"""

from __future__ import annotations

from typing import Any, Unpack

from ragloop.core.protocols import ChatModel
from ragloop.engines.agent import AgentLoop
from ragloop.engines.defaults.rag import OFFLINE_CONFIDENCE, OFFLINE_TARGET_PRECISION, rag_parts
from ragloop.engines.defaults.retrieval import OFFLINE_DEFAULTS
from ragloop.engines.loop_search import LinkedSearch, RetrievalLoopRetriever
from ragloop.engines.options import AgentLoopOptions, RAGLoopOptions, RetrievalLoopOptions
from ragloop.engines.rag import RAGLoop
from ragloop.engines.retrieval import RetrievalLoop
from ragloop.kb.knowledge_base import KnowledgeBase, KnowledgeBaseRetriever

__all__ = [
    "ENGINES",
    "OFFLINE_CONFIDENCE",
    "OFFLINE_DEFAULTS",
    "OFFLINE_TARGET_PRECISION",
    "LinkedSearch",
    "RetrievalLoopRetriever",
    "agent_loop",
    "answered_retrieval_loop",
    "offline_retrieval_loop",
    "rag_loop",
]


def rag_loop(source: Any, **options: Unpack[RAGLoopOptions]) -> RAGLoop:
    """:meth:`RAGLoop.offline <ragloop.RAGLoop.offline>`: a RAGLoop over a knowledge base or a
    retriever."""
    return RAGLoop.offline(source, **options)


def agent_loop(source: Any, **options: Unpack[AgentLoopOptions]) -> AgentLoop:
    """:meth:`AgentLoop.offline <ragloop.AgentLoop.offline>`: an AgentLoop over a knowledge base
    or a retriever."""
    return AgentLoop.offline(source, **options)


def offline_retrieval_loop(
    kb: KnowledgeBase | KnowledgeBaseRetriever, **options: Unpack[RetrievalLoopOptions]
) -> RetrievalLoop:
    """:meth:`RetrievalLoop.offline <ragloop.RetrievalLoop.offline>`: a RetrievalLoop over a
    knowledge base for multi-hop questions."""
    return RetrievalLoop.offline(kb, **options)


def answered_retrieval_loop(
    kb: KnowledgeBase | KnowledgeBaseRetriever, *, model: ChatModel | None = None, **config: Any
) -> RAGLoop:
    """:meth:`RetrievalLoop.offline <ragloop.RetrievalLoop.offline>` gathers the evidence (its
    hops, budgets and stops; ``max_iterations=`` is its own), then one RAGLoop iteration answers
    from the best ``top_k`` chunks and evaluates the answer, with the components of
    :func:`rag_loop` (the LLM ones with ``model``). What ``ragloop ask --engine retrieval`` runs.
    """
    hops = {"max_iterations": config.pop("max_iterations")} if "max_iterations" in config else {}
    parts = rag_parts(kb, model=model, **{**config, "max_iterations": 1})
    retriever = RetrievalLoopRetriever(RetrievalLoop.offline(kb, **hops))
    return RAGLoop(retriever, parts.generator, parts.evaluator, parts.reformulator, parts.config)


# ``ragloop ask --engine NAME`` builds its engine with ENGINES[NAME](kb, model=..., **settings),
# where settings are max_iterations=, and top_k= and confidence_threshold= for the engines
# that generate through a RAGLoop.
ENGINES: dict[str, Any] = {
    "rag": rag_loop,
    "agent": agent_loop,
    "retrieval": answered_retrieval_loop,
}
