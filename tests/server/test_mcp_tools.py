"""The MCP tools as an assistant sees them (issue 31, item 20), through the SDK's client over
streamable HTTP: hits name their section and a citation a person can open, every argument has
a description and bounds (out of range: a tool error, not a silent clamp), a collections tool,
and ask/retrieve limited to one of the caller's collections."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import pytest

mcp = pytest.importorskip("mcp", reason="the MCP tests need ragloop[server]")

import httpx2  # noqa: E402
from mcp import Client  # noqa: E402
from mcp.client.streamable_http import streamable_http_client  # noqa: E402

from ragloop import Document, KnowledgeBase  # noqa: E402
from ragloop.server.mcp import mcp_http_app  # noqa: E402
from ragloop.server.running import BackgroundServer  # noqa: E402
from ragloop.server.service import Service  # noqa: E402
from tests.server.conftest import KEYS, build_kb, key_settings  # noqa: E402

SKYLARK = """# Skylark 2

A two-person tent.

## Price and warranty

The Skylark 2 costs 240 pounds and carries a five-year warranty.
"""


@pytest.fixture(scope="module")
def kb_path(tmp_path_factory):
    path = build_kb(tmp_path_factory.mktemp("mcp-tools") / "kb.sqlite")
    with KnowledgeBase(path, embedder="hash") as kb:
        kb.add_documents(
            [
                Document(source="products/skylark-2.md", text=SKYLARK, format="markdown"),
                Document(
                    source="faq.md",
                    title="Shop FAQ",
                    text="Orders ship within two days of payment.",
                    metadata={"url": "https://shop.example/faq"},
                ),
            ],
            collection="public",
        )
    return path


@contextlib.asynccontextmanager
async def connect(
    kb_path, tmp_path, key: str = "alice", model: object = None
) -> AsyncIterator[Client]:
    """An MCP client session as alice (who may read the collection public only); a context
    manager, not a fixture: the SDK's task group must close in the task that opened it."""
    async with serving_mcp(kb_path, tmp_path, key, model) as (client, _):
        yield client


@contextlib.asynccontextmanager
async def serving_mcp(
    kb_path, tmp_path, key: str = "alice", model: object = None
) -> AsyncIterator[tuple[Client, Service]]:
    """:func:`connect`'s session, and the service behind the server."""
    kb = KnowledgeBase(kb_path, create=False)
    service = Service(kb, key_settings(traces=str(tmp_path / "t.sqlite")))
    if model is not None:
        service.model = model
    try:
        with BackgroundServer(mcp_http_app(service)) as running:
            headers = {"Authorization": f"Bearer {KEYS[key]}"}
            async with (
                httpx2.AsyncClient(headers=headers, timeout=120) as http,
                Client(streamable_http_client(f"{running.url}/mcp", http_client=http)) as client,
            ):
                yield client, service
    finally:
        service.close()
        kb.close()


async def test_a_hit_names_its_section_and_a_citation_to_open(kb_path, tmp_path):
    async with connect(kb_path, tmp_path) as session:
        found = await session.call_tool("search", {"query": "Skylark 2 price warranty", "top_k": 3})
        assert not found.is_error, found.content
        top = found.structured_content["results"][0]
        assert top["source"] == "products/skylark-2.md"
        assert top["heading"] == "Skylark 2 > Price and warranty"
        assert top["citation"] == "products/skylark-2.md#price-and-warranty"

        faq = await session.call_tool("search", {"query": "orders ship payment", "top_k": 1})
        assert faq.structured_content["results"][0]["citation"] == "https://shop.example/faq"

        fetched = await session.call_tool("fetch", {"id": top["id"]})
        assert fetched.structured_content["heading"] == "Skylark 2 > Price and warranty"


async def test_every_tool_and_argument_is_described_and_bounded(kb_path, tmp_path):
    async with connect(kb_path, tmp_path) as session:
        tools = {tool.name: tool for tool in (await session.list_tools()).tools}
        assert set(tools) == {"search", "fetch", "retrieve", "ask", "collections"}
        for tool in tools.values():
            assert tool.description, tool.name
            for name, schema in tool.input_schema.get("properties", {}).items():
                assert schema.get("description"), f"{tool.name}.{name} has no description"
        top_k = tools["search"].input_schema["properties"]["top_k"]
        assert (top_k["minimum"], top_k["maximum"]) == (1, 50)
        evidence_k = tools["retrieve"].input_schema["properties"]["top_k"]
        assert (evidence_k["minimum"], evidence_k["maximum"]) == (1, 50)

        too_many = await session.call_tool("search", {"query": "tent", "top_k": 500})
        assert too_many.is_error  # not 50 results in silence
        assert "top_k" in too_many.content[0].text
        assert "less than or equal to 50" in too_many.content[0].text
        none = await session.call_tool("search", {"query": "tent", "top_k": 0})
        assert none.is_error


async def test_the_collections_tool_lists_what_the_caller_may_read(kb_path, tmp_path):
    async with connect(kb_path, tmp_path) as session:
        listed = await session.call_tool("collections", {})
        assert not listed.is_error, listed.content
        collections = listed.structured_content["collections"]
        assert [c["name"] for c in collections] == ["public"]  # not secret
        assert collections[0]["documents"] == 5
        assert collections[0]["chunks"] >= 5


