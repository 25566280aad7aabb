"""What every HTTP chat model shares: the ChatModel methods, streaming, usage and cost.

A provider subclass only translates: ragloop messages and tools to its request body
(``_payload``), its response body to a :class:`~ragloop.ModelResponse` (``_read``), its stream
events to text deltas (``_stream_text``) and its usage counts to :class:`~ragloop.Usage`
(``_usage``). Sending, retrying and error mapping are the :class:`Connection`'s.

``complete()`` and ``acomplete()`` return the usage (with its cost when the price is known) and
leave charging it to the caller, as every ChatModel does: the engines charge it to the run
through ``ragloop.core.calls.complete``. ``stream()`` and ``astream()`` return the text as it
comes (a :class:`TextStream`, whose ``finish_reason`` and ``usage`` are set once it ends), and
charge the usage of a finished stream to the run in progress themselves.

Every request is bounded: the reply may take at most the smaller of the call's bound (the
``max_tokens=`` argument, or :func:`ragloop.core.limits.reply_bound` around the call, which is
how the LLM components ask) and the model's own ``max_tokens``. A server's refusal of a prompt
too long for its context window is raised as :class:`~ragloop.ContextOverflowError`.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator, Mapping
from types import TracebackType
from typing import Any, ClassVar, Self

from httpx_sse import ServerSentEvent
from pydantic import ValidationError

from ragloop.core.budget import record_usage
from ragloop.core.errors import ConfigError, ModelError, ModelHTTPError
from ragloop.core.limits import check_max_tokens, effective_max_tokens, requested_max_tokens
from ragloop.core.records import Message, ModelResponse, Tool, Usage
from ragloop.core.redaction import redact
from ragloop.providers.http import Connection, excerpt
from ragloop.providers.overflow import context_overflow
from ragloop.providers.pricing import ModelPrice, lookup_price

# What a reply may take when neither the call nor the model sets a bound: a model left
# unbounded can generate until the server's context is full.
MODEL_MAX_TOKENS = 4096


class TextStream:
    """The text of a streamed reply, piece by piece. Once the stream has ended,
    ``finish_reason`` says why (``"length"``: cut by the bound) and ``usage`` holds what the
    server reported (both None until then, or when the server sent none)."""

    def __init__(self, pieces: Iterator[str]) -> None:
        self._pieces = pieces
        self.finish_reason: str | None = None
        self.usage: Usage | None = None

    def __iter__(self) -> Iterator[str]:
        return self

    def __next__(self) -> str:
        return next(self._pieces)

    def close(self) -> None:
        close = getattr(self._pieces, "close", None)
        if callable(close):
            close()


class AsyncTextStream:
    """:class:`TextStream` for ``async for``."""

    def __init__(self, pieces: AsyncIterator[str]) -> None:
        self._pieces = pieces
        self.finish_reason: str | None = None
        self.usage: Usage | None = None

    def __aiter__(self) -> AsyncIterator[str]:
        return self

    async def __anext__(self) -> str:
        return await self._pieces.__anext__()

    async def aclose(self) -> None:
        close = getattr(self._pieces, "aclose", None)
        if callable(close):
            await close()


class HTTPChatModel:
    """Base of the HTTP chat models. ``model_name`` and ``provider`` label it in traces."""

    provider: str
    model_name: str
    _path: ClassVar[str]
    _wire_format: ClassVar[str]

    def __init__(
        self,
        model: str,
        connection: Connection,
        *,
        provider: str,
        price: ModelPrice | None,
        extra_body: Mapping[str, Any] | None,
        max_tokens: int | None = MODEL_MAX_TOKENS,
        context_window: int | None = None,
    ) -> None:
        if not isinstance(model, str) or not model.strip():
            raise ConfigError("model", f"must name a model, got {model!r}")
        self.model_name = model
        self.provider = provider
        self.price = price if price is not None else lookup_price(model)
        self.extra_body = dict(extra_body or {})
        self.max_tokens = check_max_tokens(max_tokens)
        self.context_window = check_max_tokens(context_window, "context_window")
        self._connection = connection

    @property
    def base_url(self) -> str:
        return self._connection.base_url

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.model_name!r}, provider={self.provider!r}, "
            f"base_url={redact(self.base_url)!r})"
        )

    # -- what a provider implements -------------------------------------------------------------
    def _payload(
        self,
        messages: list[Message],
        tools: list[Tool] | None,
        *,
        stream: bool,
        max_tokens: int | None,
    ) -> dict[str, Any]:
        """The request body; ``max_tokens`` is the reply bound to send (None: send none)."""
        raise NotImplementedError

    def _read(self, data: Any, tools: list[Tool] | None) -> ModelResponse:
        """The reply in a response body; raises ``ValidationError`` on a malformed body."""
        raise NotImplementedError

    def _stream_text(self, event: ServerSentEvent, counts: dict[str, Any]) -> str:
        """The text delta in one stream event (may be empty); usage counts go into ``counts``,
        and the finish reason, once sent, into ``counts["finish_reason"]``."""
        raise NotImplementedError

    def _usage(self, counts: Mapping[str, Any]) -> Usage:
        raise NotImplementedError

    def _retry_with_text_tools(self, error: ModelHTTPError, tools: list[Tool] | None) -> bool:
        """True if ``error`` says the server has no tool calling and the call should be made
        again without native tools. Only servers that may lack tools override this."""
        return False

    # -- shared -----------------------------------------------------------------------------------
    def _priced(
        self,
        input_tokens: int,
        output_tokens: int,
        *,
        cache_write_tokens: int = 0,
        cache_read_tokens: int = 0,
    ) -> Usage:
        """Usage with its cost; ``input_tokens`` includes the cache write and read tokens."""
        cost = None
        if self.price is not None:
            cost = self.price.cost(
                max(0, input_tokens - cache_write_tokens - cache_read_tokens),
                output_tokens,
                cache_write_tokens=cache_write_tokens,
                cache_read_tokens=cache_read_tokens,
            )
        return Usage(input_tokens=input_tokens, output_tokens=output_tokens, cost_usd=cost)

    def _body(
        self,
        messages: list[Message],
        tools: list[Tool] | None,
        *,
        stream: bool,
        max_tokens: int | None,
    ) -> dict[str, Any]:
        check_max_tokens(max_tokens)
        bound = effective_max_tokens(
            max_tokens if max_tokens is not None else requested_max_tokens(), self.max_tokens
        )
        payload = self._payload(messages, tools, stream=stream, max_tokens=bound)
        return {**payload, **self.extra_body}

    def _overflow(self, error: ModelHTTPError) -> ModelHTTPError:
        """``error`` as a :class:`~ragloop.ContextOverflowError` when it says the prompt does
        not fit the context window (the window it names is remembered), else ``error``."""
        overflow = context_overflow(error)
        if overflow is None:
            return error
        if overflow.context_window is not None and self.context_window is None:
            self.context_window = overflow.context_window
        return overflow

    def _response(self, data: Any, tools: list[Tool] | None) -> ModelResponse:
        try:
            return self._read(data, tools)
        except ValidationError as error:
            raise self._malformed("response", data, error) from None

    def _delta(self, event: ServerSentEvent, counts: dict[str, Any]) -> str:
        try:
            return self._stream_text(event, counts)
        except ValueError as error:  # bad JSON or a ValidationError
            raise self._malformed("stream event", event.data, error) from None

    def _malformed(self, what: str, data: Any, error: Exception) -> ModelError:
        shown = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
        first = str(error).splitlines()[0] if str(error) else type(error).__name__
        return ModelError(
            f"{self.base_url}{self._path} returned a {what} that is not {self._wire_format} "
            f"({first}): {excerpt(shown)}",
            content=excerpt(shown),
        )

    def _end_stream(self, counts: dict[str, Any], stream: TextStream | AsyncTextStream) -> None:
        stream.finish_reason = counts.pop("finish_reason", None)
        if counts:
            try:
                stream.usage = self._usage(counts)
            except ValueError as error:  # counts that are negative or not numbers
                raise self._malformed("stream usage", counts, error) from None
            record_usage(stream.usage)

    # -- ChatModel --------------------------------------------------------------------------------
    def complete(
        self,
        messages: list[Message],
        tools: list[Tool] | None = None,
        *,
        max_tokens: int | None = None,
    ) -> ModelResponse:
        """One reply (text and/or tool calls) with its usage and finish reason; ``max_tokens``
        bounds this reply (see the module docstring)."""
        body = self._body(messages, tools, stream=False, max_tokens=max_tokens)
        try:
            data = self._connection.post_json(self._path, body)
        except ModelHTTPError as error:
            if self._retry_with_text_tools(error, tools):
                return self.complete(messages, tools, max_tokens=max_tokens)
            raise self._overflow(error) from None
        return self._response(data, tools)

    async def acomplete(
        self,
        messages: list[Message],
        tools: list[Tool] | None = None,
        *,
        max_tokens: int | None = None,
    ) -> ModelResponse:
        """:meth:`complete` for async code."""
        body = self._body(messages, tools, stream=False, max_tokens=max_tokens)
        try:
            data = await self._connection.apost_json(self._path, body)
        except ModelHTTPError as error:
            if self._retry_with_text_tools(error, tools):
                return await self.acomplete(messages, tools, max_tokens=max_tokens)
            raise self._overflow(error) from None
        return self._response(data, tools)

    def stream(self, messages: list[Message], *, max_tokens: int | None = None) -> TextStream:
        """The reply's text, piece by piece as the server sends it (a :class:`TextStream`)."""
        body = self._body(messages, None, stream=True, max_tokens=max_tokens)

        def pieces() -> Iterator[str]:
            counts: dict[str, Any] = {}
            try:
                for event in self._connection.post_sse(self._path, body):
                    delta = self._delta(event, counts)
                    if delta:
                        yield delta
            except ModelHTTPError as error:
                raise self._overflow(error) from None
            self._end_stream(counts, stream)

        stream = TextStream(pieces())
        return stream

    def astream(self, messages: list[Message], *, max_tokens: int | None = None) -> AsyncTextStream:
        """:meth:`stream` for async code (an :class:`AsyncTextStream`)."""
        body = self._body(messages, None, stream=True, max_tokens=max_tokens)

        async def pieces() -> AsyncIterator[str]:
            counts: dict[str, Any] = {}
            try:
                async for event in self._connection.apost_sse(self._path, body):
                    delta = self._delta(event, counts)
                    if delta:
                        yield delta
            except ModelHTTPError as error:
                raise self._overflow(error) from None
            self._end_stream(counts, stream)

        stream = AsyncTextStream(pieces())
        return stream

    # -- lifetime ---------------------------------------------------------------------------------
    def close(self) -> None:
        """Close the connection pool the model made for sync calls (it is also closed when the
        model is garbage-collected); a client passed as ``http_client`` stays open."""
        self._connection.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
