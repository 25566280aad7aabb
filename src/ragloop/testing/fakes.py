"""The fakes of :mod:`ragloop.testing`: models that reply from a script or a function, and a
retriever over a handful of texts."""

from __future__ import annotations

import inspect
import math
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Union

from ragloop.core.errors import ComponentError, ScriptExhausted
from ragloop.core.limits import requested_max_tokens
from ragloop.core.records import Chunk, Message, ModelResponse, Tool, Usage
from ragloop.core.text import STOPWORDS, tokenize
from ragloop.kb.embedding.hash_embedder import HashEmbedder as HashEmbedder

ReplyFunction = Callable[[list[Message]], "ModelResponse | str | Awaitable[ModelResponse | str]"]
Reply = Union[ModelResponse, str, BaseException, type[BaseException], ReplyFunction]  # noqa: UP007
ModelFunction = Callable[
    [list[Message], "list[Tool] | None"], "ModelResponse | str | Awaitable[ModelResponse | str]"
]


@dataclass(frozen=True)
class ModelCall:
    """One recorded call: the messages and tools the model received, and the reply bound the
    caller asked for (``max_tokens``, None when unbounded)."""

    messages: list[Message]
    tools: list[Tool] | None = None
    max_tokens: int | None = None

    @classmethod
    def of(cls, messages: list[Message], tools: list[Tool] | None) -> ModelCall:
        return cls(
            list(messages), list(tools) if tools is not None else None, requested_max_tokens()
        )

    @property
    def prompt(self) -> str:
        """The content of the last message (the prompt, for prompt-in/text-out callers)."""
        return self.messages[-1].content if self.messages else ""


def _as_response(value: object, who: str) -> ModelResponse:
    if isinstance(value, ModelResponse):
        return value
    if isinstance(value, str):
        return ModelResponse(text=value)
    raise ComponentError(f"{who} produced {type(value).__name__}; expected ModelResponse or str")


def _refuse_awaitable(reply: object, who: str) -> None:
    if inspect.isawaitable(reply):
        close = getattr(reply, "close", None)
        if callable(close):
            close()  # never awaited: close it so Python does not warn
        raise ComponentError(f"an async {who} needs acomplete(), not complete()")


def _with_usage(response: ModelResponse, usage: Usage | None) -> ModelResponse:
    if response.usage is None and usage is not None:
        return response.model_copy(update={"usage": usage})
    return response


class ScriptedModel:
    """A chat model that replays ``replies`` in order, one per call.

    Each reply is a :class:`~ragloop.ModelResponse`, a string (the reply text), an exception
    (instance or class, raised on that call), or a function of the messages returning either
    (sync or async). Every call is recorded in :attr:`calls`. A call after the last reply raises
    :class:`~ragloop.ScriptExhausted`. ``usage`` is reported for replies that carry none, so
    token budgets can be tested.
    """

    def __init__(
        self, replies: Iterable[Reply] = (), *, usage: Usage | None = None, name: str = "scripted"
    ) -> None:
        self.replies: list[Reply] = list(replies)
        self.usage = usage
        self.name = name
        self.calls: list[ModelCall] = []

    @property
    def remaining(self) -> int:
        """Replies not used yet."""
        return len(self.replies)

    def push(self, *replies: Reply) -> None:
        """Append replies to the queue."""
        self.replies.extend(replies)

    def _next(self, messages: list[Message], tools: list[Tool] | None) -> Reply:
        self.calls.append(ModelCall.of(messages, tools))
        if not self.replies:
            raise ScriptExhausted(
                f"ScriptedModel {self.name!r} has no reply left for call {len(self.calls)}"
            )
        reply = self.replies.pop(0)
        if isinstance(reply, BaseException):
            raise reply
        if isinstance(reply, type):
            raise reply()
        return reply

    def complete(self, messages: list[Message], tools: list[Tool] | None = None) -> ModelResponse:
        reply: Any = self._next(messages, tools)
        if callable(reply) and not isinstance(reply, str | ModelResponse):
            reply = reply(list(messages))
            _refuse_awaitable(reply, "reply function")
        return _with_usage(_as_response(reply, "ScriptedModel reply"), self.usage)

    async def acomplete(
        self, messages: list[Message], tools: list[Tool] | None = None
    ) -> ModelResponse:
        reply: Any = self._next(messages, tools)
        if callable(reply) and not isinstance(reply, str | ModelResponse):
            reply = reply(list(messages))
            if inspect.isawaitable(reply):
                reply = await reply
        return _with_usage(_as_response(reply, "ScriptedModel reply"), self.usage)


