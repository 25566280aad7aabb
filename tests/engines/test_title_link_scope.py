"""The retrieval loop's title links stay inside the caller's collections (issue 31, item 3):
a retriever limited to `public` must not learn that a document titled "Ethan Hawke" exists in
`private`, so the run's events and result are the same whether that document exists or not.

Dense retrieval keeps the scores free of corpus statistics (BM25's document frequencies are
counted over every collection; see RELIABILITY.md), so the whole event stream can be compared."""

from __future__ import annotations

import asyncio

import pytest

from ragloop import (
    Document,
    EntityBridgeRefiner,
    KnowledgeBase,
    RetrievalLoop,
    RetrievalLoopConfig,
)
from ragloop.testing import HashEmbedder

QUESTION = "Where was the star of the film Sinister born?"
PUBLIC = [
    Document(
        text="Sinister is a 2012 horror film directed by Scott Derrickson. It stars Ethan Hawke "
        "as a true-crime writer.",
        source="sinister.md",
        title="Sinister",
    ),
    Document(
        text="Scott Derrickson is an American filmmaker, born in Denver, Colorado.",
        source="derrickson.md",
        title="Scott Derrickson",
    ),
]
PRIVATE = Document(
    text="Ethan Hawke is an American actor and novelist. He was born in Austin, Texas.",
    source="hawke.md",
    title="Ethan Hawke",
)


def make_kb(store: str, tmp_path, with_private: bool) -> KnowledgeBase:
    embedder = HashEmbedder(64)
    if store == "sqlite":
        kb = KnowledgeBase(tmp_path / f"kb-{with_private}.sqlite", embedder=embedder)
    else:
        kb = KnowledgeBase.in_memory(embedder=embedder)
    if with_private:  # ingested first: its chunks come first in the link order
        kb.add_documents([PRIVATE], collection="private")
    kb.add_documents(PUBLIC, collection="public")
    return kb


def timeless(value):
    """An event's data without what differs from run to run (ids, times)."""
    if isinstance(value, dict):
        return {
            k: timeless(v)
            for k, v in value.items()
            if k not in {"run_id", "timestamp"} and not k.endswith("_ms")
        }
    if isinstance(value, list):
        return [timeless(v) for v in value]
    return value


def observed(kb: KnowledgeBase, refiner) -> tuple[list, list]:
    loop = RetrievalLoop(
        kb.retriever(collection="public", mode="dense"),
        config=RetrievalLoopConfig(top_k=2, max_iterations=3),
        refiner=refiner,
    )

    async def run():
        return [event async for event in loop.astream(QUESTION)]

    events = [timeless(event.model_dump(mode="json")) for event in asyncio.run(run())]
    result = loop.run(QUESTION)
    trace = [(t.query, [(c.id, c.source, c.score) for c in t.chunks]) for t in result.trace]
    return events, [*trace, [(c.id, c.source) for c in result.chunks]]


@pytest.mark.parametrize("store", ["sqlite", "memory"])
@pytest.mark.parametrize("refiner", [EntityBridgeRefiner(), None], ids=["bridge", "links-only"])
def test_a_document_in_another_collection_changes_nothing(store, refiner, tmp_path):
    without = make_kb(store, tmp_path, with_private=False)
    with_it = make_kb(store, tmp_path, with_private=True)
    try:
        assert with_it.stats().documents == 3
        seen_without, seen_with = observed(without, refiner), observed(with_it, refiner)
        assert seen_with == seen_without
        assert "Ethan Hawke" not in str(seen_with)
        assert "hawke.md" not in str(seen_with)
    finally:
        without.close()
        with_it.close()


def test_the_bridge_still_follows_a_title_in_the_callers_collection(tmp_path):
    kb = make_kb("memory", tmp_path, with_private=True)
    try:
        events, _ = observed(kb, EntityBridgeRefiner())
        queries = [e["attributes"].get("queries") for e in events if e["kind"] == "reformulation"]
        assert ["Scott Derrickson star film born"] in queries
    finally:
        kb.close()
