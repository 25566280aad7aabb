"""Query refiners for the retrieval loop: what to search next, from what was found.

- :class:`KeywordRefiner` (seed 003): append the best chunk's longest new word to the query.
- :class:`EntityBridgeRefiner`: one sub-query per entity or title the new passages name and the
  question does not (the second hop of a bridge question), from the knowledge base's link graph
  when there is one, else from the text.
- :class:`PseudoRelevanceRefiner`: the question plus RM3-style expansion terms, weighted by the
  chunks gathered so far.
- :class:`RefinerChain`: the first of several refiners that has something to add.

Every refiner returns None when it has nothing new to search, which ends the run.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import cast

from ragloop.components.heuristics.rewriting import Evidence, relation_terms
from ragloop.core.calls import call, method, run_sync
from ragloop.core.errors import ConfigError
from ragloop.core.protocols import QueryRefiner
from ragloop.core.records import Chunk
from ragloop.core.records.retrieval import RefineContext
from ragloop.core.text import STOPWORDS, content_terms, normalize_query, tokenize


def _words(text: str) -> list[str]:
    # the lesson's split: whitespace, then only the alphanumeric characters of each piece
    words = ("".join(ch for ch in piece if ch.isalnum()) for piece in text.lower().split())
    return [w for w in words if w]


def keyword(chunk_text: str, query: str) -> str:
    """Seed 003's refinement keyword: the longest word of more than four letters in
    ``chunk_text`` that is not a stopword and not already in ``query`` ("" when there is none).
    Words are lower-cased and stripped of punctuation.

    On ties the *last* such word wins, as the lesson's Rust ``max_by_key`` returns the last of
    equal maxima. One deliberate difference: lengths count characters, where Rust's ``len()``
    counts UTF-8 bytes, so an accented word is not longer than the same word without accents.
    """
    asked = set(_words(query))
    best = ""
    for word in _words(chunk_text):
        if len(word) > 4 and word not in STOPWORDS and word not in asked and len(word) >= len(best):
            best = word
    return best


def _positive(value: object, name: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(name, f"must be an integer >= 1, got {value!r}")
    return value


class KeywordRefiner:
    """Seed 003's refinement: the last iteration's query plus :func:`keyword` of its best chunk;
    None (stop) when the chunk offers no new word or nothing was retrieved."""

    keyword = staticmethod(keyword)

    def refine(self, context: RefineContext) -> str | None:
        if not context.last_chunks or not context.queries:
            return None
        current = context.queries[0]
        word = keyword(context.last_chunks[0].content, current)
        return f"{current} {word}" if word else None


LinkedChunks = Callable[..., list[Chunk]]


def _link_graph(retriever: object) -> LinkedChunks | None:
    """The knowledge base's ``linked_chunks`` behind a retriever (or a knowledge base), kept
    to the retriever's collections and filters: a name is followed only when its document is
    one the caller may read (the store's query selects it, so others' existence never shows)."""
    found = getattr(getattr(retriever, "kb", retriever), "linked_chunks", None)
    if not callable(found):
        return None
    scope = {k: getattr(retriever, k) for k in ("collection", "filters") if hasattr(retriever, k)}
    if not hasattr(retriever, "kb") or not scope:  # the knowledge base itself: every collection
        return cast(LinkedChunks, found)
    return functools.partial(found, **scope)


class EntityBridgeRefiner:
    """Follows the entities the new passages name to their own passages.

    After each iteration it takes the ``from_top`` best new chunks and collects the names they
    mention: from the knowledge base's title/heading link graph when the retriever is a
    knowledge base retriever (names of other documents, in the order the chunks mention them),
    else from the text (capitalised phrases). It drops names the question already holds and
    names already followed, and issues one sub-query per name (at most ``max_queries``): the
    name plus what the question asks (its terms outside its own entities).
    ``use_links=False`` reads names from the text even when a link graph exists.
    """

    def __init__(self, *, max_queries: int = 2, from_top: int = 3, use_links: bool = True) -> None:
        self.max_queries = _positive(max_queries, "max_queries")
        self.from_top = _positive(from_top, "from_top")
        self.use_links = bool(use_links)

    def names(self, context: RefineContext) -> list[str]:
        """Candidate bridge names, best chunk first."""
        source = context.new_chunks[: self.from_top]
        linked = _link_graph(context.retriever) if self.use_links else None
        if linked is None:
            return Evidence(source).bridge_entities(context.original, limit=self.max_queries * 4)
        rank = {c.id: i for i, c in enumerate(source)}
        text = {c.id: c.content.lower() for c in source}

        def mentioned(target: Chunk) -> tuple[int, int]:
            origin = str(target.metadata.get("linked_from", ""))
            at = text.get(origin, "").find(str(target.metadata.get("mention", "")).lower())
            return rank.get(origin, len(rank)), at if at >= 0 else len(text.get(origin, ""))

        targets = linked(list(rank), limit=self.max_queries * 8)
        names = (t.metadata.get("mention") for t in sorted(targets, key=mentioned))
        return [name for name in names if isinstance(name, str)]

    def refine(self, context: RefineContext) -> list[str] | None:
        asked = set(tokenize(context.original))
        relation = relation_terms(context.original)
        queries: list[str] = []
        seen: set[str] = set()
        for name in self.names(context):
            key = normalize_query(name)
            own = set(tokenize(name))
            if not key or key in seen or own <= asked:
                continue
            seen.add(key)
            query = " ".join([name, *(t for t in relation if t not in own)])
            if normalize_query(query) in context.tried:
                continue
            queries.append(query)
            if len(queries) == self.max_queries:
                break
        return queries or None


class PseudoRelevanceRefiner:
    """RM3-style expansion: the question plus the ``terms`` heaviest terms of the best
    ``feedback_chunks`` chunks gathered so far (each chunk votes for its terms by their
    frequency in it, weighted by its score and rank). None when the expansion was tried."""

    def __init__(self, *, terms: int = 5, feedback_chunks: int = 3) -> None:
        self.terms = _positive(terms, "terms")
        self.feedback_chunks = _positive(feedback_chunks, "feedback_chunks")

    def refine(self, context: RefineContext) -> str | None:
        evidence = Evidence(list(context.chunks))
        extra = evidence.feedback_terms(
            context.original,
            content_terms(context.original),
            limit=self.terms,
            top_n=self.feedback_chunks,
        )
        if not extra:
            return None
        query = f"{context.original.strip().rstrip('?!. ')} {' '.join(extra)}"
        return None if normalize_query(query) in context.tried else query


class RefinerChain:
    """Asks its refiners in order; the first that returns queries wins (None when none does)."""

    def __init__(self, *refiners: QueryRefiner) -> None:
        if not refiners:
            raise ConfigError("refiners", "give at least one refiner")
        self.refiners: Sequence[QueryRefiner] = refiners

    async def arefine(self, context: RefineContext) -> str | list[str] | None:
        for refiner in self.refiners:
            out = await call(method(refiner, "refine", "refiner"), context)
            if out:
                return out  # type: ignore[no-any-return]
        return None

    def refine(self, context: RefineContext) -> str | list[str] | None:
        return run_sync(lambda: self.arefine(context))
