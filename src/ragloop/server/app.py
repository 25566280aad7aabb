"""The HTTP app of ``ragloop serve``: REST and SSE over the engines' event streams, an
OpenAI-compatible route, the web page at ``/``, and MCP at ``/mcp``.

Every route but ``/healthz`` and the page needs a key when keys are configured (see
:mod:`ragloop.server.access`). ``POST /v1/ask`` and ``POST /v1/retrieve`` answer with JSON, or,
when asked (``"stream": true`` or ``Accept: text/event-stream``), with server-sent events: one
per :class:`~ragloop.LoopEvent` (``event: <kind>``, the event as JSON), then ``event: result``
with the JSON answer, or ``event: error``. A client that disconnects cancels its run; the
run's trace is stored either way.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import asynccontextmanager
from importlib.resources import files
from typing import Annotated, Any

from fastapi import FastAPI, File, Form, Header, Query, Request, UploadFile
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from fastapi_offline import FastAPIOffline
from pydantic import BaseModel
from starlette.routing import Route

from ragloop.core.records.agent import AgentResult
from ragloop.core.records.gaps import shown_answer
from ragloop.core.records.rag import LoopResult
from ragloop.core.records.retrieval import RetrievalResult
from ragloop.kb.ingest.sources import upload_names
from ragloop.observability.events import LoopEvent
from ragloop.observability.report_html import render_html
from ragloop.server import errors, openai_compat
from ragloop.server.access import AccessLog, CallerDep, KeyGate, LocalGuard, check_cors
from ragloop.server.conversation import Rewrite, Turn, rewrite_meta
from ragloop.server.disconnect import unless_disconnected
from ragloop.server.schemas import (
    AskRequest,
    AskResponse,
    ChunkOut,
    DeleteResponse,
    DocumentOut,
    DocumentsPage,
    DocumentsRequest,
    Health,
    IngestResponse,
    RetrieveRequest,
    RetrieveResponse,
    SafeJSONResponse,
    SearchRequest,
    SearchResponse,
    Shared,
    TraceOut,
    TracesPage,
)
from ragloop.server.service import ENGINE_NAMES, Outcome, Service, version

logger = logging.getLogger("ragloop.server")
# the page's icon: a loop that comes back on itself
FAVICON = (
    '<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 32 32"><rect width="32" height="32" '
    'rx="7" fill="#2563eb"/><path d="M23 12.5A8 8 0 1 0 24 18" fill="none" stroke="#fff" '
    'stroke-width="3.2" stroke-linecap="round"/><path d="M18.5 10.5l5 1.5 1-5" fill="none" '
    'stroke="#fff" stroke-width="3.2" stroke-linecap="round" stroke-linejoin="round"/></svg>'
)

Result = LoopResult | AgentResult | RetrievalResult


def create_app(service: Service, *, on_shutdown: Callable[[], None] | None = None) -> FastAPI:
    """The app over ``service`` (the caller keeps and closes the service, or gives
    ``on_shutdown``, called when the server stops: a worker process's app)."""
    settings = service.settings.server
    check_cors(settings)
    mcp_app = None
    if settings.mcp:
        from ragloop.server.mcp import mcp_http_app

        mcp_app = mcp_http_app(service, guarded=False)  # the app's own guard covers /mcp

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        try:
            if mcp_app is None:
                yield
            else:
                async with mcp_app.router.lifespan_context(mcp_app):
                    yield
        finally:
            if on_shutdown is not None:
                on_shutdown()

    # FastAPIOffline: /docs and /redoc load their scripts from the installed package, not a CDN
    app = FastAPIOffline(
        title="ragloop",
        version=version(),
        description="Retrieval loops over your knowledge base: search, ask, retrieve, traces.",
        lifespan=lifespan,
        max_body_size=settings.max_body_bytes,
        default_response_class=SafeJSONResponse,
    )
    app.state.service = service
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origins,
            allow_methods=["GET", "POST", "DELETE"],
            allow_headers=["Authorization", "X-API-Key", "Content-Type"],
        )
    # with keys, a request without a valid one is refused before its body is read
    app.add_middleware(KeyGate, access=service.access, refuse=errors.refusal)
    # added last, so it runs first: without keys, other sites' pages are refused before anything
    app.add_middleware(LocalGuard, access=service.access)
    if settings.access_log:  # outermost: a refused request is logged too
        app.add_middleware(AccessLog, access=service.access)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, error: RequestValidationError) -> JSONResponse:
        # FastAPI's own handler echoes the input, which fails to encode when it is not Unicode
        return SafeJSONResponse({"detail": jsonable_encoder(error.errors())}, status_code=422)

    errors.install(app)  # one error -> status map for every route (server/errors.py)
    _routes(app, service)
    openai_compat.add_routes(app, service)
    if mcp_app is not None:
        # the MCP app routes /mcp itself: it gets the request with its path as it came
        app.router.routes.append(Route("/mcp", endpoint=mcp_app, name="mcp"))
    return app


