"""Reading questions without a model: answer types, parts, focus; sentence units; stems."""

from __future__ import annotations

import pytest

from ragloop.components.heuristics.extractive import SentenceScorer, code_name_found
from ragloop.components.heuristics.questions import gives_answer_type, profile, question_parts
from ragloop.core.text import (
    code_names,
    content_stems,
    entity_phrases,
    loose_stems,
    passage_units,
    says_word,
    sentence_units,
    split_sentences,
    stem,
)


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
        ("What exception does json.loads raise on invalid input?", "exception"),
        ("Which error is raised when the recursion limit is exceeded?", "exception"),
        ("In which Python version was contextlib.chdir added?", "version"),
        ("When was the walrus operator introduced?", "version"),
        ("What is the default relative tolerance of math.isclose?", "default"),
        ("How many times is a default argument evaluated?", "number"),
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


def test_a_later_part_may_open_with_a_phrase_before_its_question_word():
    assert question_parts(
        "What does json.dump do with non-ASCII text, and by default, what does pickle use?"
    ) == ["What does json.dump do with non-ASCII text", "by default, what does pickle use?"]
    assert question_parts("Which tent is lightest, and in which shop are stoves hired?") == [
        "Which tent is lightest",
        "in which shop are stoves hired?",
    ]
    # a relative clause is not a question of its own
    assert question_parts("Which audio engineer and chemist, who lived in Oakland, did it?") == [
        "Which audio engineer and chemist, who lived in Oakland, did it?"
    ]


def test_it_stands_for_the_nearest_part_before_it_that_names_something():
    assert (
        question_parts(
            "What is the default maxsize of functools.lru_cache, and what kind of UUID does "
            "uuid.uuid7() generate, and how is its timestamp encoded?"
        )[2]
        == "how is its timestamp encoded (uuid.uuid7)"
    )
    # a part that says "it" passes its names on; "PEP" is asked for, not named
    assert question_parts(
        "When was typing.Self added, and which PEP describes it, and what does it return?"
    )[1:] == ["which PEP describes it (typing.Self)", "what does it return (typing.Self)"]


def test_a_later_part_that_says_it_is_read_with_the_first_parts_names():
    """ "which PEP describes it" asks about typing.Self, not about any PEP."""
    assert question_parts("When was typing.Self added, and which PEP describes it?") == [
        "When was typing.Self added",
        "which PEP describes it (typing.Self)",
    ]
    assert question_parts("Who founded Fellside Outdoors, and when did they open a shop?") == [
        "Who founded Fellside Outdoors",
        "when did they open a shop (Fellside Outdoors)",
    ]
    # no names: the first part's subject, not the names of its question words
    assert (
        question_parts(
            "In which Python version were assignment expressions (the := operator) added, "
            "and which PEP specifies them?"
        )[1]
        == "which PEP specifies them (assignment expressions)"
    )
    assert question_parts("What does the json module do, and is it thread-safe?")[1] == (
        "is it thread-safe (json module)"
    )
    # the first part asks for its subject: a later "it" is that answer
    assert (
        question_parts(
            "What exception is raised when you call next() on a finished generator object, "
            "and which built-in class is it derived from?"
        )[1]
        == "which built-in class is it derived from?"
    )
    # a part that names its own subject, or says no "it", is left as it is
    assert question_parts("When was typing.Self added, and what does it say of typing.Self?")[
        1
    ] == ("what does it say of typing.Self?")
    assert question_parts("When was typing.Self added, and which PEP added TypeAlias?")[1] == (
        "which PEP added TypeAlias?"
    )


