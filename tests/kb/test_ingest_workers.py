"""Ingest with worker processes (issue 20): past ``PARALLEL_AFTER`` bytes, workers parse,
chunk and count terms while this process writes. What is stored is exactly what one process
stores; a document a worker cannot parse is skipped with its reason; a worker that dies costs
nothing; a writer killed outright leaves a sound file and no orphaned workers."""

from __future__ import annotations

import json
import logging
import multiprocessing
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time

import pytest

from ragloop import Document, KnowledgeBase
from ragloop.kb.index.bm25 import pack, pack_batch, renumber, term_frequencies, unpack
from ragloop.kb.ingest import pipeline as ingest_run
from ragloop.kb.ingest import workers as ingest_workers
from ragloop.kb.knowledge_base import _parse_text
from ragloop.kb.stores.sqlite.store import SQLiteStore
from ragloop.testing import HashEmbedder

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="ingest workers are forked: Linux only"
)


@pytest.fixture
def workers(monkeypatch):
    """Two workers past the first 100 bytes, four documents a job."""
    monkeypatch.setattr(ingest_run, "ingest_workers", lambda: 2)
    monkeypatch.setattr(ingest_workers, "PARALLEL_AFTER", 100)
    monkeypatch.setattr(ingest_workers, "JOB_DOCUMENTS", 4)
    monkeypatch.setattr(ingest_run, "WRITE_BATCH", 8)


@pytest.fixture
def alone(monkeypatch):
    monkeypatch.setattr(ingest_run, "ingest_workers", lambda: 0)
    monkeypatch.setattr(ingest_run, "WRITE_BATCH", 8)


def documents(count: int) -> list[Document]:
    out = []
    for i in range(count):
        body = "\n\n".join(
            f"## Part {p}\n\nTent {i} part {p}: the Ridgeline sleeps {i % 4 + 1} hikers, "
            f"déjà vu café {p}. " * (1 + (i * p) % 5)
            for p in range(1 + i % 3)
        )
        # the same text twice in a document, and a source given twice (the last one stands)
        out.append(Document(text=f"# Tent {i}\n\n{body}\n\nSame.\n\nSame.", format="markdown",
                            source=f"doc{i % 37}.md", metadata={"n": i}))  # fmt: skip
    return out


def stored(kb: KnowledgeBase) -> list[tuple]:
    """Every chunk as stored, its term frequencies by term (ids differ between files)."""
    conn = kb.store._conn()
    terms = dict(conn.execute("SELECT id, term FROM vocabulary"))
    rows = conn.execute(
        "SELECT d.source, d.title, d.metadata, c.id, c.position, c.content, c.heading_path, "
        "c.text_hash, c.metadata, c.terms FROM chunks c JOIN documents d ON d.id = c.document_id "
        "ORDER BY c.pk"
    ).fetchall()
    out = []
    for *row, blob in rows:
        ids, counts = unpack(blob)
        out.append((*row, sorted(zip((terms[int(i)] for i in ids), counts.tolist(), strict=True))))
    return out


def test_workers_store_exactly_what_one_process_stores(tmp_path, monkeypatch, alone):
    one = KnowledgeBase(tmp_path / "one.sqlite", embedder=HashEmbedder(32))
    expected = one.add_documents(documents(60))
    monkeypatch.setattr(ingest_run, "ingest_workers", lambda: 2)
    monkeypatch.setattr(ingest_workers, "PARALLEL_AFTER", 100)
    monkeypatch.setattr(ingest_workers, "JOB_DOCUMENTS", 4)
    many = KnowledgeBase(tmp_path / "many.sqlite", embedder=HashEmbedder(32))
    report = many.add_documents(documents(60))
    assert report.model_dump() == expected.model_dump()
    assert many.stats().documents == 37  # 23 sources came twice: their last version stands
    assert stored(many) == stored(one)
    for query in ("ridgeline hikers", "déjà vu", "part 2"):
        assert [(c.id, c.score) for c in many.search(query, mode="hybrid")] == [
            (c.id, c.score) for c in one.search(query, mode="hybrid")
        ]


