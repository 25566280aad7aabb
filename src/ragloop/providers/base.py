"""What every HTTP chat model shares: the ChatModel methods, streaming, usage and cost.

A provider subclass only translates: ragloop messages and tools to its request body
(``_payload``), its response body to a :class:`~ragloop.ModelResponse` (``_read``), its stream
events to text deltas (``_stream_text``) and its usage counts to :class:`~ragloop.Usage`
(``_usage``). Sending, retrying and error mapping are the :class:`Connection`'s.

``complete()`` and ``acomplete()`` return the usage (with its cost when the price is known) and
leave charging it to the caller, as every ChatModel does: the engines charge it to the run
through ``ragloop.core.calls.complete``. ``stream()`` and ``astream()`` return only text, so they
charge the usage of a finished stream to the run in progress themselves.
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
from ragloop.core.records import Message, ModelResponse, Tool, Usage
from ragloop.core.redaction import redact
from ragloop.providers.http import Connection, excerpt
from ragloop.providers.pricing import ModelPrice, lookup_price


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
    ) -> None:
        if not isinstance(model, str) or not model.strip():
            raise ConfigError("model", f"must name a model, got {model!r}")
        self.model_name = model
        self.provider = provider
        self.price = price if price is not None else lookup_price(model)
        self.extra_body = dict(extra_body or {})
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
        self, messages: list[Message], tools: list[Tool] | None, *, stream: bool
    ) -> dict[str, Any]:
        raise NotImplementedError

    def _read(self, data: Any, tools: list[Tool] | None) -> ModelResponse:
        """The reply in a response body; raises ``ValidationError`` on a malformed body."""
        raise NotImplementedError

    def _stream_text(self, event: ServerSentEvent, counts: dict[str, Any]) -> str:
        """The text delta in one stream event (may be empty); usage counts go into ``counts``."""
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
        self, messages: list[Message], tools: list[Tool] | None, *, stream: bool
    ) -> dict[str, Any]:
        return {**self._payload(messages, tools, stream=stream), **self.extra_body}

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

    def _charge_stream(self, counts: dict[str, Any]) -> None:
        if counts:
            try:
                usage = self._usage(counts)
            except ValueError as error:  # counts that are negative or not numbers
                raise self._malformed("stream usage", counts, error) from None
            record_usage(usage)

    # -- ChatModel --------------------------------------------------------------------------------
    def complete(self, messages: list[Message], tools: list[Tool] | None = None) -> ModelResponse:
        """One reply (text and/or tool calls) with its usage."""
        try:
            data = self._connection.post_json(self._path, self._body(messages, tools, stream=False))
        except ModelHTTPError as error:
            if self._retry_with_text_tools(error, tools):
                return self.complete(messages, tools)
            raise
        return self._response(data, tools)

    async def acomplete(
        self, messages: list[Message], tools: list[Tool] | None = None
    ) -> ModelResponse:
        """:meth:`complete` for async code."""
        body = self._body(messages, tools, stream=False)
        try:
            data = await self._connection.apost_json(self._path, body)
        except ModelHTTPError as error:
            if self._retry_with_text_tools(error, tools):
                return await self.acomplete(messages, tools)
            raise
        return self._response(data, tools)

    def stream(self, messages: list[Message]) -> Iterator[str]:
        """The reply's text, piece by piece as the server sends it."""
        counts: dict[str, Any] = {}
        body = self._body(messages, None, stream=True)
        for event in self._connection.post_sse(self._path, body):
            delta = self._delta(event, counts)
            if delta:
                yield delta
        self._charge_stream(counts)

    async def astream(self, messages: list[Message]) -> AsyncIterator[str]:
        """:meth:`stream` for async code."""
        counts: dict[str, Any] = {}
        body = self._body(messages, None, stream=True)
        async for event in self._connection.apost_sse(self._path, body):
            delta = self._delta(event, counts)
            if delta:
                yield delta
        self._charge_stream(counts)

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
