"""Query vectors shared by every process of a PostgreSQL knowledge base (the store's embedding
cache), and kept in memory for a SQLite one (a search never writes to its file)."""

from __future__ import annotations

import psycopg

from ragloop import Document, KnowledgeBase
from ragloop.kb.stores.base import SharedQueryVectors
from ragloop.testing import HashEmbedder

DOCS = [
    Document(text="The Skylark 2 tent weighs 2.1 kg packed.", source="skylark.md"),
    Document(text="Refunds are issued within 30 days.", source="returns.md"),
]


class CountingEmbedder(HashEmbedder):
    """The hash embedder, counting the texts it embeds."""

    def __init__(self) -> None:
        super().__init__(64)
        self.embedded: list[str] = []

    def embed(self, texts: list[str]) -> list[list[float]]:
        self.embedded += texts
        return super().embed(texts)


def test_a_query_one_server_embedded_is_not_embedded_by_another(postgres_server, postgres_schema):
    from ragloop.kb.stores.postgres.store import PostgresKnowledgeBase

    first, second = CountingEmbedder(), CountingEmbedder()
    one = PostgresKnowledgeBase(postgres_server.dsn, schema=postgres_schema, embedder=first)
    other = PostgresKnowledgeBase(postgres_server.dsn, schema=postgres_schema, embedder=second)
    try:
        assert isinstance(one.store, SharedQueryVectors)
        one.add_documents(DOCS)
        first.embedded.clear()
        found = one.search("how heavy is the Skylark tent", mode="dense", top_k=1)
        assert first.embedded == ["how heavy is the Skylark tent"]
        again = other.search("How heavy is the  Skylark tent", mode="dense", top_k=1)
        assert second.embedded == []  # the same query, normalised, read from the database
        assert [c.id for c in again] == [c.id for c in found]
        assert again[0].score == found[0].score
        other.search("what about refunds", mode="hybrid", top_k=1)
        assert second.embedded == ["what about refunds"]  # a new query is embedded
        with psycopg.connect(postgres_server.dsn) as conn:
            keys = conn.execute(
                f"SELECT text_hash FROM {postgres_schema}.embeddings WHERE text_hash LIKE 'query:%'"
            ).fetchall()
        assert len(keys) == 2  # apart from the chunks' texts
    finally:
        one.close()
        other.close()


def test_a_sqlite_search_keeps_query_vectors_in_memory(tmp_path):
    path = tmp_path / "kb.sqlite"
    embedder = CountingEmbedder()
    with KnowledgeBase(path, embedder=embedder) as kb:
        kb.add_documents(DOCS)
    assert not isinstance(kb.store, SharedQueryVectors)
    before = {p.name: p.stat().st_size for p in tmp_path.iterdir()}
    with KnowledgeBase(path, embedder=embedder, create=False) as kb:
        embedder.embedded.clear()
        kb.search("how heavy is the Skylark tent", mode="dense")
        kb.search("how heavy is the Skylark tent", mode="dense")
    assert embedder.embedded == ["how heavy is the Skylark tent"]  # once, then from memory
    after = {p.name: p.stat().st_size for p in tmp_path.iterdir() if p.name in before}
    assert after == before
