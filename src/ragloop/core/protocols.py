"""The seams: one small protocol per extension point. Engines depend only on these.

Every method may be implemented sync or async. In a run the engines prefer the ``a``-prefixed
method when a component has one (``aretrieve``, ``acomplete``, ``agenerate``, ...), await a method
that is a coroutine function, and call a plain function directly (in ``run()``) or in a worker
thread (in ``arun()``, so it does not block the event loop).

The protocols are ``runtime_checkable``: ``isinstance`` checks that the method exists, nothing
more.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

from ragloop.core.agent_records import Grounding
from ragloop.core.rag_records import (
    EvaluationResult,
    GeneratorOutput,
    LoopIteration,
    ReformulationOutput,
)
from ragloop.core.records import Chunk, Message, ModelResponse, Tool


@runtime_checkable
class Retriever(Protocol):
    """Fetches the chunks most relevant to a query, best first, scores in [0, 1]."""

    def retrieve(self, query: str, top_k: int = 5) -> list[Chunk]: ...


@runtime_checkable
class Generator(Protocol):
    """Answers the (original) question from the retrieved chunks."""

    def generate(self, query: str, chunks: list[Chunk]) -> GeneratorOutput: ...


@runtime_checkable
class Evaluator(Protocol):
    """Judges whether an answer is grounded in the chunks and complete for the question."""

    def evaluate(self, query: str, chunks: list[Chunk], answer: str) -> EvaluationResult: ...


@runtime_checkable
class Reformulator(Protocol):
    """Writes new retrieval queries after a failing iteration; ``history`` may be empty."""

    def reformulate(
        self, original_query: str, history: list[LoopIteration]
    ) -> ReformulationOutput: ...


@runtime_checkable
class ChatModel(Protocol):
    """A chat LLM: messages (and optionally tools) in, text and/or tool calls out."""

    def complete(
        self, messages: list[Message], tools: list[Tool] | None = None
    ) -> ModelResponse: ...


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into vectors of a fixed ``dimension``; ``model_id`` names the model."""

    model_id: str
    dimension: int

    def embed(self, texts: list[str]) -> list[list[float]]: ...


@runtime_checkable
class Grounder(Protocol):
    """Scores how faithful an answer is to the chunks. ``opts`` carries extras such as the
    ``question``; implementations ignore the ones they do not use."""

    def ground(self, answer: str, chunks: list[Chunk], **opts: Any) -> Grounding: ...
