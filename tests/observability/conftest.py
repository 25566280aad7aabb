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


@pytest.fixture(params=["sqlite", "postgresql"])
def trace_store(request, tmp_path):
    """A trace store of each kind, empty: a SQLite file, and a schema of the test's own on
    the session's PostgreSQL (the tests of a kind that cannot run are skipped)."""
    if request.param == "sqlite":
        from ragloop.observability.traces import TraceStore

        store = TraceStore(tmp_path / "traces.sqlite")
    else:
        from ragloop.observability.trace_stores import PostgresTraceStore

        server = request.getfixturevalue("postgres_server")
        schema = request.getfixturevalue("postgres_schema")
        store = PostgresTraceStore(server.dsn, schema=schema)
    yield store
    store.close()


def stored_text(store) -> str:
    """Everything a trace store holds, as text: the SQLite file's bytes and its write-ahead
    log's (where the latest writes are), or every row of the PostgreSQL schema's traces
    table."""
    from ragloop.observability.traces import TraceStore

    if isinstance(store, TraceStore):
        files = [store.path, store.path.with_name(store.path.name + "-wal")]
        return "".join(f.read_bytes().decode("utf-8", "replace") for f in files if f.exists())
    import psycopg

    with psycopg.connect(store._pool.conninfo) as conn:
        rows = conn.execute(f'SELECT t::text FROM "{store.schema}".traces t').fetchall()
    return "\n".join(row[0] for row in rows)
