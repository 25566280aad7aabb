"""The judge credits what an answer says about the question, not words an unrelated sentence
repeats from it (padding)."""

from __future__ import annotations

from ragloop import Chunk
from ragloop.components.heuristics.judging import AnswerJudge, on_topic
from ragloop.components.heuristics.questions import profile


def chunk(content: str, source: str, title: str, heading: str = "") -> Chunk:
    path = [title, heading] if heading else [title]
    return Chunk(
        content=content, source=source, score=0.5, metadata={"title": title, "heading_path": path}
    )


BISECT = chunk(
    "Changed in version 3.10: Added the key parameter.",
    "library/bisect.html",
    "bisect — Array bisection algorithm",
    "bisect.bisect_right(a, x, lo=0, hi=len(a), *, key=None)",
)
HEAPQ = chunk(
    "The heapq module provides functions for implementing heaps based on regular lists.",
    "tutorial/stdlib2.html",
    "Brief Tour of the Standard Library — Part II",
)
QUESTION = "In which Python version was the key parameter added to the bisect module's functions?"


def coverage(question: str, chunks: list[Chunk], answer: str) -> float:
    return AnswerJudge().analyse(profile(question), chunks, answer).answer_coverage


def test_a_sentence_from_another_document_that_only_repeats_question_words_adds_nothing():
    right = "Changed in version 3.10: Added the key parameter."
    padded = f"{right} {HEAPQ.content}"
    alone = coverage(QUESTION, [BISECT, HEAPQ], right)
    assert coverage(QUESTION, [BISECT, HEAPQ], padded) == alone
    # ... whereas the same words from the answer's own document count
    same_page = chunk(HEAPQ.content, BISECT.source, BISECT.metadata["title"])
    assert coverage(QUESTION, [BISECT, same_page], padded) > alone


def test_a_claim_naming_the_question_s_name_or_from_the_document_the_answer_names_counts():
    actress = chunk(
        "She is the voice of Lara Croft in the video game Tomb Raider.",
        "p1",
        "Alice David",
    )
    game = chunk(
        "Tomb Raider is an action-adventure game developed by Core Design.", "p2", "Tomb Raider"
    )
    elsewhere = chunk("Core Design was a video game developer in Derby.", "p3", "Derby")
    asked = profile(
        "Alice David is the voice of Lara Croft in a video game developed by which company?"
    )
    units = [(c.content, c) for c in (actress, game, elsewhere)]
    kept = on_topic(asked, units, [])
    # the second hop: a claim under the title of a name the first claim brings in
    assert [c.source for _, c in kept] == ["p1", "p2"]
    named = chunk("Lara Croft was created by Toby Gard.", "p4", "Characters")
    assert on_topic(asked, [units[0], (named.content, named)], []) == [
        units[0],
        (named.content, named),
    ]
    # a name counts as written: "python" in a list of strings is not the Python of the question
    lowercase = chunk("scores = [(100, 'perl'), (500, 'python')]", "p5", "Lists")
    bisect_unit = (BISECT.content, BISECT)
    assert on_topic(profile(QUESTION), [bisect_unit, (lowercase.content, lowercase)], []) == [
        bisect_unit
    ]
