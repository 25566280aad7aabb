"""Stored traces: the events of a run, kept in a SQLite file to look at later.

A :class:`TraceRecorder` listens to the event stream every engine emits (:mod:`.events`), keeps
each run's events, and when a run finishes writes them to a :class:`TraceStore` as one
:class:`TraceRecord`. Nothing here knows an engine's internals: what a trace shows is what the
events say, so a new engine's runs are stored as soon as it emits events.

A recorder keeps the run's content (question, queries, answer) by default: a local trace is the
run's own history on this machine, unlike the telemetry exported (logs, OpenTelemetry spans),
which keeps content out unless capture is on (:func:`~ragloop.set_trace_content` /
``RAGLOOP_TRACE_CONTENT``). ``TraceRecorder(content=False)`` (``[traces] content = false`` in
``ragloop.toml``) keeps the structure of the run only (iterations, strategies, scores, chunk
ids, sources and scores), whatever the switch; ``content=None`` follows the switch.
``TraceRecord.content`` says which kind a trace is.

The store is its own SQLite file, beside the knowledge base by default
(:func:`ragloop.core.files.traces_path_for`): traces are the user's history, not the
corpus, so a knowledge base can be shared or rebuilt without them, and a read-only or cached
knowledge base still gets traces. A knowledge base in PostgreSQL keeps its traces in a schema
of their own beside it (:class:`~ragloop.observability.trace_stores.PostgresTraceStore`), so
every server of a fleet reads every run; both are a :class:`TraceStorage`.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from ragloop.core.errors import TraceCorrupted, TraceNotFound
from ragloop.core.files import traces_path_for as traces_path_for
from ragloop.core.files import use_wal
from ragloop.core.records.gaps import EvidenceGaps
from ragloop.core.redaction import redact_all
from ragloop.observability.events import EventKind, Listening, LoopEvent, NestedRuns, listen
from ragloop.observability.settings import trace_content_enabled

logger = logging.getLogger("ragloop")

_SCHEMA = [
    (
        1,
        """
        CREATE TABLE traces (
            id TEXT PRIMARY KEY,
            engine TEXT NOT NULL,
            started_at REAL NOT NULL,
            finished_at REAL,
            question TEXT,
            answer TEXT,
            stop_reason TEXT,
            iterations INTEGER NOT NULL DEFAULT 0,
            content INTEGER NOT NULL,
            meta TEXT NOT NULL DEFAULT '{}',
            events TEXT NOT NULL
        );
        CREATE INDEX traces_started ON traces (started_at);
        """,
    ),
    (2, "ALTER TABLE traces ADD COLUMN cited TEXT NOT NULL DEFAULT '[]';"),
]


class CitedVersion(BaseModel):
    """A document a run's answer cited, and the version of it (its content hash) the answer
    read."""

    collection: str
    source: str
    version: str


class TraceRecord(BaseModel):
    """One stored run: a summary and the events it emitted, in order. ``cited``: the documents
    its answer cited, with the versions it read (kept in the summary, so a listing can tell
    which runs are stale without reading their events)."""

    id: str
    engine: str
    started_at: float
    finished_at: float | None = None
    question: str | None = None
    answer: str | None = None
    stop_reason: str | None = None
    iterations: int = 0
    content: bool = False
    meta: dict[str, Any] = Field(default_factory=dict)
    cited: list[CitedVersion] = Field(default_factory=list)
    events: list[LoopEvent] = Field(default_factory=list)

    @classmethod
    def from_events(
        cls, events: list[LoopEvent], *, content: bool, meta: Mapping[str, Any] | None = None
    ) -> TraceRecord:
        if not events:
            raise ValueError("a trace needs at least one event")
        first, last = events[0], events[-1]
        finished = last if last.kind is EventKind.RUN_FINISHED else None
        answer = finished.attributes.get("answer") if finished else None
        question = first.attributes.get("question")
        return cls(
            id=first.run_id,
            engine=first.engine,
            started_at=first.timestamp,
            finished_at=finished.timestamp if finished else None,
            question=question if isinstance(question, str) else None,
            answer=answer if isinstance(answer, str) else None,
            stop_reason=str(finished.attributes.get("stop_reason")) if finished else None,
            iterations=_count(finished.attributes.get("iterations")) if finished else 0,
            content=content,
            meta=dict(meta or {}),
            cited=cited_in(finished.attributes.get("citations")) if finished else [],
            events=list(events),
        )

    @property
    def gaps(self) -> EvidenceGaps | None:
        """The evidence gaps of a run that was not confident (kept with the trace's content)."""
        finished = self.events[-1] if self.events else None
        data = finished.attributes.get("gaps") if finished else None
        if finished is None or finished.kind is not EventKind.RUN_FINISHED or not data:
            return None
        try:
            return EvidenceGaps.model_validate(data)
        except ValueError:  # written by a version whose report had another shape
            return None

    @property
    def probability(self) -> float | None:
        """The calibrated chance that the run's answer is right, when the run judged it."""
        finished = self.events[-1] if self.events else None
        value = finished.attributes.get("probability") if finished else None
        return float(value) if isinstance(value, int | float) else None

    @property
    def duration_ms(self) -> float | None:
        if self.finished_at is None:
            return None
        return round((self.finished_at - self.started_at) * 1000.0, 1)


def cited_in(citations: object) -> list[CitedVersion]:
    """The documents of a run's citations (its ``run_finished`` attribute) that say their
    collection and version, each once, in citation order."""
    found: dict[tuple[str, str], CitedVersion] = {}
    for citation in citations if isinstance(citations, list) else []:
        if not isinstance(citation, dict):
            continue
        collection, source, version = (citation.get(k) for k in ("collection", "source", "version"))
        if isinstance(collection, str) and isinstance(source, str) and isinstance(version, str):
            found.setdefault(
                (collection, source),
                CitedVersion(collection=collection, source=source, version=version),
            )
    return list(found.values())


def _count(value: object) -> int:
    """A non-negative count from an event attribute; anything else (a listener or a store that
    altered it) counts as 0 rather than making the trace unreadable."""
    if isinstance(value, int) and not isinstance(value, bool):
        return max(0, value)
    return 0


@runtime_checkable
class TraceStorage(Protocol):
    """Where traces are kept: :class:`TraceStore` (a SQLite file) or
    :class:`~ragloop.observability.trace_stores.PostgresTraceStore`. ``location`` says where,
    for messages (no password); ``exists`` whether anything was ever saved there."""

    @property
    def location(self) -> str: ...
    @property
    def exists(self) -> bool: ...
    def save(self, record: TraceRecord) -> None: ...
    def list(self, limit: int = 50) -> list[TraceRecord]:
        """The latest traces, newest first (without their events); an unreadable row is
        logged and left out."""
        ...

    def get(self, trace_id: str) -> TraceRecord:
        """The trace with this id, or the only one whose id starts with it; else
        :class:`~ragloop.TraceNotFound` (:class:`~ragloop.TraceCorrupted` for a damaged row)."""
        ...

    def close(self) -> None: ...


# a stored trace's columns, as every store lists them (its events apart: only get reads them)
TRACE_COLUMNS = (
    "id", "engine", "started_at", "finished_at", "question", "answer", "stop_reason",
    "iterations", "content", "meta", "cited",
)  # fmt: skip
SUMMARY = ", ".join(TRACE_COLUMNS)


class TraceStore:
    """Traces in one SQLite file (created on first write; WAL, numbered migrations)."""

    def __init__(self, path: str | os.PathLike[str], *, timeout_s: float = 30.0) -> None:
        self.path = Path(path).expanduser()
        self.timeout_s = timeout_s
        self._local = threading.local()

    @property
    def location(self) -> str:
        return str(self.path)

    @property
    def exists(self) -> bool:
        return self.path.exists()

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, timeout=self.timeout_s)
            use_wal(conn, self.timeout_s)
            conn.execute(f"PRAGMA busy_timeout={int(self.timeout_s * 1000)}")
            self._migrate(conn)
            self._local.conn = conn
        return conn

    @staticmethod
    def _migrate(conn: sqlite3.Connection) -> None:
        # one transaction holding the write lock from the start: processes sharing the file
        # (several servers) migrate it once, one after the other
        conn.execute("BEGIN IMMEDIATE")
        try:
            conn.execute("CREATE TABLE IF NOT EXISTS _migrations (version INTEGER PRIMARY KEY)")
            done = {row[0] for row in conn.execute("SELECT version FROM _migrations")}
            for version, script in _SCHEMA:
                if version not in done:
                    for statement in filter(str.strip, script.split(";")):
                        conn.execute(statement)
                    conn.execute("INSERT INTO _migrations (version) VALUES (?)", (version,))
        except BaseException:
            conn.rollback()
            raise
        conn.commit()

    def save(self, record: TraceRecord) -> None:
        with self._conn() as conn:
            conn.execute(
                f"INSERT OR REPLACE INTO traces ({SUMMARY}, events) "
                f"VALUES ({', '.join('?' * (len(TRACE_COLUMNS) + 1))})",
                (*summary_values(record), events_json(record)),
            )

    def list(self, limit: int = 50) -> list[TraceRecord]:
        """The latest traces, newest first (without their events)."""
        if not self.exists:
            return []
        rows = self._conn().execute(
            f"SELECT {SUMMARY} FROM traces ORDER BY started_at DESC, id LIMIT ?", (limit,)
        )
        return readable_records(rows)

    def get(self, trace_id: str) -> TraceRecord:
        """The trace with this id, or the only one whose id starts with it."""
        if not self.exists:
            raise TraceNotFound(f"no traces at {self.location}")
        rows = (
            self._conn()
            .execute(
                f"SELECT {SUMMARY}, events FROM traces WHERE id LIKE ? ESCAPE '\\' LIMIT 2",
                (like_prefix(trace_id),),
            )
            .fetchall()
        )
        return the_one(rows, trace_id, self.location)

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None


