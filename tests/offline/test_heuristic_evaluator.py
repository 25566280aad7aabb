"""HeuristicEvaluator: verdicts, scores, and reasons that steer the strategy picker."""

from __future__ import annotations

import pytest

from ragloop import (
    Chunk,
    Document,
    ExtractiveGenerator,
    HeuristicEvaluator,
    KnowledgeBase,
    ReformulationStrategy,
)
from ragloop.components.heuristics.judging import answer_probability
from ragloop.components.heuristics.questions import profile
from ragloop.components.reformulators import select_strategy
from ragloop.offline import OFFLINE_CONFIDENCE


def chunk(text, source="doc.md", score=0.8, title=None):
    return Chunk(content=text, source=source, score=score, metadata={"title": title or source})


def judge(evaluator, question, chunks, answer=None):
    if answer is None:
        answer = ExtractiveGenerator(corpus=evaluator.corpus).generate(question, chunks).answer
    return evaluator.evaluate(question, chunks, answer)


def test_a_grounded_complete_answer_scores_above_the_offline_threshold():
    chunks = [chunk("The Skylark 2 weighs 1.6 kg with pegs and poles.", title="Skylark 2")]
    verdict = judge(HeuristicEvaluator(), "How much does the Skylark 2 weigh?", chunks)
    assert verdict.is_grounded
    assert verdict.is_complete
    assert verdict.score >= OFFLINE_CONFIDENCE
    assert verdict.reason.startswith("grounded and complete")


def test_the_score_is_the_judges_calibrated_chance():
    """The score is the logistic model of components/heuristics/judging.py over the analysis'
    features, and an answer that misses the question's names or words scores lower."""
    evaluator = HeuristicEvaluator()
    question = "How much does the Skylark 2 weigh?"
    right = [chunk("The Skylark 2 weighs 1.6 kg with pegs and poles.", title="Skylark 2")]
    verdict, found = evaluator.judge(question, right, "The Skylark 2 weighs 1.6 kg. [1]")
    assert verdict.score == round(answer_probability(profile(question), found), 4)
    other = [chunk("The Bothy 4 weighs 7.9 kg.", title="Bothy 4")]
    wrong = evaluator.evaluate(question, other, "The Bothy 4 weighs 7.9 kg. [1]")
    assert wrong.score < verdict.score - 0.2


def test_no_chunks_means_nothing_found_which_asks_for_other_words():
    verdict = HeuristicEvaluator().evaluate("Do you rent out stoves?", [], "")
    assert (verdict.score, verdict.is_grounded, verdict.is_complete) == (0.0, False, False)
    assert verdict.reason.startswith("nothing found")
    assert select_strategy(verdict.reason) is ReformulationStrategy.PERSPECTIVE_SHIFT


def test_a_word_the_documents_never_use_asks_for_their_vocabulary(shop_kb_dense):
    evaluator = HeuristicEvaluator(corpus=shop_kb_dense)
    stoves = [chunk("Never cook inside a tent: a stove can set it alight.", title="Stove Safety")]
    verdict = judge(evaluator, "Do you rent out stoves?", stoves)
    assert verdict.reason.startswith("no chunk mentions 'rent'")
    assert select_strategy(verdict.reason) is ReformulationStrategy.PERSPECTIVE_SHIFT
    assert not verdict.is_complete
    assert verdict.score < 0.8
    hire = [chunk("Tents and stoves can all be hired from our stores.", title="Gear Library")]
    read_as_hire = judge(evaluator, "Do you rent out stoves?", hire)
    assert read_as_hire.is_complete
    assert read_as_hire.score > verdict.score
    assert "'rent' read as 'hire'" in read_as_hire.reason


def test_an_unanswered_part_asks_for_decomposition():
    chunks = [chunk("You can return unused items within 60 days.", title="Returns")]
    verdict = judge(
        HeuristicEvaluator(),
        "How long do I have to return an item, and how long does standard delivery take?",
        chunks,
    )
    assert verdict.reason == (
        "multi-part question: second part 'how long does standard delivery take' not covered"
    )
    assert select_strategy(verdict.reason) is ReformulationStrategy.DECOMPOSE
    assert verdict.score < 0.8


def test_an_answer_that_points_to_an_unread_document_is_a_missing_hop(shop_kb):
    question = "What is the warranty on the tent Priya Shah takes wild camping?"
    chunks = [
        c
        for c in shop_kb.search(question, top_k=8)
        if c.source in ("staff/staff-picks.md", "products/skylark-2.md")
    ]
    verdict = judge(HeuristicEvaluator(corpus=shop_kb), question, chunks)
    assert verdict.reason.startswith(
        "missing second hop: the answer points to 'Fellside Guarantee'"
    )
    assert select_strategy(verdict.reason) is ReformulationStrategy.DECOMPOSE
    assert not verdict.is_complete