def _routes(app: FastAPI, service: Service) -> None:
    @app.get("/healthz", response_model=Health, tags=["server"])
    def healthz() -> Health:
        """Liveness: the server answers and its knowledge base is open; and what it shares
        with the other servers of its knowledge base (``shared``)."""
        backend = "postgresql" if service.kb.path is None else "sqlite"
        return Health(
            status="ok",
            version=version(),
            auth=not service.access.local_only,
            engines=list(ENGINE_NAMES),
            knowledge_base=backend,
            workers=service.settings.server.workers,
            shared=Shared.model_validate(service.shared()),
        )

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def page() -> HTMLResponse:
        return HTMLResponse(_page())

    @app.get("/favicon.ico", include_in_schema=False)
    @app.get("/favicon.svg", include_in_schema=False)
    def favicon() -> Response:
        # an SVG under both names: browsers ask for /favicon.ico whatever the page links
        return Response(
            FAVICON, media_type="image/svg+xml", headers={"Cache-Control": "max-age=86400"}
        )

    @app.post("/v1/search", response_model=SearchResponse, tags=["retrieval"])
    async def search(body: SearchRequest, caller: CallerDep) -> SearchResponse:
        """The chunks most relevant to a query (one search, no loop)."""
        chunks = await service.search(
            caller, body.query, top_k=body.top_k, collections=body.collection, mode=body.mode
        )
        return SearchResponse(chunks=[ChunkOut.of(c) for c in chunks])

    @app.post(
        "/v1/ask",
        response_model=AskResponse,
        tags=["loops"],
        responses={200: {"content": {"text/event-stream": {}}}},
    )
    async def ask(
        request: Request,
        body: AskRequest,
        caller: CallerDep,
        accept: Annotated[str | None, Header()] = None,
    ) -> Response:
        """Answer a question with a loop (a follow-up read with its ``history``); JSON, or its
        events as they happen."""
        kind = body.engine or service.settings.engine.default
        service.check_question(body.question)
        rewrite = Rewrite(body.question)
        if any(turn.role == "user" for turn in body.history):
            turns = [Turn(t.role, t.content) for t in body.history if t.content.strip()]
            rewrite = await service.standalone(caller, [*turns, Turn("user", body.question)])
        events = service.run(
            caller,
            kind,
            rewrite.question,
            collections=body.collection,
            max_iterations=body.max_iterations,
            top_k=body.top_k,
            target_precision=body.target_precision,
            budget=body.budget,
            meta=rewrite_meta(rewrite, content=service.settings.traces.content),
        )
        answer = functools.partial(_answer, kind, rewrite=rewrite)
        if body.stream or _wants_events(accept):
            return await _event_stream(events, answer)
        outcome = await unless_disconnected(request, _finish(events))
        if isinstance(outcome, Response):  # the client went away: its run was cancelled
            return outcome
        return SafeJSONResponse(answer(outcome).model_dump(mode="json"))

    @app.post(
        "/v1/retrieve",
        response_model=RetrieveResponse,
        tags=["loops"],
        responses={200: {"content": {"text/event-stream": {}}}},
    )
    async def retrieve(
        request: Request,
        body: RetrieveRequest,
        caller: CallerDep,
        accept: Annotated[str | None, Header()] = None,
    ) -> Response:
        """The evidence a RetrievalLoop gathers for a question, with citations' sources."""
        events = service.run(
            caller,
            "evidence",
            body.question,
            collections=body.collection,
            max_iterations=body.max_iterations,
            top_k=body.top_k,
            budget=body.budget,
        )
        if body.stream or _wants_events(accept):
            return await _event_stream(events, lambda outcome: _evidence(outcome, body.top_k))
        outcome = await unless_disconnected(request, _finish(events))
        if isinstance(outcome, Response):  # the client went away: its run was cancelled
            return outcome
        return SafeJSONResponse(_evidence(outcome, body.top_k).model_dump(mode="json"))

    @app.get("/v1/chunks/{chunk_id}", response_model=ChunkOut, tags=["retrieval"])
    def chunk(chunk_id: str, caller: CallerDep) -> ChunkOut:
        """One chunk by id (what a citation or a search result names)."""
        return ChunkOut.of(service.fetch(caller, chunk_id))

    @app.get("/v1/collections", tags=["retrieval"])
    def collections(caller: CallerDep) -> list[dict[str, Any]]:
        """The collections this key may read, with their sizes."""
        return service.collections(caller)

    @app.get("/v1/documents", response_model=DocumentsPage, tags=["documents"])
    def documents(
        caller: CallerDep,
        collection: Annotated[str | None, Query(min_length=1)] = None,
        offset: Annotated[int, Query(ge=0)] = 0,
        limit: Annotated[int, Query(ge=1, le=500)] = 50,
    ) -> DocumentsPage:
        """The documents this key may read, a page at a time (of one collection, or of
        every collection the key may read), by collection then source."""
        total, found = service.documents(caller, collection, offset=offset, limit=limit)
        listed = [
            DocumentOut(source=d.source, title=d.title, collection=d.collection) for d in found
        ]
        return DocumentsPage(
            documents=listed,
            total=total,
            offset=offset,
            limit=limit,
            collection=collection,
            admin=caller.admin,
        )

    @app.get("/v1/traces", response_model=TracesPage, tags=["traces"])
    def traces(
        caller: CallerDep,
        limit: Annotated[int, Query(ge=1, le=1000)] = 20,
        stale: Annotated[
            bool, Query(description="Only the runs whose cited documents changed since.")
        ] = False,
    ) -> TracesPage:
        """The newest runs this key asked (an admin key: every run), newest first, each with
        the documents its answer cites that were edited or removed since it ran."""
        found = service.runs(caller, limit=limit, stale_only=stale)
        return TracesPage(
            traces=[
                TraceOut(
                    **record.model_dump(include=set(TraceOut.model_fields) - {"stale"}),
                    trace_url=f"/v1/traces/{record.id}",
                    stale=changed,
                )
                for record, changed in found
            ]
        )

    @app.get(
        "/v1/traces/{trace_id}", tags=["traces"], responses={200: {"content": {"text/html": {}}}}
    )
    def trace(
        trace_id: str,
        caller: CallerDep,
        format: Annotated[str | None, Query(pattern="^(json|html)$")] = None,
        accept: Annotated[str | None, Header()] = None,
    ) -> Response:
        """A stored run: JSON, or the HTML viewer (``?format=html`` or ``Accept: text/html``)."""
        record = service.trace(caller, trace_id)
        stale = service.stale(record)
        if format == "html" or (format is None and "text/html" in (accept or "")):
            return HTMLResponse(render_html(record, stale))
        return JSONResponse(
            record.model_dump(mode="json") | {"stale": [s.model_dump() for s in stale]}
        )

    @app.post("/v1/documents", response_model=IngestResponse, tags=["documents"])
    async def add_documents(body: DocumentsRequest, caller: CallerDep) -> IngestResponse:
        """Add (or replace) documents given as text. Admin keys only, in their collections."""
        report = await service.add_documents(caller, body.documents, body.collection)
        return IngestResponse(**report.model_dump(exclude={"removed"}))

    @app.post("/v1/documents/files", response_model=IngestResponse, tags=["documents"])
    async def upload(
        caller: CallerDep,
        files: Annotated[list[UploadFile], File(description="Files to ingest.")],
        collection: Annotated[str, Form()] = "default",
    ) -> IngestResponse:
        """Upload files (txt, md, rst, html, json, jsonl, csv, pdf), read as `ragloop ingest`
        reads them. Admin keys only, in their collections. Each file is named by the relative
        path its part carries (`a/notes.md`); a bad name or two parts of one name refuse the
        request (422) before anything is ingested."""
        caller.writable(collection)  # refused before the files are read
        upload_names([upload.filename for upload in files])
        given = [(upload.filename or "", await upload.read()) for upload in files]
        report = await service.add_files(caller, given, collection)
        return IngestResponse(**report.model_dump(exclude={"removed"}))

    @app.delete(
        "/v1/documents",
        response_model=DeleteResponse,
        tags=["documents"],
        responses={404: {"description": "No such document where the key may change it."}},
    )
    async def delete(
        caller: CallerDep,
        source: Annotated[str, Query(min_length=1)],
        collection: Annotated[str | None, Query()] = None,
    ) -> DeleteResponse:
        """Delete a document by its source (from every collection the key may change unless
        one is named). Admin keys only, in their collections. No such document: 404."""
        return DeleteResponse(removed=await service.delete(caller, source, collection))


