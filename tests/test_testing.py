"""The public fakes in ragloop.testing."""

from __future__ import annotations

import math

import pytest

from ragloop import (
    ChatModel,
    Chunk,
    ComponentError,
    Embedder,
    Message,
    ModelResponse,
    Retriever,
    ScriptExhausted,
    Tool,
    ToolCall,
    Usage,
)
from ragloop.testing import FunctionModel, HashEmbedder, InMemoryRetriever, ScriptedModel

MSG = [Message(role="user", content="hello")]


def test_scripted_model_replays_each_kind_of_reply_in_order():
    model = ScriptedModel(
        [
            "plain text",
            ModelResponse(tool_calls=[ToolCall(name="search", arguments={"query": "x"})]),
            ValueError("bad gateway"),
            TimeoutError,
            lambda messages: f"echo {messages[-1].content}",
        ]
    )
    assert model.complete(MSG).text == "plain text"
    assert model.complete(MSG).tool_calls[0].arguments == {"query": "x"}
    with pytest.raises(ValueError, match="bad gateway"):
        model.complete(MSG)
    with pytest.raises(TimeoutError):
        model.complete(MSG)
    assert model.complete(MSG).text == "echo hello"
    assert model.remaining == 0
    with pytest.raises(ScriptExhausted, match="no reply left for call 6"):
        model.complete(MSG)
    assert len(model.calls) == 6


def test_scripted_model_records_messages_and_tools():
    tool = Tool(name="search", description="Search")
    model = ScriptedModel(["a", "b"])
    model.complete(MSG, tools=[tool])
    model.complete(MSG)
    assert model.calls[0].messages == MSG
    assert model.calls[0].tools == [tool]
    assert model.calls[1].tools is None
    assert model.calls[0].prompt == "hello"


def test_recorded_messages_are_a_copy():
    model = ScriptedModel(["a"])
    messages = list(MSG)
    model.complete(messages)
    messages.append(Message(role="assistant", content="later"))
    assert len(model.calls[0].messages) == 1


async def test_scripted_model_async_and_async_reply_functions():
    async def reply(messages):
        return ModelResponse(text="async reply")

    model = ScriptedModel([reply, "sync"])
    assert (await model.acomplete(MSG)).text == "async reply"
    assert (await model.acomplete(MSG)).text == "sync"
    model.push(reply)
    with pytest.raises(ComponentError, match="acomplete"):
        model.complete(MSG)


def test_default_usage_is_added_only_when_a_reply_has_none():
    own = Usage(input_tokens=1)
    model = ScriptedModel(["a", ModelResponse(text="b", usage=own)], usage=Usage(input_tokens=9))
    assert model.complete(MSG).usage == Usage(input_tokens=9)
    assert model.complete(MSG).usage == own


def test_bad_reply_types_are_component_errors():
    model = ScriptedModel([lambda messages: 42])
    with pytest.raises(ComponentError, match="int"):
        model.complete(MSG)


async def test_function_model_sync_and_async():
    model = FunctionModel(lambda messages, tools: f"{len(messages)} {tools is None}")
    assert model.complete(MSG).text == "1 True"
    assert (await model.acomplete(MSG, [Tool(name="t", description="d")])).text == "1 False"
    assert len(model.calls) == 2

    async def fn(messages, tools):
        return ModelResponse(text="async")

    assert (await FunctionModel(fn).acomplete(MSG)).text == "async"
    with pytest.raises(ComponentError, match="acomplete"):
        FunctionModel(fn).complete(MSG)


def test_fakes_satisfy_the_protocols():
    assert isinstance(ScriptedModel(), ChatModel)
    assert isinstance(FunctionModel(lambda m, t: ""), ChatModel)
    assert isinstance(HashEmbedder(), Embedder)
    assert isinstance(InMemoryRetriever([]), Retriever)


def cosine(a, b):
    return sum(x * y for x, y in zip(a, b, strict=True))


def test_hash_embedder_is_deterministic_normalised_and_similarity_preserving():
    embedder = HashEmbedder(dimension=128)
    a, b, c, empty = embedder.embed(
        ["refund policy for orders", "the refund policy", "volcanic eruptions in Iceland", ""]
    )
    assert len(a) == 128
    assert embedder.dimension == 128
    assert embedder.model_id == "hash-128"
    assert math.isclose(math.sqrt(sum(v * v for v in a)), 1.0)
    assert embedder.embed(["refund policy for orders"])[0] == a
    assert cosine(a, b) > cosine(a, c) + 0.3
    assert empty == [0.0] * 128
    with pytest.raises(ValueError, match="dimension"):
        HashEmbedder(dimension=4)


DOCS = {
    "refunds.md": "Refunds are issued within 14 days. Refunds go to the original card.",
    "shipping.md": "We ship to 40 countries. Shipping is free over $50.",
    "misc.md": "Our office is closed on public holidays.",
}


def test_in_memory_retriever_ranks_by_bm25_with_scores_in_unit_range():
    retriever = InMemoryRetriever(DOCS)
    results = retriever.retrieve("how long do refunds take", top_k=5)
    assert [c.source for c in results] == ["refunds.md"]
    assert 0.0 < results[0].score <= 1.0
    both = retriever.retrieve("refunds shipping", top_k=1)
    assert len(both) == 1
    assert retriever.retrieve("the of and") == []  # stopwords only
    assert retriever.calls[-1] == ("the of and", 5)


def test_in_memory_retriever_accepts_strings_and_chunks():
    by_text = InMemoryRetriever(["alpha beta", "gamma"])
    assert by_text.retrieve("gamma")[0].source == "doc-2"
    chunk = Chunk(content="delta epsilon", source="x", score=0.0, metadata={"k": 1})
    found = InMemoryRetriever([chunk]).retrieve("delta")[0]
    assert found.metadata == {"k": 1}
    assert found.id == chunk.id
    assert found.score > 0
    assert InMemoryRetriever([]).retrieve("anything") == []
