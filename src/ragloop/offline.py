"""Wiring of the defaults: one call to get an engine that answers from a knowledge base.

With no model, every engine gets the LLM-free components (see ``docs/offline.md``); with a
model (a :class:`~ragloop.ChatModel`, e.g. from ``ragloop.resolve_model``), the LLM components
take their place. The engines' ``offline`` classmethods call these functions; they import this
module only inside the classmethod, because this module sits above the engines (floor 4) and the
engines must keep depending on protocols alone.

One section per engine: RAGLoop, AgentLoop, and RetrievalLoop answered by one RAGLoop iteration.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Unpack

from ragloop.components.controller import OfflineController
from ragloop.components.corpus import Corpus
from ragloop.components.evaluators import HeuristicEvaluator, LLMEvaluator
from ragloop.components.generators import ExtractiveGenerator, LLMGenerator
from ragloop.components.judging import AnswerJudge
from ragloop.components.reformulators import HeuristicReformulator, LLMReformulator
from ragloop.core.calls import has_method
from ragloop.core.errors import ConfigError, check_options
from ragloop.core.protocols import ChatModel, Retriever
from ragloop.core.records import Chunk, Scope
from ragloop.engines.agent import AgentLoop
from ragloop.engines.agent_options import AgentLoopOptions, SearchFn
from ragloop.engines.rag import LoopConfig, RAGLoop, RAGLoopOptions
from ragloop.engines.retrieval import RetrievalLoop
from ragloop.offline_retrieval import offline_retrieval_loop
from ragloop.retrieval.knowledge_base import KnowledgeBase, KnowledgeBaseRetriever, SearchMode


def _retriever(source: Any) -> Retriever:
    """A knowledge base's retriever, or the retriever itself."""
    if hasattr(source, "retriever") and hasattr(source, "linked_chunks"):
        return source.retriever()  # type: ignore[no-any-return]
    if has_method(source, "retrieve"):
        return source  # type: ignore[no-any-return]
    raise ConfigError(
        "kb_or_retriever",
        "expected a KnowledgeBase or a retriever (retrieve/aretrieve), "
        f"got {type(source).__name__}",
    )


# The offline judge's score is a calibrated chance of being right (HeuristicEvaluator), and a
# quoted answer's chance seldom passes 0.8 even when it is right (BENCHMARKS.md: reliability of
# the offline judge), so the offline loops converge at 0.5: they stand by an answer the judge
# finds more likely right than wrong. An LLM judge keeps ragsnag's 0.8.
OFFLINE_CONFIDENCE = 0.5


# -- searching through RetrievalLoop.offline ----------------------------------------------------


class RetrievalLoopRetriever:
    """A :class:`~ragloop.Retriever` that runs a :class:`~ragloop.RetrievalLoop` per query and
    returns the best ``top_k`` chunks of the evidence it gathered."""

    def __init__(self, loop: RetrievalLoop) -> None:
        self.loop = loop

    def retrieve(self, query: str, top_k: int = 5) -> list[Chunk]:
        return self.loop.run(query).chunks[:top_k]

    async def aretrieve(self, query: str, top_k: int = 5) -> list[Chunk]:
        return (await self.loop.arun(query)).chunks[:top_k]


class LinkedSearch:
    """The offline AgentLoop's search tool over a knowledge base: every search runs
    :meth:`RetrievalLoop.offline <ragloop.RetrievalLoop.offline>` (a hybrid search and one hop
    along the link graph) within the collections the call names, and returns the best
    ``limit`` chunks of its evidence. One loop per scope, so its caches serve every search.
    Over a knowledge base's retriever, searches keep to that retriever's collections, mode and
    filters."""

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
        requested = [collection] if collection is not None else collections
        own = None if self.base.collection is None else Scope.of(self.base.collection).collections
        if requested is not None and own is not None:
            requested = [c for c in requested if c in own]
        scope = own if requested is None else tuple(requested)
        if scope not in self._loops:
            retriever = self.kb.retriever(
                collection=None if scope is None else list(scope),
                mode=self.base.mode,
                filters=self.base.filters,
            )
            self._loops[scope] = offline_retrieval_loop(retriever)
        return (await self._loops[scope].arun(query)).chunks[:limit]


# -- RAGLoop ------------------------------------------------------------------------------------


def rag_loop(source: Any, **options: Unpack[RAGLoopOptions]) -> RAGLoop:
    """A :class:`~ragloop.RAGLoop` over a knowledge base or a retriever.

    Without ``model``: :class:`~ragloop.ExtractiveGenerator`, :class:`~ragloop.HeuristicEvaluator`
    and :class:`~ragloop.HeuristicReformulator`, all three consulting the knowledge base (its
    wider search, embedder and link graph) through one :class:`~ragloop.Corpus`. With
    ``model``: :class:`~ragloop.LLMGenerator`, :class:`~ragloop.LLMEvaluator` and
    :class:`~ragloop.LLMReformulator` (whose fallback still consults the corpus).

    Without ``model``, over a knowledge base (or one of its retrievers), each retrieval is
    :class:`RetrievalLoopRetriever`: a hybrid search and its hop along the link graph
    (HotpotQA, 250 questions: recall@5 of both gold passages 0.80 against 0.78 with plain
    searches, and 0.90 against 0.85 at 10).

    ``options`` (:class:`~ragloop.engines.rag.RAGLoopOptions`) hold
    :class:`~ragloop.LoopConfig` fields (``max_iterations=``, ``top_k=``, ...) or
    ``config=LoopConfig(...)``, ``model=``, and may replace a component: ``generator=``,
    ``evaluator=``, ``reformulator=``. An unknown name is a :class:`~ragloop.ConfigError`.
    """
    check_options(options, RAGLoopOptions.__annotations__, owner="RAGLoop.offline")
    config: dict[str, Any] = dict(options)
    model = config.pop("model", None)
    retriever = _retriever(source)
    if model is None and isinstance(retriever, KnowledgeBaseRetriever):
        retriever = RetrievalLoopRetriever(offline_retrieval_loop(retriever))
    return _rag_loop(retriever, Corpus.of(source), model, config)


