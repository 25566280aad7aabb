"""Core records shared by every engine: chunks, chat messages, tool calls, usage, stop reasons."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


def chunk_id(source: str, content: str) -> str:
    """The stable default id of a chunk: a hash of its source and content."""
    digest = hashlib.sha256(f"{source}\x00{content}".encode()).hexdigest()
    return digest[:16]


class Chunk(BaseModel):
    """A retrieved piece of text.

    ``score`` is a relevance in [0, 1] (normalise raw BM25 or cosine scores before building a
    chunk). ``id`` is stable: it defaults to a hash of ``source`` and ``content``, so the same text
    from the same source is the same chunk in every run.
    """

    content: str
    source: str
    score: float
    metadata: dict[str, Any] = Field(default_factory=dict)
    id: str = ""

    @field_validator("score")
    @classmethod
    def _score_in_unit_range(cls, value: float) -> float:
        if not 0.0 <= value <= 1.0:  # also rejects NaN
            raise ValueError(
                f"Chunk.score must be in [0, 1], got {value!r}; normalise the retriever's raw "
                "scores (BM25, distances, cosine in [-1, 1]) before building chunks"
            )
        return value

    @model_validator(mode="after")
    def _default_id(self) -> Chunk:
        if not self.id:
            self.id = chunk_id(self.source, self.content)
        return self

    @property
    def chunk_id(self) -> str:
        """Seed 004's name for :attr:`id`."""
        return self.id

    @property
    def text(self) -> str:
        """Seed 004's name for :attr:`content`."""
        return self.content


class ToolCall(BaseModel):
    """A model's request to call a tool. ``arguments`` is already parsed into a dict."""

    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    id: str = Field(default_factory=lambda: f"call_{uuid.uuid4().hex[:12]}")


Role = Literal["system", "user", "assistant", "tool"]


class Message(BaseModel):
    """One chat message. ``tool_call_id`` links a ``tool`` message to the call it answers."""

    role: Role
    content: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    tool_call_id: str | None = None


ToolCallback = Callable[[dict[str, Any]], "str | Awaitable[str]"]


class Tool(BaseModel):
    """A tool a model may call: a name, a description and a JSON schema for its arguments.

    ``callback`` (sync or async) receives the parsed arguments and returns the text the model
    sees. It is not serialised.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    name: str
    description: str
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})
    callback: ToolCallback | None = Field(default=None, exclude=True, repr=False)


class Usage(BaseModel):
    """Tokens (and, where the provider's price is known, dollars) spent by model calls."""

    input_tokens: int = Field(default=0, ge=0)
    output_tokens: int = Field(default=0, ge=0)
    cost_usd: float | None = Field(default=None, ge=0)

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def __add__(self, other: Usage) -> Usage:
        if self.cost_usd is None and other.cost_usd is None:
            cost = None
        else:
            cost = (self.cost_usd or 0.0) + (other.cost_usd or 0.0)
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cost_usd=cost,
        )


class ModelResponse(BaseModel):
    """What a chat model returns: text, tool calls, or both, and the usage when known.

    ``finish_reason`` says why the reply ended, in OpenAI's words whatever the provider:
    ``"stop"`` (the model finished), ``"length"`` (cut by the reply bound, ``max_tokens``),
    ``"tool_calls"``, ``"content_filter"``; None when the model did not say.
    """

    text: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    usage: Usage | None = None
    finish_reason: str | None = None

    @property
    def truncated(self) -> bool:
        """True when the reply was cut by its bound (``finish_reason == "length"``)."""
        return self.finish_reason == "length"


class StopReason(StrEnum):
    """Why a run ended. One enum for every engine; values are lower-case strings.

    ``caller_stop`` is the caller's doing (a callback said stop), and so is ``cancelled`` (the
    task running it was cancelled, or the reader of its stream stopped); ``no_new_queries`` the
    loop's own refiner had nothing new to search. :attr:`outcome` groups the reasons by what
    they mean for the user, for displays that colour them.
    """

    CONVERGED = "converged"
    MAX_ITERATIONS = "max_iterations"
    HUMAN_APPROVED = "human_approved"
    ERROR = "error"
    ANSWERED = "answered"
    GAVE_UP = "gave_up"
    DIMINISHING_RETURNS = "diminishing_returns"
    NO_IMPROVEMENT = "no_improvement"
    CALLER_STOP = "caller_stop"
    CANCELLED = "cancelled"
    NO_NEW_QUERIES = "no_new_queries"
    BUDGET_TOKENS = "budget_tokens"
    BUDGET_DOLLARS = "budget_dollars"
    BUDGET_WALL_MS = "budget_wall_ms"
    BUDGET_ITER = "budget_iter"

    @property
    def is_budget(self) -> bool:
        """True for the four budget stops."""
        return self.value.startswith("budget_")

    @property
    def outcome(self) -> str:
        """What the stop means: ``success`` (converged, answered, approved), ``settled`` (the
        evidence stopped growing or improving, or nothing new was left to search), ``limit``
        (the iterations ran out), ``budget``, ``caller`` (a callback stopped it, or it was
        cancelled), ``gave_up``
        or ``error``."""
        return _OUTCOMES.get(self, "budget" if self.is_budget else self.value)


_OUTCOMES = {
    StopReason.CONVERGED: "success",
    StopReason.ANSWERED: "success",
    StopReason.HUMAN_APPROVED: "success",
    StopReason.DIMINISHING_RETURNS: "settled",
    StopReason.NO_IMPROVEMENT: "settled",
    StopReason.NO_NEW_QUERIES: "settled",
    StopReason.MAX_ITERATIONS: "limit",
    StopReason.CALLER_STOP: "caller",
    StopReason.CANCELLED: "caller",
}


@dataclass(frozen=True)
class Scope:
    """Which chunks a query may see. ``collections=None`` is every collection, ``[]`` none.

    ``filters`` match metadata exactly: a value, or a list of accepted values. Keys are the
    chunk's metadata keys (``source``, ``title``, ``page``, document metadata, ...).
    """

    collections: tuple[str, ...] | None = None
    filters: tuple[tuple[str, Any], ...] = ()

    @classmethod
    def of(
        cls, collection: str | Sequence[str] | None = None, filters: dict[str, Any] | None = None
    ) -> Scope:
        collections: tuple[str, ...] | None
        if collection is None:
            collections = None
        elif isinstance(collection, str):
            collections = (collection,)
        else:
            collections = tuple(collection)
        items = tuple(sorted((filters or {}).items(), key=lambda kv: kv[0]))
        return cls(collections, items)

    @property
    def empty(self) -> bool:
        return self.collections is not None and not self.collections

    def accepts(self, collection: str, metadata: dict[str, Any]) -> bool:
        if self.collections is not None and collection not in self.collections:
            return False
        for key, wanted in self.filters:
            value = metadata.get(key)
            if isinstance(wanted, list | tuple | set | frozenset):
                if value not in wanted:
                    return False
            elif value != wanted:
                return False
        return True
