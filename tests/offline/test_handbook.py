"""Seed 000's own example, offline: a six-file handbook whose returns page never says "refund",
"policy" or "international" (it says "send items back", "outside the country", "abroad").

The loops must find the 45-day rule for orders from abroad, converge on it, not take the
domestic 30-day rule for it, keep their rewritten queries on the question's topic, and say
plainly when the handbook does not answer.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ragloop import AgentLoop, KnowledgeBase, RAGLoop, StopReason
from ragloop.components.citations import UNSURE
from ragloop.core.text import content_stems
from ragloop.offline import OFFLINE_CONFIDENCE

HANDBOOK = Path(__file__).resolve().parents[1] / "fixtures" / "handbook"


@pytest.fixture(scope="module")
def handbook(tmp_path_factory):
    """The handbook with the default embedder, as a user would build it."""
    kb = KnowledgeBase(tmp_path_factory.mktemp("handbook") / "kb.sqlite")
    kb.ingest(HANDBOOK)
    yield kb
    kb.close()


def test_the_seeds_vocabulary_mismatch_reaches_the_right_document(handbook):
    """None of "refund", "policy", "international" is in the handbook: the loop finds the
    45-day rule for orders from abroad, reads the question's words in the handbook's, and
    converges on it (seed 000's own example): the judge compares the answer with the question
    read in the documents' words too ("... for abroad orders"), where the embedder sees that
    they say the same. It converges where the judge's score reaches 0.5 (the score itself);
    under the default target precision, 0.8, it is right but not sure (its chance is below)."""
    question = "What is the refund policy for international orders?"
    result = RAGLoop.offline(handbook, confidence_threshold=OFFLINE_CONFIDENCE).run(question)
    assert "45 days" in result.answer
    assert "30 days" not in result.answer
    assert "returns.md" in result.answer.split("Sources: ")[1]
    best = max(result.trace, key=lambda it: it.evaluation.score)
    assert "'refund' read as 'returned'" in best.evaluation.reason
    assert "'international' read as 'abroad'" in best.evaluation.reason
    assert result.stop_reason is StopReason.CONVERGED
    assert not result.answer.startswith(UNSURE)


def test_a_paraphrase_of_abroad_is_not_answered_with_the_domestic_rule(handbook):
    result = RAGLoop.offline(handbook).run(
        "How long do I have to return an item bought from abroad?"
    )
    assert result.stop_reason is StopReason.CONVERGED
    assert "45 days" in result.answer
    assert "30 days" not in result.answer


def test_rewritten_queries_stay_on_the_questions_topic(handbook):
    question = "What is the refund policy for international orders?"
    loop = RAGLoop.offline(handbook, confidence_threshold=1.0)  # every attempt, no convergence
    result = loop.run(question)
    asked = content_stems(question)
    for iteration in result.trace[1:]:
        for query in iteration.queries:
            assert content_stems(query) & asked, query


def test_what_the_handbook_does_not_cover_is_said_plainly(handbook):
    question = "Can I pay with bitcoin?"
    rag = RAGLoop.offline(handbook).run(question)
    assert rag.stop_reason is not StopReason.CONVERGED
    assert rag.answer.startswith(UNSURE) or rag.answer.startswith("The documents retrieved")
    agent = AgentLoop.offline(handbook).run(question)
    assert agent.stop_reason is StopReason.GAVE_UP
    assert agent.answer.startswith("Could not answer:")
