"""A question asking for a name is answered with the name, from the heading of the chunk that
documents it, then the sentence that says what it is for (components/heuristics/naming.py)."""

from __future__ import annotations

import pytest

from ragloop import Chunk, ExtractiveGenerator, HeuristicEvaluator
from ragloop.components.citations import answer_text
from ragloop.components.heuristics.extractive import shortened_signature
from ragloop.components.heuristics.judging import AnswerJudge
from ragloop.components.heuristics.naming import asks_for_name, signature_name, titled_name
from ragloop.components.heuristics.questions import gives_answer_type, profile

TIMEIT = Chunk(
    content="Source code: Lib/timeit.py\n\nThis module provides a simple way to time small bits "
    "of Python code. It has both a Command-Line Interface as well as a callable one. It avoids "
    "a number of common traps for measuring execution times.",
    source="library/timeit.html",
    score=0.9,
    metadata={
        "title": "timeit — Measure execution time of small code snippets",
        "heading_path": ["timeit — Measure execution time of small code snippets"],
    },
)
DEDENT = Chunk(
    content="Remove any common leading whitespace from every line in text.\n\nThis can be used "
    "to make triple-quoted strings line up with the left edge of the display, while still "
    "presenting them in the source code in indented form.",
    source="library/textwrap.html",
    score=0.8,
    metadata={
        "title": "textwrap — Text wrapping and filling",
        "heading_path": ["textwrap — Text wrapping and filling", "textwrap.dedent(text)"],
    },
)
RETURNS = Chunk(
    content="Returns — what to do\n\nYou can return unused items within 60 days of purchase "
    "with a receipt or order number.",
    source="policies/returns.md",
    score=0.9,
    metadata={"title": "Returns — Sending things back", "heading_path": []},
)

TIMEIT_QUESTION = "Which standard module should I use to time how long a small bit of code takes?"
DEDENT_QUESTION = "How do I make triple-quoted strings line up with the left edge?"


def first_sentence(answer: str) -> str:
    """What the answer says first, without the lead an unsure answer starts with."""
    return answer_text(answer.split(" [1]")[0])


def test_a_which_module_question_is_answered_with_the_module_name_then_what_it_is_for():
    out = ExtractiveGenerator().generate(TIMEIT_QUESTION, [TIMEIT])
    # the name from the page title, and the module's first descriptive sentence, not the
    # "Source code: Lib/timeit.py" line that opens the chunk
    assert first_sentence(out.answer) == (
        "`timeit`: This module provides a simple way to time small bits of Python code."
    )
    assert "Source code" not in out.answer
    assert "Sources: [1] library/timeit.html (timeit" in out.answer


def test_a_how_do_i_question_names_the_function_of_the_signature_heading():
    out = ExtractiveGenerator().generate(DEDENT_QUESTION, [DEDENT])
    assert first_sentence(out.answer) == (
        "`textwrap.dedent()`: This can be used to make triple-quoted strings line up with the "
        "left edge of the display, while still presenting them in the source code in indented "
        "form."
    )


@pytest.mark.parametrize(
    ("question", "chunk"), [(TIMEIT_QUESTION, TIMEIT), (DEDENT_QUESTION, DEDENT)]
)
def test_the_judge_takes_the_name_for_quoted_and_for_the_answer_asked_for(question, chunk):
    out = ExtractiveGenerator().generate(question, [chunk])
    asked = profile(question)
    found = AnswerJudge().analyse(asked, [chunk], out.answer)
    assert found.grounded_share == 1.0
    assert not found.unsupported
    assert found.type_found
    assert gives_answer_type("api", first_sentence(out.answer), question)
    verdict = HeuristicEvaluator().evaluate(question, [chunk], out.answer)
    assert verdict.is_grounded


def test_no_name_is_put_first_when_the_question_gives_it_already():
    question = "What does textwrap.dedent do to triple-quoted strings?"
    out = ExtractiveGenerator().generate(question, [DEDENT])
    assert not out.answer.startswith("`")


def test_a_how_question_takes_no_title_that_is_not_a_code_name_for_an_api():
    question = "How do I return unused items I bought?"
    out = ExtractiveGenerator().generate(question, [RETURNS])
    assert "`" not in out.answer
    assert "60 days" in out.answer


def test_a_two_part_question_is_answered_as_before():
    question = "Which module times small bits of code, and how long does it take?"
    assert asks_for_name(profile(question)) == ""


