"""A rule-based controller for :class:`~ragloop.AgentLoop`, so the agent runs with no model.

:class:`OfflineController` is a chat model in form (``complete(messages, tools)`` returns tool
calls or text) but reads the conversation with rules instead of a language model. Each turn it
looks at what the searches so far returned (it parses the tool results the loop wrote, as a
model would read them) and

1. first turn: searches the question, and each part of a multi-part question on its own;
2. then answers extractively (:class:`~ragloop.ExtractiveGenerator`) and judges the answer
   (:class:`~ragloop.HeuristicEvaluator`); a grounded, complete answer is sent with ``answer``;
3. otherwise searches what is missing: a document the answer points to or the chunks name
   (the knowledge base's link graph: an entity bridge), an unanswered part, a word the
   documents never use re-said in their vocabulary, or the question widened with related
   corpus terms; never a query it already ran;
4. when nothing new is left to search, answers if the best answer scores at least its
   threshold, else gives up, saying plainly that the documents do not answer and quoting the
   closest passage with its source.

The controller keeps no state between calls: everything comes from the messages, so one
instance serves concurrent runs. Called without tools (the loop's fallback synthesis), it
replies with the extractive answer as text.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from ragloop.components.citations import NO_ANSWER, answer_text, source_label
from ragloop.components.evaluators import HeuristicEvaluator
from ragloop.components.generators import ExtractiveGenerator
from ragloop.components.heuristics.corpus import Corpus
from ragloop.components.heuristics.judging import Analysis, AnswerJudge
from ragloop.components.heuristics.questions import profile
from ragloop.core.records import Chunk, Message, ModelResponse, Tool, ToolCall
from ragloop.core.records.rag import EvaluationResult, GeneratorOutput
from ragloop.core.text import content_stems, normalize_query, stem

_RESULT = re.compile(
    r"^\d+\. \[([^\]\n]+)\](?: \(score ([0-9.]+)\))?\n<chunk>(.*?)</chunk>", re.S | re.M
)
MAX_QUERIES_PER_TURN = 3


@dataclass
class Conversation:
    """What the controller reads from the messages."""

    question: str = ""
    searched: list[str] = field(default_factory=list)
    chunks: list[Chunk] = field(default_factory=list)  # every chunk shown, best-ranked first
    results: list[list[Chunk]] = field(default_factory=list)  # each search's, with its scores

    @property
    def searched_keys(self) -> set[str]:
        return {normalize_query(q) for q in self.searched}


def read_conversation(messages: Sequence[Message], corpus: Corpus | None = None) -> Conversation:
    """The question, the queries searched and the chunks the search results showed (looked up
    in ``corpus`` for their source and metadata when it can). A chunk keeps the best retrieval
    score any search gave it (a result without scores ranks them 1/(1 + rank)); the chunks are
    ordered by their best rank, then by when they were first shown."""
    seen = Conversation()
    calls: dict[str, ToolCall] = {}
    shown: list[list[tuple[str, float]]] = []
    texts: dict[str, str] = {}
    ranks: dict[str, tuple[int, int]] = {}
    scores: dict[str, float] = {}
    for message in messages:
        if message.role == "user" and not seen.question:
            seen.question = message.content
        for tool_call in message.tool_calls:
            calls[tool_call.id] = tool_call
            query = tool_call.arguments.get("query")
            if tool_call.name == "search" and isinstance(query, str):
                seen.searched.append(query)
        if message.role == "tool" and message.tool_call_id in calls:
            if calls[message.tool_call_id].name != "search":
                continue
            returned: list[tuple[str, float]] = []
            for rank, match in enumerate(_RESULT.finditer(message.content)):
                chunk_id, text = match[1], html.unescape(match[3])
                score = _score(match[2], rank)
                returned.append((chunk_id, score))
                texts.setdefault(chunk_id, text)
                scores[chunk_id] = max(score, scores.get(chunk_id, 0.0))
                best = ranks.get(chunk_id, (rank, len(ranks)))
                ranks[chunk_id] = (min(best[0], rank), best[1])
            shown.append(returned)
    order = sorted(ranks, key=ranks.__getitem__)
    known = {c.id: c for c in (corpus.fetch(order) if corpus is not None else [])}
    by_id: dict[str, Chunk] = {}
    for chunk_id in order:
        chunk = known.get(chunk_id)
        if chunk is None:
            chunk = Chunk(content=texts[chunk_id], source=f"chunk {chunk_id}", score=0.0)
        by_id[chunk_id] = chunk.model_copy(update={"id": chunk_id, "score": scores[chunk_id]})
    seen.chunks = list(by_id.values())
    seen.results = [
        [by_id[i].model_copy(update={"score": score}) for i, score in result]
        for result in shown
        if result
    ]
    return seen


def _score(text: str | None, rank: int) -> float:
    """The score the result gave, else one by rank (a result written without scores)."""
    try:
        return min(1.0, max(0.0, float(text or "")))
    except ValueError:
        return round(1.0 / (1 + rank), 4)


def _call(name: str, **arguments: object) -> ToolCall:
    return ToolCall(name=name, arguments=arguments)


class OfflineController:
    """The AgentLoop controller that needs no model (see the module docstring).

    ``corpus`` (a :class:`~ragloop.KnowledgeBase`, a retriever or a ``Corpus``) gives it the
    link graph, the embedder and the documents' vocabulary; ``max_searches`` caps the searches
    of a run; ``threshold`` is the evaluation score at which it answers; ``search_limit`` is
    the chunks each search asks for (the loop shows it the first 5; all count as gathered, and
    with 10 rather than 5 the gathered evidence lost no recall@10 to one search on FiQA and
    SciFact, BENCHMARKS.md).
    """

    name = "offline-controller"

    def __init__(
        self,
        *,
        corpus: object = None,
        max_searches: int = 8,
        threshold: float = 0.8,
        search_limit: int = 10,
    ) -> None:
        self.corpus = None if corpus is None else Corpus.of(corpus)
        judge = AnswerJudge(corpus=self.corpus)  # one analysis of each answer for both
        self.generator = ExtractiveGenerator(corpus=self.corpus, judge=judge)
        self.evaluator = HeuristicEvaluator(corpus=self.corpus, judge=judge)
        self.max_searches = max_searches
        self.threshold = threshold
        self.search_limit = search_limit

    def __call__(self, messages: list[Message], tools: list[Tool] | None = None) -> ModelResponse:
        return self.complete(messages, tools)

    def _search(self, query: str) -> ToolCall:
        return _call("search", query=query, limit=self.search_limit)

    def complete(self, messages: list[Message], tools: list[Tool] | None = None) -> ModelResponse:
        seen = read_conversation(messages, self.corpus)
        if not tools:  # the loop's fallback synthesis: text only
            output = self.best_answer(seen)[0]
            return ModelResponse(text=output.answer)
        if not seen.searched:
            parts = profile(seen.question).parts
            queries = [seen.question, *parts] if len(parts) > 1 else [seen.question]
            note = "Searching the question" + (" and each of its parts." if len(parts) > 1 else ".")
            return ModelResponse(text=note, tool_calls=[self._search(q) for q in queries])
        output, verdict, found = self.best_answer(seen)
        if found.complete and verdict.score >= self.threshold:
            return self._answer(output, f"The chunks answer the question ({verdict.reason}).")
        plan = [
            (q, why)
            for q, why in self.next_searches(seen, found)
            if normalize_query(q) not in seen.searched_keys
        ]
        room = self.max_searches - len(seen.searched)
        if plan and room > 0:
            plan = list({normalize_query(q): (q, why) for q, why in plan}.values())
            plan = plan[: min(MAX_QUERIES_PER_TURN, room)]
            note = f"{verdict.reason}. " + " ".join(why for _, why in plan)
            return ModelResponse(text=note, tool_calls=[self._search(q) for q, _ in plan])
        if verdict.score >= self.threshold:
            return self._answer(
                output, f"Nothing new left to search; answering ({verdict.reason})."
            )
        reason = not_found(output, verdict.score, verdict.reason, seen.chunks)
        closest = {} if output.answer == NO_ANSWER else {"closest": output.answer}
        return ModelResponse(text=reason, tool_calls=[_call("give_up", reason=reason, **closest)])

    def best_answer(self, seen: Conversation) -> tuple[GeneratorOutput, EvaluationResult, Analysis]:
        """The best-judged extractive answer: over every chunk shown, or over one search's
        own chunks (as a RAGLoop iteration answers from its own), each judged against every
        chunk shown; ties go to the answer over all of them."""
        pools = [seen.chunks]
        for result in seen.results:
            if [c.id for c in result] not in [[c.id for c in p] for p in pools]:
                pools.append(result)
        judged: dict[str, tuple[GeneratorOutput, EvaluationResult, Analysis]] = {}
        for pool in pools:
            output = self.generator.generate(seen.question, pool)
            if output.answer not in judged:
                verdict, found = self.evaluator.judge(seen.question, seen.chunks, output.answer)
                judged[output.answer] = (output, verdict, found)
        return max(judged.values(), key=lambda j: j[1].score)  # the first of equals: all shown

    @staticmethod
    def _answer(output: GeneratorOutput, note: str) -> ModelResponse:
        return ModelResponse(text=note, tool_calls=[_call("answer", text=output.answer)])

    def next_searches(self, seen: Conversation, found: Analysis) -> list[tuple[str, str]]:
        """Queries for what the answer lacks, each with why, most promising first."""
        asked = profile(seen.question)
        lacking = self._lacking(seen, found) or [
            t for t in asked.terms if t not in _entity_terms(asked.entities)
        ]
        plan: list[tuple[str, str]] = []
        for name in found.hops:
            plan.append(
                (
                    f"{name} {' '.join(lacking[:3])}",
                    f"Following '{name}', which the answer points to.",
                )
            )
        wanted = found.focus_missing or found.unresolved
        for name in found.named[:1] if wanted and not found.hops else []:
            query = f"{name} {' '.join(wanted[:3])}"
            plan.append((query, f"Looking for {', '.join(wanted[:3])} of '{name}'."))
        for name in found.bridges[:2] if found.unresolved else []:
            query = f"{name} {' '.join(found.unresolved[:3])}"
            plan.append((query, f"Looking for {', '.join(found.unresolved[:3])} in '{name}'."))
        for _, part in found.uncovered_parts:
            plan.append((part, f"Searching the unanswered part '{part}'."))
        foreign = [t for t in found.unresolved if t in found.foreign]
        if foreign and self.corpus is not None:
            words = [
                w
                for t in asked.terms
                for w in ([t] if t not in foreign else self.corpus.substitutes(t, seen.question))
            ]
            if words:
                plan.append(
                    (" ".join(words), f"Re-saying {', '.join(foreign)} in the documents' words.")
                )
        if found.unresolved and not plan:
            query = " ".join([*asked.entities, *found.unresolved])
            plan.append((query, f"Searching {', '.join(found.unresolved)} directly."))
        if self.corpus is not None:
            related = self.corpus.related_terms(seen.question, asked.terms, limit=3)
            if related:
                query = f"{' '.join(asked.terms)} {' '.join(related)}"
                plan.append((query, f"Widening with related terms: {', '.join(related)}."))
        return plan

    def _lacking(self, seen: Conversation, found: Analysis) -> list[str]:
        """The question's terms (names aside) missing from the text of the best chunks."""
        asked = profile(seen.question)
        said = content_stems(" ".join(c.content for c in seen.chunks[:3]))
        names = _entity_terms(asked.entities)
        return [
            t for t in asked.terms if stem(t) not in said and t not in names
        ] or found.unresolved


def not_found(output: GeneratorOutput, score: float, why: str, chunks: Sequence[Chunk]) -> str:
    """Why the controller gives up, plainly, with the closest passage it found (its quote and
    sources), or the sources of the best chunks when nothing was worth quoting."""
    if output.answer == NO_ANSWER:
        closest = "; ".join(dict.fromkeys(source_label(c) for c in chunks[:3]))
        return f"no document answers it: {why}" + (
            f". Closest sources: {closest}" if closest else ""
        )
    _, found, sources = output.answer.rpartition("\n\nSources: ")
    where = f" ({sources})" if found else ""
    return (
        f"the documents do not answer it (the best answer found scores {score:.2f}: {why}). "
        f"The closest passage{where}: {answer_text(output.answer)}"
    )


def _entity_terms(entities: list[str]) -> set[str]:
    return {t.lower() for e in entities for t in e.split()}
