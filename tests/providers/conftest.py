"""Fixtures of the provider tests: a loopback server, requests allowed to loopback only, no
provider variables from the developer's environment, and retry waits recorded, not slept."""

from __future__ import annotations

import pytest

from ragloop.providers import http, override_allow_model_requests
from tests.providers.server import LoopbackServer

PROVIDER_VARIABLES = [
    f"{prefix}{provider}_{what}"
    for prefix in ("", "RAGLOOP_")
    for provider in ("OPENAI", "ANTHROPIC")
    for what in ("API_KEY", "BASE_URL")
]


@pytest.fixture(autouse=True)
def _loopback_only():
    with override_allow_model_requests("loopback"):
        yield


@pytest.fixture(autouse=True)
def _no_provider_environment(monkeypatch):
    for name in PROVIDER_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(autouse=True)
def waits(monkeypatch) -> list[float]:
    """The retry waits, in order; nothing sleeps."""
    recorded: list[float] = []

    async def asleep(seconds: float) -> None:
        recorded.append(seconds)

    monkeypatch.setattr(http, "_sleep", recorded.append)
    monkeypatch.setattr(http, "_asleep", asleep)
    return recorded


@pytest.fixture
def server():
    running = LoopbackServer().start()
    yield running
    running.stop()
