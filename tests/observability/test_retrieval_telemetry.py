"""RetrievalLoop telemetry: the run span with seed 004's attributes, retrieval and chat child
spans, an iteration event (and JSON log line) per iteration, content off by default."""

from __future__ import annotations

import io
import json
import logging

import pytest
from opentelemetry.trace import SpanKind

from ragloop import (
    Budget,
    Document,
    EventKind,
    ExactEmbeddingCache,
    KnowledgeBase,
    LLMUnderstander,
    RetrievalLoop,
    RetrievalLoopConfig,
    RetrievalRouter,
    listen,
    set_trace_content,
)
from ragloop.observability import install_json_logging
from ragloop.testing import HashEmbedder, ScriptedModel

Q = "Who directed the film Sinister?"


@pytest.fixture(scope="module")
def kb():
    base = KnowledgeBase.in_memory(embedder=HashEmbedder(64))
    base.add_documents(
        [
            Document(text="Sinister is a horror film by Scott Derrickson.", source="s.md"),
            Document(text="Ethan Hawke was born in Austin, Texas.", source="h.md"),
        ]
    )
    yield base
    base.close()


def loop_for(kb, **components) -> RetrievalLoop:
    return RetrievalLoop(
        kb.retriever(),
        config=RetrievalLoopConfig(max_iterations=3, min_new_chunks_per_iter=0),
        router=RetrievalRouter(kb),
        embedding_cache=ExactEmbeddingCache(),
        **components,
    )


def run(kb, **components):
    return loop_for(kb, **components).run(Q, sub_queries=["Sinister", Q])


def named(spans, name):
    return [s for s in spans.get_finished_spans() if s.name == name]


def test_the_run_span_carries_seed_004s_attributes(spans, kb):
    result = run(kb)
    [span] = named(spans, "invoke_agent retrieval")
    attrs = span.attributes
    assert attrs["gen_ai.agent.name"] == "retrieval"
    assert attrs["openinference.span.kind"] == "CHAIN"
    assert attrs["ragloop.run.id"] == result.run_id
    assert attrs["ragloop.max_iterations"] == 3
    assert attrs["ragloop.routing.allow_route_switch"] is False
    assert attrs["ragloop.iterations"] == 3
    assert attrs["ragloop.stop_reason"] == "max_iterations"
    assert attrs["ragloop.budget.tokens"] == 0
    assert attrs["ragloop.budget.iters"] == 3
    assert attrs["ragloop.budget.wall_ms"] == result.budget_used.wall_ms  # the elapsed time
    assert attrs["ragloop.cache.embedding.hits"] == 1  # the question, asked again
    assert attrs["ragloop.cache.embedding.misses"] == 2
    assert attrs["ragloop.routing.plan_reuse_rate"] == result.plan_reuse_rate
    assert attrs["ragloop.routing.sticky_route_rate"] == 1.0
    assert attrs["ragloop.chunks.count"] == len(result.chunks) == 2
    assert [e.name for e in span.events] == [
        "ragloop.run_started",
        "ragloop.iteration",
        "ragloop.iteration",
        "ragloop.iteration",
        "ragloop.run_finished",
    ]
    assert span.events[1].attributes["route"] == "hybrid"


def test_every_search_is_a_retrieval_child_span(spans, kb):
    result = run(kb)
    [parent] = named(spans, "invoke_agent retrieval")
    retrievals = named(spans, "retrieval")
    assert len(retrievals) == 3
    for span in retrievals:
        assert span.kind == SpanKind.INTERNAL
        assert span.parent.span_id == parent.context.span_id
        assert span.attributes["ragloop.retrieval.route"] == "hybrid"
        assert span.attributes["gen_ai.retrieval.top_k"] == 10
        assert span.attributes["ragloop.run.id"] == result.run_id
        documents = json.loads(span.attributes["gen_ai.retrieval.documents"])
        assert {d["id"] for d in documents} <= {c.id for c in result.chunks}


def test_a_model_understander_makes_chat_spans(spans, kb):
    reply = '{"rewritten": "Sinister director", "shape": "keyword"}'
    model = ScriptedModel([reply] * 3, name="scripted")
    run(kb, understander=LLMUnderstander(model))
    chats = named(spans, "chat scripted")
    assert len(chats) == 3
    assert {c.attributes["ragloop.llm.role"] for c in chats} == {"understander"}
    assert [s.attributes["ragloop.retrieval.route"] for s in named(spans, "retrieval")] == [
        "bm25"
    ] * 3


def test_content_stays_out_unless_enabled(spans, kb):
    run(kb)
    text = " ".join(
        str(v)
        for s in spans.get_finished_spans()
        for v in [*s.attributes.values(), *(v for e in s.events for v in e.attributes.values())]
    )
    assert "Sinister" not in text
    assert "Derrickson" not in text
    spans.clear()
    set_trace_content(True)
    run(kb)
    queries = [s.attributes["gen_ai.retrieval.query.text"] for s in named(spans, "retrieval")]
    assert queries == [Q, "Sinister", Q]
    started = named(spans, "invoke_agent retrieval")[0].events[0]
    assert started.attributes["question"] == Q


def test_one_event_and_one_json_log_line_per_iteration(kb):
    events = []
    stream = io.StringIO()
    handler = install_json_logging(stream)
    try:
        with listen(events.append):
            result = loop_for(kb).run(Q, budget=Budget(max_iter=2))
    finally:
        logging.getLogger("ragloop").removeHandler(handler)
        logging.getLogger("ragloop").setLevel(logging.NOTSET)
    iterations = [e for e in events if e.kind == EventKind.ITERATION]
    assert [e.iteration for e in iterations] == [0, 1]
    assert {e.engine for e in events} == {"retrieval"}
    assert {e.run_id for e in events} == {result.run_id}
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    logged = [line for line in lines if line.get("kind") == "iteration"]
    assert len(logged) == 2
    first = logged[0]["attributes"]
    assert first == {
        "query_chars": len(Q),
        "query_count": 1,
        "shape": "hybrid",
        "route": "hybrid",
        "results_n": 2,
        "new_chunks_n": 2,
        "best_score": result.trace[0].best_score,
        "plan_reused": False,
        "sticky": False,
        "cache_hits": 0,
        "cache_misses": 1,
        "elapsed_ms": result.trace[0].elapsed_ms,
    }
    assert lines[-1]["kind"] == "run_finished"
    assert lines[-1]["attributes"]["stop_reason"] == "budget_iter"
