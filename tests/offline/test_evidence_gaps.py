"""The evidence-gap report of the offline loops over the demo shop: a question whose first part
the documents answer and whose second they do not is reported part by part, and a target
precision the judge cannot reach turns a right answer into a best attempt with its evidence."""

from __future__ import annotations

import pytest

from ragloop import AgentLoop, KnowledgeBase, RAGLoop, StopReason
from ragloop.demo import demo_documents
from ragloop.offline import answered_retrieval_loop

HALF_ANSWERED = "How long do I have to return an item, and how much does a helicopter rescue cost?"
ANSWERED = "How long do I have to return an item, and how long does standard delivery take?"


@pytest.fixture(scope="module")
def shop():
    """The demo shop with the default embedder, as `ragloop ask --demo` builds it."""
    kb = KnowledgeBase.in_memory()
    kb.add_documents(demo_documents())
    return kb


ENGINES = {
    "rag": RAGLoop.offline,
    "agent": AgentLoop.offline,
    "retrieval": answered_retrieval_loop,
}


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_the_part_found_and_the_part_not_found_are_named(shop, engine):
    result = ENGINES[engine](shop).run(HALF_ANSWERED)
    assert not result.confident
    gaps = result.gaps
    assert gaps is not None
    found, missing = gaps.parts
    assert found.found
    assert found.part == "How long do I have to return an item"
    assert found.source == "policies/returns.md"
    assert found.quote
    assert "60 days" in found.quote
    assert not missing.found
    assert "helicopter" in missing.part
    assert "helicopter" in gaps.missing_terms
    assert gaps.searches[0] == HALF_ANSWERED  # the searches, in the order they ran
    assert gaps.nearest
    assert gaps.nearest[0].score >= gaps.nearest[-1].score
    line = gaps.line()
    assert line.startswith("Found: 'How long do I have to return an item' (in policies/returns.md)")
    assert "not found: 'how much does a helicopter rescue cost'" in line


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_a_confident_complete_answer_carries_no_report(shop, engine):
    result = ENGINES[engine](shop).run(ANSWERED)
    assert result.confident
    assert result.gaps is None
    assert result.probability is not None
    assert result.probability >= 0.5


def test_a_target_the_judge_cannot_reach_leaves_a_best_attempt_with_its_evidence(shop):
    """The same right answer, asked for at 0.95: the loop tries its attempts, returns the best
    one not confident, and the report says both parts were found, and where."""
    result = RAGLoop.offline(shop, target_precision=0.95).run(ANSWERED)
    assert result.stop_reason is StopReason.MAX_ITERATIONS
    assert "60 days" in result.answer
    assert "3 to 5 working days" in result.answer
    gaps = result.gaps
    assert gaps is not None
    assert gaps.target == 0.95
    assert gaps.probability is not None
    assert gaps.probability < 0.95
    assert [(p.found, p.source) for p in gaps.parts] == [
        (True, "policies/returns.md"),
        (True, "policies/delivery.md"),
    ]


def test_the_offline_agent_answers_at_the_target_it_is_given(shop):
    """The offline controller answers only when the judge's chance reaches the target."""
    assert AgentLoop.offline(shop).run(ANSWERED).stop_reason is StopReason.ANSWERED
    strict = AgentLoop.offline(shop, target_precision=0.95).run(ANSWERED)
    assert strict.stop_reason is StopReason.GAVE_UP
    assert strict.gaps is not None
    assert strict.target_precision == 0.95


def test_a_part_with_a_word_no_document_uses_is_not_found(shop):
    """Half a part's words in an answer's claim do not answer it when the rest are names no
    document uses: "bitcoin wallet" is not covered by a sentence about how to pay."""
    question = "How long do I have to return an item, and which bitcoin wallet do you accept?"
    gaps = RAGLoop.offline(shop).run(question).gaps
    assert gaps is not None
    assert [p.found for p in gaps.parts] == [True, False]
    assert "bitcoin" in gaps.missing_terms


@pytest.mark.parametrize(
    "other",
    ["what does a helicopter cost", "is there free parking for cars at the shop"],
)
def test_a_part_about_what_no_document_mentions_is_not_found_in_a_sentence_that_shares_a_word(
    shop, other
):
    from ragloop import HeuristicEvaluator

    question = f"How much does the Skylark 2 weigh, and {other}?"
    answer = "It weighs 1.6 kg with pegs and poles. [1] The Skylark 2 costs £329. [2]"
    chunks = shop.search(question, top_k=5)
    weight, price = HeuristicEvaluator(corpus=shop).evidence_gaps(question, chunks, answer).parts
    assert weight.found
    assert weight.source == "products/skylark-2.md"
    assert not price.found  # "costs £329" is the tent's price, not what was asked


def test_closest_passages_are_sentences_best_first_with_their_sections(shop):
    from ragloop import HeuristicEvaluator

    question = "How heavy is the Skylark 2 tent?"
    closest = HeuristicEvaluator(corpus=shop).closest(question, shop.search(question, top_k=5))
    assert closest
    assert len(closest) <= 3
    assert [m.score for m in closest] == sorted((m.score for m in closest), reverse=True)
    assert "1.6 kg" in closest[0].text
    assert closest[0].source == "products/skylark-2.md"
    assert closest[0].heading == "Skylark 2"
    assert len({m.chunk_id for m in closest}) == len(closest)