# -- answers ------------------------------------------------------------------------------------


def _answer(kind: str, outcome: Outcome, *, rewrite: Rewrite | None = None) -> AskResponse:
    result: LoopResult | AgentResult = outcome.result
    return AskResponse(
        run_id=result.run_id,
        engine=kind,
        question=result.query,
        answer=shown_answer(result.answer, result.confident, result.gaps),
        attempt=None if result.confident else result.answer,
        citations=outcome.citations,
        stop_reason=result.stop_reason.value,
        outcome=result.stop_reason.outcome,
        iterations=result.iterations,
        chunks=[ChunkOut.of(c) for c in result.chunks],
        budget_used=result.budget_used,
        usage=result.usage,
        error=result.error,
        trace_url=f"/v1/traces/{result.run_id}",
        confident=result.confident,
        probability=result.probability,
        target_precision=result.target_precision,
        gaps=result.gaps,
        followup=rewrite.followup if rewrite else None,
        rewritten_by=rewrite.by if rewrite else None,
    )


def _evidence(outcome: Outcome, top_k: int | None) -> RetrieveResponse:
    result: Result = outcome.result
    chunks = result.chunks[:top_k] if top_k else result.chunks
    return RetrieveResponse(
        run_id=result.run_id,
        question=result.query,
        stop_reason=result.stop_reason.value,
        outcome=result.stop_reason.outcome,
        iterations=result.iterations,
        chunks=[ChunkOut.of(c) for c in chunks],
        budget_used=result.budget_used,
        error=result.error,
        trace_url=f"/v1/traces/{result.run_id}",
    )


