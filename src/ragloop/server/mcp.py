"""The MCP server of ``ragloop mcp`` (and of ``ragloop serve`` at ``/mcp``), on the official SDK's
``MCPServer`` (mcp 2.x).

Tools, all read-only, with structured output; every argument has a description and its
bounds in the input schema (a value out of range is a tool error naming it, never clamped):

- ``search(query, top_k, collection)``: one search of the knowledge base;
- ``fetch(id)``: a chunk by the id a search or a citation gave (the search/fetch pair that
  deep-research clients expect);
- ``retrieve(question, top_k, collection)``: the evidence a RetrievalLoop gathers, with sources;
- ``ask(question, engine, collection)``: a loop's answer with its citations resolved to
  sources; each event of the run is sent as a progress notification while it runs;
- ``collections()``: the collections the caller may read, with their document counts.

Resources: each document is ``ragloop://documents/{collection}/{source}`` (every hit names its
``resource``); ``resources/list`` pages through the documents the caller may read (a hundred at a
time, ``nextCursor`` for the rest), and reading one gives its text (its sections' headings as
Markdown headings) with its collection, source, title and version (its content hash) in
``_meta``. An unknown URI, a document that is not there and a tool argument out of its bounds
each answer one sentence naming what was wrong, never a traceback or a pydantic dump. A client
that listens for it (``subscriptions/listen`` with the URI, MCP 2026-07-28) is told when it
changes (``notifications/resources/updated``: an admin's write through the API, or a folder the
server watches) and that the list of documents changed, so an assistant can re-ask what it
answered from the old version. The notices of ``ragloop serve --workers N`` reach the clients
of the worker that made the change (a watching parent's reach none).

Each hit carries the section it comes from as the CLI shows it (``heading``: "Skylark 2 >
Price and warranty") and a ``citation`` a person can open: the document's URL when it has one
(a ``url`` in its metadata), else the source with the section's anchor
(``products/skylark-2.md#price-and-warranty``). A failure is a tool error with the reason the
HTTP API gives (``the model failed: ...``), never a bare "Error executing tool".

Over stdio the client is the user who started the process: it may read everything. Over
streamable HTTP a request names its key as the HTTP API does (``Authorization: Bearer``), and
without configured keys only this machine may connect.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Literal, get_type_hints
from urllib.parse import unquote

from mcp.server.context import CallNext, ServerRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from mcp.types import (
    CallToolResult,
    TextContent,
    ToolAnnotations,
)
from pydantic import BaseModel, Field, ValidationError, create_model
from starlette.applications import Starlette

from ragloop.core.records.gaps import EvidenceGaps
from ragloop.observability.events import EventKind, LoopEvent
from ragloop.server import errors
from ragloop.server.access import AccessDenied, AccessLog, Caller, KeyCheck, LocalGuard
from ragloop.server.mcp_documents import (
    DOCUMENTS,
    TEXT,
    DocumentNotices,
    DocumentResources,
    ListenScope,
    caller_of_request,
    document_uri,
    read_document,
)
from ragloop.server.service import Outcome, Service, chat_text, version

READ_ONLY = ToolAnnotations(read_only_hint=True, open_world_hint=False, idempotent_hint=True)
RUNS = ToolAnnotations(read_only_hint=True, open_world_hint=False)
INSTRUCTIONS = (
    "ragloop searches a knowledge base and answers from it with retrieval loops. Use search for "
    "a quick look, fetch to read a chunk a result or citation names, retrieve to gather evidence "
    "for a hard question over several hops, and ask for a cited answer."
)


MAX_TOP_K = 50
MAX_EVIDENCE = 50
# the argument types, with their descriptions and bounds (module level: the SDK reads the
# annotations, strings under `from __future__ import annotations`, in this module's names);
# a question longer than the server's max_question_chars is a tool error saying so
Query = Annotated[str, Field(description="What to search for, in words.", min_length=1)]
Question = Annotated[str, Field(description="The question to answer.", min_length=1)]
Collection = Annotated[
    str | None,
    Field(
        description="Only this collection (the collections tool lists those you may read); "
        "default: every collection you may read.",
        min_length=1,
    ),
]
TopK = Annotated[int, Field(description="How many chunks to return.", ge=1, le=MAX_TOP_K)]
EvidenceK = Annotated[
    int, Field(description="How many chunks of evidence to return.", ge=1, le=MAX_EVIDENCE)
]
ChunkId = Annotated[
    str, Field(description="A chunk id from a search result or a citation.", min_length=1)
]
Engine = Annotated[
    Literal["rag", "agent", "retrieval"] | None,
    Field(description="The loop that answers; default: the server's."),
]


class Hit(BaseModel):
    id: str = Field(description="The chunk's id: fetch(id) reads it.")
    resource: str | None = Field(
        default=None,
        description="The document's MCP resource: listen to it to hear when it changes.",
    )
    title: str | None = Field(description="The document's title.")
    heading: str | None = Field(
        description="The section the chunk comes from, its headings joined by ' > '."
    )
    citation: str = Field(
        description="Where a person reads it: the document's URL, else source#section-anchor."
    )
    source: str = Field(description="The document's source (its path in the knowledge base).")
    collection: str | None
    score: float
    text: str


class SearchResults(BaseModel):
    results: list[Hit]


class CollectionOut(BaseModel):
    name: str
    documents: int = Field(description="How many documents it holds.")
    chunks: int = Field(description="How many chunks they were cut into.")


class Collections(BaseModel):
    collections: list[CollectionOut]


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
    """``answer`` ends, when the run is not confident, with one line of what was found and
    what was not; ``gaps`` is that report in full."""

    question: str
    answer: str | None
    sources: list[Source]
    engine: str
    stop_reason: str
    iterations: int
    run_id: str
    confident: bool
    probability: float | None = None
    gaps: EvidenceGaps | None = None


def _hit(chunk: Any) -> Hit:
    title = chunk.metadata.get("title")
    collection = chunk.metadata.get("collection")
    path = [str(h) for h in chunk.metadata.get("heading_path") or [] if str(h).strip()]
    return Hit(
        id=chunk.id,
        resource=document_uri(collection, chunk.source) if isinstance(collection, str) else None,
        title=title if isinstance(title, str) else None,
        heading=" > ".join(path) or (title if isinstance(title, str) and title else None),
        citation=citation(chunk.source, chunk.metadata.get("url"), path),
        source=chunk.source,
        collection=collection if isinstance(collection, str) else None,
        score=round(chunk.score, 6),
        text=chunk.content,
    )


def citation(source: str, url: object, headings: list[str]) -> str:
    """What a person opens: the document's own URL, else its source with the anchor that
    Markdown renderers (GitHub, MkDocs) give the chunk's innermost section."""
    if isinstance(url, str) and url.startswith(("http://", "https://")):
        return url
    if len(headings) < 2:  # the document's own title: the top of the page
        return source
    return f"{source}#{anchor(headings[-1])}"


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    kept = "".join(c for c in heading.strip().lower() if c.isalnum() or c in " -_")
    return kept.replace(" ", "-")