def like_prefix(trace_id: str) -> str:
    """A LIKE pattern (escape character ``\\``) matching the ids that start with ``trace_id``."""
    return trace_id.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"


def stored_record(row: Sequence[Any], events: str) -> TraceRecord:
    """A record from a stored row (:data:`TRACE_COLUMNS`, meta as JSON text) and its events as
    JSON text; :class:`~ragloop.TraceCorrupted` when the row is not what ragloop wrote."""
    data = dict(zip(TRACE_COLUMNS, row, strict=True))
    try:
        data["content"] = bool(data["content"])
        data["meta"] = json.loads(data["meta"])
        data["cited"] = json.loads(data["cited"])
        data["events"] = json.loads(events)
        return TraceRecord.model_validate(data)
    except (ValueError, TypeError) as error:  # JSONDecodeError and ValidationError included
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        raise TraceCorrupted(f"stored trace {data['id']!r} is unreadable: {first}") from None


def readable_records(rows: Iterable[Sequence[Any]]) -> list[TraceRecord]:
    """The records of listed rows (without events); a damaged row is logged and left out, so
    it does not hide the others."""
    records = []
    for row in rows:
        try:
            records.append(stored_record(row, "[]"))
        except TraceCorrupted as error:
            logger.warning("%s", error)
    return records