class FunctionModel:
    """A chat model whose replies come from ``function(messages, tools)`` (sync or async).

    The function returns a :class:`~ragloop.ModelResponse` or a string. Calls are recorded in
    :attr:`calls`, as with :class:`ScriptedModel`.
    """

    def __init__(
        self, function: ModelFunction, *, usage: Usage | None = None, name: str = "function"
    ) -> None:
        self.function = function
        self.usage = usage
        self.name = name
        self.calls: list[ModelCall] = []

    def complete(self, messages: list[Message], tools: list[Tool] | None = None) -> ModelResponse:
        self.calls.append(ModelCall.of(messages, tools))
        reply = self.function(list(messages), tools)
        _refuse_awaitable(reply, "model function")
        return _with_usage(_as_response(reply, "FunctionModel function"), self.usage)

    async def acomplete(
        self, messages: list[Message], tools: list[Tool] | None = None
    ) -> ModelResponse:
        self.calls.append(ModelCall.of(messages, tools))
        reply: Any = self.function(list(messages), tools)
        if inspect.isawaitable(reply):
            reply = await reply
        return _with_usage(_as_response(reply, "FunctionModel function"), self.usage)


class InMemoryRetriever:
    """BM25 (k1=1.2, b=0.75) over a few texts, for tests and examples.

    ``documents`` is a list of chunks, a list of strings (sources ``doc-1``, ``doc-2``, ...) or a
    mapping of source to text. Scores are the BM25 score divided by the best score the query
    could reach (every query term at saturation), so they lie in [0, 1] and mean the same thing
    across queries. Stopwords are ignored; chunks with no query term are not returned.
    """

    k1 = 1.2
    b = 0.75

    def __init__(self, documents: Iterable[Chunk] | Iterable[str] | Mapping[str, str]) -> None:
        if isinstance(documents, Mapping):
            items = [Chunk(content=text, source=src, score=0.0) for src, text in documents.items()]
        else:
            items = [
                d if isinstance(d, Chunk) else Chunk(content=d, source=f"doc-{i}", score=0.0)
                for i, d in enumerate(documents, 1)
            ]
        self.chunks = items
        self._terms = [Counter(self._index_terms(c.content)) for c in items]
        self._lengths = [sum(t.values()) for t in self._terms]
        self._avg_length = (sum(self._lengths) / len(items)) if items else 0.0
        self._df: Counter[str] = Counter(term for terms in self._terms for term in terms)
        self.calls: list[tuple[str, int]] = []

    @staticmethod
    def _index_terms(text: str) -> list[str]:
        return [t for t in tokenize(text) if t not in STOPWORDS]

    def _idf(self, term: str) -> float:
        n = len(self.chunks)
        return math.log(1 + (n - self._df[term] + 0.5) / (self._df[term] + 0.5))

    def retrieve(self, query: str, top_k: int = 5) -> list[Chunk]:
        self.calls.append((query, top_k))
        terms = set(self._index_terms(query))
        ceiling = sum(self._idf(t) for t in terms if self._df[t]) * (self.k1 + 1)
        if ceiling <= 0:
            return []
        scored: list[tuple[float, int]] = []
        for i, tf in enumerate(self._terms):
            norm = self.k1 * (1 - self.b + self.b * self._lengths[i] / (self._avg_length or 1))
            score = sum(
                self._idf(t) * tf[t] * (self.k1 + 1) / (tf[t] + norm) for t in terms if tf[t]
            )
            if score > 0:
                scored.append((score, i))
        scored.sort(key=lambda pair: (-pair[0], pair[1]))
        return [
            self.chunks[i].model_copy(update={"score": min(1.0, score / ceiling)})
            for score, i in scored[:top_k]
        ]

    async def aretrieve(self, query: str, top_k: int = 5) -> list[Chunk]:
        return self.retrieve(query, top_k)
