"""RAGLoop's default parts: what :meth:`RAGLoop.offline <ragloop.RAGLoop.offline>` is built from.

Without a model: :class:`~ragloop.ExtractiveGenerator`, :class:`~ragloop.HeuristicEvaluator`
and :class:`~ragloop.HeuristicReformulator`, all three consulting the knowledge base (its wider
search, embedder and link graph) through one :class:`~ragloop.Corpus`, and the loop converges
at :data:`OFFLINE_TARGET_PRECISION` (or the ``target_precision=`` given), read through the
shipped calibration of the offline judge (or the ``calibration=`` given). With a model:
:class:`~ragloop.LLMGenerator`, :class:`~ragloop.LLMEvaluator` and
:class:`~ragloop.LLMReformulator` (whose fallback still consults the corpus), and ragsnag's
threshold unless ``target_precision=`` is given.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Unpack

from ragloop.components.evaluators import HeuristicEvaluator, LLMEvaluator
from ragloop.components.generators import ExtractiveGenerator, LLMGenerator
from ragloop.components.heuristics.confidence import offline_calibration
from ragloop.components.heuristics.corpus import Corpus
from ragloop.components.heuristics.judging import AnswerJudge
from ragloop.components.reformulators import HeuristicReformulator, LLMReformulator
from ragloop.core.calls import has_method
from ragloop.core.errors import ConfigError, check_options
from ragloop.core.protocols import Evaluator, Generator, Reformulator, Retriever
from ragloop.engines.options import LoopConfig, RAGLoopOptions
from ragloop.kb.knowledge_base import KnowledgeBase, KnowledgeBaseRetriever

# The offline judge's score is a chance of being right (HeuristicEvaluator), and a quoted
# answer's chance seldom passes 0.8 even when it is right (BENCHMARKS.md: reliability of the
# offline judge), so a raw threshold for it (``confidence_threshold=``) sits at 0.5, where the
# judge finds the answer more likely right than wrong. An LLM judge keeps ragsnag's 0.8.
OFFLINE_CONFIDENCE = 0.5
# By default the offline loops stand by an answer at a target precision of 0.8 instead, read
# through the shipped calibration (components/heuristics/confidence.py: a score stands for the
# precision of the answers scored at least as high, fitted across corpora): what a user
# assumes when ragloop says it is sure. Below it they show the closest passages.
OFFLINE_TARGET_PRECISION = 0.8


@dataclass
class RAGParts:
    """What a RAGLoop is built from. ``retrieval_loop_over``, when set (offline, over a
    knowledge base): each retrieval runs a :class:`~ragloop.RetrievalLoop` over that
    knowledge-base retriever instead of one search of ``retriever``; the engine builds the
    loop, since the defaults build no engine."""

    retriever: Retriever
    generator: Generator
    evaluator: Evaluator
    reformulator: Reformulator
    config: LoopConfig
    retrieval_loop_over: KnowledgeBaseRetriever | None = None


def retriever_of(source: Any) -> Retriever:
    """A knowledge base's retriever, or the retriever itself."""
    if isinstance(source, KnowledgeBase):
        return source.retriever()
    if has_method(source, "retrieve"):
        return source  # type: ignore[no-any-return]
    raise ConfigError(
        "kb_or_retriever",
        "expected a KnowledgeBase or a retriever (retrieve/aretrieve), "
        f"got {type(source).__name__}",
    )


def rag_parts(source: Any, **options: Unpack[RAGLoopOptions]) -> RAGParts:
    """The parts of a RAGLoop over ``source`` (a knowledge base, one of its retrievers, or any
    retriever), with ``options`` as :meth:`RAGLoop.offline <ragloop.RAGLoop.offline>` takes
    them; an unknown name is a :class:`~ragloop.ConfigError`."""
    check_options(options, RAGLoopOptions.__annotations__, owner="RAGLoop.offline")
    retriever = retriever_of(source)
    settings: dict[str, Any] = dict(options)
    model = settings.pop("model", None)
    given: dict[str, Any] = {
        name: settings.pop(name)
        for name in ("generator", "evaluator", "reformulator")
        if name in settings
    }
    config = settings.pop("config", None)
    if config is not None and settings:
        raise ConfigError("config", "pass either config=LoopConfig(...) or its fields, not both")
    if config is None:
        if model is None and "confidence_threshold" not in settings:
            settings.setdefault("target_precision", OFFLINE_TARGET_PRECISION)
            if "calibration" not in settings:
                settings["calibration"] = offline_calibration()
        config = LoopConfig(**settings)
    corpus = Corpus.of(source)
    if model is None:
        judge = AnswerJudge(corpus=corpus)  # one analysis of each answer for both
        components: dict[str, Any] = {
            "generator": ExtractiveGenerator(corpus=corpus, judge=judge),
            "evaluator": HeuristicEvaluator(corpus=corpus, judge=judge),
            "reformulator": HeuristicReformulator(corpus),
        }
    else:
        components = {
            "generator": LLMGenerator(model),
            "evaluator": LLMEvaluator(model),
            "reformulator": LLMReformulator(model, corpus=corpus),
        }
    components.update(given)
    return RAGParts(
        retriever,
        components["generator"],
        components["evaluator"],
        components["reformulator"],
        config,
        retrieval_loop_over=(
            retriever if model is None and isinstance(retriever, KnowledgeBaseRetriever) else None
        ),
    )
