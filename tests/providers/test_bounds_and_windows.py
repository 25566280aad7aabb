"""Reply bounds, finish reasons, context-overflow errors and context-window discovery, against
a loopback server speaking each provider's wire format."""

from __future__ import annotations

import pytest

from ragloop import AnthropicModel, ContextOverflowError, Message, ModelHTTPError
from ragloop import OpenAICompatibleModel as OpenAI
from ragloop.core.limits import reply_bound
from tests.providers.server import Reply
from tests.providers.wire import anthropic_message, anthropic_stream, openai_completion

ASK = [Message(role="user", content="Capital?")]
LLAMA_OVERFLOW = {
    "error": {
        "code": 400,
        "message": "request (5775 tokens) exceeds the available context size (4096 tokens), "
        "try increasing it",
        "type": "exceed_context_size_error",
        "n_prompt_tokens": 5775,
        "n_ctx": 4096,
    }
}


def cut(completion: dict) -> dict:
    completion["choices"][0]["finish_reason"] = "length"
    return completion


@pytest.fixture
def local(server):
    with OpenAI("gemma", base_url=f"{server.url}/v1") as model:
        yield model


def test_every_request_is_bounded_by_the_smaller_of_the_call_and_the_model(server):
    server.reply(*(Reply(json=openai_completion("x")) for _ in range(4)))
    model = OpenAI("gemma", base_url=f"{server.url}/v1", max_tokens=300)
    model.complete(ASK)
    model.complete(ASK, max_tokens=50)
    with reply_bound(120):
        model.complete(ASK)
    with reply_bound(900):  # no call goes above the model's own bound
        model.complete(ASK)
    assert [r.body["max_tokens"] for r in server.received] == [300, 50, 120, 300]


def test_a_model_without_a_bound_sends_none_unless_the_call_asks(server):
    server.reply(Reply(json=openai_completion("x")), Reply(json=openai_completion("y")))
    model = OpenAI("gemma", base_url=f"{server.url}/v1", max_tokens=None)
    model.complete(ASK)
    model.complete(ASK, max_tokens=7)
    assert "max_tokens" not in server.received[0].body
    assert server.received[1].body["max_tokens"] == 7


def test_bounds_are_checked():
    with pytest.raises(ValueError, match="max_tokens"):
        OpenAI("gemma", base_url="http://127.0.0.1:1/v1", max_tokens=0)
    with pytest.raises(ValueError, match="context_window"):
        OpenAI("gemma", base_url="http://127.0.0.1:1/v1", context_window=-5)


def test_the_finish_reason_is_read_from_replies_and_streams(server, local):
    server.reply(Reply(json=cut(openai_completion("Par"))))
    reply = local.complete(ASK)
    assert (reply.finish_reason, reply.truncated) == ("length", True)
    server.reply(Reply(json=openai_completion("Paris.")))
    assert local.complete(ASK).finish_reason == "stop"
    from tests.providers.wire import openai_stream

    server.reply(openai_stream(["Pa", "ris"], usage=(4, 2)))
    stream = local.stream(ASK)
    assert stream.finish_reason is None  # not before it ends
    assert "".join(stream) == "Paris"
    assert stream.finish_reason == "stop"
    assert stream.usage is not None
    assert stream.usage.output_tokens == 2


def test_a_cut_reply_under_the_text_tool_protocol_is_read_as_far_as_it_goes(server):
    from ragloop import Tool

    model = OpenAI("gemma", base_url=f"{server.url}/v1", supports_tools=False)
    text = '{"tool_calls": [{"name": "search", "arguments": {"query": "refund pol'
    server.reply(Reply(json=cut(openai_completion(text))))
    search = Tool(name="search", description="search", parameters={"type": "object"})
    reply = model.complete(ASK, [search])
    assert reply.truncated
    assert [(c.name, c.arguments) for c in reply.tool_calls] == [
        ("search", {"query": "refund pol"})
    ]


