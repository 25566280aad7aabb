"""Stored traces: recorded from the event stream, read back, and exported as HTML."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest

from ragloop import (
    AgentLoop,
    RAGLoop,
    TraceCorrupted,
    TraceNotFound,
    TraceRecord,
    TraceRecorder,
    TraceStore,
    set_trace_content,
)
from ragloop.observability.report_html import render_html
from ragloop.observability.trace_reading import trace_steps
from ragloop.observability.traces import traces_path_for
from ragloop.testing import InMemoryRetriever
from tests.observability.conftest import stored_text

DOCS = {
    "hire.md": "A tent can be hired for £12 a night from the Gear Library.",
    "stoves.md": "Never cook inside a tent: a stove can set it alight.",
    "boots.md": "Boots need <b>wax</b> & care; <script>alert('x')</script>",
}


def run_rag(store=None, question="What does it cost to hire a tent?", content=True):
    loop = RAGLoop.offline(InMemoryRetriever(DOCS), max_iterations=2)
    with TraceRecorder(store, meta={"kb": "test"}, content=content) as recorder:
        result = loop.run(question)
    (record,) = recorder.records.values()
    return result, record


def test_a_rag_run_becomes_a_record_whose_steps_match_the_result(trace_store):
    set_trace_content(True)
    store = trace_store
    result, record = run_rag(store)
    assert (record.engine, record.question, record.answer) == ("rag", result.query, result.answer)
    assert (record.stop_reason, record.iterations, record.content) == (
        result.stop_reason.value,
        result.iterations,
        True,
    )
    steps = trace_steps(record)
    assert [s.number for s in steps] == [it.iteration for it in result.trace]
    for step, it in zip(steps, result.trace, strict=True):
        assert step.queries == it.queries
        assert step.score == it.evaluation.score
        assert step.reason == it.evaluation.reason
        assert [(c.id, c.source, c.text) for c in step.chunks] == [
            (c.id, c.source, c.content) for c in it.chunks
        ]
    assert store.get(record.id) == record
    assert store.get(record.id[:6]).id == record.id
    assert [r.id for r in store.list()] == [record.id]


@pytest.mark.parametrize("capture", [False, True])
def test_a_recorder_without_content_stores_no_text_whatever_the_switch(trace_store, capture):
    set_trace_content(capture)  # the export's switch; [traces] content = false decides here
    store = trace_store
    result, record = run_rag(store, content=False)
    stored = store.get(record.id)
    assert (stored.content, stored.question, stored.answer) == (False, None, None)
    steps = trace_steps(stored)
    assert steps[0].queries == []
    assert steps[0].reason is None
    assert [c.source for c in steps[0].chunks] == [c.source for c in result.trace[0].chunks]
    assert all(c.text is None for c in steps[0].chunks)
    raw = stored_text(store)
    assert "hire a tent" not in raw
    assert "Gear Library" not in raw
    run_rag(store, content=True)
    assert "Gear Library" in stored_text(store)  # where a run with content shows its text


def test_a_local_trace_keeps_the_question_and_answer_by_default(trace_store):
    set_trace_content(False)  # nothing exported; the local trace is the run's own
    store = trace_store
    result, record = run_rag(store)
    stored = store.get(record.id)
    assert (stored.content, stored.question, stored.answer) == (True, result.query, result.answer)


def test_agent_runs_are_recorded_turn_by_turn(tmp_path):
    set_trace_content(True)
    loop = AgentLoop.offline(InMemoryRetriever(DOCS))
    with TraceRecorder() as recorder:
        result = loop.run("What does it cost to hire a tent?")
    record = recorder.records[result.run_id]
    steps = trace_steps(record)
    assert steps[0].queries == ["What does it cost to hire a tent?"]
    assert steps[0].chunks
    assert steps[0].note
    assert steps[-1].answer == result.answer
    assert sum(s.tools.count("search") for s in steps) == len(
        [e for e in result.tool_history if e.tool == "search"]
    )
    page = parse(render_html(record))
    assert page.count("li", "step") == len(steps)
    assert "Best chunk score per turn" in " ".join(page.text)
    assert page.count("line", "threshold") == 0


def test_unknown_and_ambiguous_ids(trace_store, tmp_path):
    store = trace_store
    with pytest.raises(TraceNotFound, match="no traces"):
        store.get("abc")
    assert store.list() == []
    assert not store.exists  # reading created nothing
    _, first = run_rag(store)
    _, second = run_rag(store)
    with pytest.raises(TraceNotFound, match="no trace 'zzz'"):
        store.get("zzz")
    with pytest.raises(TraceNotFound, match="several"):
        store.get("")
    with pytest.raises(TraceNotFound, match="no trace '%'"):
        store.get("%")  # a LIKE wildcard is an id's character, not a pattern
    assert {r.id for r in store.list()} == {first.id, second.id}
    assert traces_path_for(tmp_path / "kb.sqlite") == tmp_path / "kb.traces.sqlite"


class Page(HTMLParser):
    """Collects what the checks need: tags, attributes, text, and the chart's points."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)

    def count(self, tag, cls=None):
        return sum(
            1 for t, a in self.tags if t == tag and (cls is None or cls in (a.get("class") or ""))
        )


def parse(html: str) -> Page:
    page = Page()
    page.feed(html)
    page.close()
    return page