def build_mcp(service: Service, notices: DocumentNotices | None = None) -> MCPServer:
    """The MCP server over ``service``; ``notices`` carries its document-change events (made
    here, and told of the service's writes, when not given)."""
    notices = notices or DocumentNotices()
    service.on_documents_changed(notices.changed)
    tool_checks = ArgumentSentences()
    server: MCPServer = MCPServer(
        "ragloop",
        instructions=INSTRUCTIONS,
        version=version(),
        log_level="WARNING",
        subscriptions=notices.bus,
        middleware=[ListenScope(service), DocumentResources(service, notices), tool_checks],
    )
    default_engine = service.settings.engine.default

    def caller(ctx: Context) -> Caller:
        return caller_of_request(service, ctx.request_context.request)

    def scope(who: Caller, collection: str | None) -> str | None:
        """``collection`` if the caller may read it and it exists (an unknown name is an
        error listing the known ones, not an empty result)."""
        if collection is None:
            return None
        known = [c["name"] for c in service.collections(who)]
        if collection in known:
            return collection
        names = ", ".join(repr(n) for n in known) or "none"
        try:
            who.scope(collection)  # outside the key's collections: the 403's message
        except AccessDenied as error:
            raise ToolError(f"{error.message}; collections you may read: {names}") from None
        raise ToolError(f"no collection {collection!r}; collections you may read: {names}")

    @server.tool(annotations=READ_ONLY, structured_output=True)
    async def search(
        query: Query,
        ctx: Context,
        top_k: TopK = 5,
        collection: Collection = None,
    ) -> SearchResults:
        """Search the knowledge base: the top_k chunks most relevant to query, best first
        (optionally within one collection). Each result names its section (heading), a
        citation to open, and an id that fetch reads."""
        who = caller(ctx)
        chunks = await _guard(
            service.search(who, query, top_k=top_k, collections=_in(scope, who, collection))
        )
        return SearchResults(results=[_hit(c) for c in chunks])

    @server.tool(annotations=READ_ONLY, structured_output=True)
    async def fetch(
        id: ChunkId,
        ctx: Context,
    ) -> Hit:
        """Read one chunk by the id a search result or a citation gave: its full text, source,
        section and title."""
        who = caller(ctx)
        return _hit(await _guard(asyncio.to_thread(service.fetch, who, id)))

    @server.tool(annotations=READ_ONLY, structured_output=True)
    async def collections(ctx: Context) -> Collections:
        """The collections you may read, with how many documents and chunks each holds (pass
        a name as the collection argument of search, retrieve or ask)."""
        found = await _guard(asyncio.to_thread(service.collections, caller(ctx)))
        return Collections(collections=[CollectionOut.model_validate(c) for c in found])

    @server.tool(annotations=RUNS, structured_output=True)
    async def retrieve(
        question: Question,
        ctx: Context,
        top_k: EvidenceK = 20,
        collection: Collection = None,
    ) -> Evidence:
        """Gather evidence for a question with the retrieval loop (several searches that follow
        what the first ones found); the chunks best first, with their sources and sections."""
        who = caller(ctx)
        within = _in(scope, who, collection)
        result = (await _run(service, who, "evidence", question, ctx, within)).result
        return Evidence(
            question=question,
            results=[_hit(c) for c in result.chunks[:top_k]],
            stop_reason=result.stop_reason.value,
            iterations=result.iterations,
            run_id=result.run_id,
        )

    @server.tool(annotations=RUNS, structured_output=True)
    async def ask(
        question: Question,
        ctx: Context,
        engine: Engine = None,
        collection: Collection = None,
    ) -> Answer:
        """Answer a question from the knowledge base with a retrieval loop (engine rag, agent or
        retrieval; the server's default if left out); the answer cites its sources."""
        kind = engine or default_engine
        who = caller(ctx)
        outcome = await _run(service, who, kind, question, ctx, _in(scope, who, collection))
        result = outcome.result
        return Answer(
            question=question,
            answer=chat_text(result) or None,
            sources=[Source.model_validate(c) for c in outcome.citations],
            engine=kind,
            stop_reason=result.stop_reason.value,
            iterations=result.iterations,
            run_id=result.run_id,
            confident=result.confident,
            probability=result.probability,
            gaps=result.gaps,
        )

    @server.resource(
        f"{DOCUMENTS}/{{collection}}/{{+source}}",
        name="document",
        description="A document of the knowledge base: its text, with its collection, source, "
        "title and version (content hash) in _meta. Listen to it to hear when it is edited "
        "or removed.",
        mime_type=TEXT,
    )
    async def document(collection: str, source: str, ctx: Context) -> str:
        # what a tool reads with ctx.read_resource; clients' reads are DocumentResources'
        uri = document_uri(unquote(collection), unquote(source))
        return (await read_document(service, caller(ctx), uri)).text

    tool_checks.tools.update(
        search=search, fetch=fetch, collections=collections, retrieve=retrieve, ask=ask
    )
    return server


