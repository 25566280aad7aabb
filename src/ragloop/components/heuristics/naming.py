"""Answering a question that asks for a name: which module, function, class, option ...

Documentation names what it documents in its headings: an API's section is headed by its
signature (``textwrap.dedent(text)``), a module's page by "name — what it is" (``timeit —
Measure execution time of small code snippets``), and the first sentence under it says what the
thing is for. So when a question asks for an API by what it does ("Is there a module for
measuring how long code runs?"), the extractive answer leads with the name the chosen passage's
headings give, then the sentence of that passage that says what it is for:

    `timeit`: This module provides a simple way to time small bits of Python code. [1]

The name is written in backticks, as code; it is quoted from the chunk's headings, which the
grounder and the judge read with the chunk
(:func:`~ragloop.components.heuristics.corpus.chunk_text`).
"""

from __future__ import annotations

import re

from ragloop.components.heuristics.extractive import Sentence, is_signature
from ragloop.components.heuristics.questions import NAMES_KIND, QuestionProfile, gives_answer_type
from ragloop.core.records import Chunk
from ragloop.core.text import code_names, tokenize

# "timeit — Measure execution time of small code snippets": a page or section named for a module
_TITLED_NAME = re.compile(r"^\s*(?:\d+(?:\.\d+)*\.?\s+)?([A-Za-z_][\w.]*)\s+[—–]\s+\S")
# "Counter objects", "Lock Objects": a section named for a class
_OBJECTS_NAME = re.compile(r"^\s*(?:\d+(?:\.\d+)*\.?\s+)?([A-Za-z_][\w.]*)\s+objects?\s*$", re.I)
# A signature's leading words that are not part of the name
_SIGNATURE_WORDS = re.compile(
    r"^(?:(?:class|exception|async|await|abstractmethod|classmethod|staticmethod|"
    r"coroutine|awaitable|method|function|attribute|data)\s+)+"
)
# Sentences that say nothing of what a thing is for: where its code is, when it changed
_BOILERPLATE = re.compile(
    r"^\s*(?:source code:|new in version|changed in version|deprecated since|"
    r"removed in version|see also\b|availability:|note\b|warning\b|example\b|for example:)",
    re.IGNORECASE,
)


def asks_for_name(question: QuestionProfile) -> str:
    """Whether the answer should lead with an API's name: ``"kind"`` when a one-part question
    of answer type ``api`` (:mod:`ragloop.components.heuristics.questions`) names the kind of
    thing it wants ("Which module ...?", "Is there a function that ...?"), ``"how"`` when it only
    asks how to do something ("How do I wrap a long paragraph ...?": then only a code name
    in the headings is taken for the answer, not any title), else ``""``."""
    if question.answer_type != "api" or question.is_multi_part:
        return ""
    return "kind" if NAMES_KIND.search(question.text) else "how"


def signature_name(heading: str) -> str:
    """The name a signature heading documents: ``textwrap.dedent(text)`` ->
    ``textwrap.dedent()``, ``class code.InteractiveConsole(locals=None)`` ->
    ``code.InteractiveConsole``, ``@functools.cache(user_function)`` -> ``functools.cache()``,
    ``pickle.DEFAULT_PROTOCOL`` as it is; "" when the heading is not a signature."""
    heading = heading.replace("¶", "").strip()
    if not is_signature(heading):
        return ""
    words = _SIGNATURE_WORDS.match(heading)
    kind = words[0].split()[0] if words else ""
    rest = heading[words.end() :] if words else heading
    first = re.split(r"\s*[;,]\s*(?=@?[A-Za-z_][\w.]*\s*\()", rest)[0]  # "a(x); b(y)": the first
    name = re.match(r"@?([A-Za-z_][\w.]*)", first)
    if name is None:
        return ""
    callable_ = "(" in first and kind not in ("class", "exception")
    return f"{name[1]}()" if callable_ else name[1]


def titled_name(heading: str) -> str:
    """The name a "name — what it is" heading or title gives (``timeit``), or a heading
    "name objects" (``Counter``), else ""."""
    heading = heading.replace("¶", "")
    found = _TITLED_NAME.match(heading) or _OBJECTS_NAME.match(heading)
    return found[1] if found else ""


_SEE_ALSO = re.compile(r"^\s*see also:?\s*$", re.IGNORECASE)
_MODULE_LINE = re.compile(r"^\s*Module\s+([A-Za-z_][\w.]*)\s*$")


