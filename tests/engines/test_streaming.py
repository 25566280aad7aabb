"""astream(): every engine's run as its events, the same ones its trace records."""

from __future__ import annotations

import asyncio
import gc

import pytest

from ragloop import (
    AgentLoop,
    Document,
    EventKind,
    KnowledgeBase,
    LoopConfig,
    LoopEvent,
    RAGLoop,
    RetrievalLoop,
    StopReason,
    listen,
    set_trace_content,
)
from ragloop.observability.traces import TraceRecorder, TraceStore, trace_meta
from ragloop.testing import HashEmbedder, InMemoryRetriever, ScriptedModel
from tests.helpers import (
    EchoGenerator,
    ListReformulator,
    ScoreEvaluator,
    SlowAsyncRetriever,
    TableRetriever,
    answer_call,
    chunk,
    search_call,
    turn,
)

Q = "When are refunds issued?"


@pytest.fixture(autouse=True)
def _capture_off(monkeypatch):
    monkeypatch.delenv("RAGLOOP_TRACE_CONTENT", raising=False)
    set_trace_content(False)
    yield
    set_trace_content(None)


def rag_loop(scores=(0.3, 0.9), **config) -> RAGLoop:
    retriever = TableRetriever(
        {
            Q: [chunk("Refunds are issued within 30 days.", 0.8, "returns.md")],
            "refund timing": [chunk("Refunds take 5 working days to clear.", 0.6, "billing.md")],
        }
    )
    return RAGLoop(
        retriever,
        EchoGenerator(),
        ScoreEvaluator(list(scores)),
        ListReformulator([["refund timing"]]),
        LoopConfig(max_iterations=2, **config),
    )


async def read(stream) -> list[LoopEvent]:
    return [event async for event in stream]


async def test_rag_loop_streams_each_step_then_its_result():
    stream = rag_loop().astream(Q)
    events = await read(stream)
    assert [(e.kind.value, e.iteration) for e in events] == [
        ("run_started", None),
        ("search", 1),
        ("answer", 1),
        ("evaluation", 1),
        ("iteration", 1),
        ("reformulation", 1),
        ("search", 2),
        ("answer", 2),
        ("evaluation", 2),
        ("iteration", 2),
        ("run_finished", None),
    ]
    result = stream.result
    assert result.stop_reason is StopReason.CONVERGED
    assert {e.run_id for e in events} == {result.run_id}
    started, search, answer, evaluation, _, reformulation = events[:6]
    # the stream carries content even with capture off: it goes to whoever asked
    assert started.attributes["question"] == Q
    assert search.attributes["query"] == Q
    assert search.attributes["chunks"][0]["source"] == "returns.md"
    assert answer.attributes["text"] == result.trace[0].answer
    assert evaluation.attributes["score"] == 0.3
    assert evaluation.attributes["reason"] == "incomplete"
    assert reformulation.attributes["queries"] == ["refund timing"]
    assert reformulation.attributes["strategy"] == "expand"
    finished = events[-1]
    assert finished.attributes["stop_reason"] == "converged"
    assert finished.attributes["outcome"] == "success"
    assert finished.attributes["answer"] == result.answer
    assert finished.attributes["budget_used"]["iters"] == 2
    for event in events:  # serialisable, and back
        assert LoopEvent.model_validate_json(event.model_dump_json()) == event


async def test_listeners_get_the_same_events_without_content_when_capture_is_off():
    heard: list[LoopEvent] = []
    with listen(heard.append):
        streamed = await read(rag_loop().astream(Q))
    assert [(e.kind, e.timestamp) for e in heard] == [(e.kind, e.timestamp) for e in streamed]
    assert "question" not in heard[0].attributes
    assert "query" not in heard[1].attributes
    assert heard[1].attributes["chunks"] == streamed[1].attributes["chunks"]


async def test_the_stream_is_what_the_stored_trace_records(tmp_path):
    set_trace_content(True)
    store = TraceStore(tmp_path / "traces.sqlite")
    with TraceRecorder(store):
        stream = rag_loop().astream(Q)
        events = await read(stream)
    record = store.get(stream.result.run_id)
    assert record.events == events
    store.close()


async def test_agent_loop_streams_searches_tool_calls_and_the_answer():
    controller = ScriptedModel([turn(search_call("refunds")), turn(answer_call("30 days [1]"))])
    kb = InMemoryRetriever({"returns.md": "Refunds are issued within 30 days."})
    stream = AgentLoop(controller, kb).astream(Q)
    events = await read(stream)
    kinds = [e.kind for e in events]
    assert kinds[:3] == [EventKind.RUN_STARTED, EventKind.SEARCH, EventKind.TOOL_CALL]
    assert kinds[-2:] == [EventKind.ANSWER, EventKind.RUN_FINISHED]
    assert events[1].attributes["query"] == "refunds"
    assert events[-2].attributes["text"] == "30 days [1]"
    assert stream.result.stop_reason is StopReason.ANSWERED


