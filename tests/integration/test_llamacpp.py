"""The LLM path against a real model server: llama.cpp (``xllamacpp``) serving the packaged
Gemma 3 270M on 127.0.0.1, started once for the module.

The model is tiny and not instruction-tuned, so these tests assert what the loops guarantee
whatever a model says (bounded replies, prompts that fit, fallbacks, stop reasons), never the
quality of an answer. The server's context is 1024 tokens per request, small enough that the
prompts must be fitted, and every reply is capped at 40 tokens by the model, so the tier runs in
a few minutes on two cores.
"""

from __future__ import annotations

import pytest

from ragloop import (
    AgentLoop,
    ContextOverflowError,
    KnowledgeBase,
    LLMEvaluator,
    LLMGenerator,
    LLMReformulator,
    LLMUnderstander,
    LoopConfig,
    Message,
    RAGLoop,
    RetrievalLoop,
    RetrievalLoopConfig,
    StopReason,
)
from ragloop.core.limits import LLMCall
from ragloop.demo import demo_documents
from ragloop.offline import answered_retrieval_loop
from ragloop.providers import override_allow_model_requests
from ragloop.providers.llamacpp import LlamaCppServer
from ragloop.testing import InMemoryRetriever

pytestmark = pytest.mark.llamacpp

WINDOW = 1024
CAP = 40  # every reply's bound, set on the model
QUESTION = "How long do I have to return an item, and how long does standard delivery take?"
# llama.cpp constrains the controller's reply to one search call in the JSON-in-text protocol,
# as one would run a small local model as an agent
SEARCH_CALL = {
    "type": "object",
    "properties": {
        "tool_calls": {
            "type": "array",
            "minItems": 1,
            "maxItems": 1,
            "items": {
                "type": "object",
                "properties": {
                    "name": {"const": "search"},
                    "arguments": {
                        "type": "object",
                        "properties": {"query": {"type": "string", "minLength": 3}},
                        "required": ["query"],
                    },
                },
                "required": ["name", "arguments"],
            },
        }
    },
    "required": ["tool_calls"],
}


AGENT_PROMPT = """You answer questions about a shop's staff handbook by searching it. Search \
with the question's key words, for example:
{"tool_calls": [{"name": "search", "arguments": {"query": "return item standard delivery"}}]}"""


@pytest.fixture(scope="module")
def server():
    with override_allow_model_requests("loopback"), LlamaCppServer(context_window=WINDOW) as run:
        yield run


@pytest.fixture(autouse=True)
def _loopback_only():
    with override_allow_model_requests("loopback"):
        yield


@pytest.fixture
def model(server):
    return server.model(temperature=0, max_tokens=CAP)


@pytest.fixture(scope="module")
def kb():
    base = KnowledgeBase.in_memory(embedder=None)
    base.add_documents(demo_documents())
    return base


def assert_bounded(calls: list[LLMCall], *, cap: int = CAP) -> None:
    """Every call asked for a bounded reply, got one within it, said how it ended, and was
    sent a prompt that left room for its reply in the window."""
    assert calls
    for call in calls:
        assert call.max_tokens is not None
        assert call.max_tokens <= cap
        assert call.finish_reason in ("stop", "length"), call
        assert call.output_tokens is not None
        assert call.output_tokens <= call.max_tokens
        assert call.input_tokens is not None
        assert call.input_tokens + call.max_tokens <= WINDOW, call
        assert call.fit is not None
        assert call.fit.context_window == WINDOW  # read from the server


# -- the provider -------------------------------------------------------------------------------


def test_complete_and_stream_are_bounded_and_say_why_they_ended(model):
    assert model.discover_context_window() == WINDOW
    ask = [Message(role="user", content="Name three rivers of Europe.")]
    reply = model.complete(ask, max_tokens=8)
    assert reply.finish_reason == "length"
    assert reply.truncated
    assert reply.usage is not None
    assert reply.usage.output_tokens == 8
    assert reply.usage.input_tokens > 5
    stream = model.stream(ask, max_tokens=6)
    text = "".join(stream)
    assert text
    assert stream.finish_reason == "length"
    assert stream.usage is not None
    assert stream.usage.output_tokens == 6


async def test_a_prompt_beyond_the_window_is_a_context_overflow_error_naming_the_sizes(model):
    too_long = [Message(role="user", content="word " * 1500)]
    with pytest.raises(ContextOverflowError) as raised:
        await model.acomplete(too_long)
    assert raised.value.status == 400
    assert raised.value.context_window == WINDOW
    assert raised.value.prompt_tokens is not None
    assert raised.value.prompt_tokens > WINDOW
    assert f"exceeds the context window of {WINDOW} tokens" in str(raised.value)
    with pytest.raises(ContextOverflowError):
        list(model.stream(too_long))


