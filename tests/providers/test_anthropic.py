"""AnthropicModel against a loopback server speaking /v1/messages."""

from __future__ import annotations

import json

import pytest

from ragloop import AnthropicModel, ChatModel, Message, ModelError, Tool, ToolCall, Usage
from ragloop.core.budget import BudgetTracker
from tests.providers.server import Reply
from tests.providers.wire import anthropic_error, anthropic_message, anthropic_stream

SEARCH = Tool(
    name="search",
    description="Search the knowledge base.",
    parameters={"type": "object", "properties": {"query": {"type": "string"}}},
)


@pytest.fixture
def model(server):
    with AnthropicModel("claude-sonnet-4-5", base_url=server.url, api_key="sk-ant-test") as chat:
        yield chat


def test_complete_sends_system_apart_and_reads_text_and_usage(server, model):
    server.reply(Reply(json=anthropic_message("Paris.")))
    response = model.complete(
        [
            Message(role="system", content="Be brief."),
            Message(role="system", content="Answer in English."),
            Message(role="user", content="Capital of France?"),
        ]
    )
    assert response.text == "Paris."
    assert response.usage == Usage(
        input_tokens=2095, output_tokens=503, cost_usd=(2095 * 3 + 503 * 15) / 1e6
    )
    [request] = server.received
    assert request.path == "/v1/messages"
    assert request.headers["x-api-key"] == "sk-ant-test"
    assert request.headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in request.headers
    assert request.body == {
        "model": "claude-sonnet-4-5",
        "max_tokens": 4096,
        "system": "Be brief.\n\nAnswer in English.",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Capital of France?"}]}],
    }
    assert isinstance(model, ChatModel)
    assert (model.model_name, model.provider) == ("claude-sonnet-4-5", "anthropic")


async def test_acomplete(server, model):
    server.reply(Reply(json=anthropic_message("Paris.")))
    assert (await model.acomplete([Message(role="user", content="Capital?")])).text == "Paris."


def test_prompt_cache_tokens_count_as_input_at_the_cache_prices(server, model):
    usage = {
        "input_tokens": 100,
        "output_tokens": 10,
        "cache_creation_input_tokens": 1000,
        "cache_read_input_tokens": 5000,
    }
    server.reply(Reply(json=anthropic_message("ok", usage=usage)))
    result = model.complete([Message(role="user", content="hi")]).usage
    assert result is not None
    assert (result.input_tokens, result.output_tokens) == (6100, 10)
    expected = (100 * 3 + 10 * 15 + 1000 * 3.75 + 5000 * 0.30) / 1e6
    assert result.cost_usd == pytest.approx(expected)


def test_tool_use_blocks_out_and_tool_result_blocks_in(server, model):
    server.reply(
        Reply(
            json=anthropic_message(
                "Let me look.",
                tool_uses=[
                    ("toolu_01", "search", {"query": "refunds"}),
                    ("toolu_02", "search", {"query": "billing"}),
                ],
            )
        )
    )
    earlier = [
        ToolCall(id="toolu_a", name="search", arguments={"query": "a"}),
        ToolCall(id="toolu_b", name="search", arguments={"query": "b"}),
    ]
    response = model.complete(
        [
            Message(role="user", content="Refunds and billing?"),
            Message(role="assistant", content="Searching.", tool_calls=earlier),
            Message(role="tool", content="result a", tool_call_id="toolu_a"),
            Message(role="tool", content="result b", tool_call_id="toolu_b"),
            Message(role="user", content="And more?"),
        ],
        tools=[SEARCH],
    )
    assert response.text == "Let me look."
    assert response.tool_calls == [
        ToolCall(id="toolu_01", name="search", arguments={"query": "refunds"}),
        ToolCall(id="toolu_02", name="search", arguments={"query": "billing"}),
    ]
    body = server.received[0].body
    assert body["tools"] == [
        {
            "name": "search",
            "description": "Search the knowledge base.",
            "input_schema": SEARCH.parameters,
        }
    ]
    assert body["messages"][1:] == [
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Searching."},
                {"type": "tool_use", "id": "toolu_a", "name": "search", "input": {"query": "a"}},
                {"type": "tool_use", "id": "toolu_b", "name": "search", "input": {"query": "b"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_a", "content": "result a"},
                {"type": "tool_result", "tool_use_id": "toolu_b", "content": "result b"},
                {"type": "text", "text": "And more?"},
            ],
        },
    ]


def test_stream_yields_text_deltas_and_charges_the_usage(server, model):
    server.reply(anthropic_stream(["Pa", "ris", "."], input_tokens=25, output_tokens=15))
    tracker = BudgetTracker()
    with tracker.active():
        pieces = list(model.stream([Message(role="user", content="Capital?")]))
    assert pieces == ["Pa", "ris", "."]
    assert tracker.usage == Usage(
        input_tokens=25, output_tokens=15, cost_usd=(25 * 3 + 15 * 15) / 1e6
    )
    assert server.received[0].body["stream"] is True


async def test_astream(server, model):
    server.reply(anthropic_stream(["Hel", "lo"]))
    stream = model.astream([Message(role="user", content="hi")])
    assert [piece async for piece in stream] == ["Hel", "lo"]


def test_an_error_event_in_a_stream_raises(server, model):
    error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    server.reply(Reply(events=[("error", json.dumps(error))]))
    with pytest.raises(ModelError, match="Overloaded"):
        list(model.stream([Message(role="user", content="hi")]))


def test_overloaded_529_is_retried(server, model, waits):
    server.reply(
        anthropic_error(529, "overloaded_error", "Overloaded"),
        Reply(json=anthropic_message("ok")),
    )
    assert model.complete([Message(role="user", content="hi")]).text == "ok"
    assert len(waits) == 1


def test_a_body_that_is_not_a_message_is_malformed(server, model):
    server.reply(Reply(json={"type": "message", "content": "just a string"}))
    with pytest.raises(ModelError, match="not an Anthropic message"):
        model.complete([Message(role="user", content="hi")])


def test_a_missing_usage_gives_none(server, model):
    body = anthropic_message("ok")
    del body["usage"]
    server.reply(Reply(json=body))
    assert model.complete([Message(role="user", content="hi")]).usage is None


def test_options_are_sent(server):
    server.reply(Reply(json=anthropic_message("ok")))
    model = AnthropicModel(
        "claude-haiku-4-5",
        base_url=server.url,
        temperature=0.2,
        max_tokens=100,
        extra_body={"top_k": 5},
    )
    model.complete([Message(role="user", content="hi")])
    body = server.received[0].body
    assert (body["temperature"], body["max_tokens"], body["top_k"]) == (0.2, 100, 5)
    model.close()
