"""Provider responses in the shapes the providers document.

OpenAI: platform.openai.com/docs/api-reference/chat (the chat completion object, the chunk
object, ``stream_options.include_usage`` adding a last chunk with empty ``choices``, ``data:
[DONE]``, and the ``{"error": {...}}`` body). Anthropic: docs.anthropic.com/en/api/messages and
/en/api/messages-streaming (content blocks, ``tool_use``, the ``message_start`` /
``content_block_delta`` / ``message_delta`` / ``message_stop`` events, ``usage`` with the cache
fields, and the ``{"type": "error", "error": {...}}`` body).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from tests.providers.server import Reply


def openai_completion(
    content: str | None = "Hello!",
    *,
    tool_calls: Sequence[tuple[str, str, str]] = (),
    usage: tuple[int, int] | None = (9, 12),
    model: str = "gpt-4o-mini-2024-07-18",
) -> dict[str, Any]:
    """A chat completion; ``tool_calls`` are (id, name, arguments JSON text)."""
    message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": None}
    if tool_calls:
        message["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
            for i, n, a in tool_calls
        ]
    body: dict[str, Any] = {
        "id": "chatcmpl-123",
        "object": "chat.completion",
        "created": 1677652288,
        "model": model,
        "system_fingerprint": "fp_44709d6fcb",
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": "tool_calls" if tool_calls else "stop",
            }
        ],
    }
    if usage is not None:
        body["usage"] = {
            "prompt_tokens": usage[0],
            "completion_tokens": usage[1],
            "total_tokens": sum(usage),
            "prompt_tokens_details": {"cached_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": 0},
        }
    return body


def openai_stream(
    pieces: list[str], usage: tuple[int, int] | None = (9, 12), finish: str = "stop"
) -> Reply:
    """A streamed chat completion: a role chunk, one chunk per piece, a finish chunk (its
    reason ``finish``), the usage chunk (empty ``choices``) when ``usage`` is given, then
    ``[DONE]``."""

    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return json.dumps(
            {
                "id": "chatcmpl-123",
                "object": "chat.completion.chunk",
                "created": 1694268190,
                "model": "gpt-4o-mini",
                "choices": [choice],
                "usage": None,
            }
        )

    events = [chunk({"role": "assistant", "content": ""})]
    events += [chunk({"content": piece}) for piece in pieces]
    events.append(chunk({}, finish))
    if usage is not None:
        events.append(
            json.dumps(
                {
                    "id": "chatcmpl-123",
                    "object": "chat.completion.chunk",
                    "created": 1694268190,
                    "model": "gpt-4o-mini",
                    "choices": [],
                    "usage": {
                        "prompt_tokens": usage[0],
                        "completion_tokens": usage[1],
                        "total_tokens": sum(usage),
                    },
                }
            )
        )
    events.append("[DONE]")
    return Reply(events=[(None, e) for e in events])


def openai_error(status: int, message: str, kind: str = "invalid_request_error", **headers: str):
    return Reply(
        status,
        json={"error": {"message": message, "type": kind, "param": None, "code": None}},
        headers=headers,
    )


def anthropic_message(
    text: str | None = "Hello!",
    *,
    tool_uses: Sequence[tuple[str, str, dict[str, Any]]] = (),
    usage: dict[str, int] | None = None,
    model: str = "claude-sonnet-4-5-20250929",
) -> dict[str, Any]:
    """A message; ``tool_uses`` are (id, name, input)."""
    content: list[dict[str, Any]] = [{"type": "text", "text": text}] if text is not None else []
    content += [{"type": "tool_use", "id": i, "name": n, "input": a} for i, n, a in tool_uses]
    return {
        "id": "msg_013Zva2CMHLNnXjNJJKqJ2EF",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": "tool_use" if tool_uses else "end_turn",
        "stop_sequence": None,
        "usage": usage
        if usage is not None
        else {
            "input_tokens": 2095,
            "output_tokens": 503,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
    }


def anthropic_stream(pieces: list[str], input_tokens: int = 25, output_tokens: int = 15) -> Reply:
    events: list[tuple[str | None, dict[str, Any]]] = [
        (
            "message_start",
            {
                "type": "message_start",
                "message": {
                    "id": "msg_1nZdL29xx5MUA1yADyHTEsnR8uuvGzszyY",
                    "type": "message",
                    "role": "assistant",
                    "content": [],
                    "model": "claude-sonnet-4-5-20250929",
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {"input_tokens": input_tokens, "output_tokens": 1},
                },
            },
        ),
        (
            "content_block_start",
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
        ),
        ("ping", {"type": "ping"}),
    ]
    events += [
        (
            "content_block_delta",
            {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": p}},
        )
        for p in pieces
    ]
    events += [
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": output_tokens},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    return Reply(events=[(name, json.dumps(data)) for name, data in events])


def anthropic_error(status: int, kind: str, message: str, **headers: str) -> Reply:
    return Reply(
        status,
        json={"type": "error", "error": {"type": kind, "message": message}},
        headers=headers,
    )
