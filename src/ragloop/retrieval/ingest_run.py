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

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ragloop.core.protocols import Embedder
from ragloop.core.records import chunk_id
from ragloop.retrieval.chunking import ChunkingConfig, chunk_document
from ragloop.retrieval.ingest import (
    IngestProgress,
    IngestReport,
    SkipFile,
    fingerprint,
    parse_file,
    printable,
    raw_hash,
    read_file,
    storable,
    storable_document,
)
from ragloop.retrieval.links import NameIndex, canonical, document_names, reverse_links
from ragloop.retrieval.readers import ParsedDocument
from ragloop.retrieval.store import (
    ChunkRecord,
    DocumentRecord,
    Link,
    Store,
    StoreError,
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

    def read(self) -> str:
        self.data = read_file(self.path, max_bytes=self.max_bytes)
        return raw_hash(self.data)

    def parse(self) -> tuple[ParsedDocument, dict[str, Any]]:
        loaded = parse_file(self.data, self.path, encodings=self.encodings)
        self.data = b""
        return loaded.document, {**loaded.metadata, **(self.fingerprint or {})}


@dataclass
class TextItem:
    source: str
    digest: str
    parsed: Callable[[], ParsedDocument]
    metadata: dict[str, Any] = field(default_factory=dict)
    fingerprint: dict[str, Any] | None = None

    @property
    def shown(self) -> str:
        return printable(self.source)

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
        if self.callback is not None:
            self.callback(state)


@dataclass
class _Prepared:
    doc: DocumentRecord
    chunks: list[ChunkRecord]
    names: list[tuple[str, str, str]]  # (name, target chunk id, document key)
    replaced: bool


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
    way."""
    known = {doc.source: doc for doc in store.documents(collection)}
    # the names of the stored documents, read when the first changed document is written (an
    # unchanged folder never needs them; loading them was most of its re-ingest)
    names = _LinkNames(store) if link_titles else None
    pending: list[_Prepared] = []
    pending_sources: set[str] = set()
    pending_chunks = 0
    refreshed: dict[str, dict[str, Any]] = {}  # fingerprints of files read and found unchanged
    count = 0  # items seen (``files_total`` is 0 when the caller could not count them)
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
            parsed, metadata = item.parse()
            replaced = stored is not None
            if stored is None and "root" in metadata:  # stored by its absolute path before
                legacy = str(Path(str(metadata["root"])) / item.source)
                if legacy in known:
                    store.delete_document(legacy, collection)
                    replaced = True
            parsed, metadata = storable_document(parsed), storable(metadata)
            record = DocumentRecord(collection, item.source, parsed.title, doc_hash, metadata)
            prepared = _prepare(record, parsed, chunking, replaced)
        except SkipFile as reason:
            report.skipped.append((item.shown, str(reason)))
            continue
        except StoreError:
            raise
        except Exception as error:  # one document's surprise never costs the others
            logger.warning("could not ingest %s", item.shown, exc_info=True)
            report.skipped.append((item.shown, f"{type(error).__name__}: {error}"))
            continue
        if not prepared.chunks:  # a heading and nothing under it: nothing to search
            report.skipped.append((item.shown, "no text to index beyond its headings"))
            if stored is not None:  # its earlier version no longer stands
                report.removed += store.delete_document(item.source, collection)
            continue
        if item.source in pending_sources:  # the same source again: write the first one
            _write(store, pending, names, cached_model, report, progress)
            pending, pending_sources, pending_chunks = [], set(), 0
        pending.append(prepared)
        pending_sources.add(item.source)
        pending_chunks += len(prepared.chunks)
        if pending_chunks >= WRITE_BATCH:
            _write(store, pending, names, cached_model, report, progress)
            pending, pending_sources, pending_chunks = [], set(), 0
    _write(store, pending, names, cached_model, report, progress)
    update_metadata = getattr(store, "update_document_metadata", None)
    if refreshed and update_metadata is not None:
        update_metadata(collection, refreshed)
    progress.update(files_done=max(progress.state.files_total, count), source="")


def _prepare(
    doc: DocumentRecord, parsed: ParsedDocument, chunking: ChunkingConfig, replaced: bool
) -> _Prepared:
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
    names = [(name, target, doc_key) for name, target in targets]
    return _Prepared(doc, chunks, names, replaced)


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
