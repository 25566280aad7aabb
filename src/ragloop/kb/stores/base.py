"""The store seam: what a knowledge base needs from its persistence layer.

:class:`~ragloop.kb.knowledge_base.KnowledgeBase` owns ingestion (reading, chunking,
embedding, linking); a :class:`Store` owns persistence and the keyword and vector queries. The
SQLite store, the in-memory store and the PostgreSQL store implement this protocol, and all of
them pass the conformance suite in :mod:`ragloop.testing.conformance`.

Scores returned by a store are already in [0, 1]:

- keyword: the BM25 score divided by the highest score the query could reach (every query term
  at saturation in a document), so a score means the same across queries. A search scoped to
  collections takes BM25's statistics (chunk count, document frequencies, average length) from
  those collections alone, so nothing another collection holds moves its scores (a scoped
  caller must not learn from them what it may not read);
- vector: the cosine similarity, clipped at 0.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel

from ragloop.core.errors import StoreError as StoreError
from ragloop.core.files import is_postgres_dsn as is_postgres_dsn
from ragloop.core.records import Chunk
from ragloop.core.records import Scope as Scope

BM25_K1 = 1.2
BM25_B = 0.75


def index_text(title: str, heading_path: Sequence[str], text: str) -> str:
    """What keyword search indexes and the embedder embeds: the title and heading path, then
    the chunk's text (a passage often names its subject only in its title)."""
    context = [title] if title else []
    context += [h for h in heading_path if h not in context]
    header = " > ".join(context)
    return f"{header}\n{text}" if header else text


def content_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


@dataclass
class DocumentRecord:
    """A document as stored: identity (collection, source), title, hash and metadata."""

    collection: str
    source: str
    title: str
    content_hash: str
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class ChunkRecord:
    """A chunk as stored. ``index_text`` (title, headings and content) is what keyword search
    indexes and the embedder embeds; ``text_hash`` keys its vector in the embedding cache."""

    id: str
    position: int
    content: str
    heading_path: list[str]
    index_text: str
    text_hash: str
    metadata: dict[str, Any] = field(default_factory=dict)
    vector: Sequence[float] | npt.NDArray[np.float32] | None = None
    # the keyword terms of ``index_text`` counted by an ingest's worker process: the terms
    # of its batch, and this chunk's frequencies (``bm25.pack_batch``); a store that indexes
    # terms counts them itself otherwise
    counted_terms: tuple[list[str], bytes] | None = None


class CollectionInfo(BaseModel):
    name: str
    documents: int
    chunks: int


class StoreStats(BaseModel):
    """What a store holds; ``embedding_model``/``dimension`` are None before any vector."""

    documents: int
    chunks: int
    vectors: int
    links: int
    collections: list[CollectionInfo]
    embedding_model: str | None = None
    dimension: int | None = None
    size_bytes: int | None = None
    path: str | None = None


@dataclass(frozen=True)
class Link:
    """A chunk that mentions the title or a heading of another document's chunk."""

    chunk_id: str
    target_id: str
    mention: str


@runtime_checkable
class Store(Protocol):
    """Persistence and search for a knowledge base. Writes of one document are atomic.

    What a store must do; what it may do besides is each a protocol below
    (:class:`BatchWrites`, :class:`MetadataUpdates`, :class:`CountedTerms`,
    :class:`FusedSearch`, :class:`PreloadedIndexes`, :class:`BulkVectorFill`,
    :class:`SharedQueryVectors`, :class:`DocumentChunks`), which the
    knowledge base and the ingest check with ``isinstance`` and use when a store has it.
    """

    # documents
    def document_hash(self, collection: str, source: str) -> str | None: ...
    def replace_document(
        self, doc: DocumentRecord, chunks: list[ChunkRecord], links: Sequence[Link] = ()
    ) -> list[str]: ...
    def delete_document(self, source: str, collection: str | None = None) -> int: ...
    def sources(self, collection: str) -> list[str]: ...
    def documents(self, collection: str | None = None) -> list[DocumentRecord]: ...
    def get_chunks(self, ids: Sequence[str]) -> list[Chunk]: ...

    # search
    def keyword_search(self, query: str, top_k: int, scope: Scope) -> list[Chunk]: ...
    def vector_search(self, vector: Sequence[float], top_k: int, scope: Scope) -> list[Chunk]: ...

    # embeddings (the cache is keyed by model id and text hash)
    def embedding_model(self) -> tuple[str, int] | None: ...
    def set_embedding_model(self, model_id: str, dimension: int) -> None: ...
    def cached_vectors(self, model_id: str, hashes: Sequence[str]) -> dict[str, list[float]]: ...
    def cache_vectors(self, model_id: str, items: dict[str, Sequence[float]]) -> None: ...
    # vectors filled in after the text: chunks stored without one, and adding them
    def missing_vectors(self, model_id: str, limit: int) -> list[tuple[str, str]]: ...
    def count_missing_vectors(self, model_id: str) -> int: ...
    def add_vectors(self, model_id: str, vectors: dict[str, Sequence[float]]) -> None: ...

    # the title/heading link graph
    def link_targets(self) -> list[tuple[str, str, str]]: ...
    def chunks_with_phrase(self, phrase: str, limit: int) -> list[tuple[str, str, str]]: ...
    def add_links(self, links: Sequence[Link]) -> None: ...
    def links_from(
        self, chunk_ids: Sequence[str], collections: Sequence[str] | None = None
    ) -> list[Link]:
        """The links from these chunks, in chunk then target order; with ``collections``,
        only those whose target is in one of them (selected by the query itself, so a scoped
        caller never learns what the other collections hold)."""
        ...

    # bookkeeping
    def stats(self) -> StoreStats: ...
    def close(self) -> None: ...


