"""Ready-made configurations: a knowledge base built from a dataset's pool, one-shot retrieval
in each mode, and the loops over it. Retrieval calls are counted by the knowledge base itself
(``kb.searches``), which every retriever and router searches through. The answering loops
report how likely each answer is to be right and whether they stand by it
(:func:`answer_chance`), for the selective figures."""

from __future__ import annotations

import os
from typing import Any, cast

from ragloop.components.generators import strip_citations
from ragloop.core.calls import call, method
from ragloop.core.protocols import ChatModel, Embedder
from ragloop.core.records import Chunk, Message, ModelResponse, StopReason, Tool
from ragloop.core.records.rag import LoopIteration, LoopResult
from ragloop.engines.agent import AgentLoop
from ragloop.engines.rag import RAGLoop
from ragloop.engines.retrieval import RetrievalLoop
from ragloop.evaluation.datasets import EvalDataset, iter_documents
from ragloop.evaluation.harness import Configuration, Outcome, ranked_passages
from ragloop.kb.knowledge_base import Document, KnowledgeBase, SearchMode

DEPTH = 20  # passages every configuration returns (the largest k scored)


def build_knowledge_base(
    dataset: EvalDataset,
    path: str | os.PathLike[str] | None = None,
    *,
    embedder: Embedder | str | None = "default",
    titles: bool = True,
    **options: Any,
) -> KnowledgeBase:
    """A knowledge base holding the dataset's pooled passages, each chunk's source being its
    passage id. Ingestion is idempotent, so a cached file costs nothing the second time."""
    kb = (
        KnowledgeBase(path, embedder=embedder, **options)
        if path is not None
        else KnowledgeBase.in_memory(embedder=embedder, **options)
    )
    kb.add_documents(
        Document(text=text, source=pid, title=title)
        for pid, text, title in iter_documents(dataset, titles=titles)
    )
    return kb


class OneShot:
    """One retrieval of the question, in one mode: the baseline every loop must beat."""

    baseline = True

    def __init__(self, kb: KnowledgeBase, mode: SearchMode, *, name: str | None = None) -> None:
        self.kb = kb
        self.mode: SearchMode = mode
        self.name = name or f"one-shot {mode}"

    def run(self, question: str) -> Outcome:
        # passages may be split into several chunks: ask for enough to fill DEPTH passages
        chunks = self.kb.search(question, top_k=DEPTH * 2, mode=self.mode)
        return Outcome(ranked=ranked_passages(chunks)[:DEPTH], retrieval_calls=1)


class RetrievalLoopConfiguration:
    """``RetrievalLoop.offline(kb, **config)``: its ranked evidence, cut to the depth scored."""

    baseline = False

    def __init__(self, kb: KnowledgeBase, *, name: str = "RetrievalLoop", **config: Any) -> None:
        self.kb = kb
        self.name = name
        self.loop = RetrievalLoop.offline(kb, **config)

    def run(self, question: str) -> Outcome:
        before = self.kb.searches
        result = self.loop.run(question)
        return Outcome(
            ranked=ranked_passages(result.chunks)[:DEPTH],
            retrieval_calls=self.kb.searches - before,
            iterations=result.iterations,
        )


class CountingModel:
    """A :class:`~ragloop.ChatModel` that counts the calls made through it."""

    def __init__(self, model: ChatModel) -> None:
        self.model = model
        self.calls = 0

    def complete(self, messages: list[Message], tools: list[Tool] | None = None) -> ModelResponse:
        self.calls += 1
        return self.model.complete(messages, tools)

    async def acomplete(
        self, messages: list[Message], tools: list[Tool] | None = None
    ) -> ModelResponse:
        self.calls += 1
        response = await call(method(self.model, "complete", "model"), messages, tools)
        return cast(ModelResponse, response)


def _counted(config: dict[str, Any]) -> CountingModel | None:
    """Wrap ``config["model"]`` (when given) so that the loop's LLM calls are counted."""
    if config.get("model") is None:
        return None
    counter = CountingModel(config["model"])
    config["model"] = counter
    return counter


def answered_by(result: LoopResult) -> LoopIteration | None:
    """The iteration the run's answer came from: the converging one, else the best."""
    if not result.trace:
        return None
    if result.stop_reason is StopReason.CONVERGED:
        return result.trace[-1]
    return result.best_iteration


CONFIDENT = frozenset({StopReason.CONVERGED, StopReason.ANSWERED})


