"""Ready-made configurations: a knowledge base built from a dataset's pool, one-shot retrieval
in each mode, and counting wrappers that measure what a loop spends."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from typing import Any

from ragloop.core.protocols import Embedder
from ragloop.core.records import Chunk
from ragloop.evaluation.datasets import EvalDataset, iter_documents
from ragloop.evaluation.harness import Outcome, ranked_passages
from ragloop.retrieval.knowledge_base import (
    Document,
    KnowledgeBase,
    KnowledgeBaseRetriever,
    SearchMode,
)

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


class CountingRetriever:
    """A knowledge-base retriever that counts every search made through it (thread-safe)."""

    def __init__(self, inner: KnowledgeBaseRetriever) -> None:
        self.inner = inner
        self.kb = inner.kb
        self.mode = inner.mode
        self.calls = 0
        self._lock = threading.Lock()

    def _count(self) -> None:
        with self._lock:
            self.calls += 1

    def retrieve(self, query: str, top_k: int = 5) -> list[Chunk]:
        self._count()
        return self.inner.retrieve(query, top_k)

    async def aretrieve(self, query: str, top_k: int = 5) -> list[Chunk]:
        self._count()
        return await self.inner.aretrieve(query, top_k)

    def search(
        self,
        query: str,
        *,
        limit: int = 5,
        collection: str | None = None,
        collections: Sequence[str] | None = None,
    ) -> list[Chunk]:
        self._count()
        return self.inner.search(query, limit=limit, collection=collection, collections=collections)


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
