"""The PostgreSQL store's cache of decoded postings (ragloop.kb.stores.postgres.postings_cache):
the same results as reading every block, used instead of the blocks while the knowledge base
does not change, emptied by any write of any process, bounded in bytes."""

from __future__ import annotations

import random

import pytest

from ragloop.kb.knowledge_base import Document
from ragloop.kb.stores.postgres.postings_cache import PostingsCache
from ragloop.kb.stores.postgres.store import PostgresKnowledgeBase
from tests.kb.test_postgres_store import sql

WORDS = (
    "alpine tent glacier lake ridge trail summit canyon river stove lantern compass ferry "
    "harbor island meadow forest bridge valley storm winter orchard mill quarry"
).split()
QUERIES = ["alpine tent", "glacier lake trail", "summit ridge storm", "ferry harbor island",
           "quiet orchard mill", "lantern"]  # fmt: skip


def corpus(seed: int = 5) -> dict[str, list[Document]]:
    rng = random.Random(seed)
    return {
        name: [
            Document(text=" ".join(rng.choices(WORDS, k=rng.randint(4, 30))), source=f"{name}-{i}")
            for i in range(60)
        ]
        for name in ("north", "south", "east")
    }


def open_kb(dsn, schema, **options) -> PostgresKnowledgeBase:
    return PostgresKnowledgeBase(dsn, schema=schema, embedder=None, link_titles=False, **options)


def ranked(kb, query, **scope) -> list[tuple[str, float]]:
    return [(c.id, c.score) for c in kb.search(query, mode="bm25", top_k=15, **scope)]


@pytest.fixture
def filled(postgres_server, postgres_schema):
    dsn = postgres_server.dsn
    kb = open_kb(dsn, postgres_schema)
    for name, documents in corpus().items():
        kb.add_documents(documents, collection=name)
    kb.close()
    return dsn, postgres_schema


def test_cached_postings_rank_as_the_blocks_do(filled):
    dsn, schema = filled
    plain = open_kb(dsn, schema, postings_cache_mb=0)
    cached = open_kb(dsn, schema)
    assert plain.store._postings_cache is None
    scopes = [{}, {"collection": "south"}, {"collection": ["north", "east"]},
              {"filters": {"source": ["east-3", "north-7", "south-9"]}}]  # fmt: skip
    for _ in range(2):  # the first round fills the cache (unscoped queries), the second reads it
        for query in QUERIES:
            for scope in scopes:
                assert ranked(cached, query, **scope) == ranked(plain, query, **scope), scope
    assert len(cached.store._postings_cache) > 0
    plain.close()
    cached.close()


def test_held_postings_are_read_from_the_cache_until_any_process_writes(filled):
    dsn, schema = filled
    kb = open_kb(dsn, schema)
    before = ranked(kb, "glacier lake")
    assert before
    # the blocks' entries emptied behind the store's back, with no write counted: the cache
    # answers (reading them would fail: their counts no longer match)
    sql(
        dsn,
        schema,
        "CREATE TABLE saved AS SELECT * FROM postings_blocks WHERE lexeme = 'glacier';"
        "UPDATE postings_blocks SET entries = ''::bytea WHERE lexeme = 'glacier'",
    )
    assert ranked(kb, "glacier lake") == before
    sql(
        dsn,
        schema,
        "UPDATE postings_blocks p SET entries = s.entries FROM saved s WHERE "
        "(p.lexeme, p.collection, p.segment) = (s.lexeme, s.collection, s.segment)",
    )
    # another process writes (another store on the same schema): every process reads again
    other = open_kb(dsn, schema)
    other.add_documents([Document(text="glacier glacier lake", source="new")], collection="north")
    assert kb.search("glacier lake", mode="bm25", top_k=1)[0].source == "new"
    kb.close()
    other.close()


def test_a_write_that_keeps_the_counts_still_empties_the_cache(filled):
    dsn, schema = filled
    kb = open_kb(dsn, schema)
    other = open_kb(dsn, schema)
    assert not kb.search("zeppelin", mode="bm25")
    ranked(kb, "alpine tent")
    old = other.store.documents("south")[0]
    words = len(corpus()["south"][0].text.split())
    # the same source, as many chunks and terms: the corpus totals do not change
    other.add_documents(
        [Document(text=" ".join(["zeppelin"] * words), source=old.source)], collection="south"
    )
    assert [c.source for c in kb.search("zeppelin", mode="bm25")] == [old.source]
    assert old.source not in {c.source for c in kb.search("alpine tent", mode="bm25", top_k=200)}
    kb.close()
    other.close()


def test_the_cache_keeps_within_its_bytes(filled):
    dsn, schema = filled
    plain = open_kb(dsn, schema, postings_cache_mb=0)
    kb = open_kb(dsn, schema)
    cache = kb.store._postings_cache
    cache.max_bytes = 1500  # a few lexemes' postings
    for query in QUERIES * 2:
        assert ranked(kb, query) == ranked(plain, query)
        assert cache.nbytes <= 1500
    assert 0 < len(cache) < len({w for q in QUERIES for w in q.split()})
    plain.close()
    kb.close()


def test_postings_of_an_earlier_state_never_replace_newer_ones():
    cache = PostingsCache(10_000)
    from ragloop.kb.stores.postgres import postings

    entry = postings.lexeme_postings(b"", [], [], [], 10.0)
    cache.put("tent", entry, writes=5)
    cache.put("lake", entry, writes=4)  # read before the fifth write: dropped
    assert cache.entries(["tent", "lake"]) == (5, {"tent": entry})
    cache.put("lake", entry, writes=6)  # a later state: the earlier one goes
    assert cache.entries(["tent", "lake"]) == (6, {"lake": entry})