async def test_anthropic_sends_the_bound_and_reads_max_tokens_as_length(server):
    model = AnthropicModel("claude-sonnet-4-5", base_url=server.url, api_key="k", max_tokens=500)
    message = anthropic_message("Par")
    message["stop_reason"] = "max_tokens"
    server.reply(Reply(json=message), anthropic_stream(["Pa", "ris"]))
    with reply_bound(64):
        reply = await model.acomplete(ASK)
    assert reply.finish_reason == "length"
    assert server.received[0].body["max_tokens"] == 64
    stream = model.astream(ASK)
    assert [piece async for piece in stream] == ["Pa", "ris"]
    assert stream.finish_reason == "stop"  # end_turn
    assert model.context_window == 200_000


@pytest.mark.parametrize(
    ("body", "prompt", "window"),
    [
        (LLAMA_OVERFLOW, 5775, 4096),
        (
            {
                "error": {
                    "message": "This model's maximum context length is 8192 tokens. However, "
                    "your messages resulted in 9000 tokens. Please reduce the length.",
                    "type": "invalid_request_error",
                    "code": "context_length_exceeded",
                }
            },
            9000,
            8192,
        ),
        (
            {
                "object": "error",
                "message": "This model's maximum context length is 2048 tokens. However, you "
                "requested 3000 tokens (2000 in the messages, 1000 in the completion).",
            },
            2000,
            2048,
        ),
        (
            {
                "type": "error",
                "error": {
                    "type": "invalid_request_error",
                    "message": "prompt is too long: 201234 tokens > 200000 maximum",
                },
            },
            201234,
            200000,
        ),
    ],
)
def test_context_overflow_errors_are_recognised_with_their_sizes(
    server, local, body, prompt, window
):
    server.reply(Reply(400, json=body))
    with pytest.raises(ContextOverflowError) as raised:
        local.complete(ASK)
    assert (raised.value.prompt_tokens, raised.value.context_window) == (prompt, window)
    assert isinstance(raised.value, ModelHTTPError)
    assert f"a prompt of {prompt} tokens exceeds the context window of {window}" in str(
        raised.value
    )
    assert len(server.received) == 1  # a 400 is not retried
    assert local.context_window == window  # and the window is remembered


def test_other_client_errors_stay_what_they_were(server, local):
    server.reply(Reply(400, json={"error": {"message": "bad temperature"}}))
    with pytest.raises(ModelHTTPError) as raised:
        local.complete(ASK)
    assert not isinstance(raised.value, ContextOverflowError)


def test_a_stream_refused_for_its_length_raises_the_same(server, local):
    server.reply(Reply(400, json=LLAMA_OVERFLOW))
    with pytest.raises(ContextOverflowError):
        list(local.stream(ASK))


def test_the_window_is_read_from_llama_cpp_props_once(server, local):
    server.pages["/props"] = Reply(json={"default_generation_settings": {"n_ctx": 2048}})
    assert local.discover_context_window() == 2048
    assert local.discover_context_window() == 2048
    assert server.gets == ["/props"]


async def test_the_window_is_read_from_models_metadata(server):
    server.pages["/v1/models"] = Reply(
        json={
            "object": "list",
            "data": [{"id": "other", "max_model_len": 1}, {"id": "qwen", "max_model_len": 32768}],
        }
    )
    model = OpenAI("qwen", base_url=f"{server.url}/v1")
    assert await model.adiscover_context_window() == 32768
    assert server.gets == ["/props", "/v1/models"]


def test_a_server_that_says_nothing_is_asked_once_and_a_configured_window_never(server):
    model = OpenAI("m", base_url=f"{server.url}/v1")
    assert model.discover_context_window() is None
    assert model.discover_context_window() is None
    assert server.gets == ["/props", "/v1/models"]
    configured = OpenAI("m", base_url=f"{server.url}/v1", context_window=8000)
    assert configured.discover_context_window() == 8000
    assert server.gets == ["/props", "/v1/models"]
