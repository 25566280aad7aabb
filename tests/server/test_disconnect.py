"""A client that gives up on a non-streamed run (it closes its connection) cancels the run and
frees its concurrency slot: the next request of the same key is answered, not refused with 429.
Against uvicorn on 127.0.0.1 with a key that runs one request at a time."""

from __future__ import annotations

import time

import httpx
import pytest

from tests.helpers import slow_loop
from tests.server.conftest import auth, engine_key

ROUTES = {
    "/v1/ask": ({"question": "never answered", "engine": "rag"}, "rag"),
    "/v1/retrieve": ({"question": "never answered"}, "evidence"),
    "/v1/chat/completions": (
        {"model": "ragloop-rag", "messages": [{"role": "user", "content": "never answered"}]},
        "rag",
    ),
}


def running(service) -> int:
    return service.access.running("one")


def cancelled(service) -> int:
    return sum(t.stop_reason == "cancelled" for t in service.traces.list(limit=1000))


@pytest.mark.parametrize("path", list(ROUTES))
def test_a_client_that_gives_up_frees_its_slot(server, path):
    url, service = server
    body, kind = ROUTES[path]
    service._engines[engine_key(service, kind)] = slow_loop()
    before = cancelled(service)
    try:
        with pytest.raises(httpx.ReadTimeout):  # the client gives up and closes its connection
            httpx.post(f"{url}{path}", json=body, headers=auth("one"), timeout=1.0)
        for _ in range(200):  # the server notices the closed connection
            if running(service) == 0:
                break
            time.sleep(0.05)
        assert running(service) == 0, "the run still holds the key's slot"
    finally:
        del service._engines[engine_key(service, kind)]
    after = httpx.post(f"{url}/v1/search", json={"query": "tent"}, headers=auth("one"), timeout=30)
    assert after.status_code == 200
    again = httpx.post(
        f"{url}/v1/ask",
        json={"question": "How much does the Skylark 2 weigh?"},
        headers=auth("one"),
        timeout=60,
    )
    assert again.status_code == 200, again.text  # not 429
    assert cancelled(service) == before + 1  # its trace is stored, as cancelled
