"""Dropping an astream() after breaking out of `async for` cancels the run at once (issue 31,
item 15, the astream side), for all three engines: no search after the break and no task left
once the event loop has turned a few times; no garbage collection and no wall clock needed."""

from __future__ import annotations

import asyncio
import itertools

import pytest

from ragloop import (
    AgentLoop,
    EventKind,
    LoopConfig,
    RAGLoop,
    RetrievalLoop,
    RetrievalLoopConfig,
    listen,
)
from ragloop.testing import FunctionModel
from tests.helpers import EchoGenerator, ListReformulator, ScoreEvaluator, chunk, search_call, turn

Q = "When are refunds issued?"
TURNS = 20  # loop iterations the loop turns after the break (a run needs far more)


class CountingRetriever:
    """Counts its searches; each returns a new chunk (a run always has more to do) after a
    turn of the event loop."""

    def __init__(self) -> None:
        self.searches = 0
        self._ids = itertools.count()

    async def aretrieve(self, query: str, top_k: int = 5) -> list:
        self.searches += 1
        await asyncio.sleep(0)
        n = next(self._ids)
        return [chunk(f"refunds note {n} about {query}", 0.3, source=f"note-{n}.md")]


def rag(retriever):
    return RAGLoop(
        retriever,
        EchoGenerator(),
        ScoreEvaluator([0.1]),
        ListReformulator([[f"refund timing {i}"] for i in range(50)]),
        LoopConfig(max_iterations=50),
    )


def agent(retriever):
    counter = itertools.count()
    model = FunctionModel(lambda messages, tools: turn(search_call(f"refunds {next(counter)}")))
    return AgentLoop(model, retriever, max_iterations=50)


def retrieval(retriever):
    return RetrievalLoop(
        retriever, config=RetrievalLoopConfig(max_iterations=50, min_new_chunks_per_iter=0)
    )


def stream(engine, kind: str):
    if kind == "retrieval":
        return engine.astream(Q, refine_query=lambda original, history, i: [f"refunds {i}"])
    return engine.astream(Q)


async def break_after_first_search(kind: str) -> CountingRetriever:
    retriever = CountingRetriever()
    engine = {"rag": rag, "agent": agent, "retrieval": retrieval}[kind](retriever)
    async for event in stream(engine, kind):
        if event.kind is EventKind.SEARCH:
            break
    return retriever


def other_tasks() -> set[asyncio.Task]:
    return {t for t in asyncio.all_tasks() if t is not asyncio.current_task()}


async def turn_loop(times: int = TURNS) -> None:
    for _ in range(times):
        await asyncio.sleep(0)


@pytest.mark.parametrize("kind", ["rag", "agent", "retrieval"])
async def test_breaking_out_cancels_the_run_at_once(kind):
    finished = []
    with listen(lambda e: finished.append(e) if e.kind is EventKind.RUN_FINISHED else None):
        retriever = await break_after_first_search(kind)
        searched = retriever.searches
        await turn_loop()
        assert retriever.searches == searched  # no search after the break
        await turn_loop()
        assert retriever.searches == searched
        assert not other_tasks()
    assert [e.attributes["stop_reason"] for e in finished] == ["cancelled"]


@pytest.mark.parametrize("kind", ["rag", "agent", "retrieval"])
async def test_a_hundred_dropped_streams_leave_no_run_going(kind):
    retrievers = [await break_after_first_search(kind) for _ in range(100)]
    searched = [r.searches for r in retrievers]
    await turn_loop()
    assert [r.searches for r in retrievers] == searched
    assert not other_tasks()
