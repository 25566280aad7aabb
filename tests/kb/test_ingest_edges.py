"""Ingest's edges (issue 18, item 11): an interrupted ingest says what it saved and resumes, a
file with nothing under its heading is skipped, and searching never writes to the knowledge
base, whose stats count chunk vectors only."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys

import pytest

from ragloop import IngestInterrupted, KnowledgeBase
from ragloop.kb.ingest import pipeline as ingest_run
from ragloop.kb.stores.base import ChunkRecord, DocumentRecord
from ragloop.kb.stores.sqlite.store import SQLiteStore
from ragloop.testing import HashEmbedder


def write_notes(folder, count: int):
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(count):
        (folder / f"note-{i:02}.md").write_text(
            f"# Note {i}\n\nTent number {i} sleeps {i} hikers.\n"
        )
    return folder


def test_an_interrupted_ingest_says_what_it_saved_and_running_again_resumes(tmp_path, monkeypatch):
    docs = write_notes(tmp_path / "docs", 6)
    monkeypatch.setattr(ingest_run, "WRITE_BATCH", 2)  # write every two documents
    kb = KnowledgeBase(tmp_path / "kb.sqlite", embedder=HashEmbedder(32))

    def ctrl_c(state):
        if state.phase == "reading" and state.files_done == 5:
            raise KeyboardInterrupt

    with pytest.raises(IngestInterrupted) as stopped:
        kb.ingest(docs, on_progress=ctrl_c)
    assert isinstance(stopped.value, KeyboardInterrupt)
    saved = stopped.value.report
    assert (saved.added, saved.updated) == (4, 0)  # two batches written, the fifth pending
    assert kb.stats().documents == 4
    again = kb.ingest(docs)
    assert (again.unchanged, again.added) == (4, 2)
    kb.close()


PRELUDE = """
import sys
from ragloop.kb.ingest import pipeline as ingest_run
ingest_run.WRITE_BATCH = 1
calls = []
original = ingest_run._write
def interrupted(*args):
    calls.append(1)
    if len(calls) == 4:
        raise KeyboardInterrupt  # as Ctrl-C would, in the middle of the run
    return original(*args)
ingest_run._write = interrupted
from ragloop.cli import main
sys.argv[0] = "ragloop"
main()
"""


def ragloop(*args, prelude=None):
    command = ["-c", prelude] if prelude else ["-m", "ragloop"]
    return subprocess.run(
        [sys.executable, *command, *args],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "120"},
        timeout=300,
    )


def test_ctrl_c_during_the_ingest_command(tmp_path):
    docs = write_notes(tmp_path / "docs", 6)
    kb = str(tmp_path / "kb.sqlite")
    stopped = ragloop("ingest", str(docs), "--kb", kb, "--embedder", "hash", prelude=PRELUDE)
    assert stopped.returncode == 130
    assert "Aborted!" not in stopped.stderr
    assert "Traceback" not in stopped.stderr
    assert (
        "interrupted: 3 document(s) saved (3 added, 0 updated) before it stopped; run the same "
        "command again to resume: saved documents are not read again"
    ) in stopped.stderr
    resumed = ragloop("ingest", str(docs), "--kb", kb, "--embedder", "hash", "--json")
    assert resumed.returncode == 0, resumed.stderr
    assert '"unchanged": 3' in resumed.stdout
    assert '"added": 3' in resumed.stdout


def test_a_file_with_only_a_heading_is_skipped_not_added(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "title.md").write_text("# Only a title\n")
    (docs / "tents.md").write_text("# Tents\n\nThe Ridgeline 2 weighs 1.4 kg.\n")
    kb = KnowledgeBase(tmp_path / "kb.sqlite", embedder=None)
    report = kb.ingest(docs)
    assert (report.added, report.chunks_added) == (1, 1)
    assert report.skipped == [(str(docs / "title.md"), "no text to index beyond its headings")]
    (docs / "tents.md").write_text("# Tents\n")  # its text removed: the old chunks go too
    again = kb.ingest(docs)
    assert (again.removed, kb.stats().documents, kb.stats().chunks) == (1, 0, 0)
    kb.close()


def test_searching_never_writes_and_stats_count_chunk_vectors(tmp_path):
    docs = write_notes(tmp_path / "docs", 3)
    path = tmp_path / "kb.sqlite"
    assert ragloop("ingest", str(docs), "--kb", str(path), "--embedder", "hash").returncode == 0

    def rows():
        with sqlite3.connect(path) as conn:
            return conn.execute("SELECT count(*) FROM vectors").fetchone()[0]

    before = rows()
    for query in ("tent", "hikers", "how many hikers does tent 2 sleep?"):
        found = ragloop("search", query, "--kb", str(path), "--mode", "hybrid")
        assert found.returncode == 0, found.stderr
    assert rows() == before  # no query vector was written
    kb = KnowledgeBase(path)
    kb.search("a query of this process")  # cached in memory only
    stats = kb.stats()
    assert stats.vectors == stats.chunks == 3
    kb.close()
    assert rows() == before


def test_a_batch_that_names_a_source_twice_stores_its_last_version_and_replaces_the_stored_one(
    tmp_path,
):
    def version(text: str, source: str = "a.md") -> tuple[DocumentRecord, list[ChunkRecord]]:
        chunk = ChunkRecord(f"{source}:{text}", 0, text, [], text, f"hash:{text}")
        return DocumentRecord("default", source, "", f"doc:{text}"), [chunk]

    store = SQLiteStore(tmp_path / "kb.sqlite")
    store.replace_documents([version("stored first"), version("other", "b.md")], [])
    store.replace_documents([version("draft"), version("final"), version("other 2", "b.md")], [])
    documents = {d.source: d.content_hash for d in store.documents()}
    assert documents == {"a.md": "doc:final", "b.md": "doc:other 2"}
    chunks = store.get_chunks(["a.md:stored first", "a.md:draft", "a.md:final", "b.md:other"])
    assert [c.content for c in chunks] == ["final"]
    assert store.chunks_with_phrase("stored first", 5) == []  # its phrase rows went too
    store.close()
