"""Retries, timeouts, the wall-clock budget and the request switch, over a loopback server."""

from __future__ import annotations

import socket
import time
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import httpx
import pytest

from ragloop import (
    Budget,
    BudgetExceeded,
    HeuristicReformulator,
    LLMEvaluator,
    LoopConfig,
    Message,
    ModelError,
    ModelHTTPError,
    ModelTimeout,
    OpenAICompatibleModel,
    RAGLoop,
    StopReason,
)
from ragloop.core.budget import BudgetTracker
from ragloop.providers import RetryPolicy, http, override_allow_model_requests
from ragloop.providers.http import retry_after_seconds
from ragloop.testing import InMemoryRetriever
from tests.helpers import EchoGenerator
from tests.providers.server import Reply
from tests.providers.wire import openai_completion, openai_error

ASK = [Message(role="user", content="Capital?")]
OK = Reply(json=openai_completion("Paris."))


@pytest.fixture
def model(server):
    with OpenAICompatibleModel("gpt-4o-mini", base_url=server.url, api_key="sk-test") as chat:
        yield chat


def test_429_waits_exactly_the_retry_after_seconds_then_succeeds(server, model, waits):
    server.reply(openai_error(429, "Rate limit reached", "requests", **{"retry-after": "2"}), OK)
    assert model.complete(ASK).text == "Paris."
    assert waits == [2.0]
    assert len(server.received) == 2
    assert server.received[1].body == server.received[0].body


def test_retry_after_ms_takes_precedence(server, model, waits):
    headers = {"retry-after": "2", "retry-after-ms": "250"}
    server.reply(openai_error(429, "Rate limit reached", "requests", **headers), OK)
    model.complete(ASK)
    assert waits == [0.25]


def test_retry_after_as_an_http_date(server, model, waits):
    when = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    server.reply(openai_error(503, "busy", "server_error", **{"retry-after": when}), OK)
    model.complete(ASK)
    [wait] = waits
    assert 27.0 <= wait <= 30.0  # the date has a one-second resolution


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after": "7"}, 7.0),
        ({"retry-after": "1.5"}, 1.5),
        ({"retry-after": "-3"}, 0.0),
        ({"retry-after-ms": "20"}, 0.02),
        ({"retry-after": "Wed, 21 Oct 2015 07:28:10 GMT"}, 10.0),
        ({"retry-after": "Wed, 21 Oct 2015 07:27:00 GMT"}, 0.0),  # in the past
        ({"retry-after": "soon"}, None),
        ({}, None),
    ],
)
def test_retry_after_seconds(headers, expected):
    now = datetime(2015, 10, 21, 7, 28, 0, tzinfo=UTC)
    assert retry_after_seconds(httpx.Headers(headers), now) == expected


def test_500_is_retried_with_backoff_and_jitter(server, model, waits):
    server.reply(openai_error(500, "The server had an error", "server_error"), OK)
    assert model.complete(ASK).text == "Paris."
    [wait] = waits
    assert 0.5 <= wait <= 1.0  # initial_backoff_s plus up to jitter_s


@pytest.mark.parametrize("status", [408, 409, 502, 529])
def test_the_retryable_statuses(server, model, waits, status):
    server.reply(openai_error(status, "try again", "server_error"), OK)
    assert model.complete(ASK).text == "Paris."
    assert len(waits) == 1


async def test_acomplete_retries_too(server, model, waits):
    server.reply(openai_error(429, "slow down", "requests", **{"retry-after": "1"}), OK)
    assert (await model.acomplete(ASK)).text == "Paris."
    assert waits == [1.0]


def test_attempts_are_bounded_and_the_last_error_is_raised(server, model, waits):
    server.reply(*[openai_error(503, f"overloaded {i}", "server_error") for i in range(4)])
    with pytest.raises(ModelHTTPError) as raised:
        model.complete(ASK)
    assert raised.value.status == 503
    assert "overloaded 3" in raised.value.body
    assert raised.value.url.endswith("/chat/completions")
    assert len(server.received) == RetryPolicy().max_attempts == 4
    assert len(waits) == 3
    assert all(base <= w <= base + 0.5 for w, base in zip(waits, [0.5, 1.0, 2.0], strict=True))


def test_max_attempts_one_disables_retries(server, waits):
    server.reply(openai_error(500, "boom", "server_error"))
    model = OpenAICompatibleModel("m", base_url=server.url, retry=RetryPolicy(max_attempts=1))
    with pytest.raises(ModelHTTPError):
        model.complete(ASK)
    assert waits == []
    model.close()