def test_the_compact_counts_a_worker_sends_are_the_terms_counted_here():
    texts = ["Tents, tents and more tents.", "", "the of and", "Café déjà vu: 3 tents"]
    terms, blobs = pack_batch(texts, stems={})
    ids = {term: 100 + i for i, term in enumerate(sorted(terms))}
    numbered = [ids[t] for t in terms]
    import numpy as np

    for text, blob in zip(texts, blobs, strict=True):
        assert renumber(blob, np.asarray(numbered, dtype=np.uint32)) == pack(
            term_frequencies(text), ids
        )


def fragile_parse(document):
    """Parses like the knowledge base, but fails on "bad" documents and, in a worker process,
    kills the worker on "fatal" ones."""
    if "bad" in document.source:
        raise ValueError(f"cannot parse {document.source}")
    if "fatal" in document.source and multiprocessing.parent_process() is not None:
        os._exit(1)  # the worker dies: out of memory, a crash in a parser, kill -9
    return _parse_text(document)


def test_a_document_a_worker_cannot_parse_is_skipped_with_its_reason(
    tmp_path, monkeypatch, workers, caplog
):
    from ragloop.kb import knowledge_base

    monkeypatch.setattr(knowledge_base, "_parse_text", fragile_parse)
    docs = [Document(text=f"Tent {i} weighs {i} kg.", source=f"ok{i}.md") for i in range(20)]
    docs[9] = Document(text="Not a tent.", source="bad9.md")
    kb = KnowledgeBase(tmp_path / "kb.sqlite", embedder=None)
    with caplog.at_level(logging.WARNING, logger="ragloop"):
        report = kb.add_documents(docs)
    assert report.added == 19
    assert report.skipped == [("bad9.md", "ValueError: cannot parse bad9.md")]
    assert "cannot parse bad9.md" in caplog.text
    assert "Traceback" in caplog.text  # the worker's, logged here
    assert kb.stats().documents == 19


def test_a_worker_that_dies_costs_nothing(tmp_path, monkeypatch, workers, caplog):
    from ragloop.kb import knowledge_base

    monkeypatch.setattr(knowledge_base, "_parse_text", fragile_parse)
    docs = [Document(text=f"Tent {i} weighs {i} kg.", source=f"ok{i}.md") for i in range(40)]
    docs[13] = Document(text="Tent 13 weighs 13 kg.", source="fatal13.md")
    kb = KnowledgeBase(tmp_path / "kb.sqlite", embedder=HashEmbedder(32))
    with caplog.at_level(logging.WARNING, logger="ragloop"):
        report = kb.add_documents(docs)
    assert "an ingest worker failed; parsing in this process" in caplog.text
    assert (report.added, report.skipped) == (40, [])
    conn = kb.store._conn()
    assert conn.execute("SELECT count(*), count(DISTINCT id) FROM chunks").fetchone() == (40, 40)
    assert [c.source for c in kb.search("tent 13 weighs", mode="bm25", top_k=1)] == ["fatal13.md"]


def test_hostile_files_are_skipped_with_their_reasons_by_workers_too(tmp_path, workers):
    root = tmp_path / "docs"
    root.mkdir()
    for i in range(12):
        (root / f"good{i}.md").write_text(f"# Tent {i}\n\nTent {i} is guaranteed for {i} years.")
    (root / "binary.md").write_bytes(bytes(range(256)) * 10)
    (root / "bad.json").write_bytes(b'{"title": "x", "body": ')
    (root / "title-only.md").write_text("# Only a title\n")
    kb = KnowledgeBase(tmp_path / "kb.sqlite", embedder=None)
    report = kb.ingest(root)
    assert report.added == 12
    skipped = {os.path.basename(path): reason for path, reason in report.skipped}
    assert set(skipped) == {"binary.md", "bad.json", "title-only.md"}
    assert "no text to index" in skipped["title-only.md"]
    assert kb.ingest(root).unchanged == 12  # stored as one process stores: unchanged again


