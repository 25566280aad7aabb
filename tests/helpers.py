"""Small scripted components for engine tests (deterministic, recording every call)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence

from ragloop import (
    Chunk,
    EvaluationResult,
    GeneratorOutput,
    LoopIteration,
    ReformulationOutput,
    ReformulationStrategy,
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