def test_a_wait_longer_than_the_total_time_bound_is_not_taken(server, model, waits):
    server.reply(openai_error(429, "quota", "requests", **{"retry-after": "120"}))
    with pytest.raises(ModelHTTPError) as raised:
        model.complete(ASK)
    assert raised.value.retry_after_s == 120.0
    assert waits == []
    assert len(server.received) == 1


def test_a_wait_past_the_runs_wall_budget_ends_the_budget_instead(server, model, waits):
    server.reply(openai_error(429, "quota", "requests", **{"retry-after": "30"}))
    with BudgetTracker(Budget(max_wall_ms=5_000)).active(), pytest.raises(BudgetExceeded) as stop:
        model.complete(ASK)
    assert stop.value.reason is StopReason.BUDGET_WALL_MS
    assert isinstance(stop.value.__cause__, ModelHTTPError)
    assert waits == []
    assert len(server.received) == 1


def test_an_enclosing_runs_wall_budget_counts_too(server, model, waits):
    server.reply(openai_error(429, "quota", "requests", **{"retry-after": "30"}))
    with (
        BudgetTracker(Budget(max_wall_ms=5_000)).active(),
        BudgetTracker(Budget()).active(),
        pytest.raises(BudgetExceeded),
    ):
        model.complete(ASK)
    assert waits == []


def test_a_rag_loop_stops_on_its_wall_budget_rather_than_sleep_through_a_retry(server, model):
    server.reply(openai_error(429, "quota", "requests", **{"retry-after": "30"}))
    loop = RAGLoop(
        InMemoryRetriever(["Paris is the capital of France."]),
        EchoGenerator(),
        LLMEvaluator(model),
        HeuristicReformulator(),
        LoopConfig(budget=Budget(max_wall_ms=10_000)),
    )
    result = loop.run("capital of France")
    assert result.stop_reason is StopReason.BUDGET_WALL_MS
    assert len(server.received) == 1


def test_a_read_timeout_raises_model_timeout_without_retrying(server, waits):
    server.reply(Reply(hold=True))
    model = OpenAICompatibleModel("m", base_url=server.url, timeout=0.2)
    with pytest.raises(ModelTimeout) as raised:
        model.complete(ASK)
    assert isinstance(raised.value, TimeoutError)
    assert waits == []
    assert len(server.received) == 1
    model.close()


async def test_async_read_timeout(server, waits):
    server.reply(Reply(hold=True))
    model = OpenAICompatibleModel("m", base_url=server.url, timeout=0.2)
    with pytest.raises(ModelTimeout):
        await model.acomplete(ASK)
    assert waits == []


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_connection_failures_are_retried_then_raised(waits):
    model = OpenAICompatibleModel("m", base_url=f"http://127.0.0.1:{_closed_port()}/v1")
    with pytest.raises(ModelError, match="could not reach") as raised:
        model.complete(ASK)
    assert isinstance(raised.value.__cause__, httpx.ConnectError)
    assert len(waits) == 3
    model.close()


def test_real_sleeps_between_attempts(server, model, monkeypatch):
    monkeypatch.setattr(http, "_sleep", time.sleep)
    server.reply(openai_error(429, "slow down", "requests", **{"retry-after-ms": "1"}), OK)
    assert model.complete(ASK).text == "Paris."


def test_switched_off_requests_are_refused_before_anything_is_sent(server, model):
    with override_allow_model_requests(False), pytest.raises(ModelError, match="switched off"):
        model.complete(ASK)
    assert server.received == []


def test_loopback_only_refuses_other_hosts_without_connecting():
    model = OpenAICompatibleModel("gpt-4o-mini", api_key="sk-test")
    with pytest.raises(ModelError, match="switched off"):
        model.complete(ASK)
    with pytest.raises(ModelError, match="switched off"):
        list(model.stream(ASK))


def test_the_public_api_without_a_key_is_refused_before_sending():
    model = OpenAICompatibleModel("gpt-4o-mini")
    with pytest.raises(ModelError, match="no API key: set RAGLOOP_OPENAI_API_KEY or OPENAI_API"):
        model.complete(ASK)


def test_a_401_without_a_key_says_none_was_sent(server):
    server.reply(openai_error(401, "You didn't provide an API key.", "invalid_request_error"))
    model = OpenAICompatibleModel("m", base_url=server.url)
    with pytest.raises(ModelHTTPError, match="no API key was sent"):
        model.complete(ASK)
    model.close()


def test_retry_policy_validates():
    with pytest.raises(ValueError, match="max_attempts"):
        RetryPolicy(max_attempts=0)
    with pytest.raises(ValueError, match="jitter_s"):
        RetryPolicy(jitter_s=-1)