@pytest.mark.parametrize(
    ("kind", "sentence", "expected"),
    [
        ("duration", "You can return unused items within 60 days of purchase.", True),
        ("duration", "Rucksacks and daypacks: lifetime.", True),
        ("duration", "The kettle boils water in ninety seconds.", True),
        ("number", "The shop stocks seventeen tents.", True),
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


@pytest.mark.parametrize(
    ("kind", "sentence", "question", "expected"),
    [
        (
            "exception",
            "It raises JSONDecodeError on invalid input.",
            "What does json.loads raise?",
            True,
        ),
        (
            "exception",
            "BaseException is the base class of all exceptions.",
            "What exception does BaseException.add_note raise?",
            False,
        ),
        ("version", "New in version 3.11.", "When was contextlib.chdir added?", True),
        ("version", "Changed in version 3.11: it is 3.11.", "In Python 3.11, what changed?", False),
        ("default", "The default tolerance is 1e-09.", "What is the default rel_tol?", True),
        ("default", "maxsize=128", "What is the default maxsize?", True),
        ("default", "It sets the tolerance.", "What is the default rel_tol?", False),
    ],
)
def test_technical_answer_types(kind, sentence, question, expected):
    assert gives_answer_type(kind, sentence, question) is expected


def test_code_names_are_found_whole():
    question = "What happens when functools.lru_cache is given maxsize=None, or `typed=True`?"
    assert code_names(question) == ["functools.lru_cache", "maxsize=None", "typed=True"]
    assert code_names("Use --system-site-packages with ThreadPoolExecutor or os.cpu_count().") == [
        "--system-site-packages",
        "ThreadPoolExecutor",
        "os.cpu_count",
    ]
    assert profile("What does zip() do with strict=True?").identifiers == ("zip", "strict=True")
    assert code_names("How do I sort a list?") == []


def test_a_dotted_name_is_found_by_its_last_part_under_no_other_qualifier():
    def found(name: str, where: str) -> float:
        return code_name_found(name, where, content_stems(where))

    assert found("os.cpu_count", "os.cpu_count(): Return the number of CPUs.") == 1.0
    assert found("os.cpu_count", "cpu_count(): Return the number of CPUs.") == 1.0
    assert found("pathlib.Path.mkdir", "Path.mkdir(mode=0o777): Create a new directory.") == 1.0
    # another module's function of the same name is another function
    assert found("os.cpu_count", "multiprocessing.cpu_count(): Return the number.") < 1.0
    assert found("typing.Self", "def f(self): return self") == 0.0


def test_a_negated_term_is_said_by_its_negative_prefix():
    asked = profile("What does os.cpu_count() return when the number cannot be determined?")
    assert asked.negated == ("determined",)
    assert profile("Which codecs aren't supported, and what isn't set?").negated == (
        "supported",
        "set",
    )
    scorer = SentenceScorer.build(asked, [])
    assert stem("determined") in scorer.as_written(frozenset(), "Returns None if undetermined.")
    # only where the question negates it: "determined" alone is not "undetermined"
    plain = SentenceScorer.build(profile("How is the number of CPUs determined?"), [])
    assert stem("determined") not in plain.as_written(frozenset(), "None if undetermined.")


def test_a_word_as_written():
    """A code word keeps its letters and, when it has a capital, its case."""
    assert says_word("from typing import Self", "typing")
    assert not says_word("type(obj) is the type", "typing")  # not by its stem
    assert says_word("from typing import Self", "Self")
    assert not says_word("def f(self): return self", "Self")
    assert says_word("Typing is optional", "typing")  # a lower-case word in any case
    assert not says_word("selfish threads", "self")  # a word, not part of one
    assert says_word("lru_cache(maxsize=None)", "lru")  # the words of a compound name


def test_a_word_inside_a_longer_code_name_is_not_the_word():
    assert loose_stems("ZipFile(file, strict_timestamps=True)") == {stem("strict"), "timestamp"}
    assert loose_stems("If strict is true, strict_timestamps is ignored.") == {"timestamp"}


def test_passage_units_read_tables_by_row_and_keep_code_whole():
    text = (
        "# Levels\n\nThe numeric values are given in the table.\n\n"
        "Level | Numeric value\n--- | ---\nERROR | 40\nWARNING | 30\n\n"
        "run() | Run a coroutine.\nsleep() | Sleep for a while.\n\n"
        ">>> -3**2\n-9\n>>> (-3)**2\n9\n\n"
        "@lru_cache\ndef count(s):\n    return len(s)\n\n"
        "```\n# a comment, not a heading\nx = 1\n```\n\nDone¶."
    )
    units = [(u.kind, u.text, u.heading) for u in passage_units(text)]
    assert units == [
        ("prose", "The numeric values are given in the table.", "Levels"),
        ("row", "Level: ERROR; Numeric value: 40", "Levels"),
        ("row", "Level: WARNING; Numeric value: 30", "Levels"),
        # no rule under the first row: no header, every row is read as itself
        ("row", "run(); Run a coroutine.", "Levels"),
        ("row", "sleep(); Sleep for a while.", "Levels"),
        ("code", ">>> -3**2\n-9", "Levels"),
        ("code", ">>> (-3)**2\n9", "Levels"),
        ("code", "@lru_cache\ndef count(s):\n    return len(s)", "Levels"),
        ("code", "# a comment, not a heading\nx = 1", "Levels"),
        ("prose", "Done.", "Levels"),
    ]