def see_also_name(sentence: Sentence, chunk: Chunk) -> str | None:
    """None when the sentence is not in a "See also" block of its chunk; else the name the
    block points to ("See also / Module configparser / Parser for configuration files ..."
    describes configparser, not the page it is on), or "" when the block names no module."""
    paragraphs = [" ".join(p.split()) for p in re.split(r"\n\s*\n", chunk.content)]
    start = " ".join(sentence.text.split())[:60]
    at = next((i for i, p in enumerate(paragraphs) if start in p), None)
    if at is None or not any(_SEE_ALSO.match(p) for p in paragraphs[max(at - 3, 0) : at]):
        return None
    module = _MODULE_LINE.match(paragraphs[at - 1]) if at else None
    return module[1] if module else ""


def api_name(sentence: Sentence, chunk: Chunk, *, code_only: bool = False) -> str:
    """The name of the API the passage of ``sentence`` documents, from its headings: the most
    specific signature among the heading it sits under and its chunk's heading path, else the
    most specific "name — what it is" or "name objects" heading or title; "" when the headings
    name no API. A sentence of a "See also" block is named by the module the block points to
    (:func:`see_also_name`). ``code_only``: a titled name counts only when it is written as
    code would be (``timeit``, ``os.path``: lower case, no spaces), not "Fellside — Our
    story"."""
    pointed = see_also_name(sentence, chunk)
    if pointed is not None:  # a "See also" block describes what it points to
        return pointed
    path = [str(h) for h in chunk.metadata.get("heading_path") or []]
    headings = [h for h in [sentence.heading, *reversed(path)] if h]
    for heading in headings:
        if name := signature_name(heading):
            return name
    for heading in [*headings, sentence.title]:
        name = titled_name(heading)
        if name and (not code_only or name == name.lower() or code_names(name)):
            return name
    return ""


def in_question(name: str, question: QuestionProfile) -> bool:
    """Whether the question already gives the name (then it is not what it asks for)."""
    bare = name.removesuffix("()")
    asked = {n.lower() for n in code_names(question.text)} | set(tokenize(question.text))
    tail = bare.rsplit(".", 1)[-1]
    return bare.lower() in asked or tail.lower() in asked


def is_descriptive(sentence: Sentence) -> bool:
    """A prose sentence that can say what a thing is for: not boilerplate ("Source code:
    Lib/timeit.py", "New in version 3.3."), not the lead-in to an example ("...as follows:")."""
    text = sentence.text.strip()
    return (
        sentence.kind == "prose"
        and not _BOILERPLATE.match(text)
        and not text.endswith(":")
        and len(tokenize(text)) >= 4
    )


def describing(best: Sentence, sentences: list[Sentence], question: QuestionProfile) -> Sentence:
    """The unit to quote after the name: ``best`` when it is descriptive prose, or a piece of
    code or a table row that names an API the question does not (``zip_longest()`` in a row
    of the itertools table); else the first descriptive sentence of its chunk under the same
    heading (the one that says what the API is for), else the first of its chunk, else
    ``best``."""
    if is_descriptive(best) or (
        best.kind in ("code", "row") and gives_answer_type("api", best.text, question.text)
    ):
        return best
    same_chunk = sorted(
        (s for s in sentences if s.chunk == best.chunk and is_descriptive(s)),
        key=lambda s: s.position,
    )
    under = [s for s in same_chunk if s.heading == best.heading]
    found = under or same_chunk
    return found[0] if found else best


def lead_with_name(
    question: QuestionProfile,
    chosen: list[Sentence],
    sentences: list[Sentence],
    chunks: list[Chunk],
) -> tuple[list[Sentence], str]:
    """For a question that asks for a name (:func:`asks_for_name`): the chosen sentences with
    the first one replaced by the sentence that says what its API is for (:func:`describing`),
    and the API's name to lead with. Unchanged, with "", when the question asks for no name,
    the passage's headings name no API, or the question already gives that name."""
    asked = asks_for_name(question)
    if not chosen or not asked:
        return chosen, ""
    best = chosen[0]
    name = api_name(best, chunks[best.chunk], code_only=asked == "how")
    if not name or in_question(name, question):
        return chosen, ""
    lead = describing(best, sentences, question)
    rest = [s for s in chosen[1:] if s is not lead]
    return [lead, *rest], name
