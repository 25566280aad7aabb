"""Chat models that speak OpenAI's ``/v1/chat/completions``: OpenAI itself, and the servers
that copy its API (Ollama, vLLM, llama.cpp's server, LM Studio, most gateways)."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

import httpx
from httpx_sse import ServerSentEvent
from pydantic import BaseModel, Field

from ragloop.core.errors import ModelError, ModelHTTPError
from ragloop.core.records import Message, ModelResponse, Tool, ToolCall, Usage
from ragloop.providers.base import HTTPChatModel
from ragloop.providers.endpoints import OPENAI_ENV, resolve_endpoint
from ragloop.providers.http import (
    DEFAULT_STREAM_TIMEOUT_S,
    DEFAULT_TIMEOUT,
    Connection,
    RetryPolicy,
    excerpt,
)
from ragloop.providers.pricing import ModelPrice
from ragloop.providers.tools import parse_arguments, parse_text_tool_calls, to_text_protocol

logger = logging.getLogger("ragloop.providers")


def openai_connection(
    base_url: str | None,
    api_key: str | None,
    *,
    timeout: float | httpx.Timeout,
    retry: RetryPolicy | None,
    http_client: httpx.Client | httpx.AsyncClient | None,
    stream_timeout: float | None = DEFAULT_STREAM_TIMEOUT_S,
) -> tuple[str, Connection]:
    """The provider label and the connection of an OpenAI-style API (see ``endpoints``)."""
    endpoint = resolve_endpoint(OPENAI_ENV, base_url=base_url, api_key=api_key)
    headers = {"Authorization": f"Bearer {endpoint.api_key}"} if endpoint.api_key else {}
    provider = "openai" if endpoint.is_public_api else "openai-compatible"
    connection = Connection(
        endpoint,
        headers,
        timeout=timeout,
        retry=retry,
        http_client=http_client,
        stream_timeout_s=stream_timeout,
    )
    return provider, connection


# -- the wire format (platform.openai.com/docs/api-reference/chat) ----------------------------


def _wire_message(message: Message) -> dict[str, Any]:
    if message.role == "tool":
        return {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.content}
    wire: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.tool_calls:
        wire["content"] = message.content or None
        wire["tool_calls"] = [
            {
                "id": call.id,
                "type": "function",
                "function": {"name": call.name, "arguments": json.dumps(call.arguments)},
            }
            for call in message.tool_calls
        ]
    return wire


def _wire_tool(tool: Tool) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": tool.name,
            "description": tool.description,
            "parameters": tool.parameters,
        },
    }


class _Function(BaseModel):
    name: str
    arguments: str | dict[str, Any] | None = None


class _ToolCall(BaseModel):
    id: str | None = None
    function: _Function


class _Message(BaseModel):
    content: str | None = None
    tool_calls: list[_ToolCall] | None = None


class _Choice(BaseModel):
    message: _Message


class _Completion(BaseModel):
    choices: list[_Choice] = Field(min_length=1)
    usage: dict[str, Any] | None = None


class _Delta(BaseModel):
    content: str | None = None


class _DeltaChoice(BaseModel):
    delta: _Delta = Field(default_factory=_Delta)


class _Chunk(BaseModel):
    choices: list[_DeltaChoice] | None = None
    usage: dict[str, Any] | None = None
    error: Any = None


class _Usage(BaseModel):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    prompt_tokens_details: dict[str, Any] | None = None


class OpenAICompatibleModel(HTTPChatModel):
    """A chat model behind an OpenAI-style ``/chat/completions`` endpoint.

    ``base_url`` defaults to ``RAGLOOP_OPENAI_BASE_URL``, ``OPENAI_BASE_URL`` or OpenAI's API;
    ``api_key`` to the key configured for that URL (see ``ragloop.providers.endpoints``: a key
    from the environment never goes to a URL it was not configured for). Local servers need no
    key. ``provider`` is ``"openai"`` for OpenAI's API and ``"openai-compatible"`` otherwise.

    Options: ``json_mode`` asks for a JSON object reply (``response_format``); ``temperature``
    and ``max_tokens`` are sent when set; ``extra_body`` is merged into every request body.
    ``supports_tools``: ``None`` tries native tool calling and, if the server rejects the tools,
    switches this model to the JSON-in-text protocol of ``ragloop.providers.tools``; ``True``
    always sends native tools, ``False`` always uses the text protocol. ``price`` overrides the
    price table (``ModelPrice(0, 0)`` makes a local model free, so dollar budgets apply).
    ``timeout`` bounds each network read and the whole reply; ``stream_timeout`` the whole of
    a ``stream()`` (600 s; None: no limit).
    """

    _path = "/chat/completions"
    _wire_format = "an OpenAI chat completion"

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        http_client: httpx.Client | httpx.AsyncClient | None = None,
        retry: RetryPolicy | None = None,
        json_mode: bool = False,
        temperature: float | None = None,
        max_tokens: int | None = None,
        supports_tools: bool | None = None,
        price: ModelPrice | None = None,
        extra_body: Mapping[str, Any] | None = None,
        stream_timeout: float | None = DEFAULT_STREAM_TIMEOUT_S,
    ) -> None:
        provider, connection = openai_connection(
            base_url,
            api_key,
            timeout=timeout,
            retry=retry,
            http_client=http_client,
            stream_timeout=stream_timeout,
        )
        super().__init__(model, connection, provider=provider, price=price, extra_body=extra_body)
        self.json_mode = json_mode
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.supports_tools = supports_tools
        self._native_tools = supports_tools is not False

    # -- requests ---------------------------------------------------------------------------------
    def _payload(
        self, messages: list[Message], tools: list[Tool] | None, *, stream: bool
    ) -> dict[str, Any]:
        if tools and not self._native_tools:
            messages = to_text_protocol(messages, tools)
        payload: dict[str, Any] = {
            "model": self.model_name,
            "messages": [_wire_message(m) for m in messages],
        }
        if tools and self._native_tools:
            payload["tools"] = [_wire_tool(t) for t in tools]
        if self.json_mode:
            payload["response_format"] = {"type": "json_object"}
        if self.temperature is not None:
            payload["temperature"] = self.temperature
        if self.max_tokens is not None:
            # OpenAI deprecated max_tokens (its reasoning models refuse it); other servers
            # mostly know only max_tokens.
            key = "max_completion_tokens" if self.provider == "openai" else "max_tokens"
            payload[key] = self.max_tokens
        if stream:
            payload["stream"] = True
            payload["stream_options"] = {"include_usage": True}
        return payload

    def _retry_with_text_tools(self, error: ModelHTTPError, tools: list[Tool] | None) -> bool:
        if not (tools and self._native_tools and self.supports_tools is None):
            return False
        # Ollama: 400 "... does not support tools"; vLLM: 400 "auto" tool choice requires
        # --enable-auto-tool-choice; servers that validate strictly: 422 on the "tools" field.
        if not (400 <= error.status < 500 and "tool" in error.body.lower()):
            return False
        logger.warning(
            "%s rejected native tool calling (HTTP %d); %r uses the JSON-in-text tool protocol "
            "from now on",
            self.base_url,
            error.status,
            self.model_name,
        )
        self._native_tools = False
        return True

    # -- responses --------------------------------------------------------------------------------
    def _read(self, data: Any, tools: list[Tool] | None) -> ModelResponse:
        completion = _Completion.model_validate(data)
        message = completion.choices[0].message
        usage = self._usage(completion.usage) if completion.usage else None
        text = message.content or ""
        calls = [
            ToolCall(
                name=call.function.name,
                arguments=parse_arguments(call.function.arguments, call.function.name),
                **({"id": call.id} if call.id else {}),
            )
            for call in message.tool_calls or []
        ]
        if not calls and tools and not self._native_tools:
            return parse_text_tool_calls(text, tools).model_copy(update={"usage": usage})
        return ModelResponse(text=text, tool_calls=calls, usage=usage)

    def _usage(self, counts: Mapping[str, Any]) -> Usage:
        usage = _Usage.model_validate(counts)
        cached = (usage.prompt_tokens_details or {}).get("cached_tokens")
        return self._priced(
            usage.prompt_tokens or 0,
            usage.completion_tokens or 0,
            cache_read_tokens=cached if isinstance(cached, int) and cached > 0 else 0,
        )

    def _stream_text(self, event: ServerSentEvent, counts: dict[str, Any]) -> str:
        if event.data.strip() == "[DONE]":
            return ""
        chunk = _Chunk.model_validate_json(event.data)
        if chunk.error is not None:
            shown = json.dumps(chunk.error, ensure_ascii=False)
            raise ModelError(
                f"{self.base_url}{self._path} stream failed: {excerpt(shown)}",
                content=excerpt(shown),
            )
        if chunk.usage:
            counts.update(chunk.usage)
        return "".join(c.delta.content or "" for c in chunk.choices or [])
