"""The store conformance suite, run against the SQLite, in-memory and PostgreSQL stores."""

from __future__ import annotations

import pytest

from ragloop.kb.knowledge_base import KnowledgeBase
from ragloop.kb.stores.postgres.store import PostgresKnowledgeBase
from ragloop.testing.conformance import KnowledgeBaseConformance


class TestSQLiteStore(KnowledgeBaseConformance):
    def make_kb(self, tmp_path, embedder):
        return KnowledgeBase(tmp_path / "kb.sqlite", embedder=embedder)


class TestInMemoryStore(KnowledgeBaseConformance):
    def make_kb(self, tmp_path, embedder):
        return KnowledgeBase.in_memory(embedder=embedder)


class TestPostgresStore(KnowledgeBaseConformance):
    @pytest.fixture(autouse=True)
    def _database(self, postgres_server, postgres_schema):
        self.dsn, self.schema = postgres_server.dsn, postgres_schema

    def make_kb(self, tmp_path, embedder):  # a schema of its own for each test
        return PostgresKnowledgeBase(self.dsn, schema=self.schema, embedder=embedder)
