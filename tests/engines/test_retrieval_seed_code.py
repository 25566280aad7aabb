"""Seed 004's own code runs on RetrievalLoop unchanged (issue 18, items 2 and 3): the history a
refiner and a stop callback see carries each iteration's chunks and decision, and an
understander may return any object with the documented fields."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import pytest

from ragloop import (
    Chunk,
    ComponentError,
    Document,
    KnowledgeBase,
    QueryShape,
    RetrievalLoop,
    RetrievalLoopConfig,
    RetrievalRouter,
    StopReason,
    UnderstoodQueryLike,
)
from ragloop.testing import HashEmbedder
from tests.helpers import TableRetriever

FIRST = Chunk(
    content="Reranking reorders retrieved chunks.",
    source="rerank.md",
    score=0.8,
    metadata={"title": "Reranking"},
)
SECOND = Chunk(content="Cross-encoders score query and chunk together.", source="ce.md", score=0.6)


# Seed 004's refiner, verbatim (docs/agent-loop.md of rag-retrieval, "Caller-driven refinement").
async def refiner(original: str, acc, iter_idx):
    last_chunks = acc[-1].chunks if acc else []
    if not last_chunks:
        return None  # → StopReason.caller_stop
    return f"more details about {last_chunks[0].chunk_id}"


def test_seed_004s_refiner_example_runs_unchanged():
    table = {"explain reranking": [FIRST], f"more details about {FIRST.id}": [SECOND]}
    loop = RetrievalLoop(
        TableRetriever(table), config=RetrievalLoopConfig(min_new_chunks_per_iter=0)
    )
    result = loop.run("explain reranking", refine_query=refiner)
    assert [it.query for it in result.trace] == [
        "explain reranking",
        f"more details about {FIRST.id}",
        f"more details about {SECOND.id}",
    ]
    assert result.stop_reason == StopReason.CALLER_STOP  # the third search found nothing
    first = result.trace[0].chunks[0]
    assert (first.text, first.source, first.metadata, first.score) == (
        FIRST.content,
        "rerank.md",
        {"title": "Reranking"},
        0.8,
    )


def test_should_continue_sees_each_iterations_chunks_and_decision():
    seen = []

    def should_continue(history):
        last = history[-1]
        seen.append(([c.chunk_id for c in last.chunks], last.decision.shape, last.decision.reason))
        return len(history) < 2

    table = {"explain reranking": [FIRST, SECOND]}
    loop = RetrievalLoop(TableRetriever(table), config=RetrievalLoopConfig(max_iterations=5))
    result = loop.run("explain reranking", should_continue=should_continue)
    assert result.stop_reason == StopReason.CALLER_STOP
    assert seen[0][:2] == ([FIRST.id, SECOND.id], QueryShape.HYBRID)
    assert "retriever searches by default" in seen[0][2]


def test_the_decision_says_how_the_route_was_chosen():
    kb = KnowledgeBase.in_memory(embedder=HashEmbedder(64))
    kb.add_documents([Document(title="E1234", source="errors.md", text="Error E1234: bad config.")])
    loop = RetrievalLoop(
        kb.retriever(),
        router=RetrievalRouter(kb),
        understander=ShapeUnderstander("keyword"),
        config=RetrievalLoopConfig(min_new_chunks_per_iter=0, max_iterations=2),
    )
    first, second = loop.run("error E1234").trace
    assert first.decision.shape == QueryShape.KEYWORD
    assert first.decision.reason == "shape=keyword (stub); the router picked bm25"
    assert "held from iteration 0 (sticky)" in second.decision.reason
    kb.close()


# -- understanders returning their own objects (seed 004's UnderstoodQueryLike) --------------


class ForeignShape(enum.Enum):  # another package's enum, as rag-query's QueryShape would be
    KEYWORD = "KEYWORD"
    SEMANTIC = "SEMANTIC"


@dataclass
class Understood:  # a dataclass-shaped stub, as seed 004's tests use
    rewritten: str
    shape: object
    sub_queries: list[str] = field(default_factory=list)


class ShapeUnderstander:
    def __init__(self, shape: object, sub_queries: list[str] | None = None) -> None:
        self.shape = shape
        self.sub_queries = sub_queries or []

    def understand(self, query: str) -> Understood:
        stub = Understood(f"{query} rewritten", self.shape, self.sub_queries)
        stub.reason = "stub"  # type: ignore[attr-defined]
        return stub


@pytest.mark.parametrize(
    ("shape", "expected"),
    [
        (ForeignShape.KEYWORD, QueryShape.KEYWORD),
        ("semantic", QueryShape.SEMANTIC),
        ("Hybrid", QueryShape.HYBRID),
        (QueryShape.KEYWORD, QueryShape.KEYWORD),
    ],
)
def test_an_understander_may_return_any_object_with_the_fields(shape, expected):
    retriever = TableRetriever({"q rewritten": [FIRST]})
    loop = RetrievalLoop(
        retriever,
        understander=ShapeUnderstander(shape),
        config=RetrievalLoopConfig(max_iterations=1),
    )
    result = loop.run("q")
    assert retriever.calls == [("q rewritten", 10)]
    assert result.trace[0].decision.shape == expected
    assert isinstance(Understood("x", "keyword"), UnderstoodQueryLike)


def test_sub_queries_and_mappings_are_read_too():
    retriever = TableRetriever({"a": [FIRST], "b": [SECOND]})
    parts = RetrievalLoop(
        retriever,
        understander=ShapeUnderstander("keyword", ["a", "b"]),
        config=RetrievalLoopConfig(max_iterations=1),
    )
    assert [c.id for c in parts.run("a and b").chunks] == [FIRST.id, SECOND.id]

    class MappingUnderstander:
        def understand(self, query):
            return {"rewritten": "a", "shape": "keyword"}

    mapped = RetrievalLoop(
        retriever, understander=MappingUnderstander(), config=RetrievalLoopConfig(max_iterations=1)
    )
    assert mapped.run("q").chunks == [FIRST]


def test_an_unusable_understanding_is_a_component_error_naming_the_field():
    loop = RetrievalLoop(TableRetriever(), understander=ShapeUnderstander("sideways"))
    with pytest.raises(ComponentError, match="shape"):
        loop.run("q")