def the_one(rows: Sequence[Sequence[Any]], trace_id: str, location: str) -> TraceRecord:
    """The record of the one row (summary and events) an id prefix matched."""
    if not rows:
        raise TraceNotFound(f"no trace {trace_id!r} in {location}")
    if len(rows) > 1:
        raise TraceNotFound(f"{trace_id!r} matches several traces; give more of the id")
    return stored_record(rows[0][:-1], rows[0][-1])


def summary_values(record: TraceRecord) -> tuple[Any, ...]:
    """The values of :data:`TRACE_COLUMNS` for ``record`` (meta as JSON text)."""
    return (
        record.id, record.engine, record.started_at, record.finished_at, record.question,
        record.answer, record.stop_reason, record.iterations, record.content, meta_json(record),
        json.dumps([c.model_dump() for c in record.cited]),
    )  # fmt: skip


def events_json(record: TraceRecord) -> str:
    return json.dumps([e.model_dump(mode="json") for e in record.events], ensure_ascii=False)


def meta_json(record: TraceRecord) -> str:
    return json.dumps(record.meta, ensure_ascii=False, default=str)


_run_meta: ContextVar[Mapping[str, Any] | None] = ContextVar("ragloop_trace_meta", default=None)


@contextmanager
def trace_meta(**meta: Any) -> Iterator[None]:
    """Runs started inside the block are stored with ``meta`` added to the recorder's own (the
    server names the API key that asked, so only that key may read the trace)."""
    token = _run_meta.set({**(_run_meta.get() or {}), **meta})
    try:
        yield
    finally:
        _run_meta.reset(token)


