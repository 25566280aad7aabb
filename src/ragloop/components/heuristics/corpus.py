"""The knowledge base as the offline components see it.

Without a model, the only way to learn that a shop's documents say "hire" where the user said
"rent" is to ask the documents. A :class:`Corpus` wraps a search over the knowledge base and,
when the knowledge base has them, its embedder and its title/heading link graph, and answers
what the offline reformulator, evaluator and controller need:

- :meth:`Corpus.sample`: a wider retrieval for a query (its ``sample_size`` best chunks): the
  part of the corpus vocabulary near the question;
- :meth:`Corpus.related_terms`: pseudo-relevance feedback over that sample (each chunk votes for
  its terms, weighted by its retrieval score and damped for terms common across the sample),
  re-ranked by embedding similarity to the query when an embedder is at hand;
- :meth:`Corpus.substitutes`: the corpus words nearest to a term the corpus never uses
  (embedding neighbours among the sample's terms);
- :meth:`Corpus.mentions`: whether any document uses a word at all;
- :meth:`Corpus.bridges`: the documents that chunks name by title or heading (the link graph the
  knowledge base builds at ingest), i.e. the next hop of a multi-hop question.

``Corpus.of(x)`` accepts a :class:`~ragloop.KnowledgeBase`, one of its retrievers (keeping its
collection, mode and filters), any :class:`~ragloop.Retriever`, or a search function.
"""

from __future__ import annotations

import hashlib
import math
import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Protocol, TypeVar

import numpy as np
import numpy.typing as npt

from ragloop.core.cache_writes import skip_failed_cache_write
from ragloop.core.calls import call, has_method, is_async_callable, method, run_sync
from ragloop.core.protocols import Embedder
from ragloop.core.records import Chunk, Scope
from ragloop.core.text import STOPWORDS, content_stems, stem, tokenize

SearchFn = Callable[[str, int], list[Chunk]]
# Below this cosine, two single words embedded by a small sentence model are rarely related.
SUBSTITUTE_SIMILARITY = 0.44
LinkedFn = Callable[..., list[Chunk]]
FetchFn = Callable[[Sequence[str]], list[Chunk]]


class VectorCache(Protocol):
    """Where embeddings of words outlive the process (a knowledge base's store)."""

    def get(self, keys: Sequence[str]) -> dict[str, list[float]]: ...
    def put(self, items: dict[str, Sequence[float]]) -> None: ...


class _StoreVectors:
    """A knowledge base's embedding cache (keyed by model id and text hash) as a VectorCache."""

    def __init__(self, store: Any, model_id: str) -> None:
        self.store = store
        self.model_id = model_id

    def get(self, keys: Sequence[str]) -> dict[str, list[float]]:
        return dict(self.store.cached_vectors(self.model_id, list(keys)))

    def put(self, items: dict[str, Sequence[float]]) -> None:
        skip_failed_cache_write(
            "the word-vector cache", lambda: self.store.cache_vectors(self.model_id, items)
        )


K = TypeVar("K")
V = TypeVar("V")


TOPIC_SIMILARITY = 0.15  # word-to-question cosine below which a word is off the question's topic


class _Lru(OrderedDict[K, V]):
    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size

    def put(self, key: K, value: V) -> V:
        self[key] = value
        self.move_to_end(key)
        while len(self) > self.size:
            self.popitem(last=False)
        return value


def useful_term(token: str) -> bool:
    """A word worth adding to a query: not a stopword, a number or a fragment."""
    return token not in STOPWORDS and len(token) > 2 and not any(ch.isdigit() for ch in token)


def chunk_context(chunk: Chunk) -> str:
    """A chunk's title and heading path, which often name its subject."""
    context = [str(chunk.metadata.get("title") or "")]
    context += [str(h) for h in chunk.metadata.get("heading_path") or []]
    return " ".join(dict.fromkeys(c for c in context if c))


def chunk_text(chunk: Chunk) -> str:
    """A chunk's context (title, headings) and text."""
    header = chunk_context(chunk)
    return f"{header}\n{chunk.content}" if header else chunk.content


