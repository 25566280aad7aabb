"""Reciprocal rank fusion of ranked lists (Cormack, Clarke and Büttcher, 2009).

A chunk's fused score is the weighted sum over the lists of ``weight / (k + rank)`` (rank from
1). It is divided by the best score a chunk could reach (rank 1 in every list), so it lies in
[0, 1]. Each signal's own score and rank stay in ``metadata["scores"]`` for traces.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from typing import TypeVar

from ragloop.core.records import Chunk
from ragloop.kb.index.exact import exact_hits, term_patterns
from ragloop.kb.stores.base import index_text

# The constant k in 1 / (k + rank). The literature's default is 60; on the four benchmark sets
# here (HotpotQA, MuSiQue, SciFact, FiQA), fusing bm25 with dense search scored best with a
# small k, which lets the top ranks of each list dominate (see BENCHMARKS.md, "Fusion").
RRF_K = 5

K = TypeVar("K", bound=Hashable)


def fuse(
    rankings: Mapping[str, Sequence[tuple[K, float]]],
    *,
    top_k: int,
    k: int = RRF_K,
    weights: dict[str, float] | None = None,
    exact: tuple[Mapping[K, int], int] | None = None,
) -> list[tuple[K, float, dict[str, float]]]:
    """Fuse named rankings of (key, score) into the ``top_k`` keys, best first, each with its
    fused score and its signals (each list's score and rank); ties keep the order of first
    appearance. Keys are whatever identifies an item: chunk ids, or a store's row numbers.

    ``exact`` is (how many of the query's exact terms each key holds, how many there are):
    keys holding more come first (:mod:`ragloop.kb.index.exact`), and the score is
    ``(held + fused) / (terms + 1)``, so it still falls down the list and stays in [0, 1]."""
    weights = weights or {}
    fused: dict[K, float] = {}
    signals: dict[K, dict[str, float]] = {}
    for name, ranking in rankings.items():
        weight = weights.get(name, 1.0)
        for rank, (key, score) in enumerate(ranking, 1):
            fused[key] = fused.get(key, 0.0) + weight / (k + rank)
            detail = signals.setdefault(key, {})
            detail[name] = round(score, 6)
            detail[f"{name}_rank"] = rank
    best = sum(weights.get(name, 1.0) for name in rankings) / (k + 1)
    held, terms = exact if exact is not None else ({}, 0)
    # stable: first appearance on ties
    order = sorted(fused, key=lambda key: (-held.get(key, 0), -fused[key]))
    out = []
    for key in order[:top_k]:
        score = min(1.0, fused[key] / best) if best > 0 else 0.0
        detail = {**signals[key], "rrf": round(score, 6)}
        if terms:
            detail["exact"] = held.get(key, 0)
            score = (held.get(key, 0) + score) / (terms + 1)
        out.append((key, score, detail))
    return out


def reciprocal_rank_fusion(
    rankings: Mapping[str, Sequence[Chunk]],
    *,
    top_k: int,
    k: int = RRF_K,
    weights: dict[str, float] | None = None,
    exact_terms: Sequence[str] = (),
) -> list[Chunk]:
    """Fuse named rankings (e.g. ``{"bm25": [...], "dense": [...]}``) into one list of
    ``top_k`` chunks, best first; ties keep the order of first appearance. Chunks holding
    more of ``exact_terms`` (:func:`ragloop.kb.index.exact.exact_terms` of the query) come
    first."""
    first: dict[str, Chunk] = {}
    for ranking in rankings.values():
        for chunk in ranking:
            first.setdefault(chunk.id, chunk)
    exact = None
    if exact_terms:
        patterns = term_patterns(exact_terms)
        held = {cid: exact_hits(patterns, searchable_text(c)) for cid, c in first.items()}
        exact = (held, len(exact_terms))
    fused = fuse(
        {name: [(c.id, c.score) for c in ranking] for name, ranking in rankings.items()},
        top_k=top_k,
        k=k,
        weights=weights,
        exact=exact,
    )
    return [
        first[chunk_id].model_copy(
            update={"score": score, "metadata": {**first[chunk_id].metadata, "scores": signals}}
        )
        for chunk_id, score, signals in fused
    ]


def searchable_text(chunk: Chunk) -> str:
    """What keyword search indexed for a chunk: its title, headings and text."""
    title = str(chunk.metadata.get("title") or "")
    return index_text(title, chunk.metadata.get("heading_path") or [], chunk.content)
