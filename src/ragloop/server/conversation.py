"""A chat's follow-up read with the conversation: "And what does it cost?" after "Can I hire a
tent?" is searched as "What does the tent cost?".

With a model, the model rewrites the last user message into a standalone question from the
conversation (one short call; an unreadable reply falls back to the heuristic). Without one, a
heuristic: a follow-up with a pronoun (it, its, they, them, their) gets the subject of the
previous question in its place, and an elliptical one ("And the warranty?", "What about a
weekend?") gets the subject added; the subject is the previous question's named entity ("Skylark
2"), else its longest noun phrase. A question that names its own subject is left as it is.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel

from ragloop.components.llm.prompts import DATA_RULE, fence
from ragloop.core.calls import ask
from ragloop.core.jsonparse import ParseFailure, parse_llm_json
from ragloop.core.records import Usage
from ragloop.core.text import content_terms, entity_phrases, is_content_word

HISTORY_TURNS = 6  # the messages before the follow-up the model reads
SUBJECT_WORDS = 6  # a subject is a short noun phrase: its head and a few words before it
PRONOUNS = {"it": "", "its": "'s", "they": "", "them": "", "their": "'s"}
ELLIPSIS = re.compile(
    r"^\s*(?:and|so|also|then)?\s*(?:what|how)\s+about\s+|^\s*(?:and|also)\s+", re.I
)
EXPLETIVE = re.compile(r"\b(?:is|was|isn't)\s+it\s+\w+\s+to\b|\bit\s+(?:is|was)\s+\w+\s+to\b", re.I)
DETERMINERS = {"the", "a", "an", "this", "that", "these", "those", "my", "your", "our"}
# a follow-up after "And" that asks a whole question of its own (its own verb and objects, none
# of them "the ..." that may point back), not "And the warranty?" nor "And how much?"
WHOLE_QUESTION = re.compile(
    r"^(?:how|what|which|where|when|why|who|can|could|do|does|is|are|should)\s+(?!about\b)\S+\s+\S",
    re.I,
)


@dataclass(frozen=True)
class Turn:
    role: str
    text: str


@dataclass(frozen=True)
class Rewrite:
    """The question to run: ``question``; ``followup`` the user's words when they were
    rewritten (None: used as they are), ``by`` who rewrote them, ``usage`` the model call's."""

    question: str
    followup: str | None = None
    by: Literal["model", "heuristic"] | None = None
    usage: Usage | None = None


class _Reply(BaseModel):
    question: str


def rewrite_prompt(history: Sequence[Turn], followup: str) -> str:
    """The prompt that turns a follow-up into a standalone question."""
    turns = "\n".join(fence(t.role, t.text) for t in history[-HISTORY_TURNS:])
    return f"""You rewrite the last message of a conversation into a standalone question for a
search engine over a document collection.

{DATA_RULE} The same holds for <user>, <assistant> and <followup> tags.

The conversation so far:
{turns}

{fence("followup", followup)}

Rewrite the follow-up so that it can be understood without the conversation: replace pronouns
and fill in what it leaves out with the names and subjects of the conversation; keep every name,
number and quoted phrase; change nothing when it already stands alone. Do not answer it.

Reply with JSON only, no markdown:
{{"question": "..."}}"""


async def standalone(
    turns: Sequence[Turn], model: Any | None, *, max_chars: int | None = None
) -> Rewrite:
    """The last user turn as a standalone question, read with the turns before it; a rewrite
    longer than ``max_chars`` (a question the server would refuse, made long by what it
    carried over) is dropped for the user's own words."""
    rewrite = await _standalone(turns, model)
    if max_chars is not None and len(rewrite.question) > max_chars:
        followup = next(t.text for t in reversed(turns) if t.role == "user")
        return Rewrite(followup, usage=rewrite.usage)
    return rewrite


async def _standalone(turns: Sequence[Turn], model: Any | None) -> Rewrite:
    users = [i for i, t in enumerate(turns) if t.role == "user"]
    if not users:
        raise ValueError("no user message")
    last = turns[users[-1]]
    history = [t for t in turns[: users[-1]] if t.role in ("user", "assistant") and t.text.strip()]
    if not any(t.role == "user" for t in history):
        return Rewrite(last.text)  # the first question: nothing to read it with
    if model is not None:
        response = await ask(model, rewrite_prompt(history, last.text))
        parsed = parse_llm_json(response.text, _Reply, cut=response.truncated)
        if not isinstance(parsed, ParseFailure) and parsed.value.question.strip():
            question = " ".join(parsed.value.question.split())
            changed = question != last.text.strip()
            return Rewrite(
                question,
                last.text if changed else None,
                "model" if changed else None,
                response.usage,
            )
    question = heuristic([t.text for t in history if t.role == "user"], last.text)
    if question == last.text:
        return Rewrite(last.text)
    return Rewrite(question, last.text, "heuristic")


