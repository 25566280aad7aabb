"""Reading questions without a model: answer types, parts, focus; sentence units; stems."""

from __future__ import annotations

import pytest

from ragloop.components.questions import gives_answer_type, profile, question_parts
from ragloop.components.text import entity_phrases, sentence_units, split_sentences, stem


@pytest.mark.parametrize(
    ("question", "kind"),
    [
        ("How much does the Skylark 2 weigh?", "weight"),
        ("How heavy is the Bothy 4?", "weight"),
        ("What does it cost to hire a tent?", "amount"),
        ("How much is a gift card?", "number"),
        ("How long does standard delivery take?", "duration"),
        ("When was Fellside founded?", "date"),
        ("What time does the Edinburgh store open?", "time"),
        ("Who manages the Keswick store?", "person"),
        ("Where is the Repair Workshop?", "place"),
        ("Why can gas canisters not be posted?", "reason"),
        ("Do you rent out stoves?", "yesno"),
        ("What is the Fellside Circle?", None),
    ],
)
def test_answer_types(question, kind):
    assert profile(question).answer_type == kind


def test_cue_words_are_not_content_terms_and_the_focus_is_the_thing_asked_for():
    asked = profile("How long is the warranty on the Skylark 2?")
    assert "long" not in asked.terms
    assert asked.entities == ["Skylark 2"]
    assert profile("What is the warranty on the tent?").focus == ("warranty",)
    assert profile("What does it cost?").focus == ()


def test_multi_part_questions_split_at_clause_boundaries():
    assert question_parts(
        "How long do I have to return an item, and how long does delivery take?"
    ) == [
        "How long do I have to return an item",
        "how long does delivery take?",
    ]
    assert question_parts("Is it waterproof? What does it weigh?") == [
        "Is it waterproof",
        "What does it weigh?",
    ]
    assert question_parts("What do tents and stoves cost?") == ["What do tents and stoves cost?"]


@pytest.mark.parametrize(
    ("kind", "sentence", "expected"),
    [
        ("duration", "You can return unused items within 60 days of purchase.", True),
        ("duration", "Rucksacks and daypacks: lifetime.", True),
        ("duration", "Bring the item to any store.", False),
        ("amount", "A tent costs £12 a night to hire.", True),
        ("amount", "Delivery is free on orders over fifty pounds.", True),
        ("weight", "It weighs 1.6 kg with pegs and poles.", True),
        ("weight", "It packs down to 45 by 15 cm.", False),
        ("date", "Fellside was founded in 1987.", True),
        ("time", "It is open 9am to 6pm.", True),
        ("reason", "They are dangerous goods, so we cannot post them.", True),
    ],
)
def test_sentences_give_answer_types(kind, sentence, expected):
    assert gives_answer_type(kind, sentence) is expected


def test_a_person_answer_is_a_name_the_question_does_not_contain():
    question = "Who manages the Keswick store?"
    assert gives_answer_type("person", "The store manager is Priya Shah.", question)
    assert not gives_answer_type("person", "Keswick is our first store.", question)


def test_names_keep_their_numbers_and_prices_do_not_end_sentences():
    assert entity_phrases("Priya takes the Skylark 2 on trips.") == ["Priya", "Skylark 2"]
    text = "Below that it costs £4.95. Next-day delivery costs £7.95."
    assert split_sentences(text) == ["Below that it costs £4.95.", "Next-day delivery costs £7.95."]


def test_sentence_units_keep_list_items_apart():
    text = "How long:\n\n- tents: 3 years;\n- boots: 1 year.\n\nWear is not covered."
    assert sentence_units(text) == [
        "How long:",
        "tents: 3 years;",
        "boots: 1 year.",
        "Wear is not covered.",
    ]
    assert stem("weighs") == stem("weigh")
