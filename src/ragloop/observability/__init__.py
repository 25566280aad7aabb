"""Telemetry shared by every engine: one event stream, structured logs, OpenTelemetry spans.

- :func:`listen` registers a listener for :class:`LoopEvent` records;
- :func:`install_json_logging` / :class:`JsonFormatter` write the ``ragloop`` logger's events
  as JSON lines;
- :mod:`ragloop.observability.otel` holds every span and attribute name (a no-op without
  ``opentelemetry-api``);
- :func:`set_trace_content` (or ``RAGLOOP_TRACE_CONTENT=1``) lets content into all three;
- :mod:`ragloop.observability.llm` wraps model calls in ``chat`` spans, and
  :class:`~ragloop.observability.run.RunTelemetry` is what an engine uses for one run.
"""

from ragloop.core.imports import lazy_face
from ragloop.observability.events import (
    EventKind,
    JsonFormatter,
    Listening,
    LoopEvent,
    install_json_logging,
    listen,
)
from ragloop.observability.run import RunTelemetry, current_run
from ragloop.observability.settings import set_trace_content, trace_content_enabled

# the trace store loads when first named: most runs record no trace
_TRACES = lazy_face(
    __name__,
    {
        "ragloop.observability.traces": (
            "TraceRecord",
            "TraceRecorder",
            "TraceStorage",
            "TraceStore",
        ),
        "ragloop.observability.trace_stores": ("PostgresTraceStore", "open_trace_store"),
    },
)

__all__ = [
    "EventKind",
    "JsonFormatter",
    "Listening",
    "LoopEvent",
    "PostgresTraceStore",
    "RunTelemetry",
    "TraceRecord",
    "TraceRecorder",
    "TraceStorage",
    "TraceStore",
    "current_run",
    "install_json_logging",
    "listen",
    "open_trace_store",
    "set_trace_content",
    "trace_content_enabled",
]


def __getattr__(name: str) -> object:
    return _TRACES.resolve(name)