class ArgumentSentences:
    """A tool call whose arguments do not fit the tool's input schema answers one sentence
    naming the argument (``top_k: must be at most 50, not 500``), not pydantic's report with
    its URL (an MCP server middleware: the SDK's validation runs first, and only a call it
    refused is read again here, against the tool's own signature)."""

    def __init__(self) -> None:
        self.tools: dict[str, Callable[..., Any]] = {}

    async def __call__(self, ctx: ServerRequestContext[Any, Any], call_next: CallNext) -> Any:
        result = await call_next(ctx)
        failed = (
            result.get("isError") if isinstance(result, dict) else getattr(result, "is_error", 0)
        )
        if ctx.method != "tools/call" or not failed:
            return result
        params = ctx.params or {}
        tool = self.tools.get(str(params.get("name")))
        sentence = None if tool is None else argument_problem(tool, params.get("arguments"))
        if sentence is None:
            return result
        return CallToolResult(content=[TextContent(type="text", text=sentence)], is_error=True)


def argument_problem(tool: Callable[..., Any], arguments: object) -> str | None:
    """What is wrong with a tool's arguments, in one sentence naming them (None: nothing)."""
    hints = get_type_hints(tool, include_extras=True)
    fields: dict[str, Any] = {
        name: (hints[name], ... if p.default is p.empty else p.default)
        for name, p in inspect.signature(tool).parameters.items()
        if name != "ctx"
    }
    try:
        create_model(f"{tool.__name__}_arguments", **fields).model_validate(
            arguments if isinstance(arguments, dict) else {}
        )
    except ValidationError as error:
        return errors.sentence_of(error)
    return None


