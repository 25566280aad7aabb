"""HeuristicReformulator with a corpus: the six strategies consult the knowledge base."""

from __future__ import annotations

import pytest

from ragloop import EvaluationResult, HeuristicReformulator, LoopIteration, ReformulationStrategy
from ragloop.components.heuristics.corpus import chunk_text
from ragloop.core.text import normalize_query


def iteration(number, queries, chunks, reason, score=0.4):
    return LoopIteration(
        iteration=number,
        query=" | ".join(queries),
        queries=queries,
        chunks=chunks,
        answer="",
        confidence=0.0,
        evaluation=EvaluationResult(
            is_grounded=True, is_complete=False, score=score, reason=reason
        ),
    )


def test_perspective_shift_replaces_a_word_the_documents_never_use(shop_kb_dense):
    question = "Do you rent out stoves?"
    chunks = shop_kb_dense.search("stoves", top_k=3)
    history = [iteration(1, [question], chunks, "no chunk mentions 'rent': different terminology")]
    out = HeuristicReformulator(shop_kb_dense).reformulate(question, history)
    assert out.strategy is ReformulationStrategy.PERSPECTIVE_SHIFT
    words = out.queries[0].split()
    assert "hire" in words
    assert "rent" not in words
    assert "stoves" in words
    found = shop_kb_dense.search(out.queries[0], top_k=3)
    assert any(c.source == "policies/gear-library.md" for c in found)


def test_decompose_follows_the_name_the_evaluator_pointed_at(shop_kb):
    question = "What is the warranty on the tent Priya Shah takes wild camping?"
    chunks = [
        c
        for c in shop_kb.search(question, top_k=8)
        if c.source in ("staff/staff-picks.md", "products/skylark-2.md")
    ]
    reason = "missing second hop: the answer points to 'Fellside Guarantee', not searched yet"
    out = HeuristicReformulator(shop_kb).reformulate(
        question, [iteration(1, [question], chunks, reason)]
    )
    assert out.strategy is ReformulationStrategy.DECOMPOSE
    assert "Fellside Guarantee warranty" in out.queries
    found = shop_kb.search("Fellside Guarantee warranty", top_k=5)
    assert "policies/fellside-guarantee.md" in {c.source for c in found}


def test_expand_adds_terms_from_a_wider_search_of_the_corpus(shop_kb):
    question = "How should I wash a sleeping bag?"
    out = HeuristicReformulator(shop_kb).reformulate_with(
        ReformulationStrategy.EXPAND, question, []
    )
    added = set(out.queries[0].split()) - set(question.rstrip("?").split())
    assert added
    sample = " ".join(chunk_text(c).lower() for c in shop_kb.search(question, top_k=20))
    assert all(word in sample for word in added)


@pytest.mark.parametrize("strategy", list(ReformulationStrategy))
def test_every_strategy_keeps_finding_a_query_never_tried(shop_kb, strategy):
    question = "What is the warranty on the tent Priya Shah takes wild camping?"
    reformulator = HeuristicReformulator(shop_kb)
    history: list[LoopIteration] = []
    tried = {normalize_query(question)}
    for number in range(1, 7):
        out = reformulator.reformulate_with(strategy, question, history)
        fresh = [q for q in out.queries if normalize_query(q) not in tried]
        assert fresh, (strategy, out.queries)
        tried |= {normalize_query(q) for q in out.queries}
        chunks = shop_kb.search(out.queries[0], top_k=3)
        history.append(iteration(number, out.queries, chunks, "answer too generic"))