def test_the_html_report_is_self_contained_and_shows_the_run():
    set_trace_content(True)
    result, record = run_rag(question="How do I care for boots and what does a tent cost to hire?")
    page = parse(render_html(record))
    text = " ".join(page.text)
    assert page.count("script") == 0
    assert not [a for _, a in page.tags for k in ("src", "href") if a.get(k)]
    assert page.count("link") == 0
    assert record.question in text
    assert page.count("li", "step") == result.iterations
    assert page.count("circle", "point") == result.iterations
    assert page.count("line", "threshold") == 1
    assert page.count("tr", "chunk") == sum(len(it.chunks) for it in result.trace)
    for it in result.trace:
        for query in it.queries:
            assert query in text
    assert "<script>alert('x')</script>" in text  # the chunk's markup is shown, as text
    if result.trace[-1].strategy:
        assert result.trace[-1].strategy.value in text


def test_a_trace_without_content_still_renders():
    _, record = run_rag(content=False)
    page = parse(render_html(record))
    assert "question not recorded" in " ".join(page.text)
    assert page.count("li", "step") == record.iterations


def test_a_record_needs_events():
    with pytest.raises(ValueError, match="at least one event"):
        TraceRecord.from_events([], content=False)


def test_a_loop_run_inside_another_is_part_of_the_outer_trace_not_a_trace_of_its_own(
    trace_store,
):
    """RAGLoop.offline over a knowledge base retrieves through RetrievalLoop runs: the recorder
    stores the RAGLoop's trace alone, and the retrieval runs still emit their events (marked as
    nested) for listeners that want them."""
    from ragloop import Document, KnowledgeBase
    from ragloop.observability.events import NESTED_IN, EventKind, listen
    from ragloop.offline import RetrievalLoopRetriever

    kb = KnowledgeBase.in_memory(embedder=None)
    kb.add_documents([Document(title=name, source=name, text=t) for name, t in DOCS.items()])
    loop = RAGLoop.offline(kb, max_iterations=2)
    assert isinstance(loop.retriever, RetrievalLoopRetriever)
    started: list = []
    store = trace_store
    with (
        listen(lambda e: started.append(e) if e.kind is EventKind.RUN_STARTED else None),
        TraceRecorder(store) as recorder,
    ):
        result = loop.run("What does it cost to hire a tent?")
    (record,) = recorder.records.values()
    assert record.engine == "rag"
    assert record.iterations == result.iterations
    assert [r.id for r in store.list()] == [record.id]
    nested = [e for e in started if e.engine == "retrieval"]
    assert nested
    assert all(e.attributes[NESTED_IN] == record.id for e in nested)


def _record(run_id: str, started_at: float, question: str = "q") -> TraceRecord:
    from ragloop.observability.events import EventKind, LoopEvent

    started = LoopEvent(
        engine="rag",
        kind=EventKind.RUN_STARTED,
        run_id=run_id,
        timestamp=started_at,
        attributes={"question": question},
    )
    return TraceRecord.from_events([started], content=True, meta={"key": "alice"})


def test_the_latest_traces_come_first_within_the_limit_and_a_save_replaces(trace_store):
    for n, started_at in enumerate([30.0, 10.0, 20.0, 20.0, 40.0]):
        trace_store.save(_record(f"run-{n}", started_at))
    assert [r.id for r in trace_store.list()] == ["run-4", "run-0", "run-2", "run-3", "run-1"]
    assert [r.id for r in trace_store.list(2)] == ["run-4", "run-0"]
    assert all(r.events == [] for r in trace_store.list())  # the list leaves the events out
    trace_store.save(_record("run-1", 50.0, question="asked again"))  # the same id again
    listed = trace_store.list(1)
    assert [(r.id, r.question, r.meta) for r in listed] == [
        ("run-1", "asked again", {"key": "alice"})
    ]
    assert len(trace_store.list()) == 5
    assert trace_store.get("run-1").events[0].attributes == {"question": "asked again"}


def test_a_question_any_text_holds_is_read_back(trace_store):
    text = "naïve \x00 Ω 🏕 \\ % _ 'quoted' \"double\""
    trace_store.save(_record("odd_run%1", 1.0, question=text))
    stored = trace_store.get("odd_run%")
    assert stored.events[0].attributes["question"] == text  # the events keep every character
    assert stored.id == "odd_run%1"


@pytest.mark.parametrize(
    ("meta", "events", "listed"),
    [
        ("not json", "[]", ["good"]),  # the list reads the meta: the bad row is left out
        ("[1, 2]", "[]", ["good"]),
        ("{}", "[{]", ["good", "bad"]),  # the events are read by get only
        ("{}", '[{"kind": "no such kind"}]', ["good", "bad"]),
    ],
)
def test_a_damaged_row_is_a_trace_error_and_hides_no_other(trace_store, meta, events, listed):
    trace_store.save(_record("good", 2.0))
    _write_raw(trace_store, "bad", meta, events)
    assert [r.id for r in trace_store.list()] == listed
    with pytest.raises(TraceCorrupted, match="stored trace 'bad' is unreadable"):
        trace_store.get("bad")
    assert trace_store.get("good").id == "good"


def _write_raw(store, run_id: str, meta: str, events: str) -> None:
    """A row as another program (or a damaged disk) might have left it."""
    if isinstance(store, TraceStore):
        import sqlite3

        with sqlite3.connect(store.path) as conn:
            conn.execute(
                "INSERT INTO traces (id, engine, started_at, content, meta, events) "
                "VALUES (?, 'rag', 1.0, 1, ?, ?)",
                (run_id, meta, events),
            )
        return
    import psycopg

    with psycopg.connect(store._pool.conninfo) as conn:
        conn.execute(
            f'INSERT INTO "{store.schema}".traces (id, engine, started_at, content, meta, events) '
            "VALUES (%s, 'rag', 1.0, true, %s, %s)",
            (run_id, meta, events),
        )
