"""The MCP server with the SDK's own client, over stdio (a real `ragloop mcp` process) and over
streamable HTTP (uvicorn on 127.0.0.1)."""

from __future__ import annotations

import os
import sys

import pytest

mcp = pytest.importorskip("mcp", reason="the MCP tests need ragloop[server]")

import httpx2  # noqa: E402
from mcp import Client, StdioServerParameters  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

from ragloop import KnowledgeBase  # noqa: E402
from ragloop.server.mcp import mcp_http_app  # noqa: E402
from ragloop.server.running import BackgroundServer  # noqa: E402
from ragloop.server.service import Service  # noqa: E402
from tests.server.conftest import KEYS, key_settings  # noqa: E402

QUESTION = "How much does the Skylark 2 weigh?"


async def check_tools(client: Client, *, sees_secret: bool) -> None:
    tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert set(tools) == {"search", "fetch", "retrieve", "ask", "collections"}
    for tool in tools.values():
        assert tool.annotations.read_only_hint is True
        assert tool.output_schema is not None

    found = await client.call_tool("search", {"query": "tent weighs", "top_k": 10})
    assert not found.is_error, found.content
    results = found.structured_content["results"]
    collections = {r["collection"] for r in results}
    assert collections == ({"public", "secret"} if sees_secret else {"public"})

    fetched = await client.call_tool("fetch", {"id": results[0]["id"]})
    assert fetched.structured_content["text"] == results[0]["text"]

    progress: list[tuple[float, str | None]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, message))

    answered = await client.call_tool("ask", {"question": QUESTION}, progress_callback=on_progress)
    answer = answered.structured_content
    assert "2.1 kg" in answer["answer"]
    assert answer["sources"][0]["source"] == "skylark.md"
    assert progress
    assert any("searched" in (m or "") for _, m in progress)

    evidence = (await client.call_tool("retrieve", {"question": QUESTION})).structured_content
    assert evidence["results"][0]["source"] == "skylark.md"


async def test_stdio_with_the_sdk_client(kb_file, tmp_path):
    env = {**os.environ, "RAGLOOP_CONFIG": str(tmp_path / "none.toml")}
    (tmp_path / "none.toml").write_text(f'[server]\ntraces = "{tmp_path / "t.sqlite"}"\n')
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "ragloop", "mcp", "--kb", str(kb_file)], env=env
    )
    async with Client(params, read_timeout_seconds=120) as client:
        await check_tools(client, sees_secret=True)  # stdio: the user who started it


async def test_streamable_http_with_keys(kb_file, tmp_path):
    settings = key_settings(traces=str(tmp_path / "t.sqlite"))
    kb = KnowledgeBase(kb_file, create=False)
    service = Service(kb, settings)
    try:
        with BackgroundServer(mcp_http_app(service)) as running:
            url = f"{running.url}/mcp"
            headers = {"Authorization": f"Bearer {KEYS['alice']}"}
            async with (
                httpx2.AsyncClient(headers=headers, timeout=120) as http,
                Client(streamable_http_client(url, http_client=http)) as client,
            ):
                await check_tools(client, sees_secret=False)
                refused = await client.call_tool(
                    "search", {"query": "tent", "collection": "secret"}
                )
                assert refused.is_error
                assert "may not read collection 'secret'" in refused.content[0].text
            async with httpx2.AsyncClient(timeout=30) as http:
                response = await http.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
                assert response.status_code == 401
    finally:
        service.close()
        kb.close()


async def test_the_http_app_serves_mcp_at_slash_mcp(server):
    url, _ = server
    headers = {"Authorization": f"Bearer {KEYS['root']}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=120) as http,
        Client(streamable_http_client(f"{url}/mcp", http_client=http)) as client,
    ):
        await check_tools(client, sees_secret=True)
    async with httpx2.AsyncClient(timeout=30) as http:
        refused = await http.post(f"{url}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
    assert refused.status_code == 401
