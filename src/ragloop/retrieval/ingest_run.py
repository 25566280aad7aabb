"""One ingest: the text is stored first, the vectors are filled in after.

Phase one reads, chunks and stores each document, with its title links: keyword search finds a
document as soon as it is stored. A file is read only when its size or times (modification,
status change) changed, and parsed only when the hash of its bytes changed. Phase two embeds
the chunks that have no vector yet, a window at a time, sorted by length (less padding in a
batch), each batch committed: an interrupted run loses at most one batch and the next run
(``kb.embed()``, ``ragloop kb embed``) goes on where it stopped. Hybrid search uses the
vectors there are.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import multiprocessing
import os
import signal
import sys
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ragloop.core.errors import StoreError
from ragloop.core.protocols import Embedder
from ragloop.core.records import chunk_id
from ragloop.retrieval.bm25 import pack_batch
from ragloop.retrieval.chunking import ChunkingConfig, chunk_document
from ragloop.retrieval.ingest import (
    IngestProgress,
    IngestReport,
    SkipFile,
    check_size,
    fingerprint,
    parse_file,
    printable,
    raw_hash,
    read_file,
    storable,
    storable_document,
    unsupported_type,
)
from ragloop.retrieval.links import NameIndex, canonical, document_names, reverse_links
from ragloop.retrieval.readers import ParsedDocument
from ragloop.retrieval.store import (
    ChunkRecord,
    DocumentRecord,
    Link,
    Store,
    content_hash,
    index_text,
)

logger = logging.getLogger("ragloop")

ProgressCallback = Callable[[IngestProgress], None]
WRITE_BATCH = 1024  # chunks read before they are written, in one transaction
EMBED_WINDOW = 1024  # chunks without a vector fetched at once, then sorted by length
EMBED_BATCH = 64  # chunks embedded and reported together
STORE_EVERY_S = 0.5  # an interrupted run loses at most this much embedding


class Item(Protocol):
    """One document to ingest. ``fingerprint`` (a file's size and times) says it
    is unchanged without reading it; ``read()`` returns the hash of its raw content;
    ``parse()`` its blocks and metadata. Both raise :class:`SkipFile` with a reason."""

    source: str
    fingerprint: dict[str, Any] | None

    @property
    def shown(self) -> str: ...  # how the report names it when it is skipped

    @property
    def size(self) -> int: ...  # bytes read (a file) or characters given (a text), about

    def read(self) -> str: ...
    def parse(self) -> tuple[ParsedDocument, dict[str, Any]]: ...


@dataclass
class FileItem:
    path: Path
    root: Path
    source: str
    max_bytes: int
    encodings: Sequence[str]
    fingerprint: dict[str, Any] | None = None
    data: bytes = b""

    def __post_init__(self) -> None:
        found = fingerprint(self.path)
        self.fingerprint = None if found is None else {**found, "root": str(self.root)}

    @property
    def shown(self) -> str:
        return printable(self.path)

    @property
    def size(self) -> int:
        return len(self.data)

    def read(self) -> str:
        self.data = read_file(self.path, max_bytes=self.max_bytes)
        return raw_hash(self.data)

    def parse(self) -> tuple[ParsedDocument, dict[str, Any]]:
        loaded = parse_file(self.data, self.path, encodings=self.encodings)
        self.data = b""
        return loaded.document, {**loaded.metadata, **(self.fingerprint or {})}


@dataclass
class BytesItem:
    """A file's content given as bytes (an upload), named by ``source``: read as a file of
    that name would be, with no folder of its own (no ``root``)."""

    source: str
    data: bytes
    max_bytes: int
    encodings: Sequence[str]
    fingerprint: dict[str, Any] | None = None

    @property
    def shown(self) -> str:
        return printable(self.source)

    @property
    def size(self) -> int:
        return len(self.data)

    def read(self) -> str:
        if (unsupported := unsupported_type(Path(self.source))) is not None:
            raise SkipFile(unsupported)
        check_size(len(self.data), self.max_bytes)
        return raw_hash(self.data)

    def parse(self) -> tuple[ParsedDocument, dict[str, Any]]:
        loaded = parse_file(self.data, Path(self.source), encodings=self.encodings)
        self.data = b""
        return loaded.document, dict(loaded.metadata)


@dataclass
class TextItem:
    source: str
    digest: str
    parsed: Callable[[], ParsedDocument]
    metadata: dict[str, Any] = field(default_factory=dict)
    fingerprint: dict[str, Any] | None = None
    length: int = 0  # of the text

    @property
    def shown(self) -> str:
        return printable(self.source)

    @property
    def size(self) -> int:
        return self.length

    def read(self) -> str:
        return self.digest

    def parse(self) -> tuple[ParsedDocument, dict[str, Any]]:
        return self.parsed(), dict(self.metadata)


class Progress:
    """Counts what an ingest did and tells ``on_progress``, with a rate and an estimate of
    the time left in each phase."""

    def __init__(self, callback: ProgressCallback | None, files_total: int = 0) -> None:
        self.callback = callback
        self.state = IngestProgress(phase="reading", files_total=files_total)
        self.started = self.phase_started = time.perf_counter()

    def phase(self, name: str, **counts: int) -> None:
        self.state = self.state.model_copy(update={"phase": name, "rate": 0.0, "eta_s": None})
        self.phase_started = time.perf_counter()
        self.update(**counts)

    def update(self, **changes: Any) -> None:
        if self.callback is None:  # nobody to tell: keep the counts (a new state a document
            for key, value in changes.items():  # was 8% of an ingest's writer)
                setattr(self.state, key, value)
            return
        state = self.state.model_copy(update=changes)
        now = time.perf_counter()
        spent = now - self.phase_started
        if state.phase == "reading":
            done, total = state.files_done, state.files_total
        else:
            done, total = state.chunks_embedded, state.chunks_to_embed
        rate = done / spent if spent > 0 and done else 0.0
        state.rate = rate
        state.eta_s = (total - done) / rate if rate and total >= done else None
        state.elapsed_s = now - self.started
        self.state = state
        self.callback(state)


@dataclass
class _Prepared:
    doc: DocumentRecord
    chunks: list[ChunkRecord]
    names: list[tuple[str, str, str]]  # (name, target chunk id, document key)
    replaced: bool


@dataclass
class _Parsed:
    """A document parsed and chunked (in a worker process or in the writer's)."""

    shown: str
    doc: DocumentRecord
    chunks: list[ChunkRecord]
    names: list[tuple[str, str, str]]


@dataclass
class _Failed:
    """A document that could not be parsed: the reason, and the traceback of a surprise (the
    writer logs it: a worker process's log goes nowhere)."""

    shown: str
    reason: str
    details: str = ""


Outcome = _Parsed | _Failed


def unchanged_by_fingerprint(stored: DocumentRecord, item: Item, signature: str) -> bool:
    """The file has the size, times and folder it had when it was stored, and the
    pipeline is the same: no need to read it."""
    if item.fingerprint is None or not stored.content_hash.endswith(f":{signature}"):
        return False
    return all(stored.metadata.get(key) == value for key, value in item.fingerprint.items())


def store_text(
    store: Store,
    items: Iterable[Item],
    *,
    collection: str,
    chunking: ChunkingConfig,
    signature: str,
    link_titles: bool,
    cached_model: str | None,
    report: IngestReport,
    progress: Progress,
) -> None:
    """Phase one: read, chunk and store what changed (a transaction per ``WRITE_BATCH``
    chunks). Vectors of ``cached_model`` already in the embedding cache are attached on the
    way. Past ``PARALLEL_AFTER`` bytes of documents, worker processes (:func:`ingest_workers`)
    parse and chunk them and count their terms; this process reads, decides what changed and
    writes, in the order the items came."""
    known = {doc.source: doc for doc in store.documents(collection)}
    batches = _Batches(store, link_titles, cached_model, report, progress)
    refreshed: dict[str, dict[str, Any]] = {}  # fingerprints of files read and found unchanged

    def settle(outcomes: list[Outcome]) -> None:
        for outcome in outcomes:
            _settle(outcome, store, known, batches, report)

    count = 0  # items seen (``files_total`` is 0 when the caller could not count them)
    count_terms = getattr(store, "uses_counted_terms", False)  # else a worker's count is waste
    with _Preparer(collection, chunking, ingest_workers(), count_terms) as prep:
        for count, item in enumerate(items, 1):
            progress.update(files_done=count - 1, source=item.source)
            stored = known.get(item.source)
            if stored is not None and unchanged_by_fingerprint(stored, item, signature):
                report.unchanged += 1
                continue
            try:
                if storable(item.source) != item.source:
                    raise SkipFile("the name is not valid UTF-8")
                doc_hash = f"{item.read()}:{signature}"
            except SkipFile as reason:
                report.skipped.append((item.shown, str(reason)))
                continue
            except Exception as error:  # one document's surprise never costs the others
                logger.warning("could not ingest %s", item.shown, exc_info=True)
                report.skipped.append((item.shown, f"{type(error).__name__}: {error}"))
                continue
            if (
                stored is not None
                and stored.content_hash == doc_hash
                and (
                    item.fingerprint is None
                    or stored.metadata.get("root") == item.fingerprint.get("root")
                )
            ):
                report.unchanged += 1
                if item.fingerprint is not None:  # the same bytes: remember the new times
                    refreshed[item.source] = item.fingerprint
                continue
            settle(prep.add(item, doc_hash))
        settle(prep.finish())
    batches.write()
    update_metadata = getattr(store, "update_document_metadata", None)
    if refreshed and update_metadata is not None:
        update_metadata(collection, refreshed)
    progress.update(files_done=max(progress.state.files_total, count), source="")


def _settle(
    outcome: Outcome,
    store: Store,
    known: dict[str, DocumentRecord],
    batches: _Batches,
    report: IngestReport,
) -> None:
    """What the writer does with a document once it is parsed: report it, or queue it for
    writing (replacing its earlier version)."""
    if isinstance(outcome, _Failed):
        if outcome.details:
            logger.warning("could not ingest %s\n%s", outcome.shown, outcome.details)
        report.skipped.append((outcome.shown, outcome.reason))
        return
    doc = outcome.doc
    stored = known.get(doc.source)
    replaced = stored is not None
    if stored is None and "root" in doc.metadata:  # stored by its absolute path before
        legacy = str(Path(str(doc.metadata["root"])) / doc.source)
        if legacy in known:
            store.delete_document(legacy, doc.collection)
            replaced = True
    if not outcome.chunks:  # a heading and nothing under it: nothing to search
        report.skipped.append((outcome.shown, "no text to index beyond its headings"))
        if stored is not None:  # its earlier version no longer stands
            report.removed += store.delete_document(doc.source, doc.collection)
        return
    batches.add(_Prepared(doc, outcome.chunks, outcome.names, replaced))


class _Batches:
    """Documents waiting to be written together: a transaction per ``WRITE_BATCH`` chunks."""

    def __init__(
        self,
        store: Store,
        link_titles: bool,
        cached_model: str | None,
        report: IngestReport,
        progress: Progress,
    ) -> None:
        self.store, self.cached_model = store, cached_model
        self.report, self.progress = report, progress
        # the names of the stored documents, read when the first changed document is written
        # (an unchanged folder never needs them; loading them was most of its re-ingest)
        self.names = _LinkNames(store) if link_titles else None
        self.pending: list[_Prepared] = []
        self.sources: set[str] = set()
        self.chunks = 0

    def add(self, prepared: _Prepared) -> None:
        if prepared.doc.source in self.sources:  # the same source again: write the first one
            self.write()
        self.pending.append(prepared)
        self.sources.add(prepared.doc.source)
        self.chunks += len(prepared.chunks)
        if self.chunks >= WRITE_BATCH:
            self.write()

    def write(self) -> None:
        _write(self.store, self.pending, self.names, self.cached_model, self.report, self.progress)
        self.pending, self.sources, self.chunks = [], set(), 0


def prepare_documents(
    jobs: Sequence[tuple[Item, str]], collection: str, chunking: ChunkingConfig, count_terms: bool
) -> list[Outcome]:
    """Parse and chunk documents given with their hashes (what a worker process runs); with
    ``count_terms``, also count each chunk's keyword terms, the writer's largest cost."""
    outcomes = [_parse(item, doc_hash, collection, chunking) for item, doc_hash in jobs]
    if count_terms:
        if len(_worker_stems) > WORKER_STEMS:
            _worker_stems.clear()
        chunks = [c for o in outcomes if isinstance(o, _Parsed) for c in o.chunks]
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
        return _Failed(item.shown, str(reason))
    except Exception as error:  # one document's surprise never costs the others
        return _Failed(item.shown, f"{type(error).__name__}: {error}", traceback.format_exc())
    return _Parsed(item.shown, doc, chunks, names)


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


class _Preparer:
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

    def __enter__(self) -> _Preparer:
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


def _write(
    store: Store,
    pending: list[_Prepared],
    link_names: _LinkNames | None,
    cached_model: str | None,
    report: IngestReport,
    progress: Progress,
) -> None:
    if not pending:
        return
    names = link_names.index() if link_names is not None else None
    if cached_model is not None:
        chunks = [c for p in pending for c in p.chunks]
        cached = store.cached_vectors(cached_model, [c.text_hash for c in chunks])
        for chunk in chunks:
            chunk.vector = cached.get(chunk.text_hash)
    documents = [(p.doc, p.chunks) for p in pending]
    links = _batch_links(store, pending, names) if names is not None else []
    replace_documents = getattr(store, "replace_documents", None)
    if replace_documents is not None:
        replace_documents(documents, links)
    else:  # a store written before replace_documents: a transaction per document
        for doc, chunks in documents:
            store.replace_document(doc, chunks)
        store.add_links(links)
    for prepared in pending:
        report.chunks_added += len(prepared.chunks)
        if prepared.replaced:
            report.updated += 1
        else:
            report.added += 1
    progress.update(chunks_stored=report.chunks_added)


def _batch_links(store: Store, pending: list[_Prepared], names: NameIndex) -> list[Link]:
    """The links of documents written together: their chunks' mentions of names stored
    before (``names``) and of each other's names, and stored chunks' mentions of their names.
    ``names`` then holds the batch's names."""
    keys = [f"{p.doc.collection}\0{p.doc.source}" for p in pending]
    for doc_key in keys:
        names.discard(doc_key)  # a replaced document's names pointed at its old chunks
    batch = NameIndex.from_targets(name for p in pending for name in p.names)
    links: list[Link] = []
    for prepared, doc_key in zip(pending, keys, strict=True):
        for chunk in prepared.chunks:
            for index in (names, batch):
                for target, mention in index.mentions(chunk.content, doc_key):
                    links.append(Link(chunk.id, target, mention))
        links += reverse_links(store, prepared.names)
    for prepared in pending:
        for name, target, key in prepared.names:
            names.add(name, target, key)
    return canonical(links)


class _LinkNames:
    """The :class:`NameIndex` of a store's documents, read from the store on first use."""

    def __init__(self, store: Store) -> None:
        self._store = store
        self._index: NameIndex | None = None

    def index(self) -> NameIndex:
        if self._index is None:
            self._index = NameIndex.from_targets(self._store.link_targets())
        return self._index


def embed_missing(store: Store, embedder: Embedder, progress: Progress) -> int:
    """Phase two: embed every chunk without a vector, ``EMBED_BATCH`` at a time. What is done
    is stored every ``STORE_EVERY_S`` seconds, at the end of each window and when the run is
    interrupted (a commit per batch cost more than embedding it with a fast embedder).
    Returns how many texts were embedded."""
    model = embedder.model_id
    total = store.count_missing_vectors(model)
    progress.phase("embedding", chunks_to_embed=total, chunks_embedded=0)
    filling = getattr(store, "filling_vectors", None)
    with filling(total) if filling is not None else contextlib.nullcontext():
        return _embed_windows(store, embedder, progress, total)


def _embed_windows(store: Store, embedder: Embedder, progress: Progress, total: int) -> int:
    model = embedder.model_id
    done = 0
    pending: dict[str, Sequence[float]] = {}
    try:
        while window := store.missing_vectors(model, EMBED_WINDOW):
            window.sort(key=lambda item: len(item[1]))
            stored_at = time.perf_counter()
            for start in range(0, len(window), EMBED_BATCH):
                batch = window[start : start + EMBED_BATCH]
                vectors = embedder.embed([text for _, text in batch])
                check_vectors(vectors, len(batch), embedder.dimension)
                pending.update(zip((h for h, _ in batch), vectors, strict=True))
                if time.perf_counter() - stored_at >= STORE_EVERY_S:
                    store.add_vectors(model, pending)
                    pending, stored_at = {}, time.perf_counter()
                done += len(batch)
                progress.update(chunks_embedded=done, chunks_to_embed=max(total, done))
            store.add_vectors(model, pending)
            pending = {}
    except StoreError:
        raise
    except BaseException:  # interrupted (Ctrl-C, a failing embedder): keep what was embedded
        store.add_vectors(model, pending)
        raise
    return done


def check_vectors(vectors: Sequence[Sequence[float]], expected: int, dimension: int) -> None:
    if len(vectors) != expected or any(len(v) != dimension for v in vectors):
        raise StoreError(
            f"the embedder returned {len(vectors)} vectors for {expected} texts "
            f"(expected {dimension}-d each)"
        )
