"""One ingest: the text is stored first, the vectors are filled in after.

Phase one reads, chunks and stores each document, with its title links: keyword search finds a
document as soon as it is stored. A file is read only when its size or times (modification,
status change) changed, and parsed only when the hash of its bytes changed. Phase two embeds
the chunks that have no vector yet, a window at a time, sorted by length (less padding in a
batch), each batch committed: an interrupted run loses at most one batch and the next run
(``kb.embed()``, ``ragloop kb embed``) goes on where it stopped. Hybrid search uses the
vectors there are. Phase three builds the search indexes a store holds in memory (SQLite's),
so the first search after an ingest does not.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from ragloop.core.errors import StoreError
from ragloop.core.protocols import Embedder
from ragloop.kb.ingest.chunking import ChunkingConfig
from ragloop.kb.ingest.discover import (
    IngestProgress,
    IngestReport,
    SkipFile,
    file_of,
    storable,
)
from ragloop.kb.ingest.items import Item
from ragloop.kb.ingest.links import NameIndex, canonical, reverse_links
from ragloop.kb.ingest.sources import file_exists
from ragloop.kb.ingest.workers import (
    Failed,
    Outcome,
    Prepared,
    Preparer,
    ingest_workers,
)
from ragloop.kb.stores.base import (
    BatchWrites,
    BulkVectorFill,
    CountedTerms,
    DocumentRecord,
    Link,
    MetadataUpdates,
    PreloadedIndexes,
    Store,
)

logger = logging.getLogger("ragloop")


ProgressCallback = Callable[[IngestProgress], None]


WRITE_BATCH = 1024  # chunks read before they are written, in one transaction


EMBED_WINDOW = 1024  # chunks without a vector fetched at once, then sorted by length


EMBED_BATCH = 64  # chunks embedded and reported together


STORE_EVERY_S = 0.5  # an interrupted run loses at most this much embedding


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
        elif state.phase == "indexing":
            done, total = state.vectors_indexed, state.vectors_to_index
        else:
            done, total = state.chunks_embedded, state.chunks_to_embed
        rate = done / spent if spent > 0 and done else 0.0
        state.rate = rate
        state.eta_s = (total - done) / rate if rate and total >= done else None
        state.elapsed_s = now - self.started
        self.state = state
        self.callback(state)


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
    # else a worker's count is waste
    count_terms = isinstance(store, CountedTerms) and store.uses_counted_terms
    with Preparer(collection, chunking, ingest_workers(), count_terms) as prep:
        for count, item in enumerate(items, 1):
            progress.update(files_done=count - 1, source=item.source)
            stored = known.get(item.source)
            if stored is not None and unchanged_by_fingerprint(stored, item, signature):
                report.unchanged += 1
                continue
            try:
                if storable(item.source) != item.source:
                    raise SkipFile("the name is not valid UTF-8")
                if stored is not None and item.fingerprint is None:
                    check_not_a_files(stored)
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
    if refreshed and isinstance(store, MetadataUpdates):
        store.update_document_metadata(collection, refreshed)
    progress.update(files_done=max(progress.state.files_total, count), source="")


def check_not_a_files(stored: DocumentRecord) -> None:
    """A document given as text or uploaded never replaces the document of a file that still
    exists (a folder ingested or watched keeps it in step, and would store the file again
    beside it): the rule an ingest follows the other way round (:mod:`.sources`)."""
    if stored.metadata.get("root") and file_exists(file_of(stored)):
        raise SkipFile(
            f"the source is the document of the file {file_of(stored)}; give this one "
            "another name (a folder in the name keeps them apart: uploads/notes.md)"
        )


def _settle(
    outcome: Outcome,
    store: Store,
    known: dict[str, DocumentRecord],
    batches: _Batches,
    report: IngestReport,
) -> None:
    """What the writer does with a document once it is parsed: report it, or queue it for
    writing (replacing its earlier version)."""
    if isinstance(outcome, Failed):
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
    batches.add(Prepared(doc, outcome.chunks, outcome.names, replaced))


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
        self.pending: list[Prepared] = []
        self.sources: set[str] = set()
        self.chunks = 0

    def add(self, prepared: Prepared) -> None:
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


def _write(
    store: Store,
    pending: list[Prepared],
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
    if isinstance(store, BatchWrites):
        # what was stored when this process wrote: another ingest of the same files may have
        # written them since this one read the knowledge base
        previous = store.replace_documents(documents, links)
    else:  # a store written before replace_documents: a transaction per document
        for doc, chunks in documents:
            store.replace_document(doc, chunks)
        store.add_links(links)
        previous = {}
    for prepared in pending:
        replaced = prepared.replaced
        key = (prepared.doc.collection, prepared.doc.source)
        if key in previous:
            if previous[key] == prepared.doc.content_hash:
                report.unchanged += 1  # written already, the same: this process changed nothing
                continue
            replaced = replaced or previous[key] is not None
        report.chunks_added += len(prepared.chunks)
        if replaced:
            report.updated += 1
        else:
            report.added += 1
    progress.update(chunks_stored=report.chunks_added)


def _batch_links(store: Store, pending: list[Prepared], names: NameIndex) -> list[Link]:
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
    links += reverse_links(store, [name for p in pending for name in p.names])
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
    filling = store.filling_vectors(total) if isinstance(store, BulkVectorFill) else None
    with filling or contextlib.nullcontext():
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


def build_indexes(store: Store, progress: Progress, *, dense: bool) -> None:
    """Phase three: build and save the store's in-memory search indexes now (keyword, and with
    ``dense`` the vectors and, at hundreds of thousands of them, their graph: minutes at a
    million), so the first search, in this process or another, finds them ready. Stopped, the
    first search builds them instead: nothing is lost."""
    if not isinstance(store, PreloadedIndexes):  # indexes kept up as it writes (PostgreSQL)
        return
    progress.phase("indexing", vectors_indexed=0, vectors_to_index=0)
    store.load_indexes(
        dense=dense,
        on_progress=lambda done, total: progress.update(
            vectors_indexed=done, vectors_to_index=total
        ),
    )


def check_vectors(vectors: Sequence[Sequence[float]], expected: int, dimension: int) -> None:
    if len(vectors) != expected or any(len(v) != dimension for v in vectors):
        raise StoreError(
            f"the embedder returned {len(vectors)} vectors for {expected} texts "
            f"(expected {dimension}-d each)"
        )