def _rag_loop(retriever: Retriever, corpus: Corpus, model: Any, config: dict[str, Any]) -> RAGLoop:
    components: dict[str, Any] = {
        name: config.pop(name)
        for name in ("generator", "evaluator", "reformulator")
        if name in config
    }
    loop_config = config.pop("config", None)
    if loop_config is not None and config:
        raise ConfigError("config", "pass either config=LoopConfig(...) or its fields, not both")
    if loop_config is None:
        if model is None:
            config.setdefault("confidence_threshold", OFFLINE_CONFIDENCE)
        loop_config = LoopConfig(**config)
    if model is None:
        judge = AnswerJudge(corpus=corpus)  # one analysis of each answer for both
        defaults: dict[str, Any] = {
            "generator": ExtractiveGenerator(corpus=corpus, judge=judge),
            "evaluator": HeuristicEvaluator(corpus=corpus, judge=judge),
            "reformulator": HeuristicReformulator(corpus),
        }
    else:
        defaults = {
            "generator": LLMGenerator(model),
            "evaluator": LLMEvaluator(model),
            "reformulator": LLMReformulator(model, corpus=corpus),
        }
    defaults.update(components)
    return RAGLoop(
        retriever,
        defaults["generator"],
        defaults["evaluator"],
        defaults["reformulator"],
        loop_config,
    )


# -- AgentLoop ----------------------------------------------------------------------------------


def agent_loop(source: Any, **options: Unpack[AgentLoopOptions]) -> AgentLoop:
    """An :class:`~ragloop.AgentLoop` over a knowledge base or a retriever.

    Without ``model`` the controller is :class:`~ragloop.OfflineController` (rule-based: it
    searches the question and its parts, follows the link graph's bridges and answers with the
    extractive generator) and, over a knowledge base, each of its searches is a
    :class:`LinkedSearch` (HotpotQA, 100 questions: recall@5 of both gold passages 0.79
    against 0.74 with plain searches); with ``model``, the model drives and searches the
    knowledge base directly. ``options`` (:class:`~ragloop.engines.agent.AgentLoopOptions`) go
    to ``AgentLoop`` (``max_iterations=``, ``collections=``, ``budget=``, ...); an unknown name
    is a :class:`~ragloop.ConfigError`.
    """
    check_options(options, AgentLoopOptions.__annotations__, owner="AgentLoop.offline")
    settings: dict[str, Any] = dict(options)
    model = settings.pop("model", None)
    search: Retriever | SearchFn | LinkedSearch
    if isinstance(source, KnowledgeBase | KnowledgeBaseRetriever):
        # the function forms: the collections a call names reach the store (within a
        # retriever's own)
        base = source.retriever() if isinstance(source, KnowledgeBase) else source
        search = base.search if model is not None else LinkedSearch(source)
    else:
        search = _retriever(source)
    controller = (
        model
        if model is not None
        else OfflineController(corpus=_scoped(source, settings), threshold=OFFLINE_CONFIDENCE)
    )
    return AgentLoop(controller, search, **settings)


def _scoped(source: Any, settings: dict[str, Any]) -> Corpus:
    """The offline controller's corpus: only the collections the loop may search, so its
    queries never carry a word found only in another collection."""
    collections = settings.get("collections")
    if collections is None or not isinstance(source, KnowledgeBase):
        return Corpus.of(source)
    mode: SearchMode = "hybrid" if source.embedder is not None else "bm25"
    return Corpus.of(source.retriever(collection=collections, mode=mode))


# -- RetrievalLoop, answered ------------------------------------------------------------------


def answered_retrieval_loop(
    kb: KnowledgeBase | KnowledgeBaseRetriever, *, model: ChatModel | None = None, **config: Any
) -> RAGLoop:
    """:meth:`RetrievalLoop.offline <ragloop.RetrievalLoop.offline>` gathers the evidence (its
    hops, budgets and stops; ``max_iterations=`` is its own), then one RAGLoop iteration answers
    from the best ``top_k`` chunks and evaluates the answer, with the components of
    :func:`rag_loop` (the LLM ones with ``model``). What ``ragloop ask --engine retrieval`` runs.
    """
    hops = {"max_iterations": config.pop("max_iterations")} if "max_iterations" in config else {}
    retriever = RetrievalLoopRetriever(RetrievalLoop.offline(kb, **hops))
    return _rag_loop(retriever, Corpus.of(kb), model, {**config, "max_iterations": 1})


# -- the engines the CLI offers -----------------------------------------------------------------

# ``ragloop ask --engine NAME`` builds its engine with ENGINES[NAME](kb, model=..., **settings),
# where settings are max_iterations=, and top_k= and confidence_threshold= for the engines
# that generate through a RAGLoop.
ENGINES: dict[str, Any] = {
    "rag": rag_loop,
    "agent": agent_loop,
    "retrieval": answered_retrieval_loop,
}
