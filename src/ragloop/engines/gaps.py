"""The evidence-gap report of a run that is not confident (``result.gaps``), the same for
RAGLoop and AgentLoop.

The parts come from the evaluator when it can split the question and check each part (the
:class:`~ragloop.HeuristicEvaluator`: ``evidence_gaps``). Otherwise (an LLM evaluator, or none)
they come from the run: the sub-queries of a decomposition, each found when the answer cites a
chunk its search returned, or the whole question, found when the evaluator's verdict was
grounded and complete. The nearest misses are the chunks that come closest: when the
evaluator can tell (``closest``, the :class:`~ragloop.HeuristicEvaluator`: each chunk's best
sentence, scored as the extractive answer scores them), among the answer's chunks and the
best the searches returned; otherwise the best chunks the searches returned. The searches are
every query in the order it was sent.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from ragloop.components.citations import resolve_citations
from ragloop.core.calls import call, has_method, method
from ragloop.core.records import Chunk
from ragloop.core.records.gaps import QUOTE_CHARS, EvidenceGaps, GapPart, NearMiss
from ragloop.core.records.rag import EvaluationResult
from ragloop.core.text import content_terms, stem

NEAREST = 3  # near misses a report lists
CANDIDATES = 12  # chunks an evaluator's ``closest`` reads for them

logger = logging.getLogger("ragloop")


def _quote(chunk: Chunk) -> str:
    text = " ".join(chunk.content.split())
    return text if len(text) <= QUOTE_CHARS else text[: QUOTE_CHARS - 1].rstrip() + "…"


def nearest_misses(searches: Sequence[tuple[str, Sequence[Chunk]]]) -> list[NearMiss]:
    """The best chunks the searches returned (by retrieval score, each chunk once, with the
    first search that returned it)."""
    first: dict[str, tuple[str, Chunk]] = {}
    for query, chunks in searches:
        for chunk in chunks:
            first.setdefault(chunk.id, (query, chunk))
    best = sorted(first.values(), key=lambda found: -found[1].score)[:NEAREST]
    return [
        NearMiss(
            chunk_id=chunk.id, source=chunk.source, score=chunk.score, text=_quote(chunk), query=q
        )
        for q, chunk in best
    ]


async def closest_passages(
    evaluator: object,
    question: str,
    answer: str,
    answer_chunks: Sequence[Chunk],
    searches: Sequence[tuple[str, Sequence[Chunk]]],
) -> list[NearMiss]:
    """The evaluator's closest passages among the answer's chunks and the searches' best
    (``CANDIDATES`` of them), best first: the ``NEAREST`` closest, and the chunks the answer
    cites besides (the second hop of an answer that took two is seldom close to the question
    by itself), else :func:`nearest_misses`."""
    if evaluator is None or not has_method(evaluator, "closest"):
        return nearest_misses(searches)
    candidates = {c.id: c for c in answer_chunks}
    by_score = sorted((c for _, found in searches for c in found), key=lambda c: -c.score)
    for chunk in by_score:
        if len(candidates) >= CANDIDATES:
            break
        candidates.setdefault(chunk.id, chunk)
    first_query = {c.id: q for q, found in reversed(searches) for c in found}
    try:
        found = await call(
            method(evaluator, "closest", "evaluator"),
            question,
            list(candidates.values()),
            len(candidates),
        )
    except Exception as error:  # the report is a courtesy: the run's answer stands
        logger.warning("ragloop: the evaluator's closest failed: %s", error)
        return nearest_misses(searches)
    if not isinstance(found, list) or not all(isinstance(m, NearMiss) for m in found):
        return nearest_misses(searches)
    cited = {c.chunk_id for c in resolve_citations(answer, answer_chunks)}
    kept = [m for i, m in enumerate(found) if i < NEAREST or m.chunk_id in cited]
    return [m.model_copy(update={"query": first_query.get(m.chunk_id, "")}) for m in kept]


def absent_terms(question: str, chunks: Sequence[Chunk]) -> list[str]:
    """The question's content words that no chunk contains (by stem)."""
    said = {stem(t) for c in chunks for t in content_terms(c.content)}
    return [t for t in content_terms(question) if stem(t) not in said]


def run_parts(
    question: str,
    answer: str,
    answer_chunks: Sequence[Chunk],
    searches: Sequence[tuple[str, Sequence[Chunk]]],
    verdict: EvaluationResult | None,
    sub_queries: Sequence[str] = (),
) -> list[GapPart]:
    """The parts as the run shows them (see the module docstring)."""
    cited = {
        c.chunk_id: c for c in resolve_citations(answer, answer_chunks) if c.chunk_id is not None
    }
    by_id = {c.id: c for c in answer_chunks}
    if len(sub_queries) > 1:
        returned = {q: [c.id for c in chunks] for q, chunks in searches}
        parts = []
        for part in sub_queries:
            hit = next((i for i in returned.get(part, []) if i in cited and i in by_id), None)
            parts.append(_part(part, by_id[hit] if hit else None))
        return parts
    whole = verdict is not None and verdict.is_grounded and verdict.is_complete
    source = next((by_id[i] for i in cited if i in by_id), None)
    return [_part(question, source if whole else None)]


def _part(part: str, chunk: Chunk | None) -> GapPart:
    if chunk is None:
        return GapPart(part=part, found=False)
    return GapPart(
        part=part, found=True, chunk_id=chunk.id, source=chunk.source, quote=_quote(chunk)
    )


async def evidence_gaps(
    evaluator: object,
    question: str,
    answer: str,
    answer_chunks: Sequence[Chunk],
    searches: Sequence[tuple[str, Sequence[Chunk]]],
    *,
    verdict: EvaluationResult | None = None,
    sub_queries: Sequence[str] = (),
    probability: float | None = None,
    target: float | None = None,
) -> EvidenceGaps:
    """The report of a run: ``answer`` and the chunks it was drawn from, every search with
    what it returned (in order), the evaluator's verdict of the answer and the sub-queries of
    a decomposition, if any."""
    gathered = [c for _, chunks in searches for c in chunks]
    report = None
    if evaluator is not None and has_method(evaluator, "evidence_gaps"):
        try:
            found = await call(
                method(evaluator, "evidence_gaps", "evaluator"),
                question,
                list(answer_chunks),
                answer,
            )
            report = found if isinstance(found, EvidenceGaps) else None
        except Exception as error:  # the report is a courtesy: the run's answer stands
            logger.warning("ragloop: the evaluator's evidence_gaps failed: %s", error)
    if report is None:
        report = EvidenceGaps(
            parts=run_parts(question, answer, answer_chunks, searches, verdict, sub_queries),
            missing_terms=absent_terms(question, gathered),
        )
    nearest = await closest_passages(evaluator, question, answer, answer_chunks, searches)
    return report.model_copy(
        update={
            "nearest": nearest,
            "searches": list(dict.fromkeys(q for q, _ in searches)),
            "probability": None if probability is None else round(probability, 4),
            "target": target,
        }
    )
