"""Preparing documents for the writer: parse and chunk each (and count its keyword terms),
in the writer's process or, past ``PARALLEL_AFTER`` bytes, in forked worker processes that die
with their writer."""

from __future__ import annotations

import contextlib
import ctypes
import logging
import multiprocessing
import os
import signal
import sys
import traceback
from collections import deque
from collections.abc import Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass

from ragloop.core.records import chunk_id
from ragloop.kb.index.bm25 import pack_batch
from ragloop.kb.ingest.chunking import ChunkingConfig, chunk_document
from ragloop.kb.ingest.discover import (
    SkipFile,
    storable,
    storable_document,
)
from ragloop.kb.ingest.items import Item
from ragloop.kb.ingest.links import document_names
from ragloop.kb.readers import ParsedDocument
from ragloop.kb.stores.base import (
    ChunkRecord,
    DocumentRecord,
    content_hash,
    index_text,
)

logger = logging.getLogger("ragloop")


@dataclass
class Prepared:
    doc: DocumentRecord
    chunks: list[ChunkRecord]
    names: list[tuple[str, str, str]]  # (name, target chunk id, document key)
    replaced: bool


@dataclass
class Parsed:
    """A document parsed and chunked (in a worker process or in the writer's)."""

    shown: str
    doc: DocumentRecord
    chunks: list[ChunkRecord]
    names: list[tuple[str, str, str]]


@dataclass
class Failed:
    """A document that could not be parsed: the reason, and the traceback of a surprise (the
    writer logs it: a worker process's log goes nowhere)."""

    shown: str
    reason: str
    details: str = ""


Outcome = Parsed | Failed


def prepare_documents(
    jobs: Sequence[tuple[Item, str]], collection: str, chunking: ChunkingConfig, count_terms: bool
) -> list[Outcome]:
    """Parse and chunk documents given with their hashes (what a worker process runs); with
    ``count_terms``, also count each chunk's keyword terms, the writer's largest cost."""
    outcomes = [_parse(item, doc_hash, collection, chunking) for item, doc_hash in jobs]
    if count_terms:
        if len(_worker_stems) > WORKER_STEMS:
            _worker_stems.clear()
        chunks = [c for o in outcomes if isinstance(o, Parsed) for c in o.chunks]
        terms, packed = pack_batch([c.index_text for c in chunks], _worker_stems)
        for chunk, blob in zip(chunks, packed, strict=True):
            chunk.counted_terms = (terms, blob)
    return outcomes


def _parse(item: Item, doc_hash: str, collection: str, chunking: ChunkingConfig) -> Outcome:
    try:
        parsed, metadata = item.parse()
        parsed, metadata = storable_document(parsed), storable(metadata)
        doc = DocumentRecord(collection, item.source, parsed.title, doc_hash, metadata)
        chunks, names = _chunk(doc, parsed, chunking)
    except SkipFile as reason:
        return Failed(item.shown, str(reason))
    except Exception as error:  # one document's surprise never costs the others
        return Failed(item.shown, f"{type(error).__name__}: {error}", traceback.format_exc())
    return Parsed(item.shown, doc, chunks, names)


def _chunk(
    doc: DocumentRecord, parsed: ParsedDocument, chunking: ChunkingConfig
) -> tuple[list[ChunkRecord], list[tuple[str, str, str]]]:
    drafts = chunk_document(parsed, chunking)
    doc_key = f"{doc.collection}\0{doc.source}"
    chunks: list[ChunkRecord] = []
    occurrences: dict[str, int] = {}
    for draft in drafts:
        seen = occurrences.get(draft.text, 0)
        occurrences[draft.text] = seen + 1
        identity = f"{doc.collection}\0{doc.source}\0{seen}"
        text = index_text(doc.title, draft.heading_path, draft.text)
        record = ChunkRecord(
            id=chunk_id(identity, draft.text),
            position=draft.position,
            content=draft.text,
            heading_path=draft.heading_path,
            index_text=text,
            text_hash=content_hash(text),
            metadata=draft.meta,
        )
        chunks.append(record)
    targets = document_names(doc.title, ((c.id, c.heading_path) for c in chunks))
    return chunks, [(name, target, doc_key) for name, target in targets]


def ingest_workers() -> int:
    """Worker processes an ingest starts beside the writer: one a core, at most
    ``MAX_WORKERS``, none on one core, and only on Linux, where they are forked (a spawned
    worker imports the caller's script again, which a script without ``if __name__ ==
    "__main__"`` does not survive; forking is unsafe on macOS). As many workers as cores,
    not one fewer: the writer waits on SQLite often enough that on 2 cores, at 50,000 chunks,
    2 workers stored 3,300 to 3,550 chunks a second, 1 worker 2,600 to 2,900 and none 2,550
    to 2,700."""
    if not sys.platform.startswith("linux"):
        return 0
    cores = len(os.sched_getaffinity(0))
    return min(cores, MAX_WORKERS) if cores > 1 else 0