def test_an_unsupported_sentence_makes_the_answer_ungrounded_and_asks_to_narrow():
    chunks = [chunk("The Skylark 2 weighs 1.6 kg.", title="Skylark 2")]
    answer = "The Skylark 2 weighs 1.6 kg. It was designed by astronauts on the moon."
    verdict = judge(HeuristicEvaluator(), "How much does the Skylark 2 weigh?", chunks, answer)
    assert not verdict.is_grounded
    assert verdict.reason.startswith("partial support: 'It was designed by astronauts")
    assert select_strategy(verdict.reason) is ReformulationStrategy.NARROW


def test_an_answer_without_the_kind_of_answer_asked_for_is_incomplete():
    chunks = [chunk("The Skylark 2 weighs little and has two doors.", title="Skylark 2")]
    verdict = judge(HeuristicEvaluator(), "How much does the Skylark 2 weigh?", chunks)
    assert verdict.reason == "incomplete: no sentence gives the weight the question asks for"
    assert select_strategy(verdict.reason) is ReformulationStrategy.NARROW


@pytest.mark.parametrize(
    ("answer", "expected"),
    [
        ("", "no relevant sentence"),
        ("The documents retrieved do not answer this question.", "no relevant"),
    ],
)
def test_no_answer_scores_low(answer, expected):
    chunks = [chunk("The Skylark 2 weighs 1.6 kg.", title="Skylark 2")]
    verdict = HeuristicEvaluator().evaluate("How much does the Skylark 2 weigh?", chunks, answer)
    assert verdict.reason.startswith(expected)
    assert verdict.score < 0.5
    assert not verdict.is_grounded
    assert select_strategy(verdict.reason) is ReformulationStrategy.STEP_BACK


def test_a_part_whose_code_name_the_answer_lacks_is_not_covered():
    """Another argument of the same function does not answer "the default isolation_level"."""
    question = (
        "What is the default isolation_level of sqlite3.connect(), and which exception is raised "
        "if a connection is used from another thread?"
    )
    chunks = [
        chunk(
            "If check_same_thread is True (the default), ProgrammingError will be raised if the "
            "connection is used by a thread other than the one that created it.",
            title="sqlite3.connect(database, timeout=5.0)",
        )
    ]
    verdict = judge(HeuristicEvaluator(), question, chunks)
    assert verdict.reason.startswith("multi-part question: first part")
    assert verdict.score <= 0.4


def test_a_part_is_answered_by_one_claim_not_by_words_gathered_from_several():
    """A version said about classmethod and a PEP said about typing.Self do not say when
    typing.Self was added: each part needs one claim that answers it (pydocs, issue 32)."""
    question = "In which Python version was typing.Self added, and which PEP describes it?"
    chunks = [
        Chunk(
            content="The code path for hasattr(type(self.f), '__get__') was added in Python 3.9.",
            source="howto/descriptor.html",
            score=0.8,
            metadata={"title": "Descriptor HowTo Guide", "heading_path": ["Class methods"]},
        ),
        Chunk(
            content="See PEP 673 for more details.",
            source="library/typing.html",
            score=0.7,
            metadata={"title": "typing", "heading_path": ["typing.Self"]},
        ),
    ]
    answer = (
        "The code path for hasattr(type(self.f), '__get__') was added in Python 3.9. [1] "
        "See PEP 673 for more details. [2]"
    )
    verdict = judge(HeuristicEvaluator(), question, chunks, answer)
    assert verdict.reason.startswith("multi-part question: first part"), verdict.reason
    assert verdict.score <= 0.4
    # the same facts said by the claims they belong to answer both parts
    chunks[1] = chunks[1].model_copy(
        update={"content": "New in version 3.11. See PEP 673 for more details."}
    )
    answer = "New in version 3.11. See PEP 673 for more details. [2]"
    verdict = judge(HeuristicEvaluator(), question, chunks, answer)
    assert not verdict.reason.startswith("multi-part question"), verdict.reason


def test_a_name_no_document_mentions_caps_the_score():
    """The documents never mention Gunicorn: a number about other workers answers something
    else, however well it matches the rest of the question."""
    kb = KnowledgeBase.in_memory()
    kb.add_documents(
        [
            Document(
                text="A process pool starts os.cpu_count() worker processes by default.",
                source="pool.md",
                title="Process pools",
            ),
            Document(
                text="A thread pool starts at most 32 worker threads.",
                source="threads.md",
                title="Thread pools",
            ),
        ]
    )
    question = "How many worker processes does Gunicorn start by default?"
    chunks = kb.search(question, top_k=2)
    verdict = judge(HeuristicEvaluator(corpus=kb), question, chunks)
    assert "gunicorn" in verdict.reason
    assert verdict.score <= 0.4
    kb.close()