class WritesInBatches:
    """:meth:`Store.replace_document` for a store that has :class:`BatchWrites`: one document
    is a batch of one, so a document is written by the same statements as an ingest's batch."""

    def replace_documents(
        self, documents: Sequence[tuple[DocumentRecord, list[ChunkRecord]]], links: Sequence[Link]
    ) -> PreviousHashes:
        raise NotImplementedError

    def replace_document(
        self, doc: DocumentRecord, chunks: list[ChunkRecord], links: Sequence[Link] = ()
    ) -> list[str]:
        """Replace a document, its chunks, vectors and the links given, in one transaction."""
        self.replace_documents([(doc, chunks)], links)
        return [c.id for c in chunks]


# -- optional capabilities: what a store may offer besides Store, each used when present --------


# what each document replaced had stored: its content hash, None when it was new (read inside
# the write's transaction, so two processes writing the same document each know which wrote it)
PreviousHashes = dict[tuple[str, str], str | None]


@runtime_checkable
class BatchWrites(Protocol):
    """Several (document, chunks) replaced in one transaction, then the links given added
    between the chunks stored at its end (a commit costs more than a document's rows);
    returns the content hash each (collection, source) had before, None for a new one.
    Ingestion writes its batches so; without it, a transaction per document."""

    def replace_documents(
        self, documents: Sequence[tuple[DocumentRecord, list[ChunkRecord]]], links: Sequence[Link]
    ) -> PreviousHashes: ...


@runtime_checkable
class MetadataUpdates(Protocol):
    """Keys merged into documents' metadata, chunks untouched: ``updates`` maps a source to
    its keys. Ingestion records so the new size and times of a file whose bytes turned out
    unchanged (a ``touch``, a checkout), so the next ingest knows it without reading it."""

    def update_document_metadata(
        self, collection: str, updates: dict[str, dict[str, Any]]
    ) -> None: ...


@runtime_checkable
class CountedTerms(Protocol):
    """A store whose keyword index takes the terms an ingest's worker processes counted
    (:attr:`ChunkRecord.counted_terms`); for any other store the workers do not count them."""

    uses_counted_terms: bool


@runtime_checkable
class FusedSearch(Protocol):
    """Keyword and vector search fused by reciprocal rank fusion
    (:func:`ragloop.kb.index.fusion.fuse`) before any row is read. The knowledge base's hybrid
    search uses it; without it, the knowledge base fuses the chunks of the two searches."""

    def hybrid_search(
        self,
        query: str,
        vector: Sequence[float],
        top_k: int,
        scope: Scope,
        *,
        depth: int,
        k: int,
        weights: dict[str, float],
    ) -> list[Chunk]: ...


@runtime_checkable
class PreloadedIndexes(Protocol):
    """A store that searches indexes held in memory, loaded (or reloaded after writes) ahead
    of a search: the knowledge base builds them at the end of an ingest or an embed, so the
    first search finds them ready (``on_progress`` gets (vectors added, vectors to add) while
    an approximate-search graph is built), and loads them while a query is embedded."""

    def load_indexes(
        self,
        *,
        keyword: bool = True,
        dense: bool = True,
        on_progress: Callable[[int, int], None] | None = None,
    ) -> None: ...


@runtime_checkable
class PhraseBatches(Protocol):
    """A store that looks up many phrases in one query (``chunks_with_phrase`` for each, by
    phrase): ingestion looks up every new name of a batch of documents, and a store across a
    network pays a round trip a lookup otherwise."""

    def chunks_with_phrases(
        self, phrases: Sequence[str], limit: int
    ) -> dict[str, list[tuple[str, str, str]]]: ...


@runtime_checkable
class BulkVectorFill(Protocol):
    """A context manager around adding the vectors of ``count`` chunks (ingestion's embedding
    phase), for a store whose vector index is cheaper to build once after many vectors than
    to keep up to date as each comes."""

    def filling_vectors(self, count: int) -> AbstractContextManager[None]: ...


@runtime_checkable
class SharedQueryVectors(Protocol):
    """A store every process reaches over one server (a database), whose embedding cache
    holds query vectors too: a query one server embedded is not embedded again by another.
    The knowledge base looks there after its own in-memory cache and writes each query it
    embeds there; a file store keeps query vectors in memory (a search never writes to a
    knowledge base file)."""

    def cached_query_vector(self, model_id: str, query: str) -> list[float] | None: ...
    def cache_query_vector(self, model_id: str, query: str, vector: Sequence[float]) -> None: ...


@runtime_checkable
class DocumentChunks(Protocol):
    """A store that reads one document's chunks, in their order in the document: what
    :meth:`KnowledgeBase.document_text <ragloop.KnowledgeBase.document_text>` puts together
    (MCP's resources read a document whole)."""

    def document_chunks(self, collection: str, source: str) -> list[Chunk]: ...