@pytest.mark.parametrize(
    ("heading", "name"),
    [
        ("textwrap.dedent(text)", "textwrap.dedent()"),
        (
            "class code.InteractiveConsole(locals=None, filename='<console>')",
            "code.InteractiveConsole",
        ),
        ("@functools.lru_cache(user_function)", "functools.lru_cache()"),
        ("exception json.JSONDecodeError(msg, doc, pos)", "json.JSONDecodeError"),
        ("pickle.DEFAULT_PROTOCOL", "pickle.DEFAULT_PROTOCOL"),
        ("Basic Examples", ""),
    ],
)
def test_signature_name(heading, name):
    assert signature_name(heading) == name


@pytest.mark.parametrize(
    ("heading", "name"),
    [
        ("timeit — Measure execution time of small code snippets", "timeit"),
        ("os.path — Common pathname manipulations", "os.path"),
        ("Counter objects", "Counter"),
        ("9. Classes", ""),
        ("Creating virtual environments", ""),
    ],
)
def test_titled_name(heading, name):
    assert titled_name(heading) == name


@pytest.mark.parametrize(
    ("question", "asked"),
    [
        ("Which standard module should I use to benchmark a piece of code?", "kind"),
        ("Is there a standard-library function that counts combinations?", "kind"),
        ("What's the standard-library way to tally words in a list?", "kind"),
        ("I want a cache that forgets entries. What should I use?", "kind"),
        ("Which setting turns off the output buffering?", "kind"),
        ("My string is indented. How do I strip the shared indentation?", "how"),
        ("Given a file name like report.pdf, how can I guess its content type?", "how"),
        ("Inside async code, how do I call a blocking function?", "how"),
        ("What is the default maxsize of functools.lru_cache?", ""),
        ("In which Python version was contextlib.chdir added?", ""),
        ("Where is the smallest element of a heap located?", ""),
    ],
)
def test_which_questions_ask_for_a_name(question, asked):
    assert asks_for_name(profile(question)) == asked


def test_a_source_file_is_not_the_api_a_question_asks_for():
    question = "Which module should I use to call a blocking function?"
    assert not gives_answer_type("api", "Source code: Lib/asyncio/events.py", question)
    assert gives_answer_type("api", "Use asyncio.to_thread() for it.", question)


def test_a_see_also_block_is_named_by_the_module_it_points_to_not_by_its_page():
    shlex = Chunk(
        content="See also\n\nModule configparser\n\nParser for configuration files similar to "
        "the Windows .ini files.",
        source="library/shlex.html",
        score=0.9,
        metadata={
            "title": "shlex — Simple lexical analysis",
            "heading_path": ["shlex — Simple lexical analysis"],
        },
    )
    question = "Which module reads configuration files similar to the Windows .ini files?"
    out = ExtractiveGenerator().generate(question, [shlex])
    assert "`shlex`" not in out.answer
    assert first_sentence(out.answer).startswith("`configparser`: Parser for configuration files")


SQLITE_CONNECT = Chunk(
    content="- check_same_thread (bool) – If True (default), ProgrammingError will be raised if "
    "the database connection is used by a thread other than the one that created it.",
    source="library/sqlite3.html",
    score=0.9,
    metadata={
        "title": "sqlite3 — DB-API 2.0 interface for SQLite databases",
        "heading_path": [
            "sqlite3 — DB-API 2.0 interface for SQLite databases",
            "sqlite3.connect(database, timeout=5.0, detect_types=0, isolation_level='DEFERRED', "
            "check_same_thread=True, factory=sqlite3.Connection, cached_statements=128)",
        ],
    },
)


def test_a_long_signature_is_quoted_with_the_parameters_the_question_names():
    # the default the first part asks for is in the signature, not in the sentence
    question = (
        "What is the default isolation_level of sqlite3.connect(), and which exception is "
        "raised if a connection is used from a thread other than the one that created it?"
    )
    out = ExtractiveGenerator().generate(question, [SQLITE_CONNECT])
    assert first_sentence(out.answer).startswith(
        "sqlite3.connect(..., isolation_level='DEFERRED', ...): - check_same_thread (bool)"
    )


OPEN = "open_url(url, headers=(('a', 'b'), ('c', 'd')), sep=',;', *, timeout=None)"


@pytest.mark.parametrize(
    ("signature", "named", "shown"),
    [
        (OPEN, "What is the default timeout of open_url?", "open_url(..., timeout=None)"),
        (OPEN, "Which sep does open_url use by default?", "open_url(..., sep=',;', ...)"),
        (
            "run(task, *callbacks, **options)",
            "What does run do with callbacks?",
            "run(..., *callbacks, ...)",
        ),
        (OPEN, "What does open_url return?", "open_url(...)"),
        # two signatures under one heading: only the first one's parameters
        ("f(size=1); g(size=2, mode='r')", "What is the default size of f?", "f(size=1)"),
    ],
)
def test_shortened_signature_keeps_named_parameters_whole(signature, named, shown):
    assert shortened_signature(signature, profile(named)) == shown
