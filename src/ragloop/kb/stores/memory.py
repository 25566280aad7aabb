"""An in-memory store: the same behaviour as the SQLite store, nothing on disk.

For tests and small, throw-away corpora. Keyword search uses the same BM25 index as the SQLite
store (:mod:`ragloop.kb.index.bm25`), rebuilt after writes.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ragloop.core.errors import StoreError
from ragloop.core.records import Chunk, Scope
from ragloop.kb.index.bm25 import BM25Index, Postings, analyze, stems, term_frequencies
from ragloop.kb.stores.base import (
    ChunkRecord,
    CollectionInfo,
    DocumentRecord,
    Link,
    PreviousHashes,
    StoreStats,
    WritesInBatches,
)


@dataclass
class _Stored:
    doc: DocumentRecord
    chunks: list[ChunkRecord]
    postings: list[Postings] = field(default_factory=list)


class InMemoryStore(WritesInBatches):
    """A :class:`~ragloop.kb.stores.base.Store` held in memory."""

    def __init__(self) -> None:
        self._docs: dict[tuple[str, str], _Stored] = {}
        self._vectors: dict[tuple[str, str], list[float]] = {}
        self._model: tuple[str, int] | None = None
        self._links: dict[tuple[str, str], str] = {}
        self._lock = threading.RLock()
        self._vocabulary: dict[str, int] = {}
        self._index: tuple[list[tuple[_Stored, int]], BM25Index] | None = None

    # -- documents -----------------------------------------------------------------------------
    def document_hash(self, collection: str, source: str) -> str | None:
        stored = self._docs.get((collection, source))
        return stored.doc.content_hash if stored else None

    def replace_documents(
        self, documents: Sequence[tuple[DocumentRecord, list[ChunkRecord]]], links: Sequence[Link]
    ) -> PreviousHashes:
        previous: PreviousHashes = {}
        with self._lock:
            for doc, chunks in documents:
                before = self._docs.get((doc.collection, doc.source))
                previous.setdefault(
                    (doc.collection, doc.source), before.doc.content_hash if before else None
                )
                self.delete_document(doc.source, doc.collection)
                postings = [self._postings(c.index_text) for c in chunks]
                self._docs[(doc.collection, doc.source)] = _Stored(doc, list(chunks), postings)
                self._index = None
                if self._model is not None:
                    for chunk in chunks:
                        if chunk.vector is not None:
                            key = (self._model[0], chunk.text_hash)
                            self._vectors.setdefault(key, np.asarray(chunk.vector).tolist())
            self.add_links(links)
        return previous

    def delete_document(self, source: str, collection: str | None = None) -> int:
        with self._lock:
            keys = [k for k in self._docs if k[1] == source and collection in (None, k[0])]
            gone = {c.id for k in keys for c in self._docs[k].chunks}
            for key in keys:
                del self._docs[key]
            self._index = None
            self._links = {k: v for k, v in self._links.items() if not (set(k) & gone)}
            return len(keys)

    def sources(self, collection: str) -> list[str]:
        return sorted(source for coll, source in self._docs if coll == collection)

    def update_document_metadata(self, collection: str, updates: dict[str, dict[str, Any]]) -> None:
        with self._lock:
            for source, keys in updates.items():
                stored = self._docs.get((collection, source))
                if stored is not None:
                    stored.doc.metadata.update(keys)

    def documents(self, collection: str | None = None) -> list[DocumentRecord]:
        """The documents of a collection (every collection when None), by source."""
        found = [s.doc for (coll, _), s in self._docs.items() if collection in (None, coll)]
        return sorted(found, key=lambda doc: (doc.collection, doc.source))

    def _entries(self) -> list[tuple[_Stored, int]]:
        return [(stored, i) for stored in self._docs.values() for i in range(len(stored.chunks))]

    def document_chunks(self, collection: str, source: str) -> list[Chunk]:
        """One document's chunks, in their order in it (none: no such document)."""
        stored = self._docs.get((collection, source))
        return (
            [] if stored is None else [_to_chunk(stored, i, 1.0) for i in range(len(stored.chunks))]
        )

    def get_chunks(self, ids: Sequence[str]) -> list[Chunk]:
        by_id = {s.chunks[i].id: (s, i) for s, i in self._entries()}
        return [_to_chunk(*by_id[i], 1.0) for i in ids if i in by_id]

    # -- search ----------------------------------------------------------------------------------
    def _visible(self, scope: Scope) -> list[tuple[_Stored, int]]:
        return [
            (s, i) for s, i in self._entries() if scope.accepts(s.doc.collection, _metadata(s, i))
        ]

    def _postings(self, text: str) -> Postings:
        frequencies = term_frequencies(text)
        for term in frequencies:
            self._vocabulary.setdefault(term, len(self._vocabulary))
        ids = np.array([self._vocabulary[t] for t in frequencies], dtype=np.uint32)
        return ids, np.array(list(frequencies.values()), dtype=np.uint32)

    def _keyword_index(self) -> tuple[list[tuple[_Stored, int]], BM25Index]:
        with self._lock:
            if self._index is None:
                entries = self._entries()
                postings = [stored.postings[i] for stored, i in entries]
                self._index = (entries, BM25Index.build(postings, len(self._vocabulary)))
            return self._index

    def keyword_search(self, query: str, top_k: int, scope: Scope) -> list[Chunk]:
        terms = analyze(query)
        if not terms or scope.empty or top_k < 1:
            return []
        entries, index = self._keyword_index()
        mask = np.array(
            [scope.accepts(s.doc.collection, _metadata(s, i)) for s, i in entries], dtype=bool
        )
        within = None  # the chunks whose statistics count: those of the scope's collections
        if scope.collections is not None:
            wanted = set(scope.collections)
            within = index.within(
                np.array([s.doc.collection in wanted for s, _ in entries], dtype=bool)
            )
        ids = [self._vocabulary[t] for t in terms if t in self._vocabulary]
        out = []
        for row, score, raw in index.search(ids, top_k, mask, within):
            stored, i = entries[row]
            chunk = _to_chunk(stored, i, score)
            chunk.metadata["scores"] = {"bm25": round(score, 6), "bm25_raw": round(raw, 6)}
            out.append(chunk)
        return out

    def vector_search(self, vector: Sequence[float], top_k: int, scope: Scope) -> list[Chunk]:
        if self._model is None or scope.empty or top_k < 1:
            return []
        query = np.asarray(vector, dtype=np.float32)
        norm = float(np.linalg.norm(query))
        if query.shape != (self._model[1],) or norm == 0.0:
            raise StoreError(f"query vector has shape {query.shape}; expected ({self._model[1]},)")
        scored = []
        with self._lock:
            for order, (stored, i) in enumerate(self._visible(scope)):
                found = self._vectors.get((self._model[0], stored.chunks[i].text_hash))
                if found is not None:
                    value = float(np.dot(np.asarray(found, dtype=np.float32), query / norm))
                    scored.append((value, order, stored, i))
        scored.sort(key=lambda item: (-item[0], item[1]))
        out = []
        for value, _, stored, i in scored[:top_k]:
            score = min(1.0, max(0.0, value))
            chunk = _to_chunk(stored, i, score)
            chunk.metadata["scores"] = {"dense": round(score, 6)}
            out.append(chunk)
        return out

    # -- embeddings --------------------------------------------------------------------------------
    def embedding_model(self) -> tuple[str, int] | None:
        return self._model

    def set_embedding_model(self, model_id: str, dimension: int) -> None:
        if self._model is not None and self._model != (model_id, dimension):
            raise StoreError(
                f"this knowledge base holds vectors of {self._model[0]} ({self._model[1]}-d); "
                f"it cannot mix in {model_id} ({dimension}-d)"
            )
        self._model = (model_id, dimension)

    def cached_vectors(self, model_id: str, hashes: Sequence[str]) -> dict[str, list[float]]:
        return {h: self._vectors[(model_id, h)] for h in hashes if (model_id, h) in self._vectors}

    def cache_vectors(self, model_id: str, items: dict[str, Sequence[float]]) -> None:
        with self._lock:
            for text_hash, vector in items.items():
                self._vectors.setdefault((model_id, text_hash), list(vector))

    def missing_vectors(self, model_id: str, limit: int) -> list[tuple[str, str]]:
        found: dict[str, str] = {}
        for stored, i in self._entries():
            chunk = stored.chunks[i]
            if (model_id, chunk.text_hash) not in self._vectors:
                found.setdefault(chunk.text_hash, chunk.index_text)
                if len(found) == limit:
                    break
        return list(found.items())

    def count_missing_vectors(self, model_id: str) -> int:
        return len(
            {
                s.chunks[i].text_hash
                for s, i in self._entries()
                if (model_id, s.chunks[i].text_hash) not in self._vectors
            }
        )

    def add_vectors(self, model_id: str, vectors: dict[str, Sequence[float]]) -> None:
        self.cache_vectors(model_id, vectors)

    # -- links ------------------------------------------------------------------------------------
    def link_targets(self) -> list[tuple[str, str, str]]:
        targets: list[tuple[str, str, str]] = []
        for stored, i in self._entries():
            chunk = stored.chunks[i]
            doc_key = f"{stored.doc.collection}\0{stored.doc.source}"
            heading = chunk.heading_path[-1] if chunk.heading_path else None
            targets.extend(
                (name, chunk.id, doc_key) for name in (stored.doc.title, heading) if name
            )
        return targets

    def chunks_with_phrase(self, phrase: str, limit: int) -> list[tuple[str, str, str]]:
        wanted = stems(phrase)
        if not wanted:
            return []
        found = []
        for stored, i in self._entries():
            chunk = stored.chunks[i]
            tokens = stems(chunk.index_text)
            n = len(wanted)
            if any(tokens[j : j + n] == wanted for j in range(len(tokens) - n + 1)):
                found.append(
                    (chunk.id, f"{stored.doc.collection}\0{stored.doc.source}", chunk.content)
                )
                if len(found) >= limit:
                    break
        return found

    def add_links(self, links: Sequence[Link]) -> None:
        ids = {s.chunks[i].id for s, i in self._entries()}
        with self._lock:
            for link in links:
                if link.chunk_id in ids and link.target_id in ids:
                    self._links.setdefault((link.chunk_id, link.target_id), link.mention)

    def links_from(
        self, chunk_ids: Sequence[str], collections: Sequence[str] | None = None
    ) -> list[Link]:
        wanted = set(chunk_ids)
        entries = self._entries()
        order = {s.chunks[i].id: n for n, (s, i) in enumerate(entries)}
        allowed = (
            None
            if collections is None
            else {s.chunks[i].id for s, i in entries if s.doc.collection in collections}
        )
        found = [
            Link(a, b, m)
            for (a, b), m in self._links.items()
            if a in wanted and (allowed is None or b in allowed)
        ]
        return sorted(found, key=lambda link: (order[link.chunk_id], order[link.target_id]))

    # -- bookkeeping -------------------------------------------------------------------------------
    def stats(self) -> StoreStats:
        per: dict[str, list[int]] = {}
        for (collection, _), stored in self._docs.items():
            counts = per.setdefault(collection, [0, 0])
            counts[0] += 1
            counts[1] += len(stored.chunks)
        collections = [
            CollectionInfo(name=name, documents=d, chunks=c) for name, (d, c) in sorted(per.items())
        ]
        return StoreStats(
            documents=len(self._docs),
            chunks=sum(c.chunks for c in collections),
            vectors=sum(
                1
                for stored in self._docs.values()
                for chunk in stored.chunks
                if self._model is not None and (self._model[0], chunk.text_hash) in self._vectors
            ),
            links=len(self._links),
            collections=collections,
            embedding_model=self._model[0] if self._model else None,
            dimension=self._model[1] if self._model else None,
        )

    def close(self) -> None:
        """Nothing to release."""


def _metadata(stored: _Stored, i: int) -> dict[str, Any]:
    chunk = stored.chunks[i]
    return {
        **stored.doc.metadata,
        **chunk.metadata,
        "collection": stored.doc.collection,
        "source": stored.doc.source,
        "title": stored.doc.title,
        "heading_path": list(chunk.heading_path),
        "position": chunk.position,
        "document_version": stored.doc.content_hash,
    }


def _to_chunk(stored: _Stored, i: int, score: float) -> Chunk:
    chunk = stored.chunks[i]
    metadata = _metadata(stored, i)
    metadata.pop("source")
    return Chunk(
        content=chunk.content,
        source=stored.doc.source,
        score=score,
        metadata=metadata,
        id=chunk.id,
    )
