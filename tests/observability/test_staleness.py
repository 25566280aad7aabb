"""Answers that know their sources changed: a run's trace keeps the version of every document
its answer cited, and a run whose cited documents were edited or removed since is stale."""

from __future__ import annotations

import json
import sqlite3

from click.testing import CliRunner

from ragloop import KnowledgeBase, RAGLoop
from ragloop.cli import main
from ragloop.core.files import traces_path_for
from ragloop.observability.report_html import render_html
from ragloop.observability.staleness import stale_sources
from ragloop.observability.traces import TraceRecorder, TraceStore

KETTLE = "# Kettle\n\nThe kettle boils water in ninety seconds.\n"
TOASTER = "# Toaster\n\nThe toaster has six browning levels.\n"


def shop(tmp_path) -> tuple[KnowledgeBase, object]:
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "kettle.md").write_text(KETTLE)
    (docs / "toaster.md").write_text(TOASTER)
    kb = KnowledgeBase(tmp_path / "kb.sqlite", embedder=None)
    kb.ingest(docs)
    return kb, docs


def asked(kb: KnowledgeBase, store, *questions: str) -> list:
    with TraceRecorder(store) as recorder:
        for question in questions:
            RAGLoop.offline(kb).run(question)
    return list(recorder.records.values())


def test_a_trace_keeps_the_version_of_each_document_its_answer_cites(tmp_path, trace_store):
    kb, _ = shop(tmp_path)
    (record,) = asked(kb, trace_store, "How long does the kettle take to boil water?")
    assert [(c.collection, c.source) for c in record.cited] == [("default", "kettle.md")]
    assert record.cited[0].version == kb.document_version("default", "kettle.md")
    listed = trace_store.list(5)[0]  # the listing holds it too: no events needed to judge
    assert listed.cited == record.cited
    assert stale_sources(listed, kb.document_version) == []
    kb.close()


def test_an_edited_or_removed_source_makes_exactly_the_runs_that_cited_it_stale(tmp_path):
    kb, docs = shop(tmp_path)
    store = TraceStore(tmp_path / "traces.sqlite")
    kettle, toaster = asked(
        kb,
        store,
        "How long does the kettle take to boil water?",
        "How many browning levels does the toaster have?",
    )
    (docs / "kettle.md").write_text(KETTLE.replace("ninety", "sixty"))
    kb.ingest(docs)
    (edited,) = stale_sources(kettle, kb.document_version)
    assert (edited.source, edited.change) == ("kettle.md", "edited")
    assert edited.cited != edited.current
    assert stale_sources(toaster, kb.document_version) == []  # its source did not change

    (docs / "toaster.md").unlink()
    kb.ingest(docs, sync=True)
    (removed,) = stale_sources(toaster, kb.document_version)
    assert (removed.change, removed.current) == ("removed", None)

    (docs / "kettle.md").write_text(KETTLE)  # the very version the run read, back again
    kb.ingest(docs)
    assert stale_sources(kettle, kb.document_version) == []
    store.close()
    kb.close()


def test_a_trace_written_before_versions_were_kept_is_never_stale_and_still_reads(tmp_path):
    kb, _ = shop(tmp_path)
    path = tmp_path / "old.traces.sqlite"
    (record,) = asked(kb, TraceStore(path), "How long does the kettle take to boil water?")
    with sqlite3.connect(path) as conn:  # as an older ragloop wrote it: no versions
        conn.execute("UPDATE traces SET cited = '[]'")
    listed = TraceStore(path).list(5)[0]
    assert listed.cited == []
    assert listed.id == record.id
    assert stale_sources(listed, lambda collection, source: None) == []
    kb.close()


def test_the_html_trace_marks_a_stale_run(tmp_path):
    kb, docs = shop(tmp_path)
    (record,) = asked(kb, None, "How long does the kettle take to boil water?")
    assert "Stale" not in render_html(record, stale_sources(record, kb.document_version))
    (docs / "kettle.md").write_text("# Kettle\n\nThe kettle boils water in a minute.\n")
    kb.ingest(docs)
    page = render_html(record, stale_sources(record, kb.document_version))
    assert "<h2>Stale</h2>" in page
    assert "kettle.md" in page
    assert "edited" in page
    kb.close()


def test_ragloop_traces_list_stale_shows_only_the_stale_runs_and_what_changed(tmp_path):
    kb, docs = shop(tmp_path)
    store = TraceStore(traces_path_for(tmp_path / "kb.sqlite"))
    kettle, toaster = asked(
        kb,
        store,
        "How long does the kettle take to boil water?",
        "How many browning levels does the toaster have?",
    )
    store.close()
    runner = CliRunner()
    out = runner.invoke(main, ["traces", "list", "--stale", "--kb", str(tmp_path / "kb.sqlite")])
    assert out.exit_code == 0, out.output
    assert "no stale runs" in out.output

    (docs / "kettle.md").write_text(KETTLE.replace("ninety", "sixty"))
    kb.ingest(docs)
    kb.close()
    out = runner.invoke(
        main, ["traces", "list", "--stale", "--json", "--kb", str(tmp_path / "kb.sqlite")]
    )
    assert out.exit_code == 0, out.output
    (only,) = json.loads(out.output)
    assert only["id"] == kettle.id
    assert only["stale"][0]["source"] == "kettle.md"
    assert only["stale"][0]["change"] == "edited"
    shown = runner.invoke(
        main, ["traces", "show", kettle.id[:12], "--kb", str(tmp_path / "kb.sqlite")]
    )
    assert "stale:" in shown.output
    assert "kettle.md (edited)" in shown.output
    shown = runner.invoke(
        main, ["traces", "show", toaster.id[:12], "--kb", str(tmp_path / "kb.sqlite")]
    )
    assert "stale:" not in shown.output
