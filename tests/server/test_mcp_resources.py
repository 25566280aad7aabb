"""MCP resources that are documents (issue 60, item 3), through the SDK's own client:
resources/list pages through the documents the caller may read, resources/read gives a
document's text with its version in _meta, and an unknown URI or a bad tool argument answers
one sentence naming what was wrong, with no traceback on the server."""

from __future__ import annotations

import logging

import pytest

pytest.importorskip("mcp", reason="the MCP tests need ragloop[server]")

from mcp import Client
from mcp.shared.exceptions import MCPError

from ragloop import Document, KnowledgeBase
from ragloop.config import Settings
from ragloop.kb.ingest.chunking import rejoin
from ragloop.server import mcp_documents
from ragloop.server.mcp import build_mcp
from ragloop.server.service import Service
from tests.server.conftest import build_kb
from tests.server.test_mcp_tools import serving_mcp

GUIDE = """# Tent guide

Pitch the tent with its back to the wind.

## Pegs

Drive each peg in at forty-five degrees, leaning away from the tent.
"""


@pytest.fixture(scope="module")
def kb_path(tmp_path_factory):
    path = build_kb(tmp_path_factory.mktemp("mcp-resources") / "kb.sqlite")
    with KnowledgeBase(path, embedder="hash") as kb:
        kb.add_documents(
            [Document(source="guide/tents.md", text=GUIDE, format="markdown")],
            collection="public",
        )
    return path


async def every_page(client: Client) -> list[list[str]]:
    pages, cursor = [], None
    while True:
        listed = await client.list_resources(cursor=cursor)
        pages.append([r.uri for r in listed.resources])
        cursor = listed.next_cursor
        if cursor is None:
            return pages


async def test_resources_list_pages_through_the_documents_a_key_may_read(
    kb_path, tmp_path, monkeypatch
):
    monkeypatch.setattr(mcp_documents, "RESOURCES_PAGE", 3)
    async with serving_mcp(kb_path, tmp_path, "alice") as (client, _):  # public only
        pages = await every_page(client)
    assert [len(p) for p in pages] == [3, 1]
    assert [uri for page in pages for uri in page] == [
        "ragloop://documents/public/guide/tents.md",
        "ragloop://documents/public/hire.md",
        "ragloop://documents/public/returns.md",
        "ragloop://documents/public/skylark.md",
    ]
    async with serving_mcp(kb_path, tmp_path, "root") as (client, _):
        everything = [uri for page in await every_page(client) for uri in page]
        assert "ragloop://documents/secret/launch.md" in everything
        assert len(everything) == 6
        with pytest.raises(MCPError, match="cursor: 'x' is not one this server gave"):
            await client.list_resources(cursor="x")


async def test_reading_a_document_gives_its_text_and_its_version(kb_path, tmp_path):
    async with serving_mcp(kb_path, tmp_path, "alice") as (client, service):
        read = await client.read_resource("ragloop://documents/public/guide/tents.md")
        (content,) = read.contents
        assert content.mime_type == "text/markdown"
        assert content.text == (
            "# Tent guide\n\nPitch the tent with its back to the wind.\n\n## Pegs\n\n"
            "Drive each peg in at forty-five degrees, leaning away from the tent.\n"
        )
        assert content.meta["version"] == service.kb.document_version("public", "guide/tents.md")
        assert content.meta["title"] == "tents"  # no title given: the name of its source
        for uri in ("ragloop://documents/secret/launch.md", "ragloop://documents/public/nope.md"):
            with pytest.raises(MCPError, match=r"^no document '(launch|nope)\.md' in collection"):
                await client.read_resource(uri)  # another key's reads as missing: no leak


async def test_unknown_uris_and_bad_arguments_answer_one_sentence_and_log_no_traceback(
    kb_path, tmp_path, caplog
):
    kb = KnowledgeBase(kb_path, create=False)
    service = Service(kb, Settings.model_validate({"server": {"traces": str(tmp_path / "t")}}))
    caplog.set_level(logging.DEBUG)
    try:
        async with Client(build_mcp(service)) as client:  # the user who started it: reads all
            for uri, said in (
                ("ragloop://nothing/here", "no resource 'ragloop://nothing/here': a document is"),
                ("ragloop://documents/zzz/a.md", "no document 'a.md' in collection 'zzz'"),
                ("ragloop://documents/public/", "no resource 'ragloop://documents/public/'"),
            ):
                with pytest.raises(MCPError) as refused:
                    await client.read_resource(uri)
                assert str(refused.value).startswith(said)
            for arguments, said in (
                ({"query": "tent", "top_k": 500}, "top_k: input should be less than or equal "
                 "to 50, not 500"),
                ({"query": "tent", "top_k": "many"}, "top_k: input should be a valid integer"),
                ({"top_k": 3}, "query: missing; give it"),
                ({"query": ""}, "query: string should have at least 1 character, not ''"),
                ({"query": "  "}, "query: empty; give some text"),
            ):  # fmt: skip
                answered = await client.call_tool("search", arguments)
                assert answered.is_error
                text = answered.content[0].text
                assert said in text, text
                assert "\n" not in text
                assert "pydantic" not in text
    finally:
        service.close()
        kb.close()
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"


def test_a_document_is_put_together_from_its_chunks_with_each_cut_once():
    pieces = [
        (["Guide"], "One. Two. Three is long enough to carry over into the next piece."),
        (["Guide"], "Three is long enough to carry over into the next piece. Four."),
        (["Guide", "Pegs"], "Pegs go in at an angle."),
        (["Guide"], "Back in the guide."),
    ]
    assert rejoin(pieces) == (
        "# Guide\n\nOne. Two. Three is long enough to carry over into the next piece.\n\n"
        "Four.\n\n## Pegs\n\nPegs go in at an angle.\n\nBack in the guide.\n"
    )