async def _finish(events: AsyncGenerator[LoopEvent | Outcome, None]) -> Outcome:
    """Read a run to its end."""
    async for item in events:
        if isinstance(item, Outcome):
            return item
    raise RuntimeError("the run ended without a result")


def _wants_events(accept: str | None) -> bool:
    return "text/event-stream" in (accept or "")


def sse(event: str, data: Any) -> str:
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False, default=str)}\n\n"


def json_safe_sse(event: str, data: Any) -> bytes:
    """An event that always encodes (``\\u`` escapes for any text)."""
    return f"event: {event}\ndata: {json.dumps(data, default=str)}\n\n".encode("ascii")


def sse_bytes(event: str, data: Any) -> bytes:
    """An event encoded here, not by the response: text that is not Unicode raises inside the
    stream's ``try``, so the stream ends with ``event: error`` instead of breaking."""
    return sse(event, data).encode("utf-8")


async def _event_stream(
    events: AsyncGenerator[LoopEvent | Outcome, None], summary: Callable[[Outcome], BaseModel]
) -> StreamingResponse:
    """The run as server-sent events. Its first event is awaited here, so a request the
    service refuses gets its HTTP status, not a stream."""
    first = await events.__anext__()

    async def body() -> AsyncIterator[bytes]:
        item = first
        try:
            while isinstance(item, LoopEvent):
                yield sse_bytes(item.kind.value, item.model_dump(mode="json"))
                item = await events.__anext__()
            yield sse_bytes("result", summary(item).model_dump(mode="json"))
        except Exception as error:  # the run raised, hit the hard deadline, or cannot be sent
            logger.warning("a streamed run failed: %s", error)
            problem = errors.problem_of(error)
            message = problem.message if problem else str(error) or type(error).__name__
            status = problem.status if problem else 500
            yield json_safe_sse(
                "error", {"detail": message, "type": type(error).__name__, "status": status}
            )
        finally:
            await events.aclose()  # a client that went away cancels its run

    return StreamingResponse(
        body(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


def _page() -> str:
    return files("ragloop.server").joinpath("page.html").read_text(encoding="utf-8")
