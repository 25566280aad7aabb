"""Query understanding for the retrieval loop: rewrite, decompose, classify the shape, HyDE.

:class:`HeuristicUnderstander` needs no model: it normalises the query, expands the terms of a
user glossary, splits a multi-part question at its clause boundaries and classifies the shape.
:class:`LLMUnderstander` asks a model for all four in one call (the glossary still expands
deterministically afterwards) and falls back to the heuristic one when the reply is unusable.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Annotated

from pydantic import BaseModel, BeforeValidator

from ragloop.components.heuristics.rewriting import split_clauses
from ragloop.components.llm.fitting import ask_fitted
from ragloop.components.llm.prompts import understanding_prompt
from ragloop.core.calls import GenerateFn, resolve_llm, run_sync
from ragloop.core.errors import ConfigError
from ragloop.core.jsonparse import ParseFailure, StrList, lenient_enum, parse_llm_json
from ragloop.core.limits import PromptFit, check_max_tokens
from ragloop.core.protocols import ChatModel
from ragloop.core.records.retrieval import QueryShape, UnderstoodQuery
from ragloop.core.text import QUESTION_WORDS, entity_phrases, is_number, tokenize

Glossary = Mapping[str, "str | Sequence[str]"]

# identifiers: codes with letters and digits (E1234, v2.3), snake_case, dotted or pathed names,
# calls, CamelCase inside a word
_IDENTIFIER = re.compile(
    r"(?=\S*[A-Za-z])(?=\S*\d)\S{2,}|\w+_\w+|\w+(?:\.|::|/)\w+|\w+\(\)|[a-z]+[A-Z]\w*"
)
_QUESTION_OPENERS = QUESTION_WORDS | frozenset(
    "is are was were do does did can could should would will has have explain describe "
    "compare tell".split()
)


def _glossary(glossary: Glossary | None) -> dict[str, list[str]]:
    if glossary is None:
        return {}
    if not isinstance(glossary, Mapping):
        raise ConfigError("glossary", "must map terms to an expansion or a list of expansions")
    out: dict[str, list[str]] = {}
    for term, expansion in glossary.items():
        items = [expansion] if isinstance(expansion, str) else list(expansion)
        if (
            not isinstance(term, str)
            or not term.strip()
            or not all(isinstance(e, str) and e.strip() for e in items)
        ):
            raise ConfigError("glossary", f"entry {term!r}: terms and expansions must be text")
        out[term.strip()] = [e.strip() for e in items]
    return out


def normalise(query: str) -> str:
    """Whitespace collapsed, ends trimmed."""
    return " ".join(query.split())


def expand_glossary(query: str, glossary: Mapping[str, list[str]]) -> str:
    """The query with the expansions of every glossary term it contains (whole words, any case)
    appended, each once and only when the query does not say it already."""
    added: list[str] = []
    lowered = query.lower()
    for term, expansions in glossary.items():
        if not re.search(rf"(?<!\w){re.escape(term.lower())}(?!\w)", lowered):
            continue
        for expansion in expansions:
            if expansion.lower() not in lowered and expansion not in added:
                added.append(expansion)
    return " ".join([query, *added]) if added else query


def classify_shape(query: str) -> tuple[QueryShape, str]:
    """The query's shape and why. Identifiers and quoted phrases want exact terms; a question
    in natural language wants meaning; a question naming entities or numbers wants both."""
    words = query.split()
    question = query.rstrip().endswith("?") or (
        bool(words) and words[0].lower().strip("\"'") in _QUESTION_OPENERS
    )
    exact = [w for w in words if _IDENTIFIER.fullmatch(w.strip("\"'?,.;:!()"))]
    quoted = re.search(r"[\"“][^\"”]+[\"”]", query) is not None
    if exact or quoted:
        what = f"identifier {exact[0]!r}" if exact else "a quoted phrase"
        if question and len(words) > 4:
            return QueryShape.HYBRID, f"a question with {what}"
        return QueryShape.KEYWORD, f"{what}, not a question"
    if not question:
        if len(words) <= 4:
            return QueryShape.KEYWORD, "a few keywords"
        return QueryShape.SEMANTIC, "a statement in natural language"
    named = [e for e in entity_phrases(query) if e.lower() not in _QUESTION_OPENERS]
    numbers = [t for t in tokenize(query) if is_number(t)]
    if named or numbers:
        return QueryShape.HYBRID, f"a question naming {(named or numbers)[0]!r}"
    return QueryShape.SEMANTIC, "a question in natural language"


class HeuristicUnderstander:
    """Understands a query without a model. ``glossary`` maps a term to what it stands for
    (``{"RAG": "retrieval-augmented generation"}``); a query containing the term gets the
    expansion appended."""

    def __init__(self, glossary: Glossary | None = None) -> None:
        self.glossary = _glossary(glossary)

    def understand(self, query: str) -> UnderstoodQuery:
        base = normalise(query)
        clauses = split_clauses(base)
        sub_queries = (
            [expand_glossary(c, self.glossary) for c in clauses] if len(clauses) > 1 else []
        )
        rewritten = expand_glossary(base, self.glossary)
        shape, why = classify_shape(base)
        notes = [f"{shape.value}: {why}"]
        if rewritten != base:
            notes.append("glossary expanded")
        if sub_queries:
            notes.append(f"{len(sub_queries)} parts")
        return UnderstoodQuery(
            query=query,
            rewritten=rewritten,
            sub_queries=sub_queries,
            shape=shape,
            reason="heuristic: " + "; ".join(notes),
        )


class _UnderstandingReply(BaseModel):
    rewritten: str = ""
    sub_queries: StrList = []
    shape: Annotated[QueryShape, BeforeValidator(lenient_enum(QueryShape))] = QueryShape.HYBRID
    hyde: str | None = None


class LLMUnderstander:
    """Understands a query with one model call: ``generate_fn`` is a function of the prompt (sync
    or async) or a chat model, ``model=`` a chat model (the rule:
    :func:`ragloop.core.calls.resolve_llm`). A reply that cannot be read falls back to
    :class:`HeuristicUnderstander`, and ``reason`` says so. The reply is bounded by
    ``max_tokens`` (default 384, ``DEFAULT_MAX_TOKENS["understander"]``) and a cut one is read
    as far as it goes."""

    def __init__(
        self,
        generate_fn: GenerateFn | ChatModel | None = None,
        *,
        model: ChatModel | None = None,
        glossary: Glossary | None = None,
        max_tokens: int | None = None,
    ) -> None:
        self.model = resolve_llm(generate_fn, model, owner="LLMUnderstander")
        self.fallback = HeuristicUnderstander(glossary)
        self.max_tokens = check_max_tokens(max_tokens)

    async def aunderstand(self, query: str) -> UnderstoodQuery:
        glossary = self.fallback.glossary

        def build(room: int | None) -> tuple[str, PromptFit]:
            return understanding_prompt(query, glossary), PromptFit()

        response = await ask_fitted(
            self.model, build, role="understander", max_tokens=self.max_tokens
        )
        reply = response.text
        parsed = parse_llm_json(reply, _UnderstandingReply, cut=response.truncated)
        if isinstance(parsed, ParseFailure) or not parsed.value.rewritten.strip():
            why = parsed.reason if isinstance(parsed, ParseFailure) else "no rewritten query"
            heuristic = self.fallback.understand(query)
            return heuristic.model_copy(
                update={
                    "by_model": True,
                    "reason": f"model reply unusable ({why}); {heuristic.reason}",
                }
            )
        value = parsed.value
        hyde = normalise(value.hyde) if value.hyde and value.hyde.strip() else None
        return UnderstoodQuery(
            query=query,
            rewritten=expand_glossary(normalise(value.rewritten), glossary),
            # one "part" is no decomposition: search the rewritten query
            sub_queries=[expand_glossary(normalise(q), glossary) for q in value.sub_queries]
            if len(value.sub_queries) > 1
            else [],
            shape=value.shape,
            hyde=hyde,
            reason="model",
            by_model=True,
        )

    def understand(self, query: str) -> UnderstoodQuery:
        return run_sync(lambda: self.aunderstand(query))
