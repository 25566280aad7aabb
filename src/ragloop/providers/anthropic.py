"""Claude through Anthropic's Messages API (``/v1/messages``), without the vendor SDK."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import httpx
from httpx_sse import ServerSentEvent
from pydantic import BaseModel

from ragloop.core.errors import ConfigError, ModelError
from ragloop.core.records import Message, ModelResponse, Tool, ToolCall, Usage
from ragloop.providers.base import MODEL_MAX_TOKENS, HTTPChatModel
from ragloop.providers.endpoints import ANTHROPIC_ENV, resolve_endpoint
from ragloop.providers.http import (
    DEFAULT_STREAM_TIMEOUT_S,
    DEFAULT_TIMEOUT,
    Connection,
    RetryPolicy,
    excerpt,
)
from ragloop.providers.pricing import ModelPrice
from ragloop.providers.tools import parse_arguments

ANTHROPIC_VERSION = "2023-06-01"
# Every current Claude model reads 200,000 tokens (some more in beta); configure others.
CLAUDE_CONTEXT_WINDOW = 200_000
# Anthropic's stop reasons in OpenAI's words (ModelResponse.finish_reason)
_FINISH_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}


def finish_reason(stop_reason: str | None) -> str | None:
    return None if stop_reason is None else _FINISH_REASONS.get(stop_reason, stop_reason)


# -- the wire format (docs.anthropic.com/en/api/messages) ---------------------------------------


def _blocks(message: Message) -> list[dict[str, Any]]:
    if message.role == "tool":
        return [
            {
                "type": "tool_result",
                "tool_use_id": message.tool_call_id,
                "content": message.content,
            }
        ]
    blocks: list[dict[str, Any]] = []
    if message.content:  # the API refuses empty text blocks
        blocks.append({"type": "text", "text": message.content})
    blocks.extend(
        {"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments}
        for c in message.tool_calls
    )
    return blocks


def wire_messages(messages: list[Message]) -> tuple[str, list[dict[str, Any]]]:
    """The system prompt (every system message, joined) and the turns of the conversation.

    Tool results become ``tool_result`` blocks of a user turn, and consecutive messages of one
    role share a turn, so the results of parallel tool calls answer the call in one turn.
    """
    system = "\n\n".join(m.content for m in messages if m.role == "system" and m.content)
    turns: list[dict[str, Any]] = []
    for message in messages:
        if message.role == "system":
            continue
        role = "assistant" if message.role == "assistant" else "user"
        blocks = _blocks(message)
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    return system, turns


class _Block(BaseModel):
    type: str
    text: str | None = None
    id: str | None = None
    name: str | None = None
    input: Any = None


class _Message(BaseModel):
    content: list[_Block]
    usage: dict[str, Any] | None = None
    stop_reason: str | None = None


class _Usage(BaseModel):
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_creation_input_tokens: int | None = None
    cache_read_input_tokens: int | None = None


class _Delta(BaseModel):
    type: str | None = None
    text: str | None = None
    stop_reason: str | None = None


class _Event(BaseModel):
    type: str
    message: _Message | None = None
    delta: _Delta | None = None
    usage: dict[str, Any] | None = None
    error: Any = None


class AnthropicModel(HTTPChatModel):
    """Claude through the Messages API.

    ``base_url`` defaults to ``RAGLOOP_ANTHROPIC_BASE_URL``, ``ANTHROPIC_BASE_URL`` or
    ``https://api.anthropic.com``; ``api_key`` to the key configured for that URL (the
    ``RAGLOOP_ANTHROPIC_API_KEY`` / ``ANTHROPIC_API_KEY`` rules of
    ``ragloop.providers.endpoints``). System messages become the ``system`` prompt; tool calls
    and results travel as ``tool_use`` and ``tool_result`` blocks. ``max_tokens`` is required by
    the API (default 4096; a call may ask for less, as the LLM components do). Usage counts
    prompt-cache reads and writes as input tokens, priced at the cache rates.
    ``context_window`` defaults to Claude's 200,000 tokens.
    ``timeout`` bounds each network read and the whole reply; ``stream_timeout`` the whole of
    a ``stream()`` (600 s; None: no limit).
    """

    _path = "/v1/messages"
    _wire_format = "an Anthropic message"

    def __init__(
        self,
        model: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        timeout: float | httpx.Timeout = DEFAULT_TIMEOUT,
        http_client: httpx.Client | httpx.AsyncClient | None = None,
        retry: RetryPolicy | None = None,
        temperature: float | None = None,
        max_tokens: int = MODEL_MAX_TOKENS,
        context_window: int | None = CLAUDE_CONTEXT_WINDOW,
        price: ModelPrice | None = None,
        extra_body: Mapping[str, Any] | None = None,
        stream_timeout: float | None = DEFAULT_STREAM_TIMEOUT_S,
    ) -> None:
        if not (isinstance(max_tokens, int) and max_tokens >= 1):
            raise ConfigError("max_tokens", f"must be an integer >= 1, got {max_tokens!r}")
        endpoint = resolve_endpoint(ANTHROPIC_ENV, base_url=base_url, api_key=api_key)
        headers = {"anthropic-version": ANTHROPIC_VERSION}
        if endpoint.api_key:
            headers["x-api-key"] = endpoint.api_key
        connection = Connection(
            endpoint,
            headers,
            timeout=timeout,
            retry=retry,
            http_client=http_client,
            stream_timeout_s=stream_timeout,
        )
        super().__init__(
            model,
            connection,
            provider="anthropic",
            price=price,
            extra_body=extra_body,
            max_tokens=max_tokens,
            context_window=context_window,
        )
        self.temperature = temperature

    def _payload(
        self,
        messages: list[Message],
        tools: list[Tool] | None,
        *,
        stream: bool,
        max_tokens: int | None,
    ) -> dict[str, Any]:
        system, turns = wire_messages(messages)
        payload: dict[str, Any] = {
            "model": self.model_name,
            "max_tokens": max_tokens or MODEL_MAX_TOKENS,
            "messages": turns,
        }
        if system:
            payload["system"] = system
        if tools:
            payload["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.parameters}
                for t in tools
            ]
        if self.temperature is not None:
            payload["temperature"] = self.temperature
        if stream:
            payload["stream"] = True
        return payload

    def _read(self, data: Any, tools: list[Tool] | None) -> ModelResponse:
        message = _Message.model_validate(data)
        text = "".join(b.text or "" for b in message.content if b.type == "text")
        calls = [
            ToolCall(
                name=b.name or "",
                arguments=parse_arguments(b.input, b.name or ""),
                **({"id": b.id} if b.id else {}),
            )
            for b in message.content
            if b.type == "tool_use"
        ]
        usage = self._usage(message.usage) if message.usage else None
        return ModelResponse(
            text=text,
            tool_calls=calls,
            usage=usage,
            finish_reason=finish_reason(message.stop_reason),
        )

    def _usage(self, counts: Mapping[str, Any]) -> Usage:
        usage = _Usage.model_validate(counts)
        written = usage.cache_creation_input_tokens or 0
        read = usage.cache_read_input_tokens or 0
        return self._priced(
            (usage.input_tokens or 0) + written + read,  # input_tokens excludes the cache
            usage.output_tokens or 0,
            cache_write_tokens=written,
            cache_read_tokens=read,
        )

    def _stream_text(self, event: ServerSentEvent, counts: dict[str, Any]) -> str:
        data = _Event.model_validate_json(event.data)
        if data.type == "error":
            shown = json.dumps(data.error, ensure_ascii=False)
            raise ModelError(
                f"{self.base_url}{self._path} stream failed: {excerpt(shown)}",
                content=excerpt(shown),
            )
        if data.type == "message_start" and data.message and data.message.usage:
            counts.update(data.message.usage)
        elif data.type == "message_delta":
            if data.usage:
                counts.update(data.usage)
            if data.delta and data.delta.stop_reason:
                counts["finish_reason"] = finish_reason(data.delta.stop_reason)
        elif data.type == "content_block_delta" and data.delta and data.delta.type == "text_delta":
            return data.delta.text or ""
        return ""
