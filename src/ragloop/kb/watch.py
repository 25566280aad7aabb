"""Keeping a collection in step with folders while they change.

:class:`FolderWatcher` watches the files and folders an ingest was given (``watchfiles``: the
operating system's change notifications, inotify on Linux, no polling of ours) and applies each
burst of changes with :meth:`KnowledgeBase.ingest_changes
<ragloop.KnowledgeBase.ingest_changes>`: new and edited files ingested, named as an ingest of
the folder names them; renamed ones under their new name; documents whose files are gone
removed. Changes that come together (each within :data:`STEP_MS` of the last) are gathered, for
``debounce_ms`` at most (an editor's save, a ``git checkout``, a copy of a thousand files
arrive as one or a few batches), and only the paths that changed are looked at: nothing else
is read. What an ingest would not read (hidden files and folders, editors' swap and backup
files, types ragloop has no reader for) is not looked at either.

A file that cannot be read is skipped with its reason, as an ingest skips it, and keeps the
document it had; an error of the knowledge base while a batch is applied is reported with that
batch (:attr:`WatchBatch.error`) and the watch goes on: the next change of those files tries
again.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Protocol

import watchfiles
from pydantic import BaseModel, Field

from ragloop.core.errors import RagloopError
from ragloop.kb.ingest.discover import SKIPPED_DIRS, Candidate, IngestReport, file_of
from ragloop.kb.ingest.sources import base_folder
from ragloop.kb.knowledge_base import KnowledgeBase, VectorsWhen
from ragloop.kb.readers import SUPPORTED_SUFFIXES

logger = logging.getLogger("ragloop")

DEBOUNCE_MS = 300  # the longest a batch gathers changes before it is applied
STEP_MS = 50  # a quiet spell this long ends a batch


class StopSignal(Protocol):
    """What stops a watch: a :class:`threading.Event` or an :class:`asyncio.Event`."""

    def is_set(self) -> bool: ...


class WatchBatch(BaseModel):
    """One burst of changes applied: the paths seen ``changed`` (added or edited: ingested)
    and ``removed`` (gone: their documents removed), the ingest's report, when the batch was
    applied (``at``, UTC) and how long it took; ``sources``: the documents' sources it touched
    (a changed file's, as the folder names it; each removed document's); ``full``: a pass over
    every watched path (the
    sync when the watch begins) rather than the paths that changed; ``error``: why the
    knowledge base could not apply it (None when it did)."""

    full: bool = False
    changed: list[str] = Field(default_factory=list)
    removed: list[str] = Field(default_factory=list)
    sources: list[str] = Field(
        default_factory=list,
        description="The sources of the documents the changed files are and of those removed.",
    )
    report: IngestReport = Field(default_factory=IngestReport)
    at: datetime
    seconds: float = 0.0
    error: str | None = None


class FolderWatcher:
    """Watch ``paths`` (the folders and files an ingest was given) and keep ``collection`` of
    ``kb`` in step with them. :meth:`batches` yields a :class:`WatchBatch` after each burst of
    changes until ``stop`` is set (or the generator is closed); :meth:`base` is the folder
    sources are named relative to, as :meth:`KnowledgeBase.ingest
    <ragloop.KnowledgeBase.ingest>` of the same paths names them."""

    def __init__(
        self,
        kb: KnowledgeBase,
        paths: Sequence[str | os.PathLike[str]],
        *,
        collection: str = "default",
        vectors: VectorsWhen = "now",
        debounce_ms: int = DEBOUNCE_MS,
    ) -> None:
        if not paths:
            raise ValueError("nothing to watch: give at least one file or folder")
        self.kb = kb
        self.paths = [Path(p).expanduser().resolve() for p in paths]
        missing = [p for p in self.paths if not p.exists()]
        if missing:
            raise FileNotFoundError(f"cannot watch {missing[0]}: no such file or directory")
        self.collection = collection
        self.vectors: VectorsWhen = vectors
        self.debounce_ms = debounce_ms
        roots = [p for p in self.paths if p.is_dir()]
        files = [Candidate(p, None) for p in self.paths if not p.is_dir()]
        self.base = base_folder(files, roots) or self.paths[0]
        self._default_filter = watchfiles.DefaultFilter()  # editors' swap and backup files

    def watched(self, path: Path) -> bool:
        """Whether a change of ``path`` is one an ingest of the watched paths would see: under
        them, no hidden or skipped folder on the way, a folder or a type ragloop reads (a path
        without a suffix may be a folder that went away, so it is looked at; a folder with a
        dot in its name that went away is caught by the sync when a watch begins)."""
        for anchor in self.paths:
            if path == anchor:
                return True
            if anchor.is_dir() and path.is_relative_to(anchor):
                parts = path.relative_to(anchor).parts
                if any(p.startswith(".") or p in SKIPPED_DIRS for p in parts):
                    return False
                if not path.suffix or path.suffix.lower() in SUPPORTED_SUFFIXES:
                    return True
                return _exists(path) and path.is_dir()  # a folder like "release-3.11"
        return False

    def _filter(self, change: watchfiles.Change, raw: str) -> bool:
        return self._default_filter(change, raw) and self.watched(Path(raw))

    def batches(
        self, stop: StopSignal | None = None, *, sync_first: bool = True
    ) -> Iterator[WatchBatch]:
        """Apply each burst of changes as it comes and yield what it did, until ``stop`` (or
        Ctrl-C in the main thread: ``KeyboardInterrupt``, as ever).
        With ``sync_first``, once the watch has begun, one pass over the watched paths as
        ``ingest(..., sync=True)`` makes the collection match them (what changed before the
        watch began, or while an earlier ingest ran; unchanged files are not read): its batch
        has ``full`` set and is yielded only when it changed something."""
        pending_sync = sync_first
        for changes in watchfiles.watch(
            *self.paths,
            watch_filter=self._filter,
            debounce=self.debounce_ms,
            step=STEP_MS,
            stop_event=stop,
            rust_timeout=500,  # how often ``stop`` is looked at while nothing changes
            yield_on_timeout=True,  # the first timeout: the watch is on, sync now
        ):
            if pending_sync:
                pending_sync = False
                full = self.sync()
                if full.error or full.report.added + full.report.updated + full.report.removed:
                    yield full
            batch = self.apply({Path(raw) for _, raw in changes})
            if batch is not None:
                yield batch

    def sync(self) -> WatchBatch:
        """One pass over the watched paths, as ``ingest(paths, sync=True)``."""
        return self._run(
            WatchBatch(at=datetime.now(UTC), full=True),
            lambda: self.kb.ingest(
                self.paths, collection=self.collection, sync=True, vectors=self.vectors
            ),
        )

    def apply(self, paths: set[Path]) -> WatchBatch | None:
        """Apply changes of these paths: the ones that exist are ingested (a file saved by
        renaming a new one over it is an edit), the others' documents removed."""
        changed = sorted(p for p in paths if _exists(p))
        removed = sorted(p for p in paths if not _exists(p))
        if not changed and not removed:
            return None
        batch = WatchBatch(
            changed=[str(p) for p in changed],
            removed=[str(p) for p in removed],
            sources=self._sources(changed, removed),
            at=datetime.now(UTC),
        )
        return self._run(
            batch,
            lambda: self.kb.ingest_changes(
                changed,
                removed,
                relative_to=self.base,
                collection=self.collection,
                vectors=self.vectors,
            ),
        )

    def _sources(self, changed: list[Path], removed: list[Path]) -> list[str]:
        """The sources of the changed files (named relative to the base, as they are stored)
        and of the stored documents whose files are under a removed path."""
        found = {
            p.relative_to(self.base).as_posix()
            for p in changed
            if p.is_relative_to(self.base) and not p.is_dir()
        }
        if removed:
            for doc in self.kb.store.documents(self.collection):
                file = file_of(doc)
                if any(file.is_relative_to(r) for r in removed):
                    found.add(doc.source)
        return sorted(found)

    def _run(self, batch: WatchBatch, ingest: Callable[[], IngestReport]) -> WatchBatch:
        started = time.perf_counter()
        try:
            batch.report = ingest()
        except (RagloopError, OSError) as error:  # the watch goes on; the next change retries
            logger.warning("watch: could not apply a batch: %s", error)
            batch.error = str(error)
        batch.seconds = round(time.perf_counter() - started, 3)
        return batch


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except OSError:  # there, but not to be looked at: an ingest reports why
        return True
