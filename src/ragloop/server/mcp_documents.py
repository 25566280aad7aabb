"""The knowledge base's documents as MCP resources (part of :mod:`ragloop.server.mcp`).

Each document is ``ragloop://documents/{collection}/{source}``: ``resources/list`` pages through
the documents the caller may read, ``resources/read`` gives a document's text with its version
in ``_meta`` (:class:`DocumentResources`); a ``subscriptions/listen`` for a document of a
collection the caller may not read is refused (:class:`ListenScope`); :class:`DocumentNotices`
tells listening clients that documents changed.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import Future
from typing import Any
from urllib.parse import quote, unquote

from mcp.server.context import CallNext, ServerRequestContext
from mcp.server.mcpserver.exceptions import ResourceNotFoundError
from mcp.server.subscriptions import InMemorySubscriptionBus, ResourcesListChanged, ResourceUpdated
from mcp.shared.exceptions import MCPError
from mcp.types import (
    INVALID_PARAMS,
    ListResourcesResult,
    ReadResourceResult,
    Resource,
    TextResourceContents,
)

from ragloop.kb.knowledge_base import DocumentText
from ragloop.server.access import AccessDenied, Caller, key_of
from ragloop.server.service import Service

DOCUMENTS = "ragloop://documents"  # a document's resource: DOCUMENTS/{collection}/{source}
RESOURCES_PAGE = 100  # documents a resources/list answer names
TEXT = "text/markdown"  # what a document resource reads as: its headings are Markdown's


def document_uri(collection: str, source: str) -> str:
    """A document's MCP resource URI (the source's slashes kept, everything else quoted)."""
    return f"{DOCUMENTS}/{quote(collection, safe='')}/{quote(source, safe='/')}"


class DocumentNotices:
    """Tells MCP clients that documents changed: a resource-updated event for each, then a
    resources-list-changed one, on the subscription bus of the server's event loop (the first
    request made it known: with no request yet, nobody listens). :meth:`changed` may be
    called from any thread (a folder watcher's, a route's)."""

    def __init__(self) -> None:
        self.bus = InMemorySubscriptionBus()
        self.loop: asyncio.AbstractEventLoop | None = None
        self._pending: set[Future[None]] = set()  # held until published: none is dropped

    def changed(self, collection: str, sources: list[str]) -> None:
        loop = self.loop
        if loop is None or loop.is_closed():
            return
        events: list[Any] = [ResourceUpdated(uri=document_uri(collection, s)) for s in sources]
        events.append(ResourcesListChanged())

        async def publish() -> None:
            for event in events:
                await self.bus.publish(event)

        # from the loop's own thread (a route) or another (a watcher): the loop runs it
        pending = asyncio.run_coroutine_threadsafe(publish(), loop)
        self._pending.add(pending)
        pending.add_done_callback(self._pending.discard)


def caller_of_request(service: Service, request: Any) -> Caller:
    """Who sent an MCP request: over stdio (no HTTP request) the user who started the server;
    over HTTP the key its headers name, as the HTTP API reads it."""
    if request is None:
        return service.access.local_caller()
    headers = getattr(request, "headers", None) or {}
    client = getattr(getattr(request, "client", None), "host", None)
    key = key_of(headers.get("authorization"), headers.get("x-api-key"))
    return service.access.caller(key, client)


class ListenScope:
    """Refuses a ``subscriptions/listen`` for a document of a collection the caller may not
    read, so nobody hears when another collection's documents change (an MCP server
    middleware: it sees the request before the SDK's listen handler subscribes it)."""

    def __init__(self, service: Service) -> None:
        self.service = service

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> Any:
        if ctx.method == "subscriptions/listen":
            notifications = (ctx.params or {}).get("notifications")
            uris = (
                notifications.get("resourceSubscriptions")
                if isinstance(notifications, dict)
                else None
            )
            if isinstance(uris, list) and uris:
                who = caller_of_request(self.service, ctx.request)
                for uri in uris:
                    collection = collection_of_uri(uri)
                    if collection is not None and not who.may_read(collection):
                        raise MCPError(
                            INVALID_PARAMS,
                            f"this key may not read collection {collection!r} ({uri})",
                        )
        return await call_next(ctx)


def collection_of_uri(uri: object) -> str | None:
    """The collection a document resource URI names (None: not a document URI)."""
    if not isinstance(uri, str) or not uri.startswith(f"{DOCUMENTS}/"):
        return None
    return unquote(uri[len(DOCUMENTS) + 1 :].split("/", 1)[0])


async def read_document(service: Service, who: Caller, uri: object) -> DocumentText:
    """The document a resource URI names, if the caller may read it; anything else is a
    ``ResourceNotFoundError`` with one sentence saying what was wrong."""
    collection = collection_of_uri(uri)
    source = unquote(str(uri)[len(DOCUMENTS) + 1 :].partition("/")[2])
    if collection is None or not source:
        raise ResourceNotFoundError(
            f"no resource {uri!r}: a document is {DOCUMENTS}/COLLECTION/SOURCE "
            "(resources/list names them)"
        )
    try:
        return await asyncio.to_thread(service.document, who, collection, source)
    except AccessDenied as error:
        raise ResourceNotFoundError(error.message) from None


class DocumentResources:
    """Serves the documents as resources (an MCP server middleware: the SDK lists only
    resources registered one by one, and reads a template's as one blob without metadata):
    ``resources/list`` pages through the documents the caller may read, ``resources/read``
    gives a document's text with its version in ``_meta``."""

    def __init__(self, service: Service, notices: DocumentNotices) -> None:
        self.service = service
        self.notices = notices

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> Any:
        if self.notices.loop is None:  # over stdio the first request makes the loop known
            self.notices.loop = asyncio.get_running_loop()
        if ctx.method == "resources/read":
            return await self.read(ctx)
        if ctx.method != "resources/list":
            return await call_next(ctx)
        await call_next(ctx)  # the SDK's checks of the request; its list has no documents
        return await self.listed(ctx)

    async def listed(self, ctx: ServerRequestContext[Any, Any]) -> ListResourcesResult:
        cursor = (ctx.params or {}).get("cursor")
        if cursor is not None and not (isinstance(cursor, str) and cursor.isdigit()):
            raise MCPError(INVALID_PARAMS, f"cursor: {cursor!r} is not one this server gave")
        offset = int(cursor or 0)
        who = caller_of_request(self.service, ctx.request)
        total, found = await asyncio.to_thread(
            self.service.documents, who, None, offset=offset, limit=RESOURCES_PAGE
        )
        listed = [
            Resource(
                uri=document_uri(d.collection, d.source),
                name=d.source,
                title=d.title or d.source,
                description=f"{d.title or d.source} (collection {d.collection})",
                mime_type=TEXT,
            )
            for d in found
        ]
        following = offset + len(found)
        return ListResourcesResult(
            resources=listed, next_cursor=str(following) if following < total else None
        )

    async def read(self, ctx: ServerRequestContext[Any, Any]) -> ReadResourceResult:
        uri = (ctx.params or {}).get("uri")
        who = caller_of_request(self.service, ctx.request)
        try:
            found = await read_document(self.service, who, uri)
        except ResourceNotFoundError as error:
            raise MCPError(INVALID_PARAMS, str(error)) from None
        meta = found.model_dump(exclude={"text"})
        text = TextResourceContents(uri=str(uri), text=found.text, mime_type=TEXT, _meta=meta)
        return ReadResourceResult(contents=[text])
