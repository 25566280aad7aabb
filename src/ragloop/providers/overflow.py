"""Recognising a server's "the prompt does not fit the context window" among its HTTP errors.

Each server words it its own way, with the sizes in its own places:

- llama.cpp: ``{"error": {"type": "exceed_context_size_error", "n_prompt_tokens": 5775,
  "n_ctx": 4096, ...}}``;
- OpenAI: code ``context_length_exceeded``, "This model's maximum context length is 8192
  tokens. However, your messages resulted in 9000 tokens.";
- vLLM: "... maximum context length is 2048 tokens. However, you requested 3000 tokens (2000 in
  the messages, 1000 in the completion)";
- Anthropic: "prompt is too long: 201234 tokens > 200000 maximum".
"""

from __future__ import annotations

import re

from ragloop.core.errors import ContextOverflowError, ModelHTTPError

_MARKERS = (
    "exceed_context_size_error",
    "exceeds the available context size",
    "context_length_exceeded",
    "maximum context length",
    "prompt is too long",
    "context window",
    "input is too long",
)
_WINDOW = (
    re.compile(r'"n_ctx"\s*:\s*(\d+)'),
    re.compile(r"maximum context length is (\d+)"),
    re.compile(r"tokens\s*>\s*(\d+)\s*maximum"),
    re.compile(r"context size \((\d+) tokens\)"),
)
_PROMPT = (
    re.compile(r'"n_prompt_tokens"\s*:\s*(\d+)'),
    re.compile(r"\((\d+) in the messages"),
    re.compile(r"messages resulted in (\d+) tokens"),
    re.compile(r"too long:\s*(\d+) tokens"),
    re.compile(r"request \((\d+) tokens\)"),
)


def _first_number(patterns: tuple[re.Pattern[str], ...], text: str) -> int | None:
    for pattern in patterns:
        found = pattern.search(text)
        if found:
            return int(found.group(1))
    return None


def context_overflow(error: ModelHTTPError) -> ContextOverflowError | None:
    """``error`` as a :class:`~ragloop.ContextOverflowError` if it is a context-window refusal
    (with the sizes the server named), else None."""
    if isinstance(error, ContextOverflowError):
        return error
    if error.status not in (400, 413, 422):
        return None
    text = error.body.lower()
    if not any(marker in text for marker in _MARKERS):
        return None
    return ContextOverflowError(
        error.status,
        error.body,
        url=error.url,
        prompt_tokens=_first_number(_PROMPT, text),
        context_window=_first_number(_WINDOW, text),
    )