def _in(
    scope: Callable[[Caller, str | None], str | None], who: Caller, collection: str | None
) -> str | None:
    """The checked collection, a refusal as a tool error."""
    try:
        return scope(who, collection)
    except AccessDenied as error:
        raise ToolError(error.message) from None


async def _run(
    service: Service,
    caller: Caller,
    kind: str,
    question: str,
    ctx: Context,
    collection: str | None = None,
) -> Outcome:
    """Run a loop, each event sent as a progress notification."""
    done = 0
    try:
        async for item in service.run(caller, kind, question, collections=collection):
            if isinstance(item, Outcome):
                return item
            done += 1
            await ctx.report_progress(done, None, _progress(item))
    except Exception as error:
        failure = _tool_error(error)
        if failure is error:
            raise
        raise failure from error
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
    except Exception as error:
        failure = _tool_error(error)
        if failure is error:
            raise
        raise failure from error


def _tool_error(error: Exception) -> Exception:
    """The tool error for what failed, with the reason and status the HTTP API would give
    (server/errors.py); an error the map does not know stays a crash (its text kept on the
    server)."""
    if isinstance(error, ToolError):
        return error
    problem = errors.problem_of(error)
    if problem is None:
        return error
    return ToolError(
        problem.message if problem.status < 500 else f"{problem.message} ({problem.status})"
    )


def mcp_http_app(service: Service, *, path: str = "/mcp", guarded: bool = True) -> Starlette:
    """MCP over streamable HTTP at ``path``, keys checked; run its lifespan (the session
    manager) with the app that serves it. Without keys, :class:`LocalGuard` checks ``Host``
    and ``Origin`` (``guarded=False`` when the app serving it has the guard already); the SDK's
    own check is off so the rules are the same as the rest of the server's."""
    notices = DocumentNotices()
    server = build_mcp(service, notices)
    app = server.streamable_http_app(
        streamable_http_path=path,
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    app.add_middleware(KeyCheck, access=service.access)
    if guarded:  # served alone (`ragloop mcp`); inside `ragloop serve` its app does both
        app.add_middleware(LocalGuard, access=service.access)
        if service.settings.server.access_log:
            app.add_middleware(AccessLog, access=service.access)
    return app