def children(pid: int) -> set[int]:
    found: set[int] = set()
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as listing:
            found.update(int(child) for child in listing.read().split())
    return found


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_writer_killed_with_its_workers_running_leaves_a_sound_file_and_no_orphans(tmp_path):
    db = tmp_path / "kb.sqlite"
    script = textwrap.dedent(
        f"""
        from ragloop.kb.ingest import pipeline as ingest_run
        from ragloop import Document, KnowledgeBase
        ingest_run.ingest_workers = lambda: 2
        from ragloop.kb.ingest import workers
        workers.PARALLEL_AFTER, workers.JOB_DOCUMENTS, ingest_run.WRITE_BATCH = 1000, 8, 16
        kb = KnowledgeBase({str(db)!r}, embedder="hash")
        docs = (Document(text=f"Tent {{i}}. " * 50, source=f"d{{i}}") for i in range(3000))
        def progress(state):
            print(state.phase, state.chunks_stored, flush=True)
        kb.add_documents(docs, on_progress=progress)
        """
    )
    with subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True) as p:
        assert p.stdout is not None
        for line in p.stdout:
            phase, count = line.split()
            if phase == "reading" and int(count) >= 300:
                workers = children(p.pid)
                os.kill(p.pid, signal.SIGKILL)
                break
    assert p.returncode == -signal.SIGKILL
    assert len(workers) == 2
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(pid) for pid in workers)  # gone with their writer
    store = SQLiteStore(db)
    assert store.integrity_check() == "ok"
    conn = store._conn()
    documents, chunks = conn.execute(
        "SELECT count(DISTINCT document_id), count(DISTINCT id) FROM chunks"
    ).fetchone()
    assert 300 <= documents < 3000
    assert chunks == documents
    store.close()


def stored_documents(path: str) -> int:
    try:
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
            return int(conn.execute("SELECT count(*) FROM documents").fetchone()[0])
    except sqlite3.Error:  # not created yet
        return 0


def test_ctrl_c_stops_the_ingest_its_workers_included_and_running_again_resumes(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    for i in range(6000):
        (docs / f"note-{i:04}.md").write_text(f"# Note {i}\n\n" + f"Tent {i} sleeps two. " * 30)
    kb = str(tmp_path / "kb.sqlite")
    prelude = textwrap.dedent(
        """
        import sys
        from ragloop.kb.ingest import pipeline as ingest_run
        ingest_run.ingest_workers = lambda: 2
        from ragloop.kb.ingest import workers
        workers.PARALLEL_AFTER, workers.JOB_DOCUMENTS, ingest_run.WRITE_BATCH = 1000, 8, 16
        from ragloop.cli import main
        sys.argv[0] = "ragloop"
        main()
        """
    )
    command = [sys.executable, "-c", prelude, "ingest", str(docs), "--kb", kb, "--embedder",
               "none", "--json"]  # fmt: skip
    # Ctrl-C in a terminal signals the whole process group: the writer and its workers
    with subprocess.Popen(command, stderr=subprocess.PIPE, text=True, start_new_session=True) as p:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and stored_documents(kb) < 200:
            time.sleep(0.05)  # well into the ingest, workers running
        workers = children(p.pid)
        os.killpg(p.pid, signal.SIGINT)
        _, stderr = p.communicate(timeout=60)
    assert len(workers) == 2
    assert p.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert "interrupted:" in stderr
    assert not any(alive(pid) for pid in workers)
    again = [sys.executable, "-m", "ragloop", *command[3:]]
    resumed = subprocess.run(
        again,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert resumed.returncode == 0, resumed.stderr
    report = json.loads(resumed.stdout)
    assert report["unchanged"] + report["added"] == 6000
    assert report["unchanged"] > 0
