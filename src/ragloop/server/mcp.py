"""The MCP server of ``ragloop mcp`` (and of ``ragloop serve`` at ``/mcp``), on the official SDK's
``MCPServer`` (mcp 2.x).

Tools, all read-only, with structured output:

- ``search(query, top_k, collection)``: one search of the knowledge base;
- ``fetch(id)``: a chunk by the id a search or a citation gave (the search/fetch pair that
  deep-research clients expect);
- ``retrieve(question)``: the evidence a RetrievalLoop gathers, with sources;
- ``ask(question, engine)``: a loop's answer with its citations resolved to sources; each event
  of the run is sent as a progress notification while it runs.

Over stdio the client is the user who started the process: it may read everything. Over
streamable HTTP a request names its key as the HTTP API does (``Authorization: Bearer``), and
without configured keys only this machine may connect.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field
from starlette.applications import Starlette
from starlette.types import ASGIApp, Receive, Scope, Send

from ragloop.observability.events import EventKind, LoopEvent
from ragloop.server.access import AccessDenied, Caller, LocalGuard, key_of
from ragloop.server.service import Outcome, Service

READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False, idempotent_hint=True)
RUNS = ToolAnnotations(read_only_hint=True, open_world_hint=False)
INSTRUCTIONS = (
    "ragloop searches a knowledge base and answers from it with retrieval loops. Use search for "
    "a quick look, fetch to read a chunk a result or citation names, retrieve to gather evidence "
    "for a hard question over several hops, and ask for a cited answer."
)


class Hit(BaseModel):
    id: str = Field(description="The chunk's id: fetch(id) reads it.")
    title: str | None
    source: str
    collection: str | None
    score: float
    text: str


class SearchResults(BaseModel):
    results: list[Hit]


class Source(BaseModel):
    number: int
    chunk_id: str | None
    source: str
    title: str | None


class Evidence(BaseModel):
    question: str
    results: list[Hit]
    stop_reason: str
    iterations: int
    run_id: str


class Answer(BaseModel):
    question: str
    answer: str | None
    sources: list[Source]
    engine: str
    stop_reason: str
    iterations: int
    run_id: str


def _hit(chunk: Any) -> Hit:
    title = chunk.metadata.get("title")
    collection = chunk.metadata.get("collection")
    return Hit(
        id=chunk.id,
        title=title if isinstance(title, str) else None,
        source=chunk.source,
        collection=collection if isinstance(collection, str) else None,
        score=round(chunk.score, 6),
        text=chunk.content,
    )


def build_mcp(service: Service) -> MCPServer:
    """The MCP server over ``service``."""
    server: MCPServer = MCPServer(
        "ragloop", instructions=INSTRUCTIONS, version=_version(), log_level="WARNING"
    )
    default_engine = service.settings.engine.default

    def caller(ctx: Context) -> Caller:
        request = ctx.request_context.request
        if request is None:  # stdio: the user who started the server
            return service.access.local_caller()
        headers = ctx.headers or {}
        client = getattr(getattr(request, "client", None), "host", None)
        key = key_of(headers.get("authorization"), headers.get("x-api-key"))
        return service.access.caller(key, client)

    @server.tool(annotations=READ_ONLY, structured_output=True)
    async def search(
        query: str, ctx: Context, top_k: int = 5, collection: str | None = None
    ) -> SearchResults:
        """Search the knowledge base: the top_k chunks most relevant to query, best first
        (optionally within one collection). Each result's id can be passed to fetch."""
        chunks = await _guard(
            service.search(caller(ctx), query, top_k=max(1, min(top_k, 50)), collections=collection)
        )
        return SearchResults(results=[_hit(c) for c in chunks])

    @server.tool(annotations=READ_ONLY, structured_output=True)
    async def fetch(id: str, ctx: Context) -> Hit:
        """Read one chunk by the id a search result or a citation gave: its full text, source
        and title."""
        who = caller(ctx)
        return _hit(await _guard(asyncio.to_thread(service.fetch, who, id)))

    @server.tool(annotations=RUNS, structured_output=True)
    async def retrieve(question: str, ctx: Context) -> Evidence:
        """Gather evidence for a question with the retrieval loop (several searches that follow
        what the first ones found); the chunks best first, with their sources."""
        result = (await _run(service, caller(ctx), "evidence", question, ctx)).result
        return Evidence(
            question=question,
            results=[_hit(c) for c in result.chunks[:20]],
            stop_reason=result.stop_reason.value,
            iterations=result.iterations,
            run_id=result.run_id,
        )

    @server.tool(annotations=RUNS, structured_output=True)
    async def ask(
        question: str,
        ctx: Context,
        engine: Literal["rag", "agent", "retrieval"] | None = None,
    ) -> Answer:
        """Answer a question from the knowledge base with a retrieval loop (engine rag, agent or
        retrieval; the server's default if left out); the answer cites its sources."""
        kind = engine or default_engine
        outcome = await _run(service, caller(ctx), kind, question, ctx)
        result = outcome.result
        return Answer(
            question=question,
            answer=result.answer,
            sources=[Source.model_validate(c) for c in outcome.citations],
            engine=kind,
            stop_reason=result.stop_reason.value,
            iterations=result.iterations,
            run_id=result.run_id,
        )

    return server