async def test_retrieval_loop_streams_routes_hops_and_its_evidence():
    retriever = InMemoryRetriever(
        {"tent.md": "The Skylark tent weighs 2 kg.", "hire.md": "Tents can be hired."}
    )
    stream = RetrievalLoop(retriever).astream("tent weight", sub_queries=["hire tent"])
    events = await read(stream)
    searches = [e for e in events if e.kind is EventKind.SEARCH]
    assert [(e.iteration, e.attributes["query"]) for e in searches] == [
        (0, "tent weight"),
        (1, "hire tent"),
    ]
    assert all(e.attributes["route"] == "default" for e in searches)
    next_queries = next(e for e in events if e.kind is EventKind.REFORMULATION)
    assert next_queries.attributes == {
        "strategy": "sub_queries",
        "query_count": 1,
        "stop": False,
        "queries": ["hire tent"],
    }
    finished = events[-1]
    assert [c["id"] for c in finished.attributes["chunks"]] == [c.id for c in stream.result.chunks]


async def test_closing_the_stream_cancels_the_run_and_its_trace_is_stored(tmp_path):
    store = TraceStore(tmp_path / "traces.sqlite")
    slow = SlowAsyncRetriever(delay=30.0)
    loop = RAGLoop(slow, EchoGenerator(), ScoreEvaluator([0.1]), ListReformulator([["x"]]))
    with TraceRecorder(store) as recorder:
        stream = loop.astream(Q)
        first = await stream.__anext__()
        assert first.kind is EventKind.RUN_STARTED
        await asyncio.sleep(0.05)  # the run is waiting for the retriever
        assert slow.active == 1
        await stream.aclose()
    (record,) = recorder.records.values()
    assert record.id == first.run_id
    assert store.get(first.run_id).stop_reason == "cancelled"
    with pytest.raises(RuntimeError, match="has not finished"):
        _ = stream.result
    store.close()


async def test_cancelling_the_reader_cancels_the_run():
    slow = SlowAsyncRetriever(delay=30.0)
    loop = RAGLoop(slow, EchoGenerator(), ScoreEvaluator([0.1]), ListReformulator([["x"]]))
    finished: list[LoopEvent] = []

    async def reader() -> None:
        async for _ in loop.astream(Q):
            pass

    with listen(lambda e: finished.append(e) if e.kind is EventKind.RUN_FINISHED else None):
        task = asyncio.create_task(reader())
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert [e.attributes["stop_reason"] for e in finished] == ["cancelled"]
    assert StopReason.CANCELLED.outcome == "caller"


async def test_a_reader_that_breaks_out_cancels_the_run_once_the_stream_is_dropped():
    slow = SlowAsyncRetriever(delay=30.0)
    loop = RAGLoop(slow, EchoGenerator(), ScoreEvaluator([0.1]), ListReformulator([["x"]]))
    finished: list[LoopEvent] = []
    with listen(lambda e: finished.append(e) if e.kind is EventKind.RUN_FINISHED else None):
        async for _ in loop.astream(Q):
            break
        gc.collect()
        for _ in range(50):  # asyncio closes the dropped generator in a task of its own
            if finished:
                break
            await asyncio.sleep(0.02)
    assert [e.attributes["stop_reason"] for e in finished] == ["cancelled"]


async def test_an_exception_the_run_raises_is_raised_by_the_stream():
    loop = rag_loop(scores=())  # the evaluator has no score left to give: it raises
    stream = loop.astream(Q)
    with pytest.raises(Exception, match="ragloop: raised by the evaluator"):
        await read(stream)


async def test_concurrent_streams_keep_their_own_events():
    loop = rag_loop(scores=(0.9,) * 4)

    async def run(question: str) -> set[str]:
        stream = loop.astream(question)
        events = await read(stream)
        assert events[0].attributes["question"] == question
        return {e.run_id for e in events}

    first, second = await asyncio.gather(run(Q), run("refund timing"))
    assert len(first) == len(second) == 1
    assert first != second


async def test_nested_runs_stream_inside_the_outer_one():
    kb = KnowledgeBase.in_memory(embedder=HashEmbedder())
    kb.add_documents(
        [
            Document(source="hire.md", text="A tent costs 12 pounds a night to hire."),
            Document(source="skylark.md", text="The Skylark tent weighs 2 kg."),
        ]
    )
    events = await read(RAGLoop.offline(kb).astream("How much is tent hire?"))
    outer = events[0].run_id
    nested = [e for e in events if e.run_id != outer]
    assert nested
    assert nested[0].kind is EventKind.RUN_STARTED
    assert nested[0].engine == "retrieval"
    assert nested[0].attributes["ragloop.parent_run_id"] == outer
    assert events[-1].run_id == outer
    assert events[-1].kind is EventKind.RUN_FINISHED
    citations = events[-1].attributes["citations"]
    assert citations
    assert all(c["chunk_id"] for c in citations)


async def test_a_stream_runs_in_the_context_it_was_made_in(tmp_path):
    with TraceRecorder(meta={"kb": "x"}) as recorder:
        with trace_meta(key="alice"):
            stream = rag_loop().astream(Q)
        await read(stream)  # read outside the block: the run keeps the meta it was made with
        await read(rag_loop().astream(Q))
    metas = sorted((r.meta for r in recorder.records.values()), key=len)
    assert metas == [{"kb": "x"}, {"kb": "x", "key": "alice"}]
