"""The API's own documentation and its HTTP manners: /docs works offline (every asset it loads
is served by this server), the OpenAPI schema declares both ways to give a key (so /docs has
"Authorize"), 401 says how to authenticate, 429 when to retry, and a collection that does not
exist is a 404 naming the ones the key may read."""

from __future__ import annotations

import asyncio
import re
from urllib.parse import urljoin

import httpx
import pytest

from ragloop import LoopConfig, RAGLoop
from tests.helpers import EchoGenerator, ListReformulator, ScoreEvaluator, SlowAsyncRetriever
from tests.server.conftest import auth, engine_key


@pytest.mark.parametrize("page", ["/docs", "/redoc"])
def test_the_docs_load_only_local_assets(server, page):
    url, _ = server
    html = httpx.get(f"{url}{page}")
    assert html.status_code == 200
    assets = re.findall(r"""(?:src|href)\s*=\s*["']([^"']+)["']""", html.text)
    assets += re.findall(r"""url:\s*["']([^"']+)["']""", html.text)  # the schema Swagger reads
    scripts = [a for a in assets if a.endswith((".js", ".css"))]
    assert scripts, html.text
    for asset in assets:
        full = urljoin(f"{url}{page}", asset)
        assert full.startswith(url), f"{page} loads {asset} from elsewhere"
        assert httpx.get(full).status_code == 200, asset
    assert "cdn" not in html.text.lower()


def test_openapi_declares_bearer_and_x_api_key(server):
    url, _ = server
    schema = httpx.get(f"{url}/openapi.json").json()
    schemes = schema["components"]["securitySchemes"]
    assert {"type": "http", "scheme": "bearer"}.items() <= schemes["HTTPBearer"].items()
    assert schemes["APIKeyHeader"]["name"] == "X-API-Key"
    assert schemes["APIKeyHeader"]["in"] == "header"
    search = schema["paths"]["/v1/search"]["post"]
    assert {"HTTPBearer": []} in search["security"]
    assert {"APIKeyHeader": []} in search["security"]
    assert "security" not in schema["paths"]["/healthz"]["get"]


def test_a_missing_or_unknown_key_says_how_to_authenticate(server):
    url, _ = server
    for headers in ({}, {"Authorization": "Bearer rl-nope"}, {"X-API-Key": "rl-nope"}):
        response = httpx.post(f"{url}/v1/search", json={"query": "tent"}, headers=headers)
        assert response.status_code == 401
        assert response.headers["WWW-Authenticate"].startswith("Bearer")
    mcp = httpx.post(f"{url}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
    assert mcp.status_code == 401
    assert mcp.headers["WWW-Authenticate"].startswith("Bearer")
    both = httpx.post(f"{url}/v1/search", json={"query": "tent"}, headers=auth("alice"))
    assert both.status_code == 200  # a key given either way works


def test_429_says_when_to_retry(server):
    url, service = server
    service._engines[engine_key(service, "rag")] = RAGLoop(
        SlowAsyncRetriever(delay=1.0),
        EchoGenerator(),
        ScoreEvaluator([1.0]),
        ListReformulator([["x"]]),
        LoopConfig(max_iterations=1),
    )

    async def two_at_once() -> httpx.Response:
        async with httpx.AsyncClient(base_url=url, headers=auth("one"), timeout=30) as client:
            first = asyncio.create_task(
                client.post("/v1/ask", json={"question": "q", "engine": "rag"})
            )
            for _ in range(3000):  # until the first one runs
                if service.access.running("one"):
                    break
                await asyncio.sleep(0.01)
            second = await client.post("/v1/ask", json={"question": "q", "engine": "rag"})
            await first
            return second

    try:
        refused = asyncio.run(two_at_once())
    finally:
        del service._engines[engine_key(service, "rag")]
    assert refused.status_code == 429
    assert int(refused.headers["Retry-After"]) >= 1


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/search", {"query": "tent", "collection": "pubic"}),
        ("/v1/search", {"query": "tent", "collection": ["public", "pubic"]}),
        ("/v1/ask", {"question": "What does a tent cost?", "collection": "pubic"}),
        ("/v1/ask", {"question": "What does a tent cost?", "collection": "pubic", "stream": True}),
        ("/v1/retrieve", {"question": "What does a tent cost?", "collection": "pubic"}),
    ],
)
def test_an_unknown_collection_is_404_naming_what_exists(server, path, body):
    url, _ = server
    response = httpx.post(f"{url}{path}", json=body, headers=auth("root"), timeout=60)
    assert response.status_code == 404, response.text
    detail = response.json()["detail"]
    assert "no collection 'pubic'" in detail
    assert "public" in detail
    assert "secret" in detail  # root may read both


def test_a_limited_key_learns_nothing_of_collections_outside_its_own(server):
    url, _ = server
    details = []
    for name in ("pubic", "secret"):  # one missing, one existing: the same answer
        response = httpx.post(
            f"{url}/v1/search", json={"query": "tent", "collection": name}, headers=auth("alice")
        )
        assert response.status_code == 403
        details.append(response.json()["detail"].replace(name, "NAME"))
    assert details[0] == details[1]
    known = httpx.post(
        f"{url}/v1/search", json={"query": "tent", "collection": "public"}, headers=auth("alice")
    )
    assert known.status_code == 200
    assert known.json()["chunks"]