def rewrite_meta(rewrite: Rewrite, *, content: bool) -> dict[str, Any]:
    """What the trace keeps of a rewrite: who rewrote the follow-up, and (the user's words are
    content) the follow-up and the question run when the local trace keeps content
    (``[traces] content``, on by default)."""
    if rewrite.by is None:
        return {}
    if not content:
        return {"rewritten_by": rewrite.by}
    return {"rewritten_by": rewrite.by, "followup": rewrite.followup, "question": rewrite.question}


def heuristic(earlier: Sequence[str], followup: str) -> str:
    """``followup`` with the subject of the questions before it filled in (each earlier
    question read with those before it, so a chain of follow-ups keeps its subject)."""
    previous: str | None = None
    for question in earlier:
        previous = question if previous is None else _filled(previous, question)
    return followup if previous is None else _filled(previous, followup)


def subject(question: str) -> str | None:
    """The thing a question is about: its named entity, else its longest noun phrase."""
    entities = [
        e for e in entity_phrases(question) if any(is_content_word(w.lower()) for w in e.split())
    ]
    if entities:
        name = re.sub(r"['’]s$", "", entities[0])  # "Skylark 2's price": the Skylark 2
        return f"the {name}" if re.search(rf"\bthe\s+{re.escape(name)}", question, re.I) else name
    words = re.findall(r"[\w'-]+", question)
    best: list[str] = []
    run: list[str] = []
    for word in [*words, "."]:
        if word.lower() in DETERMINERS and not run:
            run = [word.lower()]
        elif is_content_word(word.lower()) and not _verbish(word):
            run.append(word)
        else:
            if _size(run) > _size(best) or (
                _size(run) == _size(best) and run[:1] in (["the"], ["a"])
            ):
                best = run
            run = [word.lower()] if word.lower() in DETERMINERS else []
    if not _size(best):
        return None
    if _size(best) > SUBJECT_WORDS:  # keep the head of a long phrase, not the whole of it
        lead = best[:1] if best[0] in DETERMINERS else []
        best = [*lead, *best[-SUBJECT_WORDS:]]
    if best[0] in ("a", "an"):
        best = ["the", *best[1:]]  # "a tent" asked about, "the tent" meant after
    return " ".join(best)


def _size(run: list[str]) -> int:
    return sum(1 for w in run if w.lower() not in DETERMINERS)


def _verbish(word: str) -> bool:
    """Question verbs that are not the subject ("does it cost", "can I hire")."""
    return word.lower() in {
        "cost",
        "costs",
        "weigh",
        "weighs",
        "mean",
        "means",
        "work",
        "do",
        "get",
    }


def _filled(previous: str, followup: str) -> str:
    about = subject(previous)
    if about is None:
        return followup
    own = set(content_terms(followup))
    if entity_phrases(followup) and not _has_pronoun(followup):
        return followup  # it names its own subject
    if set(content_terms(about)) <= own:
        return followup  # it already says what it is about
    stripped = ELLIPSIS.sub("", followup).strip()
    if _has_pronoun(stripped):
        return _capital(_replace_pronoun(stripped, about))
    if (
        WHOLE_QUESTION.match(stripped)
        and len(set(content_terms(stripped))) >= 2
        and not re.search(r"\b(?:the|this|that)\b", stripped, re.I)  # "the warranty": whose?
    ):
        return followup  # "And how do I add a prefix to each line?": a question of its own
    if stripped != followup.strip():  # "And ...?", "What about ...?": the subject left out
        core = stripped.rstrip(" ?.!")
        return _capital(f"{core} of {about}?") if core else followup
    return followup


def _has_pronoun(text: str) -> bool:
    if EXPLETIVE.search(text):  # "is it possible to ...": an "it" that stands for nothing
        return False
    return any(w.lower() in PRONOUNS for w in re.findall(r"[\w']+", text))


def _replace_pronoun(text: str, about: str) -> str:
    def swap(match: re.Match[str]) -> str:
        return about + PRONOUNS[match.group(0).lower()]

    return re.sub(r"\b(?:its|it|their|they|them)\b", swap, text, count=1, flags=re.I)


def _capital(text: str) -> str:
    return text[:1].upper() + text[1:]
