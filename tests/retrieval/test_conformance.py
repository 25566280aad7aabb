"""The store conformance suite, run against the SQLite, in-memory and PostgreSQL stores."""

from __future__ import annotations

import pytest

from ragloop.retrieval.conformance import KnowledgeBaseConformance
from ragloop.retrieval.knowledge_base import KnowledgeBase
from ragloop.retrieval.store_postgres import PostgresKnowledgeBase
from tests.conftest import schema_for


class TestSQLiteStore(KnowledgeBaseConformance):
    def make_kb(self, tmp_path, embedder):
        return KnowledgeBase(tmp_path / "kb.sqlite", embedder=embedder)


class TestInMemoryStore(KnowledgeBaseConformance):
    def make_kb(self, tmp_path, embedder):
        return KnowledgeBase.in_memory(embedder=embedder)


class TestPostgresStore(KnowledgeBaseConformance):
    @pytest.fixture(autouse=True)
    def _server(self, postgres_server):
        self.server = postgres_server

    def make_kb(self, tmp_path, embedder):
        schema = schema_for(str(tmp_path))
        return PostgresKnowledgeBase(self.server.dsn, schema=schema, embedder=embedder)