class Corpus:
    """Search plus, optionally, the embedder and the link graph of a knowledge base.

    ``search(query, top_k)`` returns chunks best first; ``keyword_search`` (same form) is used
    to check whether a word occurs at all, ``semantic_search`` (dense retrieval) to find the
    passages about a word the corpus never uses (both default to ``search``); ``embedder`` enables
    embedding neighbours; ``linked(chunk_ids, limit=...)`` returns the chunks those chunks name
    (``KnowledgeBase.linked_chunks``); ``fetch(chunk_ids)`` returns chunks by id, with their
    source and metadata; ``vector_cache`` keeps the embeddings of single words between runs (a
    knowledge base's own embedding cache). Results are cached per query, so one
    instance should serve one corpus that does not change while it is used.
    """

    def __init__(
        self,
        search: SearchFn,
        *,
        keyword_search: SearchFn | None = None,
        semantic_search: SearchFn | None = None,
        embedder: Embedder | None = None,
        linked: LinkedFn | None = None,
        fetch: FetchFn | None = None,
        vector_cache: VectorCache | None = None,
        sample_size: int = 20,
    ) -> None:
        self._search = search
        self._keyword_search = keyword_search or search
        self._semantic_search = semantic_search or search
        self.embedder = embedder
        self._linked = linked
        self._fetch = fetch
        self._vector_cache = vector_cache
        self.sample_size = sample_size
        self._lock = threading.Lock()
        # bounded so a server that answers for months holds no more than a few megabytes a
        # corpus: a run reuses its own samples and vectors; words also persist in the store
        self._samples: _Lru[str, list[Chunk]] = _Lru(64)
        self._mentions: _Lru[str, bool] = _Lru(2048)
        self._substitutes: _Lru[str, list[str]] = _Lru(2048)
        self._vectors: _Lru[str, npt.NDArray[np.float32]] = _Lru(4096)

    @classmethod
    def of(cls, source: Any, **options: Any) -> Corpus:
        """A corpus over a knowledge base, a knowledge-base retriever, a retriever or a search
        function ``search(query, top_k)`` (see the module docstring)."""
        if isinstance(source, Corpus):
            return source
        if hasattr(source, "kb") and hasattr(source.kb, "linked_chunks"):  # a KB's retriever
            scope = {"collection": source.collection, "filters": source.filters}
            return cls._of_knowledge_base(source.kb, source.mode, scope, options)
        if hasattr(source, "linked_chunks") and hasattr(source, "search"):  # a KnowledgeBase
            mode = "hybrid" if source.embedder is not None else "bm25"
            return cls._of_knowledge_base(source, mode, {}, options)
        retrieve = getattr(source, "retrieve", None)
        if callable(retrieve) and not is_async_callable(retrieve):
            return cls(lambda query, top_k: list(retrieve(query, top_k=top_k)), **options)
        if has_method(source, "retrieve"):  # async only: run it to completion
            aretrieve = method(source, "retrieve", "retriever")
            return cls(
                lambda query, top_k: list(run_sync(lambda: call(aretrieve, query, top_k=top_k))),
                **options,
            )
        if callable(source):
            return cls(source, **options)
        raise TypeError(
            "a corpus is built from a KnowledgeBase, a retriever or a search(query, top_k) "
            f"function; got {type(source).__name__}"
        )

    @classmethod
    def _of_knowledge_base(
        cls, kb: Any, mode: str, scope: dict[str, Any], options: dict[str, Any]
    ) -> Corpus:
        in_scope = Scope.of(scope.get("collection"), scope.get("filters"))

        def search(query: str, top_k: int) -> list[Chunk]:
            return list(kb.search(query, top_k=top_k, mode=mode, **scope))

        def keyword(query: str, top_k: int) -> list[Chunk]:
            return list(kb.search(query, top_k=top_k, mode="bm25", **scope))

        def semantic(query: str, top_k: int) -> list[Chunk]:
            dense = "dense" if kb.embedder is not None else "bm25"
            return list(kb.search(query, top_k=top_k, mode=dense, **scope))

        def linked(ids: Sequence[str], limit: int = 10) -> list[Chunk]:
            # scoped in the knowledge base's query: out-of-scope targets never use up the limit
            return list(kb.linked_chunks(ids, limit=limit, **scope))

        def fetch(ids: Sequence[str]) -> list[Chunk]:
            found = kb.store.get_chunks(ids)
            return [c for c in found if in_scope.accepts(c.metadata.get("collection"), c.metadata)]

        options.setdefault("embedder", kb.embedder)
        if kb.embedder is not None:
            options.setdefault("vector_cache", _StoreVectors(kb.store, kb.embedder.model_id))
        return cls(
            search,
            keyword_search=keyword,
            semantic_search=semantic,
            linked=linked,
            fetch=fetch,
            **options,
        )

    # -- searches ---------------------------------------------------------------------------
    def search(self, query: str, top_k: int = 5) -> list[Chunk]:
        return self._search(query, top_k)

    def sample(self, query: str) -> list[Chunk]:
        """The ``sample_size`` best chunks for ``query`` (cached)."""
        key = " ".join(query.lower().split())
        with self._lock:
            if key in self._samples:
                return self._samples[key]
        found = self._search(query, self.sample_size)
        with self._lock:
            return self._samples.put(key, found)

    def mentions(self, term: str) -> bool:
        """Whether any chunk uses ``term`` (or a word with the same stem)."""
        key = stem(term.lower())
        with self._lock:
            if key in self._mentions:
                return self._mentions[key]
        hits = self._keyword_search(term, 3)
        found = any(key in content_stems(chunk_text(c)) for c in hits)
        with self._lock:
            return self._mentions.put(key, found)

    # -- vocabulary -------------------------------------------------------------------------
    def feedback(self, query: str, exclude: set[str], *, top_n: int = 5) -> dict[str, float]:
        """Pseudo-relevance feedback weights of the terms of the best chunks of the sample for
        ``query`` (see :func:`feedback_weights`), terms common across the sample damped."""
        sample = self.sample(query)
        return feedback_weights(sample[:top_n], exclude, sample=sample)

    def related_terms(self, query: str, exclude: Sequence[str], limit: int = 4) -> list[str]:
        """Corpus words related to ``query`` that it does not contain: feedback terms, re-ranked
        by embedding similarity to the query when the corpus has an embedder."""
        weights = self.feedback(query, set(exclude))
        ranked = ranked_terms(weights)[:40]
        if not ranked:
            return []
        similarity = self.similarity(query, ranked)
        if similarity is not None:
            top = max(weights[t] for t in ranked)
            best = max(float(similarity.max()), 1e-6)
            score = {
                t: 0.5 * weights[t] / top + 0.5 * max(float(s), 0.0) / best
                for t, s in zip(ranked, similarity, strict=True)
            }
            # words off the question's topic would pull a query away from it
            near = {t for t, s in zip(ranked, similarity, strict=True) if s >= TOPIC_SIMILARITY}
            ranked = sorted(near, key=lambda t: (-score[t], t))
        return _distinct_stems(ranked)[:limit]

    def substitutes(self, term: str, query: str, limit: int = 2) -> list[str]:
        """Corpus words that could stand for ``term``, a word the documents may not use: the
        terms of the passages a semantic search for it finds, nearest to it in embedding space
        first. Needs an embedder: without one there is no evidence of meaning (empty list)."""
        if self.embedder is None:
            return []
        key = f"{term}\0{' '.join(sorted(set(tokenize(query))))}\0{limit}"
        with self._lock:
            if key in self._substitutes:
                return self._substitutes[key]
        found = self._substitutes_of(term, query, limit)
        with self._lock:
            return self._substitutes.put(key, found)

    def _substitutes_of(self, term: str, query: str, limit: int) -> list[str]:
        exclude = set(tokenize(query))
        weights: dict[str, float] = {}
        for rank, chunk in enumerate(self._semantic_search(term, 3)):
            tokens = [t for t in tokenize(chunk_text(chunk)) if useful_term(t) and t not in exclude]
            for token, count in Counter(tokens).items():
                weights[token] = weights.get(token, 0.0) + count / (rank + 1)
        ranked = ranked_terms(weights)[:60]
        similarity = self.similarity(term, ranked)
        if similarity is None:
            return []
        order = np.argsort(-similarity, kind="stable")
        near = [ranked[i] for i in order if similarity[i] >= SUBSTITUTE_SIMILARITY]
        return _distinct_stems(near)[:limit]

    def similarity(self, text: str, terms: list[str]) -> npt.NDArray[np.float32] | None:
        """Cosine similarity of ``text`` to each term (None without an embedder)."""
        if self.embedder is None or not terms:
            return None
        vectors = self.vectors([text, *terms])
        return vectors[1:] @ vectors[0]  # type: ignore[no-any-return]

    def vectors(self, texts: list[str]) -> npt.NDArray[np.float32]:
        """Normalised embeddings of ``texts`` (cached); needs an embedder."""
        assert self.embedder is not None
        with self._lock:  # read what is cached now: a bounded cache may drop it meanwhile
            known = {t: self._vectors[t] for t in dict.fromkeys(texts) if t in self._vectors}
        missing = [t for t in dict.fromkeys(texts) if t not in known]
        if missing:
            # single words are kept between runs (a corpus's vocabulary is bounded); sentences
            # only in memory, so the knowledge base file does not grow with every question
            keys = {
                t: "word:" + hashlib.sha256(t.encode()).hexdigest()
                for t in missing
                if self._vector_cache is not None and t.strip() and " " not in t.strip()
            }
            cache = self._vector_cache
            stored = cache.get(list(keys.values())) if cache is not None and keys else {}
            found = {
                t: np.asarray(stored[k], dtype=np.float32) for t, k in keys.items() if k in stored
            }
            new = [t for t in missing if t not in found]
            if new:
                matrix = np.asarray(self.embedder.embed(new), dtype=np.float32)
                norms = np.linalg.norm(matrix, axis=1, keepdims=True)
                matrix = (matrix / np.where(norms == 0, 1.0, norms)).astype(np.float32)
                found.update(zip(new, matrix, strict=True))
                if self._vector_cache is not None and keys:
                    self._vector_cache.put({keys[t]: found[t].tolist() for t in new if t in keys})
            with self._lock:
                for text in missing:
                    self._vectors.put(text, found[text])
            known.update(found)
        return np.stack([known[t] for t in texts])

    def fetch(self, chunk_ids: Sequence[str]) -> list[Chunk]:
        """The chunks with these ids that the corpus can look up (none without ``fetch``)."""
        return list(self._fetch(chunk_ids)) if self._fetch is not None and chunk_ids else []

    # -- the link graph ---------------------------------------------------------------------
    @property
    def has_links(self) -> bool:
        return self._linked is not None

    def linked(self, chunks: Sequence[Chunk], limit: int = 10) -> list[Chunk]:
        """Chunks of *other* documents that ``chunks`` name by title or heading, each with
        ``metadata["mention"]``; empty when the corpus has no link graph."""
        if self._linked is None or not chunks:
            return []
        sources = {c.source for c in chunks}
        found = self._linked([c.id for c in chunks], limit=limit)
        return [c for c in found if c.source not in sources]

    def bridges(self, chunks: Sequence[Chunk], limit: int = 3) -> list[str]:
        """The names (titles, headings) by which ``chunks`` point at documents not among them."""
        names: list[str] = []
        for chunk in self.linked(chunks, limit=limit * 3):
            mention = str(chunk.metadata.get("mention") or "")
            if mention and mention not in names:
                names.append(mention)
        return names[:limit]