def answer_chance(result: Any) -> tuple[float | None, float | None, bool]:
    """A loop result's (probability, evaluator score, confident): the chance that its answer
    is right (the result's calibrated ``probability`` when it has one, else the score of the
    iteration the answer came from), the evaluator's own score of that answer, and whether the
    run stands by the answer (the result's ``confident``, else a converged or answered
    stop)."""
    answered = answered_by(result) if isinstance(result, LoopResult) else None
    score = answered.evaluation.score if answered is not None else None
    probability = getattr(result, "probability", None)
    confident = getattr(result, "confident", result.stop_reason in CONFIDENT)
    return (probability if probability is not None else score), score, bool(confident)


class RAGLoopConfiguration:
    """``RAGLoop.offline(kb, **config)`` (with ``model=``, the LLM components): its answer,
    and as evidence every chunk its iterations retrieved, each at the best rank it reached in
    any of them (ties: the iteration the answer came from first, then the others in order), as
    the AgentLoop ranks what its searches gathered. ``loop`` evaluates a loop built otherwise
    (its retrieval calls are still counted by ``kb``)."""

    baseline = False

    def __init__(
        self,
        kb: KnowledgeBase,
        *,
        name: str = "RAGLoop",
        loop: RAGLoop | None = None,
        **config: Any,
    ) -> None:
        self.kb = kb
        self.name = name
        self.model = _counted(config)
        self.loop = loop if loop is not None else RAGLoop.offline(kb, **config)

    def run(self, question: str) -> Outcome:
        before, calls = self.kb.searches, self.model.calls if self.model else 0
        result = self.loop.run(question)
        answered = answered_by(result)
        ordered = sorted(result.trace, key=lambda it: it is not answered)  # stable: then in order
        best: dict[str, tuple[tuple[int, int], Chunk]] = {}
        for turn, iteration in enumerate(ordered):
            for rank, chunk in enumerate(iteration.chunks):
                if chunk.id not in best or (rank, turn) < best[chunk.id][0]:
                    best[chunk.id] = ((rank, turn), chunk)
        evidence = [chunk for _, chunk in sorted(best.values(), key=lambda item: item[0])]
        usage = result.usage
        probability, score, confident = answer_chance(result)
        return Outcome(
            ranked=ranked_passages(evidence)[:DEPTH],
            answer=strip_citations(result.answer),
            retrieval_calls=self.kb.searches - before,
            llm_calls=(self.model.calls if self.model else 0) - calls,
            tokens=usage.total_tokens if usage else 0,
            iterations=result.iterations,
            probability=probability,
            confident=confident,
            score=score,
        )


class AgentLoopConfiguration:
    """``AgentLoop.offline(kb, **options)`` (with ``model=``, the model drives): its answer
    and its gathered chunks, best first."""

    baseline = False

    def __init__(self, kb: KnowledgeBase, *, name: str = "AgentLoop", **options: Any) -> None:
        self.kb = kb
        self.name = name
        self.model = _counted(options)
        self.loop = AgentLoop.offline(kb, **options)

    def run(self, question: str) -> Outcome:
        before, calls = self.kb.searches, self.model.calls if self.model else 0
        result = self.loop.run(question)
        usage = result.usage
        probability, _, confident = answer_chance(result)
        return Outcome(
            ranked=ranked_passages(result.chunks)[:DEPTH],
            answer=strip_citations(result.answer) if result.answer is not None else None,
            retrieval_calls=self.kb.searches - before,
            llm_calls=(self.model.calls if self.model else 0) - calls,
            tokens=usage.total_tokens if usage else 0,
            iterations=result.iterations,
            probability=probability,
            confident=confident and result.answer is not None,
        )


def evaluator_name(configuration: object) -> str:
    """What scores a configuration's answers, as a :class:`~ragloop.components.calibration.
    Calibration` records it: ``heuristic``, ``llm``, another evaluator's class name, or ``any``
    when the configuration does not say."""
    evaluator = getattr(getattr(configuration, "loop", None), "evaluator", None)
    if evaluator is None:
        return "any"
    name = type(evaluator).__name__
    return {"HeuristicEvaluator": "heuristic", "LLMEvaluator": "llm"}.get(name, name)


ENGINES = ("bm25", "dense", "hybrid", "retrieval", "rag", "agent")
LOOPS: dict[str, Any] = {
    "retrieval": RetrievalLoopConfiguration,
    "rag": RAGLoopConfiguration,
    "agent": AgentLoopConfiguration,
}


def make_configuration(engine: str, kb: KnowledgeBase, **config: Any) -> Configuration:
    """The configuration an engine name stands for (see :data:`ENGINES`); ``config`` goes to
    the loops."""
    if engine in ("bm25", "dense", "hybrid"):
        return OneShot(kb, engine)  # type: ignore[arg-type]
    if engine in LOOPS:
        return LOOPS[engine](kb, **config)  # type: ignore[no-any-return]
    raise ValueError(f"unknown engine {engine!r}; choose from {', '.join(ENGINES)}")