# -- RAGLoop ------------------------------------------------------------------------------------


def test_rag_loop_runs_to_its_end_within_its_bounds(kb, model):
    loop = RAGLoop.offline(kb, model=model, max_iterations=2, top_k=20)
    result = loop.run(QUESTION)

    assert result.stop_reason in (StopReason.CONVERGED, StopReason.MAX_ITERATIONS)
    assert 1 <= result.iterations <= 2
    first = result.trace[0]
    assert [c.role for c in first.llm_calls] == ["generator", "evaluator"]
    calls = [c for it in result.trace for c in it.llm_calls]
    assert_bounded(calls)
    # twenty chunks do not fit a 1024-token window: the lowest-ranked were left out
    generator = first.llm_calls[0]
    assert generator.fit is not None
    assert generator.fit.chunks_dropped > 0
    assert generator.fit.chunks_kept + generator.fit.chunks_dropped == len(first.chunks)
    for it in result.trace:  # a verdict the tiny model could not write falls back to 0.0
        assert it.evaluation.parse_failed or 0.0 <= it.evaluation.score <= 1.0
        if it.evaluation.parse_failed:
            assert it.evaluation.score == 0.0
    if result.iterations == 2:
        second = result.trace[1]
        assert [c.role for c in second.llm_calls] == ["reformulator", "generator", "evaluator"]
        assert second.queries  # the LLM's queries, or the heuristic fallback's


def test_a_question_too_long_for_the_window_stops_the_loop_through_on_error(model):
    huge = "Which of these words matters most? " + "word " * 1500
    retriever = InMemoryRetriever(["Words matter.", "A word is a unit of language."])
    components = (LLMGenerator(model), LLMEvaluator(model), LLMReformulator(model))
    stopped = RAGLoop(retriever, *components, LoopConfig(on_error="stop")).run(huge)
    assert stopped.stop_reason is StopReason.ERROR
    assert stopped.error is not None
    assert "generator failed in iteration 1: ContextOverflowError" in stopped.error
    with pytest.raises(ContextOverflowError):
        RAGLoop(retriever, *components).run(huge)


# -- AgentLoop ----------------------------------------------------------------------------------


def test_agent_loop_searches_then_falls_back_to_synthesis_within_its_bounds(kb, server):
    controller = server.model(
        temperature=0,
        max_tokens=CAP,
        supports_tools=False,
        extra_body={"json_schema": SEARCH_CALL},
    )
    answerer = server.model(temperature=0, max_tokens=24)
    loop = AgentLoop(
        controller,
        kb.retriever(),
        answerer=answerer,
        max_iterations=2,
        system_prompt=AGENT_PROMPT,  # the default one alone nearly fills a 1024-token window
    )
    result = loop.run(QUESTION)

    assert result.stop_reason is StopReason.MAX_ITERATIONS
    assert [c.role for c in result.llm_calls] == ["controller", "controller", "synthesizer"]
    assert_bounded(result.llm_calls)
    assert result.llm_calls[2].max_tokens == 24
    searches = [e for e in result.tool_history if e.tool == "search"]
    assert searches
    assert searches[0].returned_chunk_ids  # the model's query found chunks
    assert result.tool_history[-1].tool == "synthesis"
    assert result.answer
    # the second turn's conversation holds the first search's five chunks, fitted to the window
    second = result.llm_calls[1].fit
    assert second is not None
    assert second.history_dropped or second.chunks_cut or second.prompt_tokens <= WINDOW - CAP


# -- RetrievalLoop ------------------------------------------------------------------------------


def test_retrieval_loop_with_an_llm_understander_and_the_answered_engine(kb, model):
    loop = RetrievalLoop(
        kb.retriever(),
        understander=LLMUnderstander(model, max_tokens=24),
        config=RetrievalLoopConfig(max_iterations=2),
    )
    found = loop.run(QUESTION)
    assert found.stop_reason in (
        StopReason.MAX_ITERATIONS,
        StopReason.DIMINISHING_RETURNS,
        StopReason.CALLER_STOP,
    )
    assert found.chunks
    assert {c.role for c in found.llm_calls} == {"understander"}
    assert_bounded(found.llm_calls, cap=24)

    answered = answered_retrieval_loop(kb, model=model).run(QUESTION)
    assert answered.iterations == 1
    assert answered.stop_reason in (StopReason.CONVERGED, StopReason.MAX_ITERATIONS)
    assert [c.role for c in answered.trace[0].llm_calls] == ["generator", "evaluator"]
    assert_bounded(answered.trace[0].llm_calls)
