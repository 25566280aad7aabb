from __future__ import annotations

import asyncio
import threading

import pytest

from ragloop import (
    ComponentError,
    Message,
    ModelResponse,
    Usage,
    as_async_generate_fn,
    as_generate_fn,
)
from ragloop.core.budget import BudgetTracker
from ragloop.core.calls import (
    ask,
    ask_text,
    call,
    complete,
    method,
    run_sync,
    sync_calls_in_threads,
)
from ragloop.testing import FunctionModel, ScriptedModel


async def test_call_awaits_async_functions_and_async_callables():
    async def double(x):
        return 2 * x

    class Halver:
        async def __call__(self, x):
            return x / 2

    assert await call(double, 4) == 8
    assert await call(Halver(), 4) == 2


async def test_call_runs_sync_functions_inline_or_in_threads():
    def where():
        return threading.current_thread().name

    assert await call(where) == threading.current_thread().name
    with sync_calls_in_threads(True):
        assert await call(where) != threading.current_thread().name


async def test_call_awaits_an_awaitable_returned_by_a_sync_function():
    def later():
        return asyncio.sleep(0, result="done")

    assert await call(later) == "done"


def test_method_prefers_the_async_variant():
    class Both:
        def retrieve(self):
            return "sync"

        async def aretrieve(self):
            return "async"

    assert method(Both(), "retrieve", "retriever").__name__ == "aretrieve"
    with pytest.raises(TypeError, match="has neither retrieve"):
        method(object(), "retrieve", "retriever")


def test_run_sync_outside_and_inside_an_event_loop():
    async def answer():
        return 42

    assert run_sync(answer) == 42

    async def nested():
        return run_sync(answer)

    assert asyncio.run(nested()) == 42


async def test_complete_records_usage_and_checks_the_reply_type():
    tracker = BudgetTracker()
    model = ScriptedModel([ModelResponse(text="hi", usage=Usage(input_tokens=3))])
    with tracker.active():
        reply = await complete(model, [Message(role="user", content="x")])
    assert reply.text == "hi"
    assert tracker.usage == Usage(input_tokens=3)

    class Broken:
        def complete(self, messages, tools=None):
            return "text"

    with pytest.raises(ComponentError, match=r"expected ragloop\.ModelResponse"):
        await complete(Broken(), [])


async def test_ask_text_accepts_functions_models_and_model_responses():
    assert await ask_text(lambda prompt: prompt.upper(), "abc") == "ABC"

    async def async_fn(prompt):
        return prompt[::-1]

    assert await ask_text(async_fn, "abc") == "cba"
    model = ScriptedModel(["from model"])
    assert await ask_text(model, "p") == "from model"
    assert model.calls[0].messages == [Message(role="user", content="p")]
    assert await ask_text(lambda p: ModelResponse(text="resp"), "p") == "resp"
    with pytest.raises(ComponentError, match="expected str"):
        await ask_text(lambda p: 3, "p")
    with pytest.raises(TypeError, match="chat model or a function"):
        await ask_text(42, "p")  # type: ignore[arg-type]


def test_as_generate_fn_wraps_sync_and_async_models_and_charges_usage():
    model = FunctionModel(
        lambda messages, tools: messages[-1].content.upper(), usage=Usage(input_tokens=3)
    )
    generate = as_generate_fn(model)
    tracker = BudgetTracker()
    with tracker.active():
        assert generate("hello") == "HELLO"
    assert tracker.usage == Usage(input_tokens=3)
    assert [c.messages[0].role for c in model.calls] == ["user"]


async def test_as_async_generate_fn_inside_an_event_loop():
    model = ScriptedModel(["one", "two"])
    assert await as_async_generate_fn(model)("q") == "one"
    assert as_generate_fn(model)("q") == "two"  # sync use from async code runs in a thread


async def test_complete_accepts_a_function_of_messages_and_tools():
    seen = []

    def chat(messages, tools):
        seen.append((messages, tools))
        return ModelResponse(text="fn", usage=Usage(output_tokens=2))

    tracker = BudgetTracker()
    with tracker.active():
        reply = await complete(chat, [Message(role="user", content="x")], None)
    assert reply.text == "fn"
    assert seen == [([Message(role="user", content="x")], None)]
    assert tracker.usage == Usage(output_tokens=2)
    with pytest.raises(ComponentError, match="chat function '<lambda>' returned str"):
        await complete(lambda m, t: "text", [])
    with pytest.raises(TypeError, match="chat model or a function"):
        await complete(42, [])  # type: ignore[arg-type]


async def test_ask_returns_the_whole_response():
    reply = await ask(lambda p: ModelResponse(text="t", usage=Usage(input_tokens=1)), "p")
    assert reply == ModelResponse(text="t", usage=Usage(input_tokens=1))
    assert await ask(lambda p: "plain", "p") == ModelResponse(text="plain")
