"""The telemetry of one run: its id, its span and its events. Engines create one per run."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from typing import Any
from uuid import uuid4

from ragloop.core.budget import BudgetSpend
from ragloop.core.errors import server_text, withhold
from ragloop.core.records import StopReason, Tool
from ragloop.core.redaction import redact_all
from ragloop.observability import otel
from ragloop.observability.events import NESTED_IN, EventKind, LoopEvent, emit
from ragloop.observability.settings import trace_content_enabled
from ragloop.observability.stream import stream_event

_current: ContextVar[RunTelemetry | None] = ContextVar("ragloop_run_telemetry", default=None)


def current_run() -> RunTelemetry | None:
    """The run in progress in this context (the innermost one when runs nest), or None."""
    return _current.get()


class RunTelemetry:
    """Opens the run span, emits the run's events and opens its child spans.

    ``engine`` names the engine in events and spans; ``span_kind`` is the run span's
    OpenInference kind (``AGENT`` for a tool loop, ``CHAIN`` for a fixed pipeline); ``tools``
    are recorded as the run's tool definitions. ``run_id`` is new unless given (to emit more
    events about a finished run, such as its grounding).
    """

    def __init__(
        self,
        engine: str,
        *,
        span_kind: str = "CHAIN",
        tools: Sequence[Tool] = (),
        run_id: str | None = None,
    ) -> None:
        self.engine = engine
        self.run_id = run_id or uuid4().hex
        self.span_kind = span_kind
        self.tools = list(tools)
        self.span = otel.Span(None)
        self.finished = False
        self._iterations = 0
        self._server_text: list[str] = []

    @contextmanager
    def active(
        self,
        *,
        attributes: Mapping[str, Any] | None = None,
        content: Mapping[str, Any] | None = None,
    ) -> Iterator[RunTelemetry]:
        """Inside the block: the run span is open and this run is :func:`current_run`. Emits
        ``run_started`` on entry."""
        parent = _current.get()
        if parent is not None and parent is not self:  # e.g. a RetrievalLoop as a retriever
            attributes = {**(attributes or {}), NESTED_IN: parent.run_id}
        with otel.run_span(
            self.engine, self.run_id, span_kind=self.span_kind, tools=self.tools
        ) as span:
            self.span = span
            token = _current.set(self)
            try:
                self.event(EventKind.RUN_STARTED, attributes=attributes, content=content)
                yield self
            except BaseException as error:
                # A run that raises (on_error="raise", a cancelled task) still ends its trace:
                # without run_finished a recorder would keep its events forever and store none.
                self.failed(error)
                if not self.finished:
                    cancelled = isinstance(error, asyncio.CancelledError)
                    self.finish(
                        stop_reason=StopReason.CANCELLED if cancelled else StopReason.ERROR,
                        iterations=self._iterations,
                        budget_used=BudgetSpend(),
                        chunk_count=0,
                        error=f"{type(error).__name__}: {error}",
                    )
                raise
            finally:
                _current.reset(token)

    def failed(self, error: BaseException) -> None:
        """Note an error the run turns into a message: what servers wrote in it (a reply's
        body, see :func:`~ragloop.core.errors.server_text`) is content, withheld from the
        run's telemetry unless content capture is on."""
        self._server_text.extend(server_text(error))

    def _public(
        self, attributes: dict[str, Any], *, withhold_always: bool = False
    ) -> dict[str, Any]:
        """Attributes fit for telemetry: secrets redacted, servers' text withheld (unless
        content capture is on, or always with ``withhold_always``)."""
        attributes = redact_all(attributes)
        if self._server_text and (withhold_always or not trace_content_enabled()):
            attributes = {
                k: withhold(v, self._server_text) if isinstance(v, str) else v
                for k, v in attributes.items()
            }
        return attributes

    def event(
        self,
        kind: EventKind,
        *,
        iteration: int | None = None,
        attributes: Mapping[str, Any] | None = None,
        content: Mapping[str, Any] | None = None,
    ) -> LoopEvent:
        """Emit an event; ``content`` joins its attributes only when content capture is on (and
        always on the run's stream, which goes to whoever asked). Secrets are redacted
        (:mod:`ragloop.core.redaction`), and servers' text withheld without capture."""
        if kind is EventKind.ITERATION:
            self._iterations += 1
        event = LoopEvent(
            engine=self.engine,
            kind=kind,
            run_id=self.run_id,
            iteration=iteration,
            attributes=redact_all({**(attributes or {}), **(content or {})}),
        )
        stream_event(event)
        full = bare = event
        if content or self._server_text:
            public = self._public(dict(attributes or {}), withhold_always=True)
            bare = event.model_copy(update={"attributes": public})
        shown = full if trace_content_enabled() else bare
        emit(shown, full=full, bare=bare)
        return shown

    def finish(
        self,
        *,
        stop_reason: StopReason,
        iterations: int,
        budget_used: BudgetSpend,
        chunk_count: int,
        error: str | None = None,
        attributes: Mapping[str, Any] | None = None,
        content: Mapping[str, Any] | None = None,
    ) -> None:
        """Record the run's outcome on its span and emit ``run_finished``; ``attributes`` are
        the engine's own (citations, confidence, usage)."""
        self.finished = True
        if error is not None:
            error = self._public({"error": error})["error"]
        self.span.set(
            otel.run_outcome(
                stop_reason=stop_reason.value,
                iterations=iterations,
                budget_used=budget_used,
                chunk_count=chunk_count,
                error=error,
            )
        )
        if stop_reason is StopReason.ERROR:
            self.span.fail(error or "error")
        self.event(
            EventKind.RUN_FINISHED,
            attributes={
                "stop_reason": stop_reason.value,
                "outcome": stop_reason.outcome,
                "iterations": iterations,
                "chunk_count": chunk_count,
                "budget_used": budget_used.model_dump(),
                "error": error,
                **(attributes or {}),
            },
            content=content,
        )

    def retrieval(
        self, query: str, *, top_k: int, data_source: str | None = None, route: str | None = None
    ) -> AbstractContextManager[otel.Span]:
        """A child span around one retriever call."""
        return otel.retrieval_span(
            query, top_k=top_k, run_id=self.run_id, data_source=data_source, route=route
        )

    def tool(
        self, name: str, call_id: str, arguments: Mapping[str, Any]
    ) -> AbstractContextManager[otel.Span]:
        """A child span around one tool execution."""
        return otel.tool_span(name, call_id, arguments=arguments, run_id=self.run_id)
