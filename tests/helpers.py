"""Small scripted components for engine tests (deterministic, recording every call)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence

from ragloop import (
    Chunk,
    EvaluationResult,
    GeneratorOutput,
    LoopConfig,
    LoopIteration,
    ModelResponse,
    RAGLoop,
    ReformulationOutput,
    ReformulationStrategy,
    ToolCall,
)


def chunk(content: str, score: float = 0.5, source: str = "doc") -> Chunk:
    return Chunk(content=content, source=source, score=score)


class TableRetriever:
    """Returns the chunks listed for a query (empty for unknown queries); records calls."""

    def __init__(self, table: dict[str, list[Chunk]] | None = None) -> None:
        self.table = table or {}
        self.calls: list[tuple[str, int]] = []
        self.threads: list[str] = []

    def retrieve(self, query: str, top_k: int = 5) -> list[Chunk]:
        self.calls.append((query, top_k))
        self.threads.append(threading.current_thread().name)
        return list(self.table.get(query, []))[:top_k]


class SlowAsyncRetriever:
    """An async retriever that sleeps, to observe concurrency."""

    def __init__(self, delay: float = 0.05) -> None:
        self.delay = delay
        self.active = 0
        self.max_active = 0

    async def aretrieve(self, query: str, top_k: int = 5) -> list[Chunk]:
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        await asyncio.sleep(self.delay)
        self.active -= 1
        return [chunk(f"about {query}", 0.5, source=query)]


class EchoGenerator:
    """Answers with the joined chunk contents; records the query it received."""

    def __init__(self, confidence: float = 0.5) -> None:
        self.confidence = confidence
        self.queries: list[str] = []

    def generate(self, query: str, chunks: list[Chunk]) -> GeneratorOutput:
        self.queries.append(query)
        answer = " / ".join(c.content for c in chunks) or "no answer"
        return GeneratorOutput(answer=answer, confidence=self.confidence)


class ScoreEvaluator:
    """Returns the scripted scores in order (the last one repeats); records its inputs."""

    def __init__(self, scores: Sequence[float], reason: str = "incomplete") -> None:
        self.scores = list(scores)
        self.reason = reason
        self.calls: list[tuple[str, list[Chunk], str]] = []

    def evaluate(self, query: str, chunks: list[Chunk], answer: str) -> EvaluationResult:
        self.calls.append((query, list(chunks), answer))
        score = self.scores[min(len(self.calls) - 1, len(self.scores) - 1)]
        return EvaluationResult(
            is_grounded=score >= 0.5, is_complete=score >= 0.8, score=score, reason=self.reason
        )


class ListReformulator:
    """Returns the scripted query lists in order; records the history lengths it saw."""

    def __init__(
        self,
        queries: Sequence[list[str]],
        strategy: ReformulationStrategy = ReformulationStrategy.EXPAND,
    ) -> None:
        self.queries = list(queries)
        self.strategy = strategy
        self.calls: list[tuple[str, list[LoopIteration]]] = []

    def reformulate(self, original_query: str, history: list[LoopIteration]) -> ReformulationOutput:
        self.calls.append((original_query, list(history)))
        queries = self.queries[min(len(self.calls) - 1, len(self.queries) - 1)]
        return ReformulationOutput(
            queries=queries, strategy=self.strategy, reasoning=f"call {len(self.calls)}"
        )


def raising(exc: BaseException) -> Callable[..., object]:
    def fail(*args: object, **kwargs: object) -> object:
        raise exc

    return fail


# -- AgentLoop ---------------------------------------------------------------------------------


def search_call(query: object, **extra: object) -> ToolCall:
    return ToolCall(name="search", arguments={"query": query, **extra})


def answer_call(text: str) -> ToolCall:
    return ToolCall(name="answer", arguments={"text": text})


def give_up_call(reason: str) -> ToolCall:
    return ToolCall(name="give_up", arguments={"reason": reason})


def turn(*calls: ToolCall, text: str = "") -> ModelResponse:
    """One controller reply: these tool calls (and optional text)."""
    return ModelResponse(text=text, tool_calls=list(calls))


class CollectionSearch:
    """A search function over collections: ``corpus`` maps a collection to its texts. Returns
    the chunks (tagged with their collection) sharing a word with the query; records every
    call with the scope it received."""

    def __init__(self, corpus: dict[str, list[str]], *, ignore_scope: bool = False) -> None:
        self.corpus = corpus
        self.ignore_scope = ignore_scope
        self.calls: list[dict[str, object]] = []

    def __call__(
        self,
        query: str,
        *,
        limit: int,
        collection: str | None = None,
        collections: list[str] | None = None,
    ) -> list[Chunk]:
        self.calls.append(
            {"query": query, "limit": limit, "collection": collection, "collections": collections}
        )
        names = list(self.corpus)
        if not self.ignore_scope and collection is not None:
            names = [collection]
        elif not self.ignore_scope and collections is not None:
            names = list(collections)
        words = set(query.lower().split())
        found = [
            Chunk(content=text, source=name, score=0.5, metadata={"collection": name})
            for name in names
            for text in self.corpus.get(name, [])
            if words & set(text.lower().replace(",", " ").replace(".", " ").split())
        ]
        return found[:limit]


def slow_loop() -> RAGLoop:
    """A RAGLoop whose retrieval takes a minute: a run that stays running while a test looks."""
    return RAGLoop(
        SlowAsyncRetriever(delay=60.0),  # far longer than a test runs
        EchoGenerator(),
        ScoreEvaluator([1.0]),
        ListReformulator([["x"]]),
        LoopConfig(max_iterations=1),
    )
