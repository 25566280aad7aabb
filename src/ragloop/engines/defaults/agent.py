"""AgentLoop's default parts: what :meth:`AgentLoop.offline <ragloop.AgentLoop.offline>` is
built from.

Without a model the controller is :class:`~ragloop.OfflineController` (rule-based: it searches
the question and its parts, follows the link graph's bridges and answers with the extractive
generator) and, over a knowledge base, each of its searches runs a
:class:`~ragloop.RetrievalLoop` (a hybrid search and its hop along the link graph; HotpotQA,
100 questions: recall@5 of both gold passages 0.79 against 0.74 with plain searches); with a
model, the model drives and searches the knowledge base directly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Unpack

from ragloop.components.calibration import IDENTITY
from ragloop.components.heuristics.confidence import offline_calibration
from ragloop.components.heuristics.controller import OfflineController
from ragloop.components.heuristics.corpus import Corpus
from ragloop.core.calls import ChatFn
from ragloop.core.errors import check_options
from ragloop.core.protocols import ChatModel, Retriever
from ragloop.engines.defaults.rag import OFFLINE_TARGET_PRECISION, retriever_of
from ragloop.engines.options import AgentLoopOptions, SearchFn, calibration_of
from ragloop.kb.knowledge_base import KnowledgeBase, KnowledgeBaseRetriever, SearchMode


@dataclass
class AgentParts:
    """What an AgentLoop is built from: its controller, its search and the rest of its keyword
    arguments. ``retrieval_loop_over``, when set (offline, over a knowledge base): every search
    runs a :class:`~ragloop.RetrievalLoop` over that knowledge-base retriever, within the
    collections the call names, instead of calling ``search``; the engine builds that search,
    since the defaults build no engine."""

    controller: ChatModel | ChatFn
    search: Retriever | SearchFn
    settings: dict[str, Any] = field(default_factory=dict)
    retrieval_loop_over: KnowledgeBaseRetriever | None = None


def agent_parts(source: Any, **options: Unpack[AgentLoopOptions]) -> AgentParts:
    """The parts of an AgentLoop over ``source`` (a knowledge base, one of its retrievers, or
    any retriever), with ``options`` as :meth:`AgentLoop.offline <ragloop.AgentLoop.offline>`
    takes them; an unknown name is a :class:`~ragloop.ConfigError`."""
    check_options(options, AgentLoopOptions.__annotations__, owner="AgentLoop.offline")
    settings: dict[str, Any] = dict(options)
    model = settings.pop("model", None)
    retriever = retriever_of(source)
    over_kb = retriever if isinstance(retriever, KnowledgeBaseRetriever) else None
    # with a model, over a knowledge base, the function form: the collections a call names
    # reach the store (within the retriever's own)
    search: Retriever | SearchFn = (
        over_kb.search if over_kb is not None and model is not None else retriever
    )
    controller: ChatModel | ChatFn = model
    if model is None:
        settings.setdefault("target_precision", OFFLINE_TARGET_PRECISION)
        if "calibration" not in settings:
            settings["calibration"] = offline_calibration()
        calibration = calibration_of(settings["calibration"]) or IDENTITY
        offline = OfflineController(
            corpus=_scoped(source, settings),
            threshold=calibration.score_for(settings["target_precision"]),
        )
        settings.setdefault("evaluator", offline.evaluator)  # judges the answer it sends
        controller = offline
    return AgentParts(
        controller,
        search,
        settings,
        retrieval_loop_over=over_kb if model is None else None,
    )


def _scoped(source: Any, settings: dict[str, Any]) -> Corpus:
    """The offline controller's corpus: only the collections the loop may search, so its
    queries never carry a word found only in another collection."""
    collections = settings.get("collections")
    if collections is None or not isinstance(source, KnowledgeBase):
        return Corpus.of(source)
    mode: SearchMode = "hybrid" if source.embedder is not None else "bm25"
    return Corpus.of(source.retriever(collection=collections, mode=mode))
