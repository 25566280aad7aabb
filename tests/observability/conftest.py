"""An OpenTelemetry SDK with an in-memory exporter, installed once for the test session."""

from __future__ import annotations

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ragloop.observability import set_trace_content


@pytest.fixture(scope="session")
def _exporter() -> InMemorySpanExporter:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    return exporter


@pytest.fixture
def spans(_exporter: InMemorySpanExporter) -> InMemorySpanExporter:
    """The exporter, emptied; ``spans.get_finished_spans()`` lists what the test recorded."""
    _exporter.clear()
    return _exporter


@pytest.fixture(autouse=True)
def _content_capture_follows_the_environment(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("RAGLOOP_TRACE_CONTENT", raising=False)
    set_trace_content(None)
    yield
    set_trace_content(None)
