"""A collection kept in step with a folder while files change under a running watcher (real
files, real inotify through watchfiles): add, edit, rename, delete, editors' saves, a burst of
files, files that cannot be read."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from ragloop import KnowledgeBase
from ragloop.kb.watch import FolderWatcher, WatchBatch

WAIT_S = 20  # how long a change may take to show before the test fails (never asserted as speed)


def sources(kb: KnowledgeBase, collection: str = "default") -> set[str]:
    return {doc.source for doc in kb.store.documents(collection)}


def wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"the watcher never got there: {what}")
        time.sleep(0.05)


def gathered(
    batches: queue.Queue[WatchBatch], enough: Callable[[list[WatchBatch]], bool]
) -> list[WatchBatch]:
    """The watcher's batches, taken until ``enough`` holds of them (a batch is handed over
    after its changes are in the knowledge base: a search may see them first)."""
    seen: list[WatchBatch] = []
    deadline = time.monotonic() + WAIT_S
    while not enough(seen):
        try:
            seen.append(batches.get(timeout=max(deadline - time.monotonic(), 0.01)))
        except queue.Empty:
            raise AssertionError(f"the watcher never handed over enough: {seen}") from None
    while not batches.empty():  # any that came with them
        seen.append(batches.get())
    return seen


def names(seen: list[WatchBatch]) -> set[str]:
    return {Path(p).name for b in seen for p in b.changed + b.removed}


@contextmanager
def watching(
    kb: KnowledgeBase, *paths: Path, collection: str = "default"
) -> Iterator[queue.Queue[WatchBatch]]:
    """A watcher over ``paths`` in a thread, synced before the block starts; its batches."""
    batches: queue.Queue[WatchBatch] = queue.Queue()
    stop = threading.Event()
    started = threading.Event()
    watcher = FolderWatcher(kb, paths, collection=collection)
    original_sync = watcher.sync

    def sync_then_signal() -> WatchBatch:
        batch = original_sync()
        started.set()
        return batch

    watcher.sync = sync_then_signal  # type: ignore[method-assign]

    def run() -> None:
        for batch in watcher.batches(stop):
            batches.put(batch)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert started.wait(WAIT_S), "the watch never began"
    try:
        yield batches
    finally:
        stop.set()
        thread.join(WAIT_S)
        assert not thread.is_alive(), "the watcher did not stop"


@pytest.fixture
def docs(tmp_path) -> Path:
    folder = tmp_path / "docs"
    (folder / "guide").mkdir(parents=True)
    (folder / "intro.md").write_text("# Intro\n\nThe kettle boils water in ninety seconds.\n")
    (folder / "guide" / "setup.md").write_text("# Setup\n\nPlug the toaster into the wall.\n")
    return folder


@pytest.fixture
def kb(tmp_path, docs) -> Iterator[KnowledgeBase]:
    base = KnowledgeBase(tmp_path / "kb.sqlite", embedder=None)
    base.ingest(docs)
    yield base
    base.close()


def texts(kb: KnowledgeBase, query: str) -> list[str]:
    return [c.text for c in kb.search(query, mode="bm25")]


def test_added_edited_renamed_and_deleted_files_follow_the_folder(kb, docs):
    with watching(kb, docs):
        (docs / "guide" / "faq.md").write_text("# FAQ\n\nThe blender has three speeds.\n")
        wait_for(lambda: "guide/faq.md" in sources(kb), "a new file ingested")
        assert any("three speeds" in t for t in texts(kb, "blender speeds"))

        (docs / "intro.md").write_text("# Intro\n\nThe kettle boils water in sixty seconds.\n")
        wait_for(lambda: any("sixty" in t for t in texts(kb, "kettle")), "an edit ingested")
        assert not any("ninety" in t for t in texts(kb, "kettle ninety"))

        (docs / "guide" / "setup.md").rename(docs / "guide" / "install.md")
        wait_for(lambda: "guide/install.md" in sources(kb), "a renamed file under its name")
        wait_for(lambda: "guide/setup.md" not in sources(kb), "the old name gone")

        (docs / "intro.md").unlink()
        wait_for(lambda: "intro.md" not in sources(kb), "a deleted file's document removed")
    assert sources(kb) == {"guide/faq.md", "guide/install.md"}


def test_a_new_file_is_named_as_an_ingest_of_the_folder_names_it(kb, docs, tmp_path):
    with watching(kb, docs):
        (docs / "guide" / "deep").mkdir()
        (docs / "guide" / "deep" / "notes.txt").write_text("Descaling takes an hour.")
        wait_for(lambda: "guide/deep/notes.txt" in sources(kb), "a file in a new folder")
    fresh = KnowledgeBase(tmp_path / "fresh.sqlite", embedder=None)
    fresh.ingest(docs)
    assert sources(fresh) == sources(kb)  # the same names as a new ingest of the folder
    fresh.close()


def test_an_editors_save_by_rename_updates_the_document_and_never_drops_it(kb, docs):
    with watching(kb, docs) as batches:
        target = docs / "intro.md"
        for n in range(3):  # write a temporary file, then rename it over the document
            temporary = docs / f".intro.md.{n}.tmp"
            temporary.write_text(f"# Intro\n\nThe kettle now takes {n + 100} seconds.\n")
            os.replace(temporary, target)
        wait_for(lambda: any("102 seconds" in t for t in texts(kb, "kettle")), "the last save")
        seen = gathered(batches, lambda got: sum(b.report.updated for b in got) >= 1)
    assert all(b.report.removed == 0 for b in seen)  # the document was never removed
    assert "intro.md" in sources(kb)
    assert not any(".tmp" in path for b in seen for path in b.changed + b.removed)


def test_swap_files_hidden_files_and_unread_types_are_not_looked_at(kb, docs):
    with watching(kb, docs) as batches:
        (docs / ".notes.md").write_text("hidden")
        (docs / "intro.md.swp").write_text("swap")
        (docs / "intro.md~").write_text("backup")
        (docs / "image.png").write_bytes(b"\x89PNG")
        (docs / "last.md").write_text("# Last\n\nA marker file.\n")
        seen = gathered(batches, lambda got: "last.md" in names(got))
    assert names(seen) == {"last.md"}


def test_a_folder_with_a_dot_in_its_name_is_followed(kb, docs, tmp_path):
    outside = tmp_path / "release-3.11"
    outside.mkdir()
    (outside / "notes.md").write_text("# Notes\n\nThe 3.11 release adds a faster kettle.\n")
    with watching(kb, docs):
        outside.rename(docs / "release-3.11")
        wait_for(lambda: "release-3.11/notes.md" in sources(kb), "the moved-in folder's file")


def test_a_deleted_folder_takes_its_documents_and_a_moved_one_brings_them_back(kb, docs):
    with watching(kb, docs):
        (docs / "guide").rename(docs / "manual")
        wait_for(lambda: "manual/setup.md" in sources(kb), "the moved folder's file")
        wait_for(lambda: "guide/setup.md" not in sources(kb), "the old folder's document")
        for file in (docs / "manual").iterdir():
            file.unlink()
        (docs / "manual").rmdir()
        wait_for(lambda: sources(kb) == {"intro.md"}, "the deleted folder's documents")


def test_a_file_that_cannot_be_parsed_is_skipped_with_its_reason_and_keeps_its_document(
    tmp_path,
):
    folder = tmp_path / "data"
    folder.mkdir()
    (folder / "items.json").write_text(json.dumps({"name": "kettle", "watts": 3000}))
    kb = KnowledgeBase(tmp_path / "kb.sqlite", embedder=None)
    kb.ingest(folder)
    with watching(kb, folder) as batches:
        (folder / "items.json").write_text("{not json")
        batch = batches.get(timeout=WAIT_S)
        assert batch.report.skipped
        assert "items.json" in batch.report.skipped[0][0]
        (folder / "more.md").write_text("# More\n\nThe watch goes on.\n")
        wait_for(lambda: "more.md" in sources(kb), "a later file")
    assert "items.json" in sources(kb)  # the document it had is kept
    assert any("3000" in t for t in texts(kb, "kettle watts"))
    kb.close()


def test_a_burst_of_a_thousand_files_is_ingested_in_batches(kb, docs):
    burst = docs / "burst"
    with watching(kb, docs) as batches:
        burst.mkdir()
        for n in range(1000):
            (burst / f"page{n:04d}.md").write_text(f"# Page {n}\n\nItem number {n} of the burst.\n")
        seen = gathered(batches, lambda got: sum(b.report.added for b in got) >= 1000)
    assert len(sources(kb)) == 1002
    assert sum(b.report.added for b in seen) == 1000
    assert all(b.error is None for b in seen)
    assert any("Item number 999 of" in t for t in texts(kb, "item number 999"))


def test_changes_made_before_the_watch_began_are_synced_when_it_begins(kb, docs):
    (docs / "intro.md").unlink()
    (docs / "late.md").write_text("# Late\n\nWritten while nobody watched.\n")
    with watching(kb, docs) as batches:
        first = batches.get(timeout=WAIT_S)
    assert first.full
    assert (first.report.added, first.report.removed) == (1, 1)
    assert sources(kb) == {"guide/setup.md", "late.md"}


def test_a_batch_the_knowledge_base_cannot_apply_is_reported_and_the_watch_goes_on(
    kb, docs, monkeypatch
):
    from ragloop.core.errors import StoreError

    real = kb.ingest_changes
    failures = iter([StoreError("database is locked")])

    def flaky(*args, **kwargs):
        failure = next(failures, None)
        if failure is not None:
            raise failure
        return real(*args, **kwargs)

    monkeypatch.setattr(kb, "ingest_changes", flaky)
    with watching(kb, docs) as batches:
        (docs / "first.md").write_text("# First\n\nThis batch fails.\n")
        failed = batches.get(timeout=WAIT_S)
        assert failed.error == "database is locked"
        (docs / "first.md").write_text("# First\n\nThis save is applied.\n")
        wait_for(lambda: "first.md" in sources(kb), "the next change of the file")


def test_watching_a_path_that_does_not_exist_is_refused(kb, tmp_path):
    with pytest.raises(FileNotFoundError, match="no such file"):
        FolderWatcher(kb, [tmp_path / "nowhere"])


def test_ragloop_ingest_watch_prints_a_json_line_per_batch_and_stops_on_ctrl_c(tmp_path, docs):
    command = [sys.executable, "-m", "ragloop", "ingest", str(docs), "--watch", "--json"]
    command += ["--kb", str(tmp_path / "cli.sqlite"), "--embedder", "none"]
    process = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    assert process.stderr is not None
    try:
        initial = json.loads(process.stdout.readline())
        assert initial["added"] == 2
        assert "watching" in process.stderr.readline()
        time.sleep(1)  # the watch begins with a sync pass; a change may come any time after
        (docs / "new.md").write_text("# New\n\nA file added while ragloop watches.\n")
        batch = json.loads(process.stdout.readline())
        while batch["full"]:  # the sync pass, when it found anything (it should not)
            batch = json.loads(process.stdout.readline())
        assert batch["changed"] == [str((docs / "new.md").resolve())]
        assert batch["report"]["added"] == 1
    finally:
        process.send_signal(signal.SIGINT)
        _out, err = process.communicate(timeout=WAIT_S)
    assert process.returncode == 0, err
    assert "stopped watching: 1 batch(es) applied" in err
