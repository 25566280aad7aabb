"""The seams: one small protocol per extension point. Engines depend only on these.

Every method may be implemented sync or async. In a run the engines prefer the ``a``-prefixed
method when a component has one (``aretrieve``, ``acomplete``, ``agenerate``, ...), await a method
that is a coroutine function, and call a plain function directly (in ``run()``) or in a worker
thread (in ``arun()``, so it does not block the event loop).

The protocols are ``runtime_checkable``: ``isinstance`` checks that the method exists, nothing
more.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:  # annotations only: a protocol checks that methods exist, so importing the
    # protocols (the knowledge base does, for Embedder) builds none of these models
    from ragloop.core.records import Chunk, Message, ModelResponse, Tool, Usage
    from ragloop.core.records.agent import Grounding
    from ragloop.core.records.rag import (
        EvaluationResult,
        GeneratorOutput,
        LoopIteration,
        ReformulationOutput,
    )
    from ragloop.core.records.retrieval import RefineContext, UnderstoodQuery


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


# -- the retrieval loop's seams ---------------------------------------------------------------


@runtime_checkable
class UnderstoodQueryLike(Protocol):
    """What a :class:`QueryUnderstander` may return (seed 004's protocol): any object with
    ``rewritten`` (the text to search) and ``shape`` (a :class:`~ragloop.QueryShape`, or its
    value or name), and optionally ``sub_queries``, ``hyde``, ``reason`` and ``by_model``, as
    :class:`~ragloop.UnderstoodQuery` has them. A mapping with those keys will do as well."""

    @property
    def rewritten(self) -> str: ...

    @property
    def shape(self) -> object: ...


@runtime_checkable
class QueryUnderstander(Protocol):
    """Rewrites, decomposes and classifies a query before it is searched; returns a
    :class:`~ragloop.UnderstoodQuery` or any :class:`UnderstoodQueryLike`."""

    def understand(self, query: str) -> UnderstoodQuery | UnderstoodQueryLike: ...


@runtime_checkable
class Router(Protocol):
    """Picks a search route for an understood query and searches by it.

    ``query_embedder(route)`` is the embedder whose query vectors the route needs (None when it
    needs none): the loop embeds through its embedding cache and passes the ``vector`` on.
    """

    def route(self, query: UnderstoodQuery) -> str: ...

    def query_embedder(self, route: str) -> Embedder | None: ...

    def search(
        self, query: str, *, route: str, top_k: int, vector: Sequence[float] | None = None
    ) -> list[Chunk]: ...


@runtime_checkable
class QueryRefiner(Protocol):
    """Writes the next iteration's queries from what the loop has found; None stops the run."""

    def refine(self, context: RefineContext) -> str | list[str] | None: ...


@runtime_checkable
class EmbeddingCache(Protocol):
    """Query vectors by embedding model and text. ``lookup`` returns None on a miss."""

    def lookup(self, model_id: str, text: str) -> list[float] | None: ...

    def store(self, model_id: str, text: str, vector: Sequence[float]) -> None: ...


@runtime_checkable
class CostEstimator(Protocol):
    """The usage a stage (``understand``, ``embed``, ``retrieve``) would cost for its inputs and
    outputs; the loop charges it when no provider reported usage for that stage."""

    def estimate(self, stage: str, inputs: Sequence[str], outputs: Sequence[str] = ()) -> Usage: ...
