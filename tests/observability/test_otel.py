"""OpenTelemetry spans of AgentLoop and RAGLoop, read back from the SDK's in-memory exporter."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from opentelemetry.trace import SpanKind, StatusCode

from ragloop import (
    AgentLoop,
    LLMEvaluator,
    LoopConfig,
    ModelResponse,
    RAGLoop,
    StopReason,
    ToolCall,
    Usage,
    listen,
    set_trace_content,
)
from ragloop.observability import otel
from ragloop.testing import InMemoryRetriever, ScriptedModel
from tests.helpers import (
    EchoGenerator,
    ListReformulator,
    TableRetriever,
    answer_call,
    chunk,
    raising,
    search_call,
    turn,
)

Q = "When are refunds issued?"
EVAL = '{"is_grounded": true, "is_complete": false, "score": 0.4, "reason": "vague"}'


def kb() -> InMemoryRetriever:
    return InMemoryRetriever({"returns.md": "Refunds are issued within 30 days of purchase."})


def run_agent(**options):
    controller = ScriptedModel(
        [
            turn(search_call("refunds"), ToolCall(name="nope")),
            turn(answer_call("Within 30 days.")),
        ],
        usage=Usage(input_tokens=10, output_tokens=2),
    )
    return AgentLoop(controller, kb(), **options).run(Q)


def named(spans, name):
    return [s for s in spans.get_finished_spans() if s.name == name]


def one(spans, name):
    [span] = named(spans, name)
    return span


def all_attribute_text(spans) -> str:
    parts = []
    for span in spans.get_finished_spans():
        parts += [str(v) for v in span.attributes.values()]
        parts += [str(v) for e in span.events for v in e.attributes.values()]
    return " ".join(parts)


def test_an_agent_run_is_one_span_with_chat_tool_and_retrieval_children(spans):
    result = run_agent()
    run = one(spans, "invoke_agent agent")
    assert run.kind == SpanKind.INTERNAL
    attrs = run.attributes
    assert attrs["gen_ai.operation.name"] == "invoke_agent"
    assert attrs["gen_ai.agent.name"] == "agent"
    assert attrs["openinference.span.kind"] == "AGENT"
    assert attrs["ragloop.run.id"] == result.run_id
    assert attrs["ragloop.stop_reason"] == "answered"
    assert attrs["ragloop.iterations"] == 2
    assert attrs["ragloop.chunks.count"] == 1
    assert attrs["ragloop.budget.tokens"] == 24
    assert [t["name"] for t in json.loads(attrs["gen_ai.tool.definitions"])] == [
        "search",
        "answer",
        "give_up",
    ]

    chats = named(spans, "chat scripted")
    assert len(chats) == 2
    for chat in chats:
        assert chat.kind == SpanKind.CLIENT
        assert chat.parent.span_id == run.context.span_id
        assert chat.attributes["gen_ai.operation.name"] == "chat"
        assert chat.attributes["gen_ai.request.model"] == "scripted"
        assert chat.attributes["gen_ai.provider.name"] == "unknown"
        assert chat.attributes["ragloop.llm.role"] == "controller"
        assert chat.attributes["gen_ai.usage.input_tokens"] == 10
        assert chat.attributes["gen_ai.usage.output_tokens"] == 2
        assert chat.attributes["openinference.span.kind"] == "LLM"

    tool = one(spans, "execute_tool search")  # the unknown tool never runs
    assert tool.parent.span_id == run.context.span_id
    assert tool.attributes["gen_ai.tool.name"] == "search"
    assert tool.attributes["gen_ai.tool.call.id"] == result.tool_history[0].call_id
    assert tool.attributes["openinference.span.kind"] == "TOOL"

    retrieval = one(spans, "retrieval")
    assert retrieval.parent.span_id == tool.context.span_id
    assert retrieval.attributes["gen_ai.operation.name"] == "retrieval"
    assert retrieval.attributes["gen_ai.retrieval.top_k"] == 5
    assert retrieval.attributes["ragloop.retrieval.result_count"] == 1
    documents = json.loads(retrieval.attributes["gen_ai.retrieval.documents"])
    assert [d["id"] for d in documents] == [result.chunks[0].id]

    events = [e.name for e in run.events]
    assert events == [
        "ragloop.run_started",
        "ragloop.tool_call",
        "ragloop.tool_call",
        "ragloop.iteration",
        "ragloop.tool_call",
        "ragloop.iteration",
        "ragloop.run_finished",
    ]


def test_content_stays_out_of_spans_by_default(spans):
    run_agent()
    text = all_attribute_text(spans)
    assert "refunds" not in text.lower()
    assert "30 days" not in text
    keys = {k for s in spans.get_finished_spans() for k in s.attributes}
    for key in (
        "gen_ai.input.messages",
        "gen_ai.output.messages",
        "gen_ai.retrieval.query.text",
        "gen_ai.tool.call.arguments",
        "gen_ai.tool.call.result",
    ):
        assert key not in keys


def test_content_is_recorded_when_enabled(spans):
    set_trace_content(True)
    run_agent()
    chat = named(spans, "chat scripted")[0]
    messages = json.loads(chat.attributes["gen_ai.input.messages"])
    assert messages[1] == {"role": "user", "parts": [{"type": "text", "content": Q}]}
    output = json.loads(chat.attributes["gen_ai.output.messages"])
    assert output[0]["parts"][0]["type"] == "tool_call"
    assert one(spans, "retrieval").attributes["gen_ai.retrieval.query.text"] == "refunds"
    tool = one(spans, "execute_tool search")
    assert json.loads(tool.attributes["gen_ai.tool.call.arguments"]) == {"query": "refunds"}
    assert "Refunds are issued" in tool.attributes["gen_ai.tool.call.result"]
    started = one(spans, "invoke_agent agent").events[0]
    assert started.attributes["question"] == Q


def test_the_environment_variable_enables_content_and_the_api_switch_wins(spans, monkeypatch):
    monkeypatch.setenv("RAGLOOP_TRACE_CONTENT", "1")
    run_agent()
    assert one(spans, "retrieval").attributes["gen_ai.retrieval.query.text"] == "refunds"
    spans.clear()
    set_trace_content(False)
    run_agent()
    assert "gen_ai.retrieval.query.text" not in one(spans, "retrieval").attributes
    with pytest.raises(TypeError):
        set_trace_content("yes")  # type: ignore[arg-type]


def test_chat_spans_name_the_model_and_provider_the_model_declares(spans):
    class Provided(ScriptedModel):
        model_name = "gpt-x"
        provider = "openai"

    controller = Provided([turn(answer_call("a"))])
    AgentLoop(controller, kb()).run(Q)
    chat = one(spans, "chat gpt-x")
    assert chat.attributes["gen_ai.provider.name"] == "openai"
    assert chat.attributes["gen_ai.request.model"] == "gpt-x"


def test_failures_mark_their_spans(spans):
    controller = ScriptedModel([turn(search_call("refunds")), RuntimeError("model down")])
    search = raising(OSError("index offline"))
    result = AgentLoop(controller, search).run(Q)
    assert result.stop_reason == StopReason.ERROR
    tool = one(spans, "execute_tool search")
    assert tool.status.status_code == StatusCode.ERROR
    failed_chat = named(spans, "chat scripted")[1]
    assert failed_chat.status.status_code == StatusCode.ERROR
    assert failed_chat.events[0].name == "exception"
    run = one(spans, "invoke_agent agent")
    assert run.status.status_code == StatusCode.ERROR
    assert run.attributes["ragloop.error"] == result.error


async def test_parallel_tool_spans_are_children_of_the_run(spans):
    controller = ScriptedModel([turn(search_call("a"), search_call("b")), turn(answer_call("x"))])
    await AgentLoop(controller, kb()).arun(Q)
    run = one(spans, "invoke_agent agent")
    tools = named(spans, "execute_tool search")
    assert len(tools) == 2
    assert {t.parent.span_id for t in tools} == {run.context.span_id}


def test_collection_scope_names_the_retrieval_data_source(spans):
    def search(query, *, limit, collection=None, collections=None):
        return []

    controller = ScriptedModel([turn(search_call("a")), turn(answer_call("x"))])
    AgentLoop(controller, search, collections="docs").run(Q)
    assert one(spans, "retrieval docs").attributes["gen_ai.data_source.id"] == "docs"


# -- RAGLoop -----------------------------------------------------------------------------------


def rag_loop(**config) -> RAGLoop:
    return RAGLoop(
        TableRetriever({Q: [chunk("refunds", 0.5)], "q2": [chunk("more", 0.4)]}),
        EchoGenerator(),
        LLMEvaluator(ScriptedModel([EVAL] * 3)),
        ListReformulator([["q2", "q3"]]),
        LoopConfig(max_iterations=2, **config),
    )


def test_rag_loop_run_span_with_retrieval_and_evaluator_chat_children(spans):
    result = rag_loop().run(Q)
    run = one(spans, "invoke_agent rag")
    assert run.attributes["openinference.span.kind"] == "CHAIN"
    assert run.attributes["gen_ai.agent.name"] == "rag"
    assert run.attributes["ragloop.stop_reason"] == "max_iterations"
    assert run.attributes["ragloop.iterations"] == result.iterations == 2
    assert run.attributes["ragloop.budget.iters"] == 2
    retrievals = named(spans, "retrieval")
    assert len(retrievals) == 3  # Q, then q2 and q3
    assert {r.parent.span_id for r in retrievals} == {run.context.span_id}
    chats = named(spans, "chat scripted")
    assert [c.attributes["ragloop.llm.role"] for c in chats] == ["evaluator", "evaluator"]
    assert [e.name for e in run.events].count("ragloop.iteration") == 2


def test_a_rag_loop_that_raises_records_the_exception_on_its_span(spans):
    loop = RAGLoop(
        TableRetriever({}),
        EchoGenerator(),
        LLMEvaluator(ScriptedModel([EVAL])),
        ListReformulator([["q2"]]),
        LoopConfig(),
    )
    loop.generator.generate = raising(ValueError("generator broke"))  # type: ignore[method-assign]
    with pytest.raises(ValueError, match="generator broke"):
        loop.run(Q)
    run = one(spans, "invoke_agent rag")
    assert run.status.status_code == StatusCode.ERROR
    assert any(e.name == "exception" for e in run.events)


def test_llm_components_outside_a_run_still_get_chat_spans(spans):
    model = ScriptedModel([ModelResponse(text=EVAL, usage=Usage(input_tokens=4))])
    LLMEvaluator(model).evaluate(Q, [], "answer")
    chat = one(spans, "chat scripted")
    assert chat.attributes["ragloop.llm.role"] == "evaluator"
    assert chat.parent is None
    assert "ragloop.run.id" not in chat.attributes


# -- without OpenTelemetry ---------------------------------------------------------------------


def test_without_the_api_no_span_is_made_and_events_still_flow(spans, monkeypatch):
    monkeypatch.setattr(otel, "_trace", None)
    events = []
    with listen(events.append):
        result = run_agent()
    assert result.stop_reason == StopReason.ANSWERED
    assert spans.get_finished_spans() == ()
    assert events[0].kind == "run_started"
    assert not otel.available()


def test_ragloop_imports_and_runs_when_opentelemetry_is_not_installed():
    script = textwrap.dedent(
        """
        import sys

        class NoOpenTelemetry:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] == "opentelemetry":
                    raise ModuleNotFoundError(f"No module named {name!r}")
                return None

        sys.meta_path.insert(0, NoOpenTelemetry())
        from ragloop import AgentLoop, ModelResponse, ToolCall
        from ragloop.observability import otel
        from ragloop.testing import InMemoryRetriever, ScriptedModel

        controller = ScriptedModel([
            ModelResponse(tool_calls=[ToolCall(name="search", arguments={"query": "refunds"})]),
            ModelResponse(tool_calls=[ToolCall(name="answer", arguments={"text": "30 days"})]),
        ])
        result = AgentLoop(controller, InMemoryRetriever(["Refunds take 30 days."])).run("q")
        print(otel.available(), "opentelemetry" in sys.modules, result.stop_reason.value)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False", "answered"]
