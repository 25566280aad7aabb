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
from ragloop.providers.base import MODEL_MAX_TOKENS, HTTPChatModel
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
    finish_reason: str | None = None


class _Completion(BaseModel):
    choices: list[_Choice] = Field(min_length=1)
    usage: dict[str, Any] | None = None


class _Delta(BaseModel):
    content: str | None = None


class _DeltaChoice(BaseModel):
    delta: _Delta = Field(default_factory=_Delta)
    finish_reason: str | None = None


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
    is sent when set; ``max_tokens`` caps every reply (default 4096; a call may ask for less,
    as the LLM components do; None sends no bound unless the call asks for one);
    ``extra_body`` is merged into every request body. ``context_window`` declares the model's
    window in tokens; left None, it is read from the server when the LLM components first need
    it (:meth:`adiscover_context_window`: llama.cpp's ``/props``, the ``/models`` metadata of
    llama.cpp, vLLM and gateways that give it), and from a context-overflow error's sizes.
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
        max_tokens: int | None = MODEL_MAX_TOKENS,
        context_window: int | None = None,
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
        super().__init__(
            model,
            connection,
            provider=provider,
            price=price,
            extra_body=extra_body,
            max_tokens=max_tokens,
            context_window=context_window,
        )
        self.json_mode = json_mode
        self.temperature = temperature
        self.supports_tools = supports_tools
        self._native_tools = supports_tools is not False
        self._window_asked = False

    # -- requests ---------------------------------------------------------------------------------
    def _payload(
        self,
        messages: list[Message],
        tools: list[Tool] | None,
        *,
        stream: bool,
        max_tokens: int | None,
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
        if max_tokens is not None:
            # OpenAI deprecated max_tokens (its reasoning models refuse it); other servers
            # mostly know only max_tokens.
            key = "max_completion_tokens" if self.provider == "openai" else "max_tokens"
            payload[key] = max_tokens
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
        finish = completion.choices[0].finish_reason
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
            parsed = parse_text_tool_calls(text, tools, cut=finish == "length")
            return parsed.model_copy(update={"usage": usage, "finish_reason": finish})
        return ModelResponse(text=text, tool_calls=calls, usage=usage, finish_reason=finish)

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
        for choice in chunk.choices or []:
            if choice.finish_reason:
                counts["finish_reason"] = choice.finish_reason
        return "".join(c.delta.content or "" for c in chunk.choices or [])

    # -- the context window -----------------------------------------------------------------------
    def _window_urls(self) -> list[str]:
        root = self.base_url.removesuffix("/v1")
        return [f"{root}/props", f"{self.base_url}/models"]

    def _window_in(self, data: Any) -> int | None:
        """The context window a ``/props`` or ``/models`` body gives for this model."""
        if not isinstance(data, dict):
            return None
        settings = data.get("default_generation_settings")  # llama.cpp's /props: per slot
        if isinstance(settings, dict) and isinstance(settings.get("n_ctx"), int):
            return int(settings["n_ctx"])
        entries = [e for e in data.get("data") or [] if isinstance(e, dict)]
        named = [e for e in entries if self.model_name in (e.get("id"), *(e.get("aliases") or []))]
        for entry in named or entries[:1]:
            meta = entry.get("meta")
            meta = meta if isinstance(meta, dict) else {}
            for value in (
                meta.get("n_ctx"),  # llama.cpp
                entry.get("max_model_len"),  # vLLM
                entry.get("context_length"),  # OpenRouter, LM Studio
                entry.get("context_window"),
            ):
                if isinstance(value, int) and value > 0:
                    return value
        return None

    def _found_window(self, window: int | None) -> int | None:
        self._window_asked = True
        if window is not None:
            self.context_window = window
            logger.info(
                "%s: context window of %r is %d tokens", self.base_url, self.model_name, window
            )
        return self.context_window

    def discover_context_window(self) -> int | None:
        """The context window: as configured, else as the server says (asked once; None when
        it does not say). OpenAI's own API does not say: configure it."""
        if self.context_window is not None or self._window_asked or self.provider == "openai":
            return self.context_window
        for url in self._window_urls():
            try:
                window = self._window_in(self._connection.get_json(url))
            except ModelError as error:
                logger.debug("no context window from %s: %s", url, error)
                continue
            if window is not None:
                return self._found_window(window)
        return self._found_window(None)

    async def adiscover_context_window(self) -> int | None:
        """:meth:`discover_context_window` for async code."""
        if self.context_window is not None or self._window_asked or self.provider == "openai":
            return self.context_window
        for url in self._window_urls():
            try:
                window = self._window_in(await self._connection.aget_json(url))
            except ModelError as error:
                logger.debug("no context window from %s: %s", url, error)
                continue
            if window is not None:
                return self._found_window(window)
        return self._found_window(None)