MAX_WORKERS = 4  # beyond this the writer (SQLite, one process) is the limit


# the stems a worker process remembers (its life is one ingest): a job's words are mostly
# stemmed before, and stemming them again was half of counting them
_worker_stems: dict[str, str] = {}


WORKER_STEMS = 500_000  # words, about 100 MB; then it starts again


PARALLEL_AFTER = 1 << 20  # bytes of documents parsed in the writer's process before workers


JOB_DOCUMENTS = 256  # documents sent to a worker at once


JOB_BYTES = 1 << 20  # ... or fewer, when they are this large


IN_FLIGHT = 2  # jobs a worker may have waiting (bounds the documents held in memory)


class Preparer:
    """Parses and chunks documents, handing them back in the order they came: in this
    process until ``PARALLEL_AFTER`` bytes (a small ingest never starts a process), then
    in worker processes, a job of documents at a time. When a worker dies (killed, out of
    memory) or a job cannot reach it, its documents are parsed here and the rest too."""

    def __init__(
        self, collection: str, chunking: ChunkingConfig, workers: int, count_terms: bool
    ) -> None:
        self.collection, self.chunking, self.workers = collection, chunking, workers
        self.count_terms = count_terms
        self.seen = 0
        self.job: list[tuple[Item, str]] = []
        self.job_bytes = 0
        self.running: deque[tuple[list[tuple[Item, str]], Future[list[Outcome]]]] = deque()
        self.pool: ProcessPoolExecutor | None = None

    def add(self, item: Item, doc_hash: str) -> list[Outcome]:
        """The outcomes finished by now (in order), this document's or earlier ones."""
        self.seen += item.size
        if self.pool is None and (self.workers < 1 or self.seen <= PARALLEL_AFTER):
            return self._here([(item, doc_hash)])
        self.job.append((item, doc_hash))
        self.job_bytes += item.size
        if len(self.job) < JOB_DOCUMENTS and self.job_bytes < JOB_BYTES:
            return []
        return self._send(waiting=IN_FLIGHT * self.workers)

    def finish(self) -> list[Outcome]:
        """Every outcome still to come."""
        return self._send(waiting=0)

    def _here(self, job: list[tuple[Item, str]]) -> list[Outcome]:
        return prepare_documents(job, self.collection, self.chunking, count_terms=False)

    def _send(self, *, waiting: int) -> list[Outcome]:
        """Send the job to a worker, then hand back the outcomes finished while more than
        ``waiting`` jobs are under way (all of them when there are no workers)."""
        job, self.job, self.job_bytes = self.job, [], 0
        if job and self.pool is None and self.workers > 0:
            self.pool = self._start()
        if job and self.pool is not None:
            try:
                future = self.pool.submit(
                    prepare_documents, job, self.collection, self.chunking, self.count_terms
                )
            except Exception:  # a worker died since the last job
                self._failed()
            else:
                self.running.append((job, future))
                job = []
        done: list[Outcome] = []
        while len(self.running) > (waiting if self.pool is not None else 0):
            done += self._collect()
        return done + self._here(job)  # a job no worker took comes after the earlier ones

    def _start(self) -> ProcessPoolExecutor | None:
        try:
            return ProcessPoolExecutor(
                self.workers,
                mp_context=multiprocessing.get_context("fork"),
                initializer=_worker_started,
                initargs=(os.getpid(),),
            )
        except (OSError, ValueError):  # no processes here (limits, a sandbox): parse here
            logger.warning("could not start ingest workers; parsing in this process", exc_info=True)
            self.workers = 0
            return None

    def _collect(self) -> list[Outcome]:
        job, future = self.running.popleft()
        try:
            return future.result()
        except Exception:  # prepare_documents keeps each document's errors: this is the pool's
            self._failed()
            return self._here(job)

    def _failed(self) -> None:
        if self.pool is not None:  # said once: the jobs under way fail with it
            logger.warning("an ingest worker failed; parsing in this process", exc_info=True)
        self._stop()

    def _stop(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True, cancel_futures=True)
        self.pool, self.workers = None, 0

    def __enter__(self) -> Preparer:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop()


def _worker_started(writer: int) -> None:
    # Ctrl-C reaches the whole process group: the writer stops the ingest, not each worker
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # a writer killed outright (kill -9) takes its workers with it instead of orphaning them
    with contextlib.suppress(OSError, AttributeError):  # no prctl: the pool's shutdown stands
        ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != writer:  # the writer died before the line above took effect
        os._exit(1)


_PR_SET_PDEATHSIG = 1  # prctl(2)
