"""Ready-made configurations: a knowledge base built from a dataset's pool, one-shot retrieval
in each mode, and the loops over it. Retrieval calls are counted by the knowledge base itself
(``kb.searches``), which every retriever and router searches through."""

from __future__ import annotations

import os
from typing import Any

from ragloop.core.protocols import Embedder
from ragloop.evaluation.datasets import EvalDataset, iter_documents
from ragloop.evaluation.harness import Outcome, ranked_passages
from ragloop.retrieval.knowledge_base import Document, KnowledgeBase, SearchMode

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
        from ragloop.engines.retrieval import RetrievalLoop

        self.kb = kb
        self.name = name
        self.loop = RetrievalLoop.offline(kb, **config)

    def run(self, question: str) -> Outcome:
        before = self.kb.searches
        result = self.loop.run(question)
        return Outcome(
            ranked=ranked_passages(result.chunks)[:DEPTH],
            retrieval_calls=self.kb.searches - before,
            iterations=len(result.iterations),
        )


ENGINES = ("bm25", "dense", "hybrid", "retrieval")


def make_configuration(engine: str, kb: KnowledgeBase, **config: Any) -> OneShot | Any:
    """The configuration an engine name stands for (see :data:`ENGINES`); ``config`` goes to
    the loops."""
    if engine in ("bm25", "dense", "hybrid"):
        return OneShot(kb, engine)  # type: ignore[arg-type]
    if engine == "retrieval":
        return RetrievalLoopConfiguration(kb, **config)
    raise ValueError(f"unknown engine {engine!r}; choose from {', '.join(ENGINES)}")
