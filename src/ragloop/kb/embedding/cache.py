"""Query-embedding caches: exact (normalised text) and semantic (token Jaccard), with stats.

Both are keyed by the embedding model too, so one cache may serve knowledge bases built with
different models. They are thread-safe and bounded (least recently used entries go first), and
meant to be shared: across the iterations of a run, across runs, across loops. A vector is kept
packed (an ``array`` of doubles: 3 kB for 384 dimensions where a list of Python floats took
12 kB), so a server's caches full of queries stay small and give back the very floats stored.

- :class:`ExactEmbeddingCache`: the key is the text lower-cased with whitespace collapsed, so
  ``"What is RAG?"`` and ``"what  is rag?"`` share a vector.
- :class:`SemanticEmbeddingCache`: an exact layer first; on a miss, the cached query whose
  content words (stopwords left out) overlap most with the new one, when their Jaccard
  similarity reaches ``threshold``. A refined query that differs from an earlier one by one
  function word reuses its vector; one that adds a content word to a short query does not.
"""

from __future__ import annotations

import threading
from array import array
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ragloop.core.errors import ConfigError
from ragloop.core.text import content_terms

if TYPE_CHECKING:  # built on first use: a knowledge base holds a cache, a CLI search never asks
    from ragloop.core.records.retrieval import CacheStats


def cache_key(text: str) -> str:
    """The exact cache's key: lower-cased, whitespace collapsed."""
    return " ".join(text.lower().split())


def _positive(value: object, name: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(name, f"must be an integer >= 1, got {value!r}")
    return value


class ExactEmbeddingCache:
    """Vectors by (model, normalised text); at most ``max_entries``, least recently used out."""

    def __init__(self, max_entries: int = 4096) -> None:
        self.max_entries = _positive(max_entries, "max_entries")
        self._vectors: OrderedDict[tuple[str, str], array[float]] = OrderedDict()
        self._lock = threading.Lock()
        self._hits = 0
        self._misses = 0

    def lookup(self, model_id: str, text: str) -> list[float] | None:
        key = (model_id, cache_key(text))
        with self._lock:
            vector = self._vectors.get(key)
            if vector is None:
                self._misses += 1
                return None
            self._vectors.move_to_end(key)
            self._hits += 1
            return vector.tolist()

    def store(self, model_id: str, text: str, vector: Sequence[float]) -> None:
        self.keep(model_id, text, array("d", vector))

    def keep(self, model_id: str, text: str, vector: array[float]) -> None:
        """Store a vector already packed (shared with a semantic layer, not copied)."""
        key = (model_id, cache_key(text))
        with self._lock:
            self._vectors[key] = vector
            self._vectors.move_to_end(key)
            while len(self._vectors) > self.max_entries:
                self._vectors.popitem(last=False)

    @property
    def stats(self) -> CacheStats:
        """Lookups since the cache was made (or :meth:`clear` ed)."""
        from ragloop.core.records.retrieval import CacheStats

        return CacheStats(hits=self._hits, misses=self._misses)

    def __len__(self) -> int:
        return len(self._vectors)

    def clear(self) -> None:
        with self._lock:
            self._vectors.clear()
            self._hits = self._misses = 0


class SemanticEmbeddingCache:
    """An exact layer, then token-Jaccard lookup at or above ``threshold`` (0 < t <= 1).

    ``stats`` counts every lookup once (a hit from either layer, or a miss); ``semantic_hits``
    the hits only the Jaccard layer found. ``exact`` may be an :class:`ExactEmbeddingCache`
    shared with other code.
    """

    def __init__(
        self,
        exact: ExactEmbeddingCache | None = None,
        *,
        threshold: float = 0.85,
        max_entries: int = 1024,
    ) -> None:
        if (
            isinstance(threshold, bool)
            or not isinstance(threshold, int | float)
            or not 0.0 < threshold <= 1.0
        ):
            raise ConfigError("threshold", f"must be a number in (0, 1], got {threshold!r}")
        self.exact = exact if exact is not None else ExactEmbeddingCache()
        self.threshold = float(threshold)
        self.max_entries = _positive(max_entries, "max_entries")
        self._terms: OrderedDict[tuple[str, str], tuple[frozenset[str], array[float]]] = (
            OrderedDict()
        )
        self._lock = threading.Lock()
        self._hits = 0
        self._misses = 0
        self.semantic_hits = 0

    def lookup(self, model_id: str, text: str) -> list[float] | None:
        vector = self.exact.lookup(model_id, text)
        with self._lock:
            if vector is None:
                vector = self._nearest(model_id, frozenset(content_terms(text)))
                self.semantic_hits += vector is not None
            if vector is None:
                self._misses += 1
            else:
                self._hits += 1
            return vector

    def _nearest(self, model_id: str, terms: frozenset[str]) -> list[float] | None:
        if not terms:
            return None
        best: tuple[float, tuple[str, str]] | None = None
        for key, (cached, _) in self._terms.items():
            if key[0] != model_id:
                continue
            similarity = len(terms & cached) / len(terms | cached)
            if similarity >= self.threshold and (best is None or similarity > best[0]):
                best = (similarity, key)
        if best is None:
            return None
        self._terms.move_to_end(best[1])
        return self._terms[best[1]][1].tolist()

    def store(self, model_id: str, text: str, vector: Sequence[float]) -> None:
        packed = array("d", vector)
        self.exact.keep(model_id, text, packed)
        key = (model_id, cache_key(text))
        with self._lock:
            self._terms[key] = (frozenset(content_terms(text)), packed)
            self._terms.move_to_end(key)
            while len(self._terms) > self.max_entries:
                self._terms.popitem(last=False)

    @property
    def stats(self) -> CacheStats:
        from ragloop.core.records.retrieval import CacheStats

        return CacheStats(hits=self._hits, misses=self._misses)
