"""One event stream for every engine: listeners, structured logs and OpenTelemetry span events.

Each engine emits a :class:`LoopEvent` when a run starts, after every iteration (a controller
turn in AgentLoop), for every tool call, when an answer is grounded and when the run ends; and,
as the run goes, a *step* event for each search, answer (and answer text delta), evaluation and
reformulation. An event goes, in order, to

1. the stream of the run when it is consumed with ``astream()`` (see :mod:`.stream`), with its
   content whatever the capture setting: the stream goes to whoever asked;
2. every listener registered with :func:`listen` (called inline; a listener that raises is
   logged and skipped, never breaks the run);
3. ``logging.getLogger("ragloop")``, one record per event (step events at DEBUG, the others at
   INFO), the event as a dict in the record's ``ragloop_event`` attribute
   (:class:`JsonFormatter` writes it as one JSON line);
4. the active OpenTelemetry span, as a span event named ``ragloop.{kind}`` (not step events:
   each search and model call has its own child span already).

Content (queries, answers, tool arguments, results) is added to an event's attributes only when
content capture is on (``RAGLOOP_TRACE_CONTENT=1`` or :func:`set_trace_content`).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from enum import StrEnum
from types import TracebackType
from typing import IO, Any

from pydantic import BaseModel, ConfigDict, Field

from ragloop.core.records import Chunk
from ragloop.core.redaction import redact, redact_all
from ragloop.observability import otel

logger = logging.getLogger("ragloop")
logger.addHandler(logging.NullHandler())


class EventKind(StrEnum):
    """What happened."""

    RUN_STARTED = "run_started"
    SEARCH = "search"
    ANSWER_DELTA = "answer_delta"
    ANSWER = "answer"
    EVALUATION = "evaluation"
    REFORMULATION = "reformulation"
    ITERATION = "iteration"
    TOOL_CALL = "tool_call"
    GROUNDING = "grounding"
    RUN_FINISHED = "run_finished"


# Events about one step inside an iteration: logged at DEBUG and kept off spans (each search and
# model call has its own span), so the INFO log keeps seed 004's one record per iteration.
STEP_KINDS = frozenset(
    {
        EventKind.SEARCH,
        EventKind.ANSWER_DELTA,
        EventKind.ANSWER,
        EventKind.EVALUATION,
        EventKind.REFORMULATION,
    }
)


class LoopEvent(BaseModel):
    """One event of a run.

    ``engine`` names the engine (``"agent"``, ``"rag"``); ``run_id`` is shared by every event of
    a run (and is the ``ragloop.run.id`` of its spans); ``iteration`` uses the engine's own
    numbering, as in its result (AgentLoop: the 0-based turn; RAGLoop: the 1-based
    ``LoopIteration.iteration``), None for run-level events. ``attributes`` holds the details.
    """

    model_config = ConfigDict(frozen=True)

    engine: str
    kind: EventKind
    run_id: str
    iteration: int | None = None
    attributes: dict[str, Any] = Field(default_factory=dict)
    timestamp: float = Field(default_factory=time.time)


Listener = Callable[[LoopEvent], object]

# run_started's attribute naming the run a run started inside (a RetrievalLoop that serves as
# another loop's retriever): recorders keep its events in the outer run's trace
NESTED_IN = "ragloop.parent_run_id"


class NestedRuns:
    """Tells which events belong to a run started inside another run, and which outermost run
    that is."""

    def __init__(self) -> None:
        self._roots: dict[str, str] = {}  # nested run id -> the outermost run's id

    def root(self, event: LoopEvent) -> str:
        """The id of the outermost run ``event`` belongs to (its own run's for a run that
        started inside no other; a nested run's run_started says where it started)."""
        parent = event.attributes.get(NESTED_IN) if event.kind is EventKind.RUN_STARTED else None
        if isinstance(parent, str):
            self._roots[event.run_id] = self._roots.get(parent, parent)
        root = self._roots.get(event.run_id, event.run_id)
        if event.kind is EventKind.RUN_FINISHED:
            self._roots.pop(event.run_id, None)
        return root


_listeners: list[Listening] = []
_lock = threading.Lock()


class Listening:
    """A registered listener; :meth:`close` (or leaving the ``with`` block) unregisters it.
    ``content``: whether it gets events with their content (True), without (False), or as
    the capture switch says (None)."""

    def __init__(self, listener: Listener, content: bool | None = None) -> None:
        self.listener = listener
        self.content = content
        with _lock:
            _listeners.append(self)

    def close(self) -> None:
        with _lock:
            if self in _listeners:
                _listeners.remove(self)

    def __enter__(self) -> Listening:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def listen(listener: Listener, *, content: bool | None = None) -> Listening:
    """Call ``listener(event)`` for every event of every run until closed.

    Use it as a context manager (``with listen(events.append): loop.run(q)``) or keep the
    handle and call ``close()``. Listeners are process-wide and called from the thread that
    runs the engine; tell runs apart by ``event.run_id``. Events carry their content
    (queries, answers, ...) as the capture switch says (:func:`set_trace_content`), unless
    ``content`` chooses for this listener: True always (a local trace of the run, as
    :class:`~ragloop.observability.traces.TraceRecorder` keeps by default), False never.
    """
    if not callable(listener):
        raise TypeError(f"listener must be callable, got {type(listener).__name__}")
    if content is not None and not isinstance(content, bool):
        raise TypeError(f"content must be True, False or None, got {content!r}")
    return Listening(listener, content)


def _describe(event: LoopEvent) -> str:
    where = f" iteration={event.iteration}" if event.iteration is not None else ""
    details = " ".join(
        f"{k}={v}" for k, v in event.attributes.items() if isinstance(v, str | int | float)
    )
    return f"{event.engine} {event.kind.value} run={event.run_id}{where} {details}".rstrip()


def emit(event: LoopEvent, *, full: LoopEvent | None = None, bare: LoopEvent | None = None) -> None:
    """Deliver ``event`` to the listeners, the ``ragloop`` logger and the active span; a
    listener that chose (``listen(content=...)``) gets ``full`` (the event with its content)
    or ``bare`` (without) instead, when given."""
    with _lock:
        listeners = list(_listeners)
    for listening in listeners:
        chosen = event
        if listening.content is True and full is not None:
            chosen = full
        elif listening.content is False and bare is not None:
            chosen = bare
        try:
            listening.listener(chosen)
        except Exception:
            logger.warning(
                "ragloop event listener %r raised; skipped", listening.listener, exc_info=True
            )
    step = event.kind in STEP_KINDS
    level = logging.DEBUG if step else logging.INFO
    if logger.isEnabledFor(level):
        logger.log(level, _describe(event), extra={"ragloop_event": event.model_dump(mode="json")})
    if step:
        return
    otel.add_event(
        f"ragloop.{event.kind.value}",
        {"engine": event.engine, "iteration": event.iteration, **event.attributes},
    )


def chunk_refs(chunks: Sequence[Chunk]) -> list[dict[str, Any]]:
    """What events record about chunks without content capture: id, source, title, score."""
    return [
        {
            "id": c.id,
            "source": c.source,
            "title": c.metadata.get("title"),
            "score": round(c.score, 6),
        }
        for c in chunks
    ]


class JsonFormatter(logging.Formatter):
    """Formats each log record as one JSON object per line; a ragloop event's fields are
    included at the top level (``engine``, ``kind``, ``run_id``, ``iteration``,
    ``attributes``)."""

    def format(self, record: logging.LogRecord) -> str:
        data: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname,
            "logger": record.name,
            "message": redact(record.getMessage()),
        }
        event = getattr(record, "ragloop_event", None)
        if isinstance(event, dict):
            data.update(redact_all(event))
        if record.exc_info:
            data["exception"] = redact(self.formatException(record.exc_info))
        return json.dumps(data, default=str, ensure_ascii=False)


def install_json_logging(
    stream: IO[str] | None = None, level: int = logging.INFO
) -> logging.Handler:
    """Log ragloop's events as JSON lines to ``stream`` (stderr by default); returns the
    handler so the caller can remove it (``logging.getLogger("ragloop").removeHandler(h)``)."""
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    logger.addHandler(handler)
    logger.setLevel(level)
    return handler
