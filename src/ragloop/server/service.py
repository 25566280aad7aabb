"""What the HTTP API and the MCP server do, once: a client of the public API and of the engines'
event streams, like the CLI.

One :class:`Service` holds the knowledge base, the settings, the engines (one per kind, scope
and settings, built on first use and shared by concurrent requests: an engine holds no per-run
state) and the trace recorder. A caller limited to collections gets engines built over a
retriever of those collections: the offline components search through it too, so the limit is
in every query the store runs.

What a fleet shares lives where the knowledge base lives: over PostgreSQL, the traces (a
schema beside the knowledge base's), the keys' run counts (advisory locks) and the query
vectors (the store's embedding cache) are in the database, so a server holds nothing another
needs; :meth:`Service.shared` says which, for ``/healthz``.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
from collections import OrderedDict
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass
from importlib import metadata
from typing import TYPE_CHECKING, Any

from ragloop.config import Settings, default_kb_location, kb_traces_location
from ragloop.core.budget import Budget
from ragloop.core.errors import ConfigError, TraceNotFound
from ragloop.core.files import traces_path_for
from ragloop.core.records import Chunk, StopReason
from ragloop.core.records.gaps import shown_answer
from ragloop.engines.retrieval import RetrievalLoop
from ragloop.kb.ingest.discover import IngestReport
from ragloop.kb.ingest.sources import upload_names
from ragloop.kb.knowledge_base import Document, DocumentText, KnowledgeBase, SearchMode
from ragloop.kb.stores.base import DocumentRecord, SharedQueryVectors
from ragloop.observability.events import EventKind, LoopEvent
from ragloop.observability.staleness import RUNS_SCANNED, StaleSource, replayed, stale_sources
from ragloop.observability.stream import RunStream
from ragloop.observability.trace_stores import (
    PostgresTraceStore,
    open_trace_store,
    traces_schema_for,
)
from ragloop.observability.traces import (
    TraceRecord,
    TraceRecorder,
    TraceStorage,
    TraceStore,
    trace_meta,
)
from ragloop.offline import ENGINES
from ragloop.providers import resolve_model
from ragloop.server.access import AccessControl, AccessDenied, Caller
from ragloop.server.conversation import Rewrite, Turn, standalone
from ragloop.server.errors import Refusal, ServerMisconfigured
from ragloop.server.slots import PostgresSlots, ProcessSlots, Slots

if TYPE_CHECKING:
    from ragloop.kb.stores.postgres.store import PostgresStore

logger = logging.getLogger("ragloop.server")

ENGINE_NAMES = tuple(sorted(ENGINES))
EVIDENCE = "evidence"
MAX_ENGINES = 64  # engines kept (kinds x scopes x settings); the least used is dropped


@dataclass(frozen=True)
class Outcome:
    """How a run ended: its result and its ``run_finished`` event (the answer's citations)."""

    result: Any
    finished: LoopEvent | None

    @property
    def citations(self) -> list[Any]:
        found = self.finished.attributes.get("citations") if self.finished else None
        return list(found) if isinstance(found, list) else []


def chat_text(result: Any) -> str:
    """A run's answer as a chat client shows it: the answer, or for one that is not
    confident, evidence first (:func:`~ragloop.core.records.gaps.shown_answer`)."""
    return shown_answer(getattr(result, "answer", None), result.confident, result.gaps)


class Service:
    """The knowledge base served, to callers with their access. :meth:`close` ends it."""

    def __init__(
        self, kb: KnowledgeBase, settings: Settings, *, traces: TraceStorage | None = None
    ) -> None:
        self.kb = kb
        self.settings = settings
        self.access = AccessControl(settings.server, run_slots(kb))
        self.model = resolve_model(settings.model.spec, **settings.model.options())
        self.traces = traces if traces is not None else trace_store_of(kb, settings)
        self.recorder = TraceRecorder(
            self.traces,
            meta={"served": True, "model": settings.model.spec},
            content=settings.traces.content,
            keep=0,  # runs are read back from the store; memory stays flat however many run
        )
        self.recorder.__enter__()
        self._engines: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
        self._lock = threading.Lock()
        self._collections: frozenset[str] = frozenset()  # names seen; refreshed on a miss
        self._document_listeners: list[Callable[[str, list[str]], None]] = []

    def on_documents_changed(self, listener: Callable[[str, list[str]], None]) -> None:
        """Call ``listener(collection, sources)`` after documents are added, replaced or
        removed through this service (its routes, a folder it watches): MCP's resource
        notifications."""
        self._document_listeners.append(listener)

    def documents_changed(self, collection: str | None, sources: Sequence[str]) -> None:
        """Tell the listeners that these documents changed (``collection`` None: in every
        collection that may hold them); a listener that fails is logged, never the writer's
        error."""
        if not sources:
            return
        names = [collection] if collection else [c.name for c in self.kb.collections()]
        for listener in list(self._document_listeners):
            for name in names:
                try:
                    listener(name, list(sources))
                except Exception:  # a notification must not fail the write that caused it
                    logger.exception("a documents-changed listener failed")

    def close(self) -> None:
        self.recorder.__exit__(None, None, None)
        self.traces.close()
        self.access.slots.close()

    def shared(self) -> dict[str, str]:
        """Where what a fleet shares lives: ``postgresql`` (every server of the database
        sees it), ``file`` (the processes that open the same file, on one host) or
        ``process`` (this process only)."""
        traces = "postgresql" if isinstance(self.traces, PostgresTraceStore) else "file"
        vectors = isinstance(self.kb.store, SharedQueryVectors)
        return {
            "traces": traces,
            "concurrency": self.access.slots.shared,
            "query_vectors": "postgresql" if vectors else "process",
        }

    # -- engines ------------------------------------------------------------------------------
    def engine(
        self,
        kind: str,
        scope: tuple[str, ...] | None,
        *,
        max_iterations: int | None = None,
        top_k: int | None = None,
        target_precision: float | None = None,
    ) -> Any:
        """The engine of ``kind`` over the collections ``scope`` (None: all); kind
        ``evidence`` is the RetrievalLoop alone (what /v1/retrieve runs)."""
        if kind not in ENGINES and kind != EVIDENCE:
            raise ConfigError("engine", f"must be one of {', '.join(ENGINE_NAMES)}, got {kind!r}")
        options = self.settings.engine.settings(kind) if kind != EVIDENCE else {}
        if max_iterations is not None:
            options["max_iterations"] = max_iterations
        if top_k is not None and kind != "agent":
            options["top_k"] = top_k
        if target_precision is not None and kind != EVIDENCE:
            options["target_precision"] = target_precision
            options.pop("confidence_threshold", None)
        key = (kind, scope, tuple(sorted(options.items())))
        with self._lock:
            if key in self._engines:
                self._engines.move_to_end(key)
                return self._engines[key]
        source: Any = self.kb if scope is None else self.kb.retriever(collection=list(scope))
        if kind == "agent" and scope is not None:
            options["collections"] = list(scope)
        try:
            if kind == EVIDENCE:
                engine = RetrievalLoop.offline(source, model=self.model, **options)
            else:
                engine = ENGINES[kind](source, model=self.model, **options)
        except ConfigError as error:  # a request's options are bounded: the config is at fault
            raise ServerMisconfigured(error) from error
        with self._lock:
            self._engines[key] = engine
            while len(self._engines) > MAX_ENGINES:
                self._engines.popitem(last=False)
        return engine

    def budget(self, requested: Budget | None = None) -> Budget:
        """A run's budget: the config's, lowered by the request's, the deadline as its
        wall-clock cap."""
        caps = self.settings.budget.model_dump()
        caps["max_wall_ms"] = _lowest(caps["max_wall_ms"], self.settings.server.deadline_s * 1000)
        if requested is not None:
            for name, value in requested.model_dump().items():
                caps[name] = _lowest(caps[name], value)
        return Budget(**caps)

    def check_question(self, question: str, field: str = "question") -> str:
        """``question`` if the server takes it; refused (422 empty, 413 too long) naming
        ``field``, the name the caller sent it under (``query``, ``messages``)."""
        refused = self.settings.server.question_refusal(question, field)
        if refused is not None:
            raise AccessDenied(*refused)
        return question

    def check_collections(self, caller: Caller, requested: str | Sequence[str] | None) -> None:
        """A collection a request names must exist (404 otherwise, naming the ones the caller
        may read), so a typo is not a 200 with no results. The names are cached and read
        again only on a miss: a collection added since (by any process) is found."""
        if requested is None:
            return
        names = [requested] if isinstance(requested, str) else list(requested)
        if all(n in self._collections for n in names):
            return
        self._collections = frozenset(info.name for info in self.kb.collections())
        missing = [n for n in names if n not in self._collections]
        if missing:
            readable = sorted(n for n in self._collections if caller.may_read(n))
            raise AccessDenied(
                404,
                f"no collection {missing[0]!r}; this key may read: {', '.join(readable) or 'none'}",
            )

    async def standalone(self, caller: Caller, turns: Sequence[Turn]) -> Rewrite:
        """The last user turn read with the turns before it, as a question that stands alone
        (:func:`~ragloop.server.conversation.standalone`: the model's rewrite, else the
        heuristic); the model's call holds one of the caller's slots and ends at the
        deadline (a 504 past it)."""
        slot = await self.access.enter(caller)
        try:
            async with asyncio.timeout(self.settings.server.deadline_s):
                limit = self.settings.server.max_question_chars
                return await standalone(turns, self.model, max_chars=limit)
        finally:
            self.access.leave(slot)

    # -- what callers do ----------------------------------------------------------------------
    async def search(
        self,
        caller: Caller,
        query: str,
        *,
        top_k: int = 5,
        collections: str | Sequence[str] | None = None,
        mode: SearchMode = "hybrid",
    ) -> list[Chunk]:
        self.check_question(query, "query")
        scope = caller.scope(collections)
        self.check_collections(caller, collections)
        collection = None if scope is None else list(scope)
        return await self.kb.asearch(query, top_k=top_k, collection=collection, mode=mode)

    async def run(
        self,
        caller: Caller,
        kind: str,
        question: str,
        *,
        collections: str | Sequence[str] | None = None,
        max_iterations: int | None = None,
        top_k: int | None = None,
        target_precision: float | None = None,
        budget: Budget | None = None,
        meta: dict[str, Any] | None = None,
    ) -> AsyncGenerator[LoopEvent | Outcome, None]:
        """The run's events, then its :class:`Outcome`; the run holds one of the caller's
        slots, is cut off at the deadline, and is cancelled (its trace stored) when the reader
        stops. ``meta`` is stored with its trace."""
        self.check_question(question)
        scope = caller.scope(collections)
        self.check_collections(caller, collections)
        engine = self.engine(
            kind,
            scope,
            max_iterations=max_iterations,
            top_k=top_k,
            target_precision=target_precision,
        )
        slot = await self.access.enter(caller)
        try:
            searched = None if scope is None else list(scope)
            with trace_meta(**(meta or {}), key=caller.name, engine=kind, collections=searched):
                stream: RunStream[Any] = engine.astream(question, budget=self.budget(budget))
            # the budget stops the loop at the deadline with its best answer; this cuts off a
            # component that does not give the loop a chance to check
            finished: LoopEvent | None = None
            root = ""  # the run's own id: its run_started comes first, nested runs' later
            async with asyncio.timeout(self.settings.server.deadline_s + 5.0), stream:
                async for event in stream:
                    root = root or event.run_id
                    if event.kind is EventKind.RUN_FINISHED and event.run_id == root:
                        finished = event
                    yield event
            check_failed(stream.result)
            yield Outcome(stream.result, finished)
        finally:
            self.access.leave(slot)

    def fetch(self, caller: Caller, chunk_id: str) -> Chunk:
        """A chunk by id, if the caller may read its collection."""
        found = self.kb.store.get_chunks([chunk_id])
        if not found or not caller.may_read(found[0].metadata.get("collection")):
            raise AccessDenied(404, f"no chunk {chunk_id!r}")
        return found[0]

    def trace(self, caller: Caller, trace_id: str) -> TraceRecord:
        """A stored run, if the caller may read it (:meth:`Caller.may_read_run`)."""
        try:
            record = self.traces.get(trace_id)
        except TraceNotFound:
            raise AccessDenied(404, f"no trace {trace_id!r}") from None
        if not caller.may_read_run(record.meta):
            raise AccessDenied(404, f"no trace {trace_id!r}")
        return record

    def runs(
        self, caller: Caller, *, limit: int, stale_only: bool = False
    ) -> list[tuple[TraceRecord, list[StaleSource]]]:
        """The newest runs the caller may read (:meth:`Caller.may_read_run`), each with the
        documents its answer cites that changed since (``stale_only``: only the runs that have
        some), looked for among the newest :data:`RUNS_SCANNED` of all keys."""
        version_of = functools.cache(self.kb.document_version)
        found = []
        reads_all = caller.admin and caller.collections is None
        scanned = limit if reads_all and not stale_only else RUNS_SCANNED
        listed = self.traces.list(scanned)
        answered = replayed(listed) if stale_only else set()  # a replayed run is answered
        for record in listed:
            if not caller.may_read_run(record.meta) or record.id in answered:
                continue
            stale = stale_sources(record, version_of)
            if stale or not stale_only:
                found.append((record, stale))
            if len(found) == limit:
                break
        return found

    def stale(self, record: TraceRecord) -> list[StaleSource]:
        """The documents ``record``'s answer cites that changed since the run."""
        return stale_sources(record, self.kb.document_version)

    # -- writes: admin keys, inside their collections ------------------------------------------
    async def add_documents(
        self, caller: Caller, documents: Sequence[Document], collection: str
    ) -> IngestReport:
        """Add (or replace) documents in ``collection``, which the caller must be allowed to
        change."""
        caller.writable(collection)
        report = await asyncio.to_thread(
            self.kb.add_documents, list(documents), collection=collection
        )
        self.documents_changed(collection, [d.source for d in documents])
        return report

    async def add_files(
        self, caller: Caller, files: Sequence[tuple[str, bytes]], collection: str
    ) -> IngestReport:
        """Ingest uploaded files (name, bytes) into ``collection``, as :meth:`add_documents`."""
        caller.writable(collection)
        sources = upload_names([name for name, _ in files])  # refuse before reading
        report = await asyncio.to_thread(self.kb.add_files, list(files), collection=collection)
        self.documents_changed(collection, sources)
        return report

    async def delete(self, caller: Caller, source: str, collection: str | None) -> int:
        """Delete a document by its source from ``collection`` (None: from every collection
        the caller may change); how many were removed. Nothing to remove is a 404: a typo in
        a source is not a success."""
        within = caller.writable(collection)
        if within is None:
            removed = await asyncio.to_thread(self.kb.delete, source)
            if removed:
                self.documents_changed(None, [source])
        else:
            removed = 0
            for name in within:
                here = await asyncio.to_thread(self.kb.delete, source, collection=name)
                if here:
                    self.documents_changed(name, [source])
                removed += here
        if not removed:
            where = (
                f"collection {collection!r}"
                if collection
                else "the collections this key may change"
            )
            raise AccessDenied(404, f"source: no document {source!r} in {where}")
        return removed

    def document(self, caller: Caller, collection: str, source: str) -> DocumentText:
        """A document read whole, if the caller may read its collection (another key's
        collection reads as missing, a 404 either way: nothing is given away)."""
        found = self.kb.document_text(collection, source) if caller.may_read(collection) else None
        if found is None:
            raise AccessDenied(404, f"no document {source!r} in collection {collection!r}")
        return found

    def collections(self, caller: Caller) -> list[dict[str, Any]]:
        return [info.model_dump() for info in self.kb.collections() if caller.may_read(info.name)]

    def documents(
        self, caller: Caller, collection: str | None, *, offset: int, limit: int
    ) -> tuple[int, list[DocumentRecord]]:
        """A page of the documents the caller may read (of ``collection``, else of every
        collection it may read): how many there are, and those from ``offset``."""
        scope = caller.scope(collection)
        if collection is not None and collection not in {
            c["name"] for c in self.collections(caller)
        }:
            raise AccessDenied(404, f"no collection {collection!r}")
        found = [
            doc
            for doc in self.kb.store.documents(collection)
            if scope is None or doc.collection in scope
        ]
        return len(found), found[offset : offset + limit]


def version() -> str:
    """ragloop's version, as the server names itself (HTTP and MCP)."""
    try:
        return metadata.version("ragloop")
    except metadata.PackageNotFoundError:  # pragma: no cover - a source checkout
        return "0"


def check_failed(result: Any) -> None:
    """Raise for a run that ended with nothing to give: in error (an AgentLoop whose
    controller, its model, failed returns such a result rather than raising) the model
    failed, a 502 (504 when it timed out); at its wall-clock budget (the server's deadline,
    or the request's own ``max_wall_ms``) before any answer, a 504. Never a 200 with no
    answer that reads as "not found"."""
    if result.stop_reason not in (StopReason.ERROR, StopReason.BUDGET_WALL_MS):
        return
    if getattr(result, "answer", None) or (not hasattr(result, "answer") and result.chunks):
        return  # an answer, or (/v1/retrieve) evidence, is still worth giving
    if result.stop_reason is StopReason.BUDGET_WALL_MS:
        raise Refusal(
            504,
            "the run reached its deadline before it had an answer (the server's deadline_s "
            "or the request's budget.max_wall_ms); the model may be too slow",
            code="timeout",
        )
    message = f"the model failed: {result.error or 'the run ended in error'}"
    timed_out = "Timeout" in (result.error or "")
    if timed_out:
        raise Refusal(504, message, code="timeout")
    raise Refusal(502, message, code="model_error")


def postgres_store(kb: KnowledgeBase) -> PostgresStore | None:
    """The knowledge base's PostgreSQL store, or None (its module loads psycopg: only then)."""
    if kb.path is not None:
        return None
    from ragloop.kb.stores.postgres.store import PostgresStore

    return kb.store if isinstance(kb.store, PostgresStore) else None


def run_slots(kb: KnowledgeBase) -> Slots:
    """Who counts the keys' runs: every server of a PostgreSQL knowledge base, else this
    process."""
    store = postgres_store(kb)
    if store is None:
        return ProcessSlots()
    return PostgresSlots(store.conninfo, namespace=store.schema)


def trace_store_of(kb: KnowledgeBase, settings: Settings) -> TraceStorage:
    """Where runs are stored: ``[server] traces`` (a file or a ``postgresql://`` URL), else the
    database of a PostgreSQL knowledge base (a schema beside its own), else the file beside a
    SQLite one (or of the default knowledge base, for a store of another kind)."""
    if settings.server.traces:
        return open_trace_store(settings.server.traces)
    store = postgres_store(kb)
    if store is not None:
        return PostgresTraceStore(store.conninfo, schema=traces_schema_for(store.schema))
    if kb.path is not None:
        return TraceStore(traces_path_for(kb.path))
    location = settings.kb.location or default_kb_location(settings)
    return open_trace_store(kb_traces_location(location))


def _lowest(a: float | None, b: float | None) -> Any:
    if a is None:
        return b
    if b is None:
        return a
    return min(a, b)