class TraceRecorder:
    """Records the runs that happen while it listens (use it as a context manager).

    Each finished run becomes a :class:`TraceRecord` in ``records`` (by run id; the newest
    ``keep``, so a recorder that listens for a server's lifetime holds a bounded number) and,
    given a ``store``, is saved there; a save the store refuses (a full disk) is logged in one
    line and its reason kept in ``unsaved`` (as bounded), and the run goes on. ``meta`` is
    stored with every record (the knowledge base, the model, the settings of the command that
    ran it), with the :func:`trace_meta` of the run. ``content``: keep the question, queries
    and answer (True, the default), never (False), or as the telemetry capture switch says
    (None); see the module docstring.
    """

    def __init__(
        self,
        store: TraceStorage | None = None,
        *,
        meta: Mapping[str, Any] | None = None,
        content: bool | None = True,
        keep: int = 1000,
    ) -> None:
        if content is not None and not isinstance(content, bool):
            raise TypeError(f"content must be True, False or None, got {content!r}")
        if keep < 0:
            raise ValueError(f"keep must be 0 or more, got {keep}")
        self.store = store
        self.content = content
        self.meta = redact_all(dict(meta or {}))  # a model given as a URL may carry a key
        self.keep = keep
        self.records: OrderedDict[str, TraceRecord] = OrderedDict()
        self.unsaved: OrderedDict[str, str] = OrderedDict()  # run id -> why it was not saved
        self._events: dict[str, list[LoopEvent]] = {}
        self._meta: dict[str, Mapping[str, Any]] = {}  # root run id -> its trace_meta
        self._nested = NestedRuns()
        self._lock = threading.Lock()
        self._listening: Listening | None = None

    def __call__(self, event: LoopEvent) -> None:
        if event.kind is EventKind.ANSWER_DELTA:  # the answer event that follows holds them all
            return
        with self._lock:
            # a run started inside another (a RetrievalLoop serving as a loop's retriever) is
            # kept in the outer run's trace, where trace_steps shows it as that step's hops
            root = self._nested.root(event)
            if root not in self._events:  # called in the run's own context: its trace_meta
                self._meta[root] = _run_meta.get() or {}
            events = self._events.setdefault(root, [])
            events.append(event)
            if event.kind is not EventKind.RUN_FINISHED or event.run_id != root:
                return
            del self._events[root]
            meta = {**self.meta, **self._meta.pop(root, {})}
        content = trace_content_enabled() if self.content is None else self.content
        record = TraceRecord.from_events(events, content=content, meta=meta)
        self._keep(self.records, record.id, record)
        if self.store is None:
            return
        try:
            self.store.save(record)
        except Exception as error:  # the answer still comes back; the trace is reported lost
            reason = f"{type(error).__name__}: {error}"
            self._keep(self.unsaved, record.id, reason)
            logger.warning("the trace of run %s was not saved: %s", record.id, reason)

    def _keep(self, kept: OrderedDict[str, Any], key: str, value: Any) -> None:
        with self._lock:
            kept[key] = value
            while len(kept) > self.keep:
                kept.popitem(last=False)

    def __enter__(self) -> TraceRecorder:
        self._listening = listen(self, content=self.content)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._listening is not None:
            self._listening.close()
            self._listening = None


@contextmanager
def recording(
    store: TraceStorage | None = None,
    *,
    meta: Mapping[str, Any] | None = None,
    content: bool | None = True,
) -> Iterator[TraceRecorder]:
    """``with recording(store) as recorder: loop.run(q)`` stores the run's trace
    (``content`` as :class:`TraceRecorder`'s)."""
    with TraceRecorder(store, meta=meta, content=content) as recorder:
        yield recorder
