"""KnowledgeBase: ingest files into one local file and search them (bm25, dense or hybrid).

The facade owns ingestion (find, read, chunk, embed with a cache, link titles) and search
(keyword, vector, reciprocal rank fusion); a :class:`~ragloop.retrieval.store.Store` owns
persistence. ``KnowledgeBase(path)`` is one SQLite file; ``KnowledgeBase.in_memory()`` keeps
everything in memory.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, Field

from ragloop.core.errors import ConfigError
from ragloop.core.protocols import Embedder
from ragloop.core.records import Chunk, chunk_id
from ragloop.retrieval.chunking import ChunkingConfig, chunk_document
from ragloop.retrieval.embedders import EmbedderUnavailable, default_embedder, embed_queries
from ragloop.retrieval.embedders import get_embedder as load_embedder
from ragloop.retrieval.embedding_cache import ExactEmbeddingCache
from ragloop.retrieval.fusion import RRF_K, reciprocal_rank_fusion
from ragloop.retrieval.ingest import (
    DEFAULT_ENCODINGS,
    DEFAULT_MAX_FILE_BYTES,
    IngestInterrupted,
    IngestReport,
    SkipFile,
    discover,
    file_of,
    load_file,
    printable,
    source_of,
    storable,
    storable_document,
)
from ragloop.retrieval.links import NameIndex, canonical, document_names, reverse_links
from ragloop.retrieval.readers import ParsedDocument, markdown_blocks, read_plain_text
from ragloop.retrieval.store import (
    ChunkRecord,
    CollectionInfo,
    DocumentRecord,
    Link,
    Scope,
    Store,
    StoreError,
    StoreStats,
    content_hash,
    index_text,
)
from ragloop.retrieval.store_memory import InMemoryStore
from ragloop.retrieval.store_sqlite import SQLiteStore

logger = logging.getLogger("ragloop")

SearchMode = Literal["bm25", "dense", "hybrid"]
SEARCH_MODES: tuple[SearchMode, ...] = ("bm25", "dense", "hybrid")
ProgressCallback = Callable[[int, int, str], None]
EMBED_BATCH = 256  # chunks embedded together (the ONNX embedder batches them by length)
_PIPELINE_VERSION = "3"  # bumped when readers or chunking change: re-ingest re-reads every file
NO_EMBEDDER = ("none", 0)  # recorded for a knowledge base built for keyword search only


class KnowledgeBaseNotFound(StoreError):
    """A read command pointed at a knowledge base that does not exist."""


class DenseSearchUnavailable(StoreError):
    """Dense search was asked for, but the knowledge base has no usable embedder."""


class Document(BaseModel):
    """A document given as text rather than read from a file (``format`` "text" or
    "markdown": markdown headings become the chunks' heading paths). Without a ``title`` the
    source's name is the title; ``title=""`` leaves the document untitled."""

    text: str
    source: str
    title: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    format: Literal["text", "markdown"] = "text"


class KnowledgeBaseStats(StoreStats):
    """Store statistics plus whether dense search is on, and why not."""

    dense: bool = False
    dense_off_reason: str | None = None


# what ingestion reads: (source, how the report names it if skipped, a loader raising SkipFile)
_Item = tuple[str, str, Callable[[], tuple[ParsedDocument, str, dict[str, Any]]]]


@dataclass
class _Prepared:
    doc: DocumentRecord
    chunks: list[ChunkRecord]
    names: list[tuple[str, str, str]]  # (name, target chunk id, document key)
    replaced: bool


class KnowledgeBase:
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
                return load_embedder(recorded[0]), ""
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
    ) -> IngestReport:
        """Ingest files and folders into ``collection``. Unchanged files cost nothing; a changed
        file replaces its chunks in one transaction. A file or folder that cannot be read or
        parsed is reported in ``skipped`` with the reason, and the rest is ingested. With
        ``sync=True``, documents of the collection under the given folders whose files are gone
        are removed (never those under a folder, or of a file, that could not be read).

        A document's source is its path relative to the folder given (``library/os.html``), or
        the file's name for a file given by itself; the folder is kept in the document's
        metadata as ``root``. Knowledge bases built before sources were relative (absolute
        paths) are converted as their files are ingested again."""
        if isinstance(paths, str | os.PathLike):
            paths = [paths]
        discovery = discover(list(paths))
        found, roots = discovery.found, discovery.roots
        report = IngestReport(skipped=list(discovery.skipped))
        seen: dict[str, Path] = {}

        def items() -> Iterable[_Item]:
            for candidate in found:
                source, root = source_of(candidate)
                if source in seen:
                    report.skipped.append(
                        (printable(candidate.path), f"same source {source!r} as {seen[source]}")
                    )
                    continue
                seen[source] = candidate.path

                def load(
                    path: Path = candidate.path, root: Path = root
                ) -> tuple[ParsedDocument, str, dict[str, Any]]:
                    loaded = load_file(
                        path, max_bytes=self.max_file_bytes, encodings=self.encodings
                    )
                    return loaded.document, loaded.raw_hash, {**loaded.metadata, "root": str(root)}

                yield source, printable(candidate.path), load

        self._ingest(items(), len(found), collection, report, on_progress)
        if sync:
            walked = {str(root) for root in roots}
            for doc in self.store.documents(collection):
                if doc.source in seen or not discovery.may_remove(str(file_of(doc))):
                    continue
                root = doc.metadata.get("root")
                legacy = root is None and any(Path(doc.source).is_relative_to(r) for r in roots)
                if root in walked or legacy:
                    report.removed += self.store.delete_document(doc.source, collection)
        return report

    def add_documents(
        self,
        documents: Iterable[Document],
        *,
        collection: str = "default",
        on_progress: ProgressCallback | None = None,
    ) -> IngestReport:
        """Ingest documents given as text (same chunking, hashing and embedding as files)."""
        docs = list(documents)
        report = IngestReport()

        def items() -> Iterable[_Item]:
            for document in docs:

                def load(d: Document = document) -> tuple[ParsedDocument, str, dict[str, Any]]:
                    if not d.text.strip():
                        raise SkipFile("empty document")
                    path = Path(d.source)
                    if d.format == "markdown":
                        parsed = ParsedDocument(d.title or path.stem, markdown_blocks(d.text))
                    else:
                        parsed = read_plain_text(d.text, path)
                    if d.title is not None:  # "" keeps the document untitled
                        parsed.title = d.title
                    text = f"{d.title}\0{d.text}".encode("utf-8", "surrogatepass")
                    return parsed, hashlib.sha256(text).hexdigest(), dict(d.metadata)

                yield document.source, document.source, load

        self._ingest(items(), len(docs), collection, report, on_progress)
        return report

    def _ingest(
        self,
        items: Iterable[_Item],
        total: int,
        collection: str,
        report: IngestReport,
        on_progress: ProgressCallback | None,
    ) -> None:
        try:
            self._ingest_items(items, total, collection, report, on_progress)
        except KeyboardInterrupt:  # say what was saved: running again resumes from there
            raise IngestInterrupted(report) from None

    def _ingest_items(
        self,
        items: Iterable[_Item],
        total: int,
        collection: str,
        report: IngestReport,
        on_progress: ProgressCallback | None,
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
        names = NameIndex.from_targets(self.store.link_targets()) if self.link_titles else None
        signature = (
            f"{self.chunking.max_tokens}:{self.chunking.overlap}:{self.chunking.min_tokens}"
            f":{_PIPELINE_VERSION}"
        )
        pending: list[_Prepared] = []
        for done, (source, shown, load) in enumerate(items):
            if on_progress:
                on_progress(done, total, source)
            try:
                if storable(source) != source:
                    raise SkipFile("the name is not valid UTF-8")
                parsed, raw_hash, metadata = load()
                doc_hash = f"{raw_hash}:{signature}"
                existing = self.store.document_hash(collection, source)
                if existing == doc_hash:
                    report.unchanged += 1
                    continue
                if existing is None and "root" in metadata:  # stored by its absolute path before
                    legacy = str(Path(str(metadata["root"])) / source)
                    if self.store.document_hash(collection, legacy) is not None:
                        self.store.delete_document(legacy, collection)
                        existing = legacy
                parsed, metadata = storable_document(parsed), storable(metadata)
                record = DocumentRecord(collection, source, parsed.title, doc_hash, metadata)
                prepared = self._prepare(record, parsed, replaced=existing is not None)
            except SkipFile as reason:
                report.skipped.append((printable(shown), str(reason)))
                continue
            except StoreError:
                raise
            except Exception as error:  # one document's surprise never costs the others
                logger.warning("could not ingest %s", printable(shown), exc_info=True)
                report.skipped.append((printable(shown), f"{type(error).__name__}: {error}"))
                continue
            if not prepared.chunks:  # a heading and nothing under it: nothing to search
                report.skipped.append((printable(shown), "no text to index beyond its headings"))
                if existing is not None:  # its earlier version no longer stands
                    report.removed += self.store.delete_document(source, collection)
                continue
            pending.append(prepared)
            if sum(len(p.chunks) for p in pending) >= EMBED_BATCH:
                self._write(pending, report, names)
                pending = []
        self._write(pending, report, names)
        if on_progress:
            on_progress(total, total, "")

    def _prepare(self, doc: DocumentRecord, parsed: ParsedDocument, replaced: bool) -> _Prepared:
        drafts = chunk_document(parsed, self.chunking)
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
        self, pending: list[_Prepared], report: IngestReport, names: NameIndex | None
    ) -> None:
        if not pending:
            return
        self._embed_chunks([c for p in pending for c in p.chunks])
        for prepared in pending:
            doc_key = f"{prepared.doc.collection}\0{prepared.doc.source}"
            links: list[Link] = []
            if names is not None:
                names.discard(doc_key)  # a replaced document's names pointed at its old chunks
                for chunk in prepared.chunks:
                    for target, mention in names.mentions(chunk.content, doc_key):
                        links.append(Link(chunk.id, target, mention))
                links = canonical([*links, *reverse_links(self.store, prepared.names)])
            self.store.replace_document(prepared.doc, prepared.chunks, links)
            if names is not None:
                for name, target, key in prepared.names:
                    names.add(name, target, key)
            report.chunks_added += len(prepared.chunks)
            if prepared.replaced:
                report.updated += 1
            else:
                report.added += 1

    def _embed_chunks(self, chunks: list[ChunkRecord]) -> None:
        """Give every chunk its vector (from the cache, else the embedder), EMBED_BATCH chunks
        at a time, kept as float32 arrays: a file of 100,000 records holds 150 MB of vectors
        until it is written, not the 1.2 GB of Python floats."""
        if self.embedder is None or not chunks:
            return
        model = self.embedder.model_id
        for start in range(0, len(chunks), EMBED_BATCH):
            batch = chunks[start : start + EMBED_BATCH]
            cached = self.store.cached_vectors(model, [c.text_hash for c in batch])
            missing = {c.text_hash: c.index_text for c in batch if c.text_hash not in cached}
            if missing:
                hashes = list(missing)
                vectors = self.embedder.embed([missing[h] for h in hashes])
                _check_vectors(vectors, len(hashes), self.embedder.dimension)
                cached.update(zip(hashes, vectors, strict=True))
            for chunk in batch:
                chunk.vector = np.asarray(cached[chunk.text_hash], dtype=np.float32)

    # -- search ------------------------------------------------------------------------------
    def search(
        self,
        query: str,
        *,
        top_k: int = 5,
        collection: str | Sequence[str] | None = None,
        mode: SearchMode = "hybrid",
        filters: dict[str, Any] | None = None,
        vector: Sequence[float] | None = None,
    ) -> list[Chunk]:
        """The ``top_k`` chunks most relevant to ``query``, best first, scores in [0, 1].

        ``collection`` is None (all), a name, or a list of names (``[]`` matches nothing);
        ``filters`` match metadata exactly (a value or a list of values). Hybrid search fuses
        the bm25 and dense rankings with reciprocal rank fusion; each signal's score and rank
        are kept in ``chunk.metadata["scores"]``. ``vector``, a query vector made by this
        knowledge base's embedder elsewhere (an embedding cache, a HyDE passage), replaces the
        embedding of ``query`` in dense and hybrid search.
        """
        if mode not in SEARCH_MODES:
            raise ConfigError("mode", f"must be one of {', '.join(SEARCH_MODES)}, got {mode!r}")
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
            raise ConfigError("top_k", f"must be an integer >= 1, got {top_k!r}")
        if not isinstance(query, str):
            raise TypeError(f"query must be a string, got {type(query).__name__}")
        scope = Scope.of(collection, filters)
        with self._searches_lock:
            self.searches += 1
        if mode == "bm25" or (mode == "hybrid" and self.embedder is None):
            if mode == "hybrid" and not self._warned_hybrid:
                logger.warning("hybrid search runs as bm25 only: %s", self.dense_off_reason)
                self._warned_hybrid = True
            return self.store.keyword_search(query, top_k, scope)
        if vector is None:
            vector = self.query_vector(query)
        elif self.embedder is None:
            raise DenseSearchUnavailable(self.dense_off_reason)
        else:
            _check_vectors([vector], 1, self.embedder.dimension)
            vector = list(vector)
        if mode == "dense":
            return self.store.vector_search(vector, top_k, scope)
        depth = max(top_k * 4, 40)
        hybrid_search = getattr(self.store, "hybrid_search", None)
        if hybrid_search is not None:  # a store that fuses before reading rows (SQLite)
            return hybrid_search(  # type: ignore[no-any-return]
                query, vector, top_k, scope, depth=depth, k=self.rrf_k, weights=self.fusion_weights
            )
        rankings = {
            "bm25": self.store.keyword_search(query, depth, scope),
            "dense": self.store.vector_search(vector, depth, scope),
        }
        return reciprocal_rank_fusion(
            rankings, top_k=top_k, k=self.rrf_k, weights=self.fusion_weights
        )

    async def asearch(self, query: str, **options: Any) -> list[Chunk]:
        return await asyncio.to_thread(lambda: self.search(query, **options))

    def query_vector(self, query: str) -> list[float]:
        """The query's embedding, from the cache when this query was embedded before in this
        process. The cache is in memory only: a search never writes to the knowledge base."""
        if self.embedder is None:
            raise DenseSearchUnavailable(self.dense_off_reason)
        model = self.embedder.model_id
        vector = self._query_vectors.lookup(model, query)
        if vector is None:
            vector = embed_queries(self.embedder, [query])[0]
            _check_vectors([vector], 1, self.embedder.dimension)
            self._query_vectors.store(model, query, vector)
        return vector

    def retriever(
        self,
        collection: str | Sequence[str] | None = None,
        mode: SearchMode = "hybrid",
        filters: dict[str, Any] | None = None,
    ) -> KnowledgeBaseRetriever:
        """A :class:`~ragloop.Retriever` (sync and async) over this knowledge base."""
        if mode not in SEARCH_MODES:
            raise ConfigError("mode", f"must be one of {', '.join(SEARCH_MODES)}, got {mode!r}")
        return KnowledgeBaseRetriever(self, collection, mode, filters)

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
        for link in self.store.links_from(chunk_ids):
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

    def collections(self) -> list[CollectionInfo]:
        return self.store.stats().collections

    def stats(self) -> KnowledgeBaseStats:
        stats = self.store.stats()
        return KnowledgeBaseStats(
            **stats.model_dump(),
            dense=self.embedder is not None,
            dense_off_reason=self.dense_off_reason or None,
        )

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> KnowledgeBase:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class KnowledgeBaseRetriever:
    """A knowledge base as a :class:`~ragloop.Retriever`, limited to a scope and a mode.

    ``search(query, *, limit, collection=None, collections=None)`` is the function form the
    AgentLoop takes; the collections it names are intersected with this retriever's own.
    """

    def __init__(
        self,
        kb: KnowledgeBase,
        collection: str | Sequence[str] | None,
        mode: SearchMode,
        filters: dict[str, Any] | None,
    ) -> None:
        self.kb = kb
        self.collection = collection
        self.mode: SearchMode = mode
        self.filters = filters

    def retrieve(self, query: str, top_k: int = 5) -> list[Chunk]:
        return self.kb.search(
            query, top_k=top_k, collection=self.collection, mode=self.mode, filters=self.filters
        )

    async def aretrieve(self, query: str, top_k: int = 5) -> list[Chunk]:
        return await asyncio.to_thread(self.retrieve, query, top_k)

    def _narrowed(self, requested: Sequence[str] | None) -> str | Sequence[str] | None:
        if requested is None:
            return self.collection
        own = Scope.of(self.collection).collections
        return [c for c in requested if own is None or c in own]

    def search(
        self,
        query: str,
        *,
        limit: int = 5,
        collection: str | None = None,
        collections: Sequence[str] | None = None,
    ) -> list[Chunk]:
        requested = [collection] if collection is not None else collections
        return self.kb.search(
            query,
            top_k=limit,
            collection=self._narrowed(requested),
            mode=self.mode,
            filters=self.filters,
        )


def _check_vectors(vectors: Sequence[Sequence[float]], expected: int, dimension: int) -> None:
    if len(vectors) != expected or any(len(v) != dimension for v in vectors):
        raise StoreError(
            f"the embedder returned {len(vectors)} vectors for {expected} texts "
            f"(expected {dimension}-d each)"
        )
