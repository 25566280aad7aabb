"""The event stream: listeners, the ragloop logger, JSON lines, content capture."""

from __future__ import annotations

import io
import json
import logging
import sys

import pytest

from ragloop import (
    AgentLoop,
    EventKind,
    LoopConfig,
    LoopEvent,
    RAGLoop,
    StopReason,
    listen,
    set_trace_content,
)
from ragloop.observability import JsonFormatter, install_json_logging
from ragloop.testing import InMemoryRetriever, ScriptedModel
from tests.helpers import (
    EchoGenerator,
    ListReformulator,
    ScoreEvaluator,
    TableRetriever,
    answer_call,
    chunk,
    search_call,
    turn,
)

Q = "When are refunds issued?"


def run_agent():
    controller = ScriptedModel([turn(search_call("refunds")), turn(answer_call("30 days"))])
    kb = InMemoryRetriever({"returns.md": "Refunds are issued within 30 days."})
    return AgentLoop(controller, kb).run(Q)


def test_a_listener_sees_every_event_of_a_run_in_order():
    events: list[LoopEvent] = []
    with listen(events.append):
        result = run_agent()
    assert [(e.kind, e.iteration) for e in events] == [
        (EventKind.RUN_STARTED, None),
        (EventKind.SEARCH, 0),
        (EventKind.TOOL_CALL, 0),
        (EventKind.ITERATION, 0),
        (EventKind.TOOL_CALL, 1),
        (EventKind.ITERATION, 1),
        (EventKind.ANSWER, 1),
        (EventKind.RUN_FINISHED, None),
    ]
    assert {e.run_id for e in events} == {result.run_id}
    assert {e.engine for e in events} == {"agent"}
    searched, search, _, answer, turn_event, answered, finished = events[1:]
    assert searched.attributes["chunks"] == search.attributes["chunks"]
    assert answered.attributes == {"citations": [], "final": True}  # content capture is off
    assert answer.attributes["tool"] == "answer"
    assert search.attributes == {
        "tool": "search",
        "call_id": result.tool_history[0].call_id,
        "returned_count": 1,
        "history_size": 1,
        "failed": False,
        "chunks": [
            {
                "id": result.chunks[0].id,
                "source": "returns.md",
                "title": None,
                "score": round(result.chunks[0].score, 6),
            }
        ],
    }
    assert turn_event.attributes["tool_calls"] == ["answer"]
    assert finished.attributes["stop_reason"] == "answered"
    assert finished.attributes["iterations"] == 2
    assert finished.attributes["budget_used"]["iters"] == 2
    assert LoopEvent.model_validate_json(finished.model_dump_json()) == finished


def test_closing_a_listener_stops_its_events():
    events: list[LoopEvent] = []
    handle = listen(events.append)
    run_agent()
    handle.close()
    handle.close()  # closing twice is harmless
    count = len(events)
    run_agent()
    assert len(events) == count > 0
    with pytest.raises(TypeError):
        listen("not callable")  # type: ignore[arg-type]


def test_a_failing_listener_is_logged_and_does_not_break_the_run(caplog):
    def broken(event):
        raise RuntimeError("listener bug")

    seen = []
    with caplog.at_level(logging.WARNING, logger="ragloop"), listen(broken), listen(seen.append):
        result = run_agent()
    assert result.stop_reason == StopReason.ANSWERED
    assert len(seen) == 8  # later listeners still get every event
    assert "listener" in caplog.text
    assert "listener bug" in caplog.text


def test_content_joins_events_only_when_enabled():
    events: list[LoopEvent] = []
    with listen(events.append):
        run_agent()
    assert "question" not in events[0].attributes
    assert "query" not in events[1].attributes
    assert "args" not in events[2].attributes
    assert "text" not in events[-2].attributes
    assert "answer" not in events[-1].attributes
    events.clear()
    set_trace_content(True)
    with listen(events.append):
        run_agent()
    assert events[0].attributes["question"] == Q
    assert events[1].attributes["query"] == "refunds"
    assert events[2].attributes["args"] == {"query": "refunds"}
    assert events[2].attributes["summary"].startswith("Found 1 chunks.")
    assert events[-2].attributes["text"] == "30 days"
    assert events[-1].attributes["answer"] == "30 days"


def test_each_event_is_one_structured_record_on_the_ragloop_logger(caplog):
    with caplog.at_level(logging.INFO, logger="ragloop"):
        result = run_agent()
    records = [r for r in caplog.records if hasattr(r, "ragloop_event")]
    assert [r.ragloop_event["kind"] for r in records] == [
        "run_started",
        "tool_call",
        "iteration",
        "tool_call",
        "iteration",
        "run_finished",
    ]
    assert records[1].getMessage().startswith(f"agent tool_call run={result.run_id} iteration=0")
    assert records[1].ragloop_event["attributes"]["tool"] == "search"


def test_json_logging_writes_one_object_per_event():
    stream = io.StringIO()
    logger = logging.getLogger("ragloop")
    level = logger.level
    handler = install_json_logging(stream)
    try:
        result = run_agent()
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert lines[0]["kind"] == "run_started"
    assert len(lines) == 6
    assert {line["run_id"] for line in lines} == {result.run_id}
    assert lines[-1]["attributes"]["stop_reason"] == "answered"
    assert lines[0]["logger"] == "ragloop"
    assert lines[0]["level"] == "INFO"


def test_json_formatter_handles_plain_records_and_exceptions():
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.LogRecord(
            "ragloop", logging.ERROR, __file__, 1, "bad %s", ("x",), sys.exc_info()
        )
    data = json.loads(JsonFormatter().format(record))
    assert data["message"] == "bad x"
    assert "ValueError: boom" in data["exception"]
    assert "kind" not in data


def test_rag_loop_emits_an_event_per_iteration():
    loop = RAGLoop(
        TableRetriever({Q: [chunk("refunds")]}),
        EchoGenerator(),
        ScoreEvaluator([0.2, 0.9]),
        ListReformulator([["q2"]]),
        LoopConfig(max_iterations=3),
    )
    events: list[LoopEvent] = []
    with listen(events.append):
        result = loop.run(Q)
    iterations = [e for e in events if e.kind == EventKind.ITERATION]
    assert [e.iteration for e in iterations] == [1, 2]  # RAGLoop's own 1-based numbering
    assert [e.attributes["score"] for e in iterations] == [0.2, 0.9]
    assert iterations[1].attributes["strategy"] == "expand"
    assert events[0].engine == "rag"
    assert events[-1].attributes["stop_reason"] == result.stop_reason == "converged"
