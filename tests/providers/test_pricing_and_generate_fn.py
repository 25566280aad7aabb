"""Prices and dollar budgets; the models as LLMEvaluator's generate_fn."""

from __future__ import annotations

import json

import pytest

from ragloop import (
    Budget,
    Chunk,
    ConfigError,
    HeuristicReformulator,
    LLMEvaluator,
    LoopConfig,
    OpenAICompatibleModel,
    RAGLoop,
    StopReason,
    as_async_generate_fn,
    as_generate_fn,
)
from ragloop.core.budget import BudgetTracker
from ragloop.providers import ModelPrice, describe_price, lookup_price
from ragloop.testing import InMemoryRetriever
from tests.helpers import EchoGenerator
from tests.providers.server import Reply
from tests.providers.wire import openai_completion

VERDICT = json.dumps({"is_grounded": True, "is_complete": False, "score": 0.4, "reason": "half"})


@pytest.mark.parametrize(
    ("model", "input_price", "output_price"),
    [
        ("gpt-4o-mini", 0.15, 0.60),
        ("gpt-4o-mini-2024-07-18", 0.15, 0.60),
        ("gpt-4o-2024-08-06", 2.50, 10.00),
        ("gpt-4o-2024-05-13", 5.00, 15.00),
        ("claude-sonnet-4-20250514", 3.00, 15.00),
        ("claude-3-5-haiku-latest", 0.80, 4.00),
        ("claude-opus-4-0", 15.00, 75.00),
        ("Claude-Haiku-4-5", 1.00, 5.00),
    ],
)
def test_prices_of_snapshots_and_aliases(model, input_price, output_price):
    price = lookup_price(model)
    assert price is not None
    assert (price.input_per_million, price.output_per_million) == (input_price, output_price)


@pytest.mark.parametrize("model", ["llama3.1", "gpt-4o-audio-preview", "claude-opus-9", ""])
def test_unknown_models_have_no_price_and_say_so(model):
    assert lookup_price(model) is None
    assert describe_price(model).startswith("unknown")


def test_describe_a_known_price():
    assert describe_price("gpt-4o-mini") == (
        "gpt-4o-mini: $0.15 input, $0.6 output per million tokens"
    )


def test_cost_arithmetic():
    price = ModelPrice(2.0, 8.0, cache_write_per_million=2.5, cache_read_per_million=0.2)
    assert price.cost(1_000_000, 500_000) == 2.0 + 4.0
    assert price.cost(0, 0, cache_write_tokens=1_000_000, cache_read_tokens=1_000_000) == 2.7
    assert ModelPrice(1.0, 1.0).cost(0, 0, cache_read_tokens=1_000_000) == 1.0
    with pytest.raises(ConfigError, match="output_per_million"):
        ModelPrice(1.0, -1.0)


def test_unknown_models_report_no_cost_unless_priced(server):
    server.reply(Reply(json=openai_completion("hi")), Reply(json=openai_completion("hi")))
    unknown = OpenAICompatibleModel("llama3.1", base_url=server.url)
    free = OpenAICompatibleModel("llama3.1", base_url=server.url, price=ModelPrice(0, 0))
    assert unknown.complete([]).usage.cost_usd is None
    assert free.complete([]).usage.cost_usd == 0.0
    unknown.close()
    free.close()


def test_a_dollar_budget_stops_a_loop_that_uses_a_priced_model(server):
    # gpt-4o: 100k input + 10k output tokens = 0.25 + 0.10 dollars per evaluation
    server.reply(*[Reply(json=openai_completion(VERDICT, usage=(100_000, 10_000)))] * 3)
    model = OpenAICompatibleModel("gpt-4o", base_url=server.url)
    loop = RAGLoop(
        InMemoryRetriever(["Refunds take 5 days.", "Billing is monthly."]),
        EchoGenerator(),
        LLMEvaluator(model),
        HeuristicReformulator(),
        LoopConfig(max_iterations=3, budget=Budget(max_dollars=0.5)),
    )
    result = loop.run("refunds and billing")
    assert result.stop_reason is StopReason.BUDGET_DOLLARS
    assert len(server.received) == 2
    assert result.usage is not None
    assert result.usage.cost_usd == pytest.approx(0.70)
    model.close()


def test_llm_evaluator_takes_a_model_as_generate_fn(server):
    server.reply(Reply(json=openai_completion(VERDICT)))
    model = OpenAICompatibleModel("gpt-4o-mini", base_url=server.url)
    chunks = [Chunk(content="Refunds take 5 days.", source="faq", score=0.9)]
    result = LLMEvaluator(generate_fn=model).evaluate("Refund time?", chunks, "5 days")
    assert (result.is_grounded, result.is_complete, result.score) == (True, False, 0.4)
    [message] = server.received[0].body["messages"]
    assert message["role"] == "user"
    assert "Refunds take 5 days." in message["content"]
    model.close()


def test_as_generate_fn_is_a_prompt_to_text_function_that_charges_the_run(server):
    server.reply(Reply(json=openai_completion(VERDICT, usage=(1000, 100))))
    model = OpenAICompatibleModel("gpt-4o-mini", base_url=server.url)
    generate = as_generate_fn(model)
    tracker = BudgetTracker()
    with tracker.active():
        result = LLMEvaluator(generate).evaluate("Refund time?", [], "5 days")
    assert result.score == 0.4
    assert tracker.usage is not None
    assert tracker.usage.total_tokens == 1100
    assert server.received[0].body["messages"][0]["role"] == "user"
    model.close()


async def test_as_async_generate_fn(server):
    server.reply(Reply(json=openai_completion("pong")), Reply(json=openai_completion(VERDICT)))
    model = OpenAICompatibleModel("gpt-4o-mini", base_url=server.url)
    generate = as_async_generate_fn(model)
    assert await generate("ping") == "pong"
    assert (await LLMEvaluator(generate).aevaluate("q", [], "a")).score == 0.4
    assert server.received[0].body["messages"] == [{"role": "user", "content": "ping"}]
