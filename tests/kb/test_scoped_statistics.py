"""BM25 statistics of a collection scope (issue 58, item 2), where a store keeps them: the
SQLite store's saved index carries what a scoped search weighs postings from (an index saved by
an earlier ragloop is built again, quietly), and the PostgreSQL store's counters per collection
are filled from the chunks when an older knowledge base is opened. The behaviour itself, every
store alike, is the conformance suite's (test_scoped_scores_tell_nothing_of_other_collections)."""

from __future__ import annotations

import logging
import os

import pytest

from ragloop.kb.index import saved_arrays
from ragloop.kb.knowledge_base import Document, KnowledgeBase
from ragloop.kb.stores.postgres.store import PostgresKnowledgeBase
from tests.kb.test_postgres_store import counters_match_the_chunks, sql

PUBLIC = [
    Document(text="A film critic finds a box of home movies.", source="sinister.md"),
    Document(text="Sinister is a 2012 supernatural horror film.", source="horror.md"),
    Document(text="The film festival opens on Friday.", source="festival.md"),
]
SECRET = [
    Document(text="Acme plans: the Acme film launch.", source="plans.md"),
    Document(text="Acme budget for the spring, film rights included.", source="budget.md"),
]
QUERY = "Acme Sinister film"


def scored(kb: KnowledgeBase, collection: str | None = "public") -> list[tuple[str, float]]:
    return [(c.id, c.score) for c in kb.search(QUERY, mode="bm25", collection=collection)]


def test_a_keyword_index_saved_before_scoped_statistics_is_built_again_quietly(tmp_path, caplog):
    path = tmp_path / "kb.sqlite"
    with KnowledgeBase(path, embedder=None) as kb:
        kb.add_documents(PUBLIC, collection="public")
        kb.add_documents(SECRET, collection="secret")
        expected = scored(kb)
    (file,) = tmp_path.glob("kb.sqlite-keyword-*.arrays")
    arrays, info = saved_arrays.load(file)
    older = {name: a.copy() for name, a in arrays.items() if name not in ("tfs", "lengths")}
    os.remove(file)
    assert saved_arrays.save(file, older, info)  # the arrays an earlier ragloop saved
    caplog.set_level(logging.WARNING, logger="ragloop")
    with KnowledgeBase(path, embedder=None) as kb:
        assert scored(kb) == expected
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert {"tfs", "lengths"} <= set(saved_arrays.load(file)[0])  # saved whole again


def test_collection_counters_are_filled_when_an_older_knowledge_base_opens(
    postgres_server, postgres_schema
):
    dsn = postgres_server.dsn
    kb = PostgresKnowledgeBase(dsn, schema=postgres_schema, embedder=None, link_titles=False)
    kb.add_documents(PUBLIC, collection="public")
    kb.add_documents(SECRET, collection="secret")
    expected = scored(kb)
    kb.close()
    # the layout before migration 6: no counters per collection
    sql(
        dsn,
        postgres_schema,
        "DROP TABLE collection_counters; DELETE FROM _ragloop_migrations WHERE version = 6",
    )
    kb = PostgresKnowledgeBase(dsn, schema=postgres_schema, embedder=None, link_titles=False)
    assert counters_match_the_chunks(dsn, postgres_schema)
    assert scored(kb) == expected
    kb.add_documents([Document(text="Acme Acme Acme.", source="more.md")], collection="secret")
    assert scored(kb) == expected
    assert counters_match_the_chunks(dsn, postgres_schema)
    kb.close()


@pytest.mark.parametrize("store", ["sqlite", "memory"])
def test_a_filtered_search_leaves_its_scope_whole_for_the_next(tmp_path, store):
    """A store keeps each scope's chunks and statistics for its next searches: a metadata
    filter narrows one search's results, never what the scope holds for the next."""
    kb = (
        KnowledgeBase(tmp_path / "kb.sqlite", embedder=None)
        if store == "sqlite"
        else KnowledgeBase.in_memory(embedder=None)
    )
    kb.add_documents(PUBLIC, collection="public")
    kb.add_documents(SECRET, collection="secret")
    expected = scored(kb)
    filtered = kb.search(QUERY, mode="bm25", collection="public", filters={"source": "horror.md"})
    assert [c.source for c in filtered] == ["horror.md"]
    assert [s for c, s in expected if c == filtered[0].id] == [filtered[0].score]
    assert scored(kb) == expected
    assert len(expected) == 3
    kb.close()
