"""OpenAICompatibleModel against a loopback server speaking /v1/chat/completions."""

from __future__ import annotations

import json

import pytest

from ragloop import (
    ChatModel,
    Message,
    ModelError,
    ModelHTTPError,
    OpenAICompatibleModel,
    Tool,
    ToolCall,
    Usage,
)
from ragloop.core.budget import BudgetTracker
from tests.providers.server import Reply
from tests.providers.wire import openai_completion, openai_error, openai_stream

SEARCH = Tool(
    name="search",
    description="Search the knowledge base.",
    parameters={
        "type": "object",
        "properties": {"query": {"type": "string"}},
        "required": ["query"],
    },
)
ASK = [Message(role="system", content="Be brief."), Message(role="user", content="Capital?")]


@pytest.fixture
def model(server):
    with OpenAICompatibleModel(
        "gpt-4o-mini", base_url=f"{server.url}/v1", api_key="sk-test"
    ) as chat:
        yield chat


def test_complete_sends_the_documented_request_and_reads_text_usage_and_cost(server, model):
    server.reply(Reply(json=openai_completion("Paris.", usage=(12, 3))))
    response = model.complete(ASK)

    assert response.text == "Paris."
    assert response.tool_calls == []
    assert response.usage == Usage(
        input_tokens=12, output_tokens=3, cost_usd=(12 * 0.15 + 3 * 0.60) / 1e6
    )
    [request] = server.received
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == "Bearer sk-test"
    assert request.headers["content-type"] == "application/json"
    assert request.body == {
        "model": "gpt-4o-mini",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Capital?"},
        ],
        "max_tokens": 4096,  # no reply is unbounded
    }


async def test_acomplete_is_the_same_call(server, model):
    server.reply(Reply(json=openai_completion("Paris.", usage=(12, 3))))
    response = await model.acomplete(ASK)
    assert response.text == "Paris."
    assert response.usage == Usage(
        input_tokens=12, output_tokens=3, cost_usd=(12 * 0.15 + 3 * 0.60) / 1e6
    )
    assert server.received[0].body["messages"][1] == {"role": "user", "content": "Capital?"}


def test_it_is_a_chat_model_labelled_for_traces(server, model):
    assert isinstance(model, ChatModel)
    assert (model.model_name, model.provider) == ("gpt-4o-mini", "openai-compatible")
    assert "sk-test" not in repr(model)


def test_tools_go_out_as_functions_and_tool_calls_come_back_parsed_tolerantly(server, model):
    server.reply(
        Reply(
            json=openai_completion(
                None,
                tool_calls=[
                    ("call_1", "search", '{"query": "refund policy"}'),
                    ("call_2", "search", "{'query': 'billing', }"),  # Python-ish, trailing comma
                ],
            )
        )
    )
    response = model.complete(ASK, tools=[SEARCH])

    assert response.text == ""
    assert response.tool_calls == [
        ToolCall(id="call_1", name="search", arguments={"query": "refund policy"}),
        ToolCall(id="call_2", name="search", arguments={"query": "billing"}),
    ]
    assert server.received[0].body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "search",
                "description": "Search the knowledge base.",
                "parameters": SEARCH.parameters,
            },
        }
    ]


def test_unreadable_tool_arguments_become_empty_with_a_warning(server, model, caplog):
    server.reply(Reply(json=openai_completion(None, tool_calls=[("c", "search", "query=x")])))
    response = model.complete(ASK, tools=[SEARCH])
    assert response.tool_calls[0].arguments == {}
    assert "unreadable" in caplog.text


def test_tool_calls_and_results_in_the_history_use_the_wire_shapes(server, model):
    server.reply(Reply(json=openai_completion("Refunds take 5 days.")))
    call = ToolCall(id="call_9", name="search", arguments={"query": "refunds"})
    model.complete(
        [
            Message(role="user", content="Refunds?"),
            Message(role="assistant", tool_calls=[call]),
            Message(role="tool", content="5 days", tool_call_id="call_9"),
        ],
        tools=[SEARCH],
    )
    sent = server.received[0].body["messages"]
    assert sent[1] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_9",
                "type": "function",
                "function": {"name": "search", "arguments": '{"query": "refunds"}'},
            }
        ],
    }
    assert sent[2] == {"role": "tool", "tool_call_id": "call_9", "content": "5 days"}


def test_options_json_mode_temperature_max_tokens_and_extra_body_are_sent(server):
    server.reply(Reply(json=openai_completion('{"ok": true}')))
    model = OpenAICompatibleModel(
        "llama3.1",
        base_url=server.url,
        json_mode=True,
        temperature=0.0,
        max_tokens=64,
        extra_body={"seed": 7},
    )
    model.complete(ASK)
    body = server.received[0].body
    assert body["response_format"] == {"type": "json_object"}
    assert (body["temperature"], body["max_tokens"], body["seed"]) == (0.0, 64, 7)
    assert "authorization" not in server.received[0].headers  # a local server gets no key
    model.close()


def test_openai_itself_gets_max_completion_tokens():
    model = OpenAICompatibleModel("o3", api_key="sk-test", max_tokens=64)
    assert model.provider == "openai"
    payload = model._body(ASK, None, stream=False, max_tokens=None)
    assert payload["max_completion_tokens"] == 64
    assert "max_tokens" not in payload


