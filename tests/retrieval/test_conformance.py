"""The store conformance suite, run against the SQLite store and the in-memory store."""

from __future__ import annotations

from ragloop.retrieval.conformance import KnowledgeBaseConformance
from ragloop.retrieval.knowledge_base import KnowledgeBase


class TestSQLiteStore(KnowledgeBaseConformance):
    def make_kb(self, tmp_path, embedder):
        return KnowledgeBase(tmp_path / "kb.sqlite", embedder=embedder)


class TestInMemoryStore(KnowledgeBaseConformance):
    def make_kb(self, tmp_path, embedder):
        return KnowledgeBase.in_memory(embedder=embedder)