async def _run(service: Service, caller: Caller, kind: str, question: str, ctx: Context) -> Outcome:
    """Run a loop, each event sent as a progress notification."""
    done = 0
    try:
        async for item in service.run(caller, kind, question):
            if isinstance(item, Outcome):
                return item
            done += 1
            await ctx.report_progress(done, None, _progress(item))
    except AccessDenied as error:
        raise ToolError(error.message) from None
    raise RuntimeError("the run ended without a result")


def _progress(event: LoopEvent) -> str:
    a = event.attributes
    if event.kind is EventKind.SEARCH:
        return f"{event.engine}: searched {a.get('query')!r}, {len(a.get('chunks') or [])} chunks"
    if event.kind is EventKind.EVALUATION:
        return f"{event.engine}: answer scored {a.get('score')}"
    if event.kind is EventKind.RUN_FINISHED:
        return f"{event.engine}: finished ({a.get('stop_reason')})"
    return f"{event.engine}: {event.kind.value}"


async def _guard(work: Awaitable[Any]) -> Any:
    """A refused request is a tool error with the reason, as MCP clients show it."""
    try:
        return await work
    except AccessDenied as error:
        raise ToolError(error.message) from None


def _version() -> str:
    from importlib import metadata

    try:
        return metadata.version("ragloop")
    except metadata.PackageNotFoundError:  # pragma: no cover
        return "0"


class KeyCheck:
    """Refuses an HTTP request to MCP whose key is missing or unknown (401), or that comes from
    another machine when the server has no keys (403), before any MCP session starts."""

    def __init__(self, app: ASGIApp, service: Service) -> None:
        self.app = app
        self.service = service

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
            client = scope.get("client")
            try:
                self.service.access.caller(
                    key_of(headers.get("authorization"), headers.get("x-api-key")),
                    client[0] if client else None,
                )
            except AccessDenied as error:
                await error.response()(scope, receive, send)
                return
        await self.app(scope, receive, send)


def mcp_http_app(service: Service, *, path: str = "/mcp", guarded: bool = True) -> Starlette:
    """MCP over streamable HTTP at ``path``, keys checked; run its lifespan (the session
    manager) with the app that serves it. Without keys, :class:`LocalGuard` checks ``Host``
    and ``Origin`` (``guarded=False`` when the app serving it has the guard already); the SDK's
    own check is off so the rules are the same as the rest of the server's."""
    server = build_mcp(service)
    app = server.streamable_http_app(
        streamable_http_path=path,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    app.add_middleware(KeyCheck, service=service)
    if guarded:
        app.add_middleware(LocalGuard, access=service.access)
    return app