def test_stream_yields_text_deltas_and_charges_the_usage_to_the_run(server, model):
    server.reply(openai_stream(["Pa", "ri", "s."], usage=(10, 3)))
    tracker = BudgetTracker()
    with tracker.active():
        pieces = list(model.stream(ASK))
    assert pieces == ["Pa", "ri", "s."]
    assert tracker.usage is not None
    assert (tracker.usage.input_tokens, tracker.usage.output_tokens) == (10, 3)
    assert tracker.usage.cost_usd == pytest.approx((10 * 0.15 + 3 * 0.60) / 1e6)
    body = server.received[0].body
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}


async def test_astream_yields_the_same_deltas(server, model):
    server.reply(openai_stream(["Hel", "lo"]))
    assert [piece async for piece in model.astream(ASK)] == ["Hel", "lo"]


def test_a_server_that_omits_usage_gives_none(server, model):
    server.reply(Reply(json=openai_completion("hi", usage=None)), openai_stream(["hi"], None))
    assert model.complete(ASK).usage is None
    tracker = BudgetTracker()
    with tracker.active():
        assert list(model.stream(ASK)) == ["hi"]
    assert tracker.usage is None


def test_a_server_without_tools_falls_back_to_the_json_in_text_protocol(server, caplog):
    model = OpenAICompatibleModel("gemma:2b", base_url=f"{server.url}/v1")
    reply = '```json\n{"tool_calls": [{"name": "search", "arguments": {"query": "refunds"}}]}\n```'
    server.reply(
        openai_error(400, "registry.ollama.ai/library/gemma:2b does not support tools"),
        Reply(json=openai_completion(reply)),
        Reply(json=openai_completion("Refunds take 5 days.")),
    )
    first = model.complete([Message(role="user", content="Refunds?")], tools=[SEARCH])
    assert [(c.name, c.arguments) for c in first.tool_calls] == [("search", {"query": "refunds"})]
    assert first.text == ""
    assert "JSON-in-text" in caplog.text

    native, text = server.received[0].body, server.received[1].body
    assert "tools" in native
    assert "tools" not in text
    system = text["messages"][0]
    assert system["role"] == "system"
    assert "search: Search the knowledge base." in system["content"]
    assert '"tool_calls"' in system["content"]

    # the model remembers: the next call goes straight to the text protocol, and a plain reply
    # is the answer
    second = model.complete(
        [
            Message(role="user", content="Refunds?"),
            Message(role="assistant", tool_calls=first.tool_calls),
            Message(role="tool", content="5 <days>", tool_call_id=first.tool_calls[0].id),
        ],
        tools=[SEARCH],
    )
    assert second.text == "Refunds take 5 days."
    assert second.tool_calls == []
    assert len(server.received) == 3
    history = server.received[2].body["messages"]
    assert "tools" not in server.received[2].body
    assert json.loads(history[2]["content"]) == {
        "tool_calls": [{"name": "search", "arguments": {"query": "refunds"}}]
    }
    assert history[3]["role"] == "user"
    assert history[3]["content"].startswith("<tool_result ")
    assert "5 &lt;days&gt;" in history[3]["content"]  # tool output is fenced as data
    model.close()


def test_supports_tools_false_never_sends_tools_and_reads_a_lone_call(server):
    model = OpenAICompatibleModel("phi3", base_url=server.url, supports_tools=False)
    server.reply(
        Reply(json=openai_completion('I will search. {"name": "search", "arguments": "{}"}'))
    )
    response = model.complete([Message(role="user", content="Refunds?")], tools=[SEARCH])
    assert [(c.name, c.arguments) for c in response.tool_calls] == [("search", {})]
    assert "tools" not in server.received[0].body
    model.close()


def test_other_client_errors_are_not_retried_and_do_not_trigger_the_fallback(server, model):
    server.reply(openai_error(400, "Invalid value for 'temperature'"))
    with pytest.raises(ModelHTTPError) as raised:
        model.complete(ASK, tools=[SEARCH])
    assert raised.value.status == 400
    assert "Invalid value for 'temperature'" in raised.value.body
    assert len(server.received) == 1


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        (Reply(body="<html>Bad Gateway</html>"), "not JSON"),
        (Reply(json={"choices": []}), "not an OpenAI chat completion"),
        (Reply(json={"object": "list", "data": []}), "not an OpenAI chat completion"),
        (Reply(events=[(None, "{not json")]), "not an OpenAI chat completion"),
    ],
)
def test_malformed_bodies_raise_model_error_with_an_excerpt(server, model, reply, message):
    server.reply(reply)
    streamed = reply.events is not None
    with pytest.raises(ModelError, match=message):
        list(model.stream(ASK)) if streamed else model.complete(ASK)


def test_an_error_inside_a_stream_raises(server, model):
    error = json.dumps({"error": {"message": "The server had an error", "type": "server_error"}})
    server.reply(Reply(events=[(None, error)]))
    with pytest.raises(ModelError, match="The server had an error"):
        list(model.stream(ASK))


def test_a_json_reply_to_a_stream_request_is_malformed(server, model):
    server.reply(Reply(json=openai_completion("not streamed")))
    with pytest.raises(ModelError, match="no event stream"):
        list(model.stream(ASK))