def feedback_weights(
    chunks: Sequence[Chunk], exclude: Iterable[str], *, sample: Sequence[Chunk] = ()
) -> dict[str, float]:
    """Pseudo-relevance feedback (relevance-model style): each chunk votes for its terms in
    proportion to their frequency in it, weighted by its retrieval score and discounted by its
    rank. With a ``sample`` (a wider retrieval), a term is damped by how many of the sample's
    chunks contain it (idf), so words found everywhere near the query count less. Terms sharing
    a stem with ``exclude`` are left out."""
    excluded = {stem(t) for t in exclude}
    df: Counter[str] = Counter()
    for chunk in sample:
        df.update(set(tokenize(chunk_text(chunk))))
    weights: dict[str, float] = {}
    for rank, chunk in enumerate(chunks):
        tokens = [t for t in tokenize(chunk_text(chunk)) if useful_term(t)]
        tokens = [t for t in tokens if stem(t) not in excluded]
        if not tokens:
            continue
        vote = max(chunk.score, 0.01) / (rank + 1)
        for term, count in Counter(tokens).items():
            idf = math.log((len(sample) + 1) / df[term]) + 0.1 if sample else 1.0
            weights[term] = weights.get(term, 0.0) + vote * idf * count / len(tokens)
    return weights


def ranked_terms(weights: dict[str, float]) -> list[str]:
    """Terms by weight, ties broken by length (longest first: the better guess at a rarer,
    more specific word) and then alphabetically."""
    return sorted(weights, key=lambda t: (-weights[t], -len(t), t))


def _distinct_stems(terms: list[str]) -> list[str]:
    seen: set[str] = set()
    out: list[str] = []
    for term in terms:
        key = stem(term)
        if key not in seen:
            seen.add(key)
            out.append(term)
    return out
