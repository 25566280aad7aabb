"""A streamed run whose model streams: the answer arrives as answer_delta events."""

from __future__ import annotations

import json

import pytest

from ragloop import (
    EvaluationResult,
    EventKind,
    LLMGenerator,
    LoopConfig,
    OpenAICompatibleModel,
    RAGLoop,
    set_trace_content,
)
from ragloop.observability.llm import JsonStringField
from ragloop.observability.traces import TraceRecorder
from tests.helpers import ListReformulator, TableRetriever, chunk
from tests.providers.server import Reply
from tests.providers.wire import openai_completion, openai_stream

Q = "When are refunds issued?"
REPLY = '{"answer": "Refunds are issued within 30 days [1].", "confidence": 0.9}'


class Converged:
    def evaluate(self, query, chunks, answer):
        return EvaluationResult(is_grounded=True, is_complete=True, score=1.0, reason="ok")


@pytest.fixture
def loop(server):
    model = OpenAICompatibleModel("gpt-4o-mini", base_url=f"{server.url}/v1", api_key="sk-test")
    retriever = TableRetriever({Q: [chunk("Refunds are issued within 30 days.", 0.8, "r.md")]})
    yield RAGLoop(
        retriever, LLMGenerator(model), Converged(), ListReformulator([["x"]]), LoopConfig()
    )
    model.close()


async def test_a_streamed_run_sends_the_answer_text_as_it_is_written(server, loop):
    pieces = [REPLY[i : i + 7] for i in range(0, len(REPLY), 7)]
    server.reply(openai_stream(pieces, usage=(20, 9)))
    set_trace_content(False)
    with TraceRecorder() as recorder:
        stream = loop.astream(Q)
        events = [event async for event in stream]
    set_trace_content(None)
    deltas = [e for e in events if e.kind is EventKind.ANSWER_DELTA]
    assert len(deltas) > 3
    assert "".join(e.attributes["delta"] for e in deltas) == (
        "Refunds are issued within 30 days [1]."
    )
    assert {e.attributes["role"] for e in deltas} == {"generator"}
    answer = next(e for e in events if e.kind is EventKind.ANSWER)
    assert answer.attributes["text"].startswith("Refunds are issued within 30 days [1].")
    assert answer.attributes["citations"][0]["source"] == "r.md"
    assert stream.result.usage.output_tokens == 9  # the stream's usage is charged to the run
    assert server.received[0].body["stream"] is True
    # a stored trace keeps the whole answer, not its pieces
    (record,) = recorder.records.values()
    assert not [e for e in record.events if e.kind is EventKind.ANSWER_DELTA]


async def test_a_streamed_answer_is_bounded_and_recorded_and_read_as_far_as_it_goes(server, loop):
    cut = REPLY[: REPLY.index(" 30 days")]  # the server stopped at the reply bound
    server.reply(openai_stream([cut[i : i + 7] for i in range(0, len(cut), 7)], (20, 6), "length"))
    stream = loop.astream(Q)
    assert [e async for e in stream]
    assert server.received[0].body["max_tokens"] == 512  # the generator's bound
    (call,) = stream.result.llm_calls
    assert (call.role, call.max_tokens, call.finish_reason) == ("generator", 512, "length")
    assert (call.input_tokens, call.output_tokens) == (20, 6)
    assert stream.result.answer.startswith("Refunds are issued within")
    assert "answer" not in stream.result.answer  # the cut JSON was read, not shown whole


async def test_a_run_nobody_streams_asks_for_the_whole_reply(server, loop):
    server.reply(Reply(json=openai_completion(REPLY)))
    result = await loop.arun(Q)
    assert result.answer.startswith("Refunds are issued within 30 days [1].")
    assert "stream" not in server.received[0].body or not server.received[0].body["stream"]


@pytest.mark.parametrize("size", [1, 2, 5, 100])
def test_the_answer_field_is_read_from_json_pieces_of_any_size(size):
    reply = json.dumps({"confidence": 0.5, "answer": 'a "quoted" word\nand \\ é ✓'})
    field = JsonStringField("answer")
    text = "".join(field.feed(reply[i : i + size]) for i in range(0, len(reply), size))
    assert text == 'a "quoted" word\nand \\ é ✓'


def test_a_reply_that_is_not_json_passes_as_it_comes():
    field = JsonStringField("answer")
    assert [field.feed(p) for p in ["  Ref", "unds."]] == ["  Ref", "unds."]
