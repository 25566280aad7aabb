"""KnowledgeBase: ingest files into one local file and search them (bm25, dense or hybrid).

The facade owns ingestion (find, read, chunk, link titles, then embed: see
:mod:`ragloop.kb.ingest.pipeline`) and search (keyword, vector, reciprocal rank fusion); a
:class:`~ragloop.kb.stores.base.Store` owns persistence. ``KnowledgeBase(path)`` is one
SQLite file; ``KnowledgeBase.in_memory()`` keeps everything in memory.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence, Sized
from functools import partial
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, field_validator

from ragloop.core.errors import ConfigError, EmbedderUnavailable, StoreError
from ragloop.core.errors import DenseSearchUnavailable as DenseSearchUnavailable
from ragloop.core.errors import KnowledgeBaseNotFound as KnowledgeBaseNotFound
from ragloop.core.protocols import Embedder
from ragloop.core.records import Chunk, Scope
from ragloop.kb.embedding.cache import ExactEmbeddingCache
from ragloop.kb.embedding.embedders import default_embedder, recorded_embedder
from ragloop.kb.embedding.embedders import get_embedder as load_embedder
from ragloop.kb.index.fusion import RRF_K
from ragloop.kb.ingest.chunking import ChunkingConfig, rejoin
from ragloop.kb.ingest.discover import (
    DEFAULT_ENCODINGS,
    DEFAULT_MAX_FILE_BYTES,
    IngestInterrupted,
    IngestReport,
    discover,
    file_of,
)
from ragloop.kb.ingest.items import BytesItem, FileItem, Item, TextItem
from ragloop.kb.ingest.pipeline import (
    Progress,
    ProgressCallback,
    build_indexes,
    embed_missing,
    store_text,
)
from ragloop.kb.ingest.sources import file_exists, name_files, upload_names
from ragloop.kb.readers import ParsedDocument, markdown_blocks, read_plain_text
from ragloop.kb.search import SEARCH_MODES as SEARCH_MODES
from ragloop.kb.search import KnowledgeBaseRetriever as KnowledgeBaseRetriever
from ragloop.kb.search import Searching
from ragloop.kb.search import SearchMode as SearchMode
from ragloop.kb.stores.base import (
    CollectionInfo,
    DocumentChunks,
    Link,
    Store,
    StoreStats,
)
from ragloop.kb.stores.memory import InMemoryStore
from ragloop.kb.stores.sqlite.store import SQLiteStore

logger = logging.getLogger("ragloop")

VectorsWhen = Literal["now", "later"]
# bumped when readers, chunking or link matching change: re-ingest re-reads every file
_PIPELINE_VERSION = "5"
NO_EMBEDDER = ("none", 0)  # recorded for a knowledge base built for keyword search only


class Document(BaseModel):
    """A document given as text rather than read from a file (``format`` "text" or
    "markdown": markdown headings become the chunks' heading paths). Without a ``title`` the
    source's name is the title; ``title=""`` leaves the document untitled."""

    text: str
    source: str
    title: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    format: Literal["text", "markdown"] = "text"

    @field_validator("source")
    @classmethod
    def _named(cls, source: str) -> str:
        if not source.strip():  # a document no delete could name
            raise ValueError("must not be empty")
        return source


class DocumentText(BaseModel):
    """A stored document read whole (:meth:`KnowledgeBase.document_text`): its text put
    together from its chunks, and its ``version`` (content hash) as stale runs compare it."""

    collection: str
    source: str
    title: str
    version: str
    text: str


class KnowledgeBaseStats(StoreStats):
    """Store statistics plus whether dense search is on, and why not, and how many chunks'
    texts wait for a vector (:meth:`KnowledgeBase.embed`)."""

    dense: bool = False
    dense_off_reason: str | None = None
    vectors_missing: int = 0


class KnowledgeBase(Searching):
    """Ingest and search documents in one local file.

    ``embedder`` is ``"default"`` (the knowledge base's recorded model, else ragloop's default
    if installed), a name (``"minilm"``, ``"e5"``, ``"hash"``), any :class:`~ragloop.Embedder`,
    or ``None`` for keyword search only. A knowledge base never mixes embedding models.
    ``create=False`` refuses to create a missing file (read commands use it).
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        store: Store | None = None,
        embedder: Embedder | str | None = "default",
        chunking: ChunkingConfig | None = None,
        create: bool = True,
        max_file_bytes: int = DEFAULT_MAX_FILE_BYTES,
        encodings: Sequence[str] = DEFAULT_ENCODINGS,
        rrf_k: int = RRF_K,
        fusion_weights: dict[str, float] | None = None,
        link_titles: bool = True,
    ) -> None:
        if store is None:
            if path is None:
                raise ConfigError("path", "give a file path, or use KnowledgeBase.in_memory()")
            file = Path(path).expanduser()
            if not create and not file.exists():
                raise KnowledgeBaseNotFound(
                    f"no knowledge base at {file}; create one with: ragloop ingest PATH --kb {file}"
                )
            store = SQLiteStore(file)
        self.store = store
        self.path = Path(path) if path is not None else None
        self.chunking = chunking or ChunkingConfig()
        self.max_file_bytes = max_file_bytes
        self.encodings = tuple(encodings)
        self.rrf_k = rrf_k
        self.fusion_weights = dict(fusion_weights or {"bm25": 1.0, "dense": 1.0})
        self.link_titles = link_titles
        self.embedder, self.dense_off_reason = self._resolve_embedder(embedder)
        self._query_vectors = ExactEmbeddingCache(max_entries=2048)
        self._warned_hybrid = False
        self.searches = 0  # searches served since opened (what a loop spent, for evaluations)
        self._searches_lock = threading.Lock()

    @classmethod
    def in_memory(cls, **options: Any) -> KnowledgeBase:
        """A knowledge base that lives in memory only."""
        return cls(store=InMemoryStore(), **options)

    # -- embedder ----------------------------------------------------------------------------
    def _resolve_embedder(self, spec: Embedder | str | None) -> tuple[Embedder | None, str]:
        recorded = self.store.embedding_model()
        if recorded == NO_EMBEDDER and spec != "default" and spec is not None:
            raise StoreError(
                "this knowledge base was built without embeddings (keyword search only); "
                "build a new one to use an embedder"
            )
        if recorded == NO_EMBEDDER:
            return None, "the knowledge base was built without embeddings (keyword search only)"
        if spec is None:
            return None, "dense search is off: the knowledge base was opened with embedder=None"
        if spec == "default":
            if recorded is None:
                embedder, reason = default_embedder()
                return embedder, reason
            try:
                return recorded_embedder(*recorded), ""
            except EmbedderUnavailable as error:
                return None, f"vectors were made by {recorded[0]}, not installed here: {error}"
            except ConfigError:
                return None, (
                    f"vectors were made by {recorded[0]}; pass that embedder to "
                    "KnowledgeBase(embedder=...) for dense search"
                )
        embedder = load_embedder(spec) if isinstance(spec, str) else spec
        if recorded is not None and recorded != (embedder.model_id, embedder.dimension):
            raise StoreError(
                f"this knowledge base holds vectors of {recorded[0]} ({recorded[1]}-d); "
                f"it cannot mix in {embedder.model_id} ({embedder.dimension}-d)"
            )
        return embedder, ""

    # -- ingestion ---------------------------------------------------------------------------
    def ingest(
        self,
        paths: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
        *,
        collection: str = "default",
        on_progress: ProgressCallback | None = None,
        sync: bool = False,
        vectors: VectorsWhen = "now",
    ) -> IngestReport:
        """Ingest files and folders into ``collection``. The text of every file is stored first
        (keyword search finds it at once), then the chunks are embedded (with
        ``vectors="later"`` they are left for :meth:`embed`), then the search indexes are built
        and saved beside the file, so the first search, in any process, finds them ready. A file
        whose size and times (modification, status change) are unchanged is not read, one whose
        bytes are unchanged is not parsed; a changed file replaces its chunks in one
        transaction. A file or folder that cannot be read or parsed is reported in ``skipped``
        with the reason, and the rest is ingested. With ``sync=True``, documents of the
        collection under the given folders whose files are gone are removed (never those under a
        folder, or of a file, that could not be read).

        A document's source is its path relative to the folder given (``library/os.html``), or
        the file's name for a file given by itself; several folders given at once are named
        relative to their common parent (``library/logging.html``, ``howto/logging.html``). A
        file already stored keeps its source, and a source held by another file that still
        exists is lengthened with the folders above it (:mod:`ragloop.kb.ingest.sources`): no
        file replaces another's document. The folder a source is relative to is kept in the
        document's metadata as ``root``. Knowledge bases built before sources were relative
        (absolute paths) are converted as their files are ingested again. ``on_progress`` gets an
        :class:`~ragloop.kb.ingest.discover.IngestProgress` after every file and every batch."""
        if isinstance(paths, str | os.PathLike):
            paths = [paths]
        check_collection(collection)
        discovery = discover(list(paths))
        found, roots = discovery.found, discovery.roots
        report = IngestReport(skipped=list(discovery.skipped))
        named = name_files(found, roots, self.store.documents(collection))
        items = (
            FileItem(f.path, f.root, f.source, self.max_file_bytes, self.encodings) for f in named
        )

        def remove_gone() -> None:  # with sync: documents whose files left the folders given
            files = {f.path for f in named}
            for doc in self.store.documents(collection):
                file = file_of(doc)
                if file in files or not discovery.may_remove(str(file)):
                    continue
                if any(file.is_relative_to(root) for root in roots):
                    report.removed += self.store.delete_document(doc.source, collection)

        self._ingest(
            items,
            len(found),
            collection,
            report,
            on_progress,
            vectors,
            remove_gone if sync else None,
        )
        return report

    def ingest_changes(
        self,
        changed: Sequence[str | os.PathLike[str]],
        removed: Sequence[str | os.PathLike[str]] = (),
        *,
        relative_to: str | os.PathLike[str],
        collection: str = "default",
        on_progress: ProgressCallback | None = None,
        vectors: VectorsWhen = "now",
    ) -> IngestReport:
        """Apply what changed under the folder ``relative_to`` (what a watcher saw): the files
        and folders in ``changed`` are ingested, named as an ingest of that whole folder names
        them, and the documents whose files are in ``removed``, or under a folder there, and
        are gone are removed; one run, with the batches, skip reasons and index builds of
        :meth:`ingest`. A removed path that exists again (a file saved by renaming a new one
        over it) is not removed; a changed file that cannot be read is skipped with its reason
        and keeps the document it had."""
        check_collection(collection)
        base = Path(relative_to).expanduser().resolve()
        discovery = discover(list(changed))
        report = IngestReport(skipped=list(discovery.skipped))
        named = name_files(
            discovery.found, discovery.roots, self.store.documents(collection), base=base
        )
        items = (
            FileItem(f.path, f.root, f.source, self.max_file_bytes, self.encodings) for f in named
        )
        # the parent still exists: resolved, it matches the resolved roots documents keep
        gone = [Path(p).expanduser().absolute().parent.resolve() / Path(p).name for p in removed]

        def remove_gone() -> None:
            if not gone:
                return
            for doc in self.store.documents(collection):
                file = file_of(doc)
                if any(file.is_relative_to(p) for p in gone) and not file_exists(file):
                    report.removed += self.store.delete_document(doc.source, collection)

        self._ingest(items, len(named), collection, report, on_progress, vectors, remove_gone)
        return report

    def add_documents(
        self,
        documents: Iterable[Document | Mapping[str, Any]],
        *,
        collection: str = "default",
        on_progress: ProgressCallback | None = None,
        vectors: VectorsWhen = "now",
    ) -> IngestReport:
        """Ingest documents given as text (same chunking, hashing and embedding as files):
        :class:`Document` records or mappings with their fields (``{"source": ..., "text":
        ...}``). One whose source is the document of a file that still exists is skipped with
        the reason, as :meth:`add_files` does. ``documents`` may be a generator: they are read
        one at a time, never held together (progress then counts them without a total)."""
        report = IngestReport()
        if isinstance(documents, list | tuple):  # all checked before any is stored
            documents = [Document.model_validate(given) for given in documents]

        def items() -> Iterable[Item]:
            for given in documents:
                document = Document.model_validate(given)
                if not document.text.strip():
                    report.skipped.append((document.source, "empty document"))
                    continue
                text = f"{document.title}\0{document.text}".encode("utf-8", "surrogatepass")
                digest = hashlib.sha256(text).hexdigest()
                yield TextItem(
                    document.source,
                    digest,
                    partial(_parse_text, document),
                    document.metadata,
                    length=len(document.text),
                )

        total = len(documents) if isinstance(documents, Sized) else 0
        self._ingest(items(), total, collection, report, on_progress, vectors)
        return report

    def add_files(
        self,
        files: Iterable[tuple[str, bytes]],
        *,
        collection: str = "default",
        on_progress: ProgressCallback | None = None,
        vectors: VectorsWhen = "now",
    ) -> IngestReport:
        """Ingest files given as ``(name, bytes)`` (uploads), read as files of those names
        are. The name, a relative path (``a/notes.md``), is the source; a file of a stored
        source replaces it, unless that is the document of a file that still exists (an ingest
        or a watch keeps it in step): such a file is skipped with the reason. A bad name
        (empty, absolute, ``..``, NUL, a part over 255 bytes) or two files of one name:
        :class:`ConfigError` naming it, before anything is ingested."""
        given = list(files)
        sources = upload_names([name for name, _ in given])
        items = [
            BytesItem(source, data, self.max_file_bytes, self.encodings)
            for source, (_, data) in zip(sources, given, strict=True)
        ]
        report = IngestReport()
        self._ingest(items, len(items), collection, report, on_progress, vectors)
        return report

    def _ingest(
        self,
        items: Iterable[Item],
        total: int,
        collection: str,
        report: IngestReport,
        on_progress: ProgressCallback | None,
        vectors: VectorsWhen,
        then: Callable[[], None] | None = None,
    ) -> None:
        """Store the items' text, embed it (``vectors="now"``), run ``then``, and build the
        search indexes (the vectors' only when they were embedded now)."""
        if vectors not in ("now", "later"):
            raise ConfigError("vectors", f"must be 'now' or 'later', got {vectors!r}")
        check_collection(collection)
        progress = Progress(on_progress, total)
        try:
            self._ingest_items(items, collection, report, progress, vectors)
            if then is not None:
                then()
            embedded = self.embedder is not None and vectors == "now"
            build_indexes(self.store, progress, dense=embedded)
        except KeyboardInterrupt:  # say what was saved: running again resumes from there
            raise IngestInterrupted(report) from None
        progress.phase("done")

    def _ingest_items(
        self,
        items: Iterable[Item],
        collection: str,
        report: IngestReport,
        progress: Progress,
        vectors: VectorsWhen,
    ) -> None:
        recorded = self.store.embedding_model()
        if self.embedder is None and recorded not in (None, NO_EMBEDDER):
            raise StoreError(
                f"this knowledge base holds vectors ({self.dense_off_reason}); ingesting "
                "without its embedder would leave new chunks out of dense search"
            )
        if self.embedder is not None:
            self.store.set_embedding_model(self.embedder.model_id, self.embedder.dimension)
        elif recorded is None:
            # remembered, so a later open does not start embedding only the new documents
            self.store.set_embedding_model(*NO_EMBEDDER)
        store_text(
            self.store,
            items,
            collection=collection,
            chunking=self.chunking,
            signature=(
                f"{self.chunking.max_tokens}:{self.chunking.overlap}:{self.chunking.min_tokens}"
                f":{_PIPELINE_VERSION}"
            ),
            link_titles=self.link_titles,
            cached_model=self.embedder.model_id if self.embedder is not None else None,
            report=report,
            progress=progress,
        )
        if self.embedder is not None:
            if vectors == "now":
                report.chunks_embedded = embed_missing(self.store, self.embedder, progress)
            report.vectors_missing = self.store.count_missing_vectors(self.embedder.model_id)

    def embed(self, *, on_progress: ProgressCallback | None = None) -> int:
        """Embed the chunks stored without a vector (``ingest(..., vectors="later")``, or an
        ingest that was interrupted), a batch at a time, each batch stored as it is done:
        interrupted, it goes on where it stopped the next time. Returns how many chunks'
        texts were embedded."""
        if self.embedder is None:
            raise DenseSearchUnavailable(self.dense_off_reason)
        progress = Progress(on_progress)
        done = embed_missing(self.store, self.embedder, progress)
        build_indexes(self.store, progress, dense=True)
        progress.phase("done")
        return done

    # -- search ------------------------------------------------------------------------------
    def linked_chunks(
        self,
        chunk_ids: Sequence[str],
        *,
        limit: int = 10,
        collection: str | Sequence[str] | None = None,
        filters: dict[str, Any] | None = None,
    ) -> list[Chunk]:
        """Chunks named (by title or heading) in the given chunks, in link order, within the
        scope given (``collection`` and ``filters`` as in :meth:`search`). Each carries
        ``metadata["linked_from"]`` and ``metadata["mention"]``."""
        scope = Scope.of(collection, filters)
        if scope.empty:
            return []
        targets: dict[str, Link] = {}
        for link in self.store.links_from(chunk_ids, scope.collections):
            targets.setdefault(link.target_id, link)
        found = []
        for chunk in self.store.get_chunks(list(targets)):
            if not scope.accepts(
                str(chunk.metadata.get("collection")), chunk.metadata | {"source": chunk.source}
            ):
                continue
            link = targets[chunk.id]
            chunk.metadata.update(linked_from=link.chunk_id, mention=link.mention)
            found.append(chunk)
            if len(found) == limit:
                break
        return found

    # -- management --------------------------------------------------------------------------
    def delete(self, source: str | os.PathLike[str], *, collection: str | None = None) -> int:
        """Remove a document (all collections unless one is named), given by its source or by
        the path of its file; returns how many."""
        removed = self.store.delete_document(str(source), collection)
        if not removed:  # a path to the file: the document whose root and source lead there
            path = Path(source).expanduser().resolve()
            for doc in self.store.documents(collection):
                if file_of(doc) == path:
                    removed += self.store.delete_document(doc.source, doc.collection)
        return removed

    def document_version(self, collection: str, source: str) -> str | None:
        """The version of a document, its content hash (None when there is no such document):
        what a stored run's citations are compared with to tell whether its answer is stale
        (:mod:`ragloop.observability.staleness`)."""
        return self.store.document_hash(collection, source)

    def document_text(self, collection: str, source: str) -> DocumentText | None:
        """A document's text, put together from its chunks in order (its sections' headings
        as Markdown headings, the words two chunks share at a cut written once), with its
        title and version; None when there is no such document. A store that cannot read a
        document's chunks (:class:`~ragloop.kb.stores.base.DocumentChunks`) raises
        ``StoreError``."""
        if not isinstance(self.store, DocumentChunks):
            raise StoreError(f"{type(self.store).__name__} cannot read a document whole")
        version = self.store.document_hash(collection, source)
        chunks = self.store.document_chunks(collection, source)
        if version is None or not chunks:
            return None
        title = chunks[0].metadata.get("title")
        pieces = [(c.metadata.get("heading_path") or [], c.content) for c in chunks]
        return DocumentText(
            collection=collection,
            source=source,
            title=title if isinstance(title, str) else source,
            version=version,
            text=rejoin(pieces),
        )

    def collections(self) -> list[CollectionInfo]:
        return self.store.stats().collections

    def stats(self) -> KnowledgeBaseStats:
        stats = self.store.stats()
        missing = self.store.count_missing_vectors(self.embedder.model_id) if self.embedder else 0
        return KnowledgeBaseStats(
            **stats.model_dump(),
            dense=self.embedder is not None,
            dense_off_reason=self.dense_off_reason or None,
            vectors_missing=missing,
        )

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> KnowledgeBase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def check_collection(collection: object) -> None:
    """:class:`ConfigError` for a collection no read could select (empty, blank, not text)."""
    if not isinstance(collection, str) or not collection.strip():
        raise ConfigError("collection", f"must be a name, got {collection!r}")


def _parse_text(document: Document) -> ParsedDocument:
    path = Path(document.source)
    if document.format == "markdown":
        parsed = ParsedDocument(document.title or path.stem, markdown_blocks(document.text))
    else:
        parsed = read_plain_text(document.text, path)
    if document.title is not None:  # "" keeps the document untitled
        parsed.title = document.title
    return parsed