async def test_ask_and_retrieve_keep_to_the_collection_asked(kb_path, tmp_path):
    async with connect(kb_path, tmp_path) as session:
        question = "How much does the Skylark 2 cost?"
        answered = await session.call_tool("ask", {"question": question, "collection": "public"})
        assert not answered.is_error, answered.content
        assert "240 pounds" in answered.structured_content["answer"]

        evidence = await session.call_tool(
            "retrieve", {"question": question, "collection": "public", "top_k": 2}
        )
        results = evidence.structured_content["results"]
        assert len(results) <= 2
        assert {r["collection"] for r in results} == {"public"}

        for tool, arguments in (
            ("ask", {"question": question, "collection": "secret"}),
            ("retrieve", {"question": question, "collection": "secret"}),
        ):
            refused = await session.call_tool(tool, arguments)
            assert refused.is_error
            assert "may not read collection 'secret'" in refused.content[0].text

        unknown = await session.call_tool("ask", {"question": question, "collection": "pubic"})
        assert unknown.is_error
        expected = "may not read collection 'pubic'; collections you may read: 'public'"
        assert expected in unknown.content[0].text


async def test_an_unknown_collection_is_named_with_the_known_ones(kb_path, tmp_path):
    async with connect(kb_path, tmp_path, key="root") as session:
        unknown = await session.call_tool("search", {"query": "tent", "collection": "pubic"})
        assert unknown.is_error  # not an empty result
        text = unknown.content[0].text
        assert "no collection 'pubic'; collections you may read: 'public', 'secret'" in text


async def test_a_failing_model_is_a_tool_error_with_the_reason(kb_path, tmp_path):
    from ragloop.providers import override_allow_model_requests
    from ragloop.providers.http import RetryPolicy
    from ragloop.providers.openai_compat import OpenAICompatibleModel
    from tests.server.test_error_statuses import closed_port

    model = OpenAICompatibleModel(
        "local-model",
        base_url=f"http://127.0.0.1:{closed_port()}/v1",
        retry=RetryPolicy(max_attempts=1),
    )
    with override_allow_model_requests("loopback"):
        async with connect(kb_path, tmp_path, model=model) as session:
            failed = await session.call_tool("ask", {"question": "What does a tent cost?"})
    assert failed.is_error
    assert "the model failed: could not reach http://127.0.0.1" in failed.content[0].text
    assert "(502)" in failed.content[0].text


async def test_an_unsure_answer_says_what_was_found_and_what_was_not(kb_path, tmp_path):
    question = "How much does the Skylark 2 weigh, and what does a helicopter rescue cost?"
    async with connect(kb_path, tmp_path) as session:
        answered = await session.call_tool("ask", {"question": question, "collection": "public"})
        assert not answered.is_error, answered.content
        result = answered.structured_content
        assert result["confident"] is False
        assert [p["found"] for p in result["gaps"]["parts"]] == [True, False]
        # a chat client reads the text: its last line says it
        assert "not found: 'what does a helicopter rescue cost'" in result["answer"]


async def test_a_document_is_a_resource_and_a_listener_hears_when_it_changes(kb_path, tmp_path):
    import anyio

    async with serving_mcp(kb_path, tmp_path) as (client, service):
        kb = service.kb
        found = await client.call_tool("search", {"query": "Skylark 2 warranty"})
        uri = found.structured_content["results"][0]["resource"]
        assert uri == "ragloop://documents/public/products/skylark-2.md"
        read = await client.read_resource(uri)
        before = read.contents[0].meta  # the text is the document's; its _meta, what it is
        assert before["source"] == "products/skylark-2.md"
        assert before["version"] == kb.document_version("public", "products/skylark-2.md")
        assert "five-year" in read.contents[0].text

        async with client.listen(
            resource_subscriptions=[uri], resources_list_changed=True
        ) as events:
            edited = SKYLARK.replace("five-year", "ten-year")
            await anyio.to_thread.run_sync(
                lambda: kb.add_documents(
                    [Document(source="products/skylark-2.md", text=edited)], collection="public"
                )
            )
            service.documents_changed("public", ["products/skylark-2.md"])
            heard = []
            with anyio.fail_after(20):
                async for event in events:
                    heard.append(event)
                    if len(heard) == 2:
                        break
        assert [type(e).__name__ for e in heard] == ["ResourceUpdated", "ResourcesListChanged"]
        assert heard[0].uri == uri
        after = (await client.read_resource(uri)).contents[0]
        assert after.meta["version"] != before["version"]
        assert "ten-year" in after.text

        secret = await _refused(client, "ragloop://documents/secret/launch.md")
        assert "secret" in secret
        kb.add_documents(  # as the module's other tests read it
            [Document(source="products/skylark-2.md", text=SKYLARK, format="markdown")],
            collection="public",
        )


async def _refused(client, uri: str) -> str:
    """The error a resource read is refused with."""
    from mcp.shared.exceptions import MCPError

    try:
        await client.read_resource(uri)
    except MCPError as error:
        return str(error)
    raise AssertionError(f"{uri} was read")


async def test_a_listener_hears_only_collections_its_key_may_read(kb_path, tmp_path):
    """A scoped admin may not listen to another collection's document (issue 58, item 1); a
    key that may read it does."""
    import anyio
    from mcp.shared.exceptions import MCPError

    secret = "ragloop://documents/secret/launch.md"

    async def first_event(client, uri: str):
        with anyio.fail_after(20):
            async with client.listen(resource_subscriptions=[uri]) as events:
                async for event in events:
                    return event
        return None

    for uri in (secret, "ragloop://documents/%73ecret/launch.md"):
        async with serving_mcp(kb_path, tmp_path, "pubadmin") as (client, _):
            with pytest.raises(MCPError, match="may not read collection 'secret'"):
                await first_event(client, uri)
    async with serving_mcp(kb_path, tmp_path, "root") as (client, service):
        async with client.listen(resource_subscriptions=[secret]) as events:
            service.documents_changed("secret", ["launch.md"])
            heard = None
            with anyio.fail_after(20):
                async for event in events:
                    heard = event
                    break
        assert heard is not None
        assert heard.uri == secret
