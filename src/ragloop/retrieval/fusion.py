"""Reciprocal rank fusion of ranked lists (Cormack, Clarke and Büttcher, 2009).

A chunk's fused score is the weighted sum over the lists of ``weight / (k + rank)`` (rank from
1). It is divided by the best score a chunk could reach (rank 1 in every list), so it lies in
[0, 1]. Each signal's own score and rank stay in ``metadata["scores"]`` for traces.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ragloop.core.records import Chunk

# The constant k in 1 / (k + rank). The literature's default is 60; on the four benchmark sets
# here (HotpotQA, MuSiQue, SciFact, FiQA), fusing bm25 with dense search scored best with a
# small k, which lets the top ranks of each list dominate (see BENCHMARKS.md, "Fusion").
RRF_K = 5


def reciprocal_rank_fusion(
    rankings: Mapping[str, Sequence[Chunk]],
    *,
    top_k: int,
    k: int = RRF_K,
    weights: dict[str, float] | None = None,
) -> list[Chunk]:
    """Fuse named rankings (e.g. ``{"bm25": [...], "dense": [...]}``) into one list of
    ``top_k`` chunks, best first; ties keep the order of first appearance."""
    weights = weights or {}
    fused: dict[str, float] = {}
    first: dict[str, Chunk] = {}
    signals: dict[str, dict[str, float]] = {}
    for name, ranking in rankings.items():
        weight = weights.get(name, 1.0)
        for rank, chunk in enumerate(ranking, 1):
            fused[chunk.id] = fused.get(chunk.id, 0.0) + weight / (k + rank)
            first.setdefault(chunk.id, chunk)
            detail = signals.setdefault(chunk.id, {})
            detail[name] = round(chunk.score, 6)
            detail[f"{name}_rank"] = rank
    best = sum(weights.get(name, 1.0) for name in rankings) / (k + 1)
    order = sorted(fused, key=lambda cid: -fused[cid])  # stable: first appearance on ties
    out = []
    for chunk_id in order[:top_k]:
        chunk = first[chunk_id]
        score = min(1.0, fused[chunk_id] / best) if best > 0 else 0.0
        metadata = {**chunk.metadata, "scores": {**signals[chunk_id], "rrf": round(score, 6)}}
        out.append(chunk.model_copy(update={"score": score, "metadata": metadata}))
    return out
