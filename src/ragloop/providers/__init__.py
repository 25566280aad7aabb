"""Real LLMs over HTTP, with no vendor SDK: OpenAI, Anthropic and OpenAI-compatible servers.

- :class:`OpenAICompatibleModel`, :class:`AnthropicModel`: chat models (``complete``,
  ``acomplete``, ``stream``, ``astream``), each with ``model_name`` and ``provider``.
- :class:`OpenAICompatibleEmbedder`: an embedder over ``/v1/embeddings``.
- :func:`get_model`, :func:`resolve_model`, :func:`get_embedder`: models from a spec string.
- :class:`RetryPolicy`, :class:`ModelPrice`, :func:`lookup_price`, :func:`describe_price`.

The switch: ``ALLOW_MODEL_REQUESTS`` is ``True`` (any request), ``"loopback"`` (only to
127.0.0.0/8, ::1 and localhost) or ``False`` (none: a model call raises
:class:`~ragloop.ModelError` before anything is sent). Set it to ``False`` in a test suite's
``conftest.py`` so no test can call a real model by accident, and open it for a block with
:func:`override_allow_model_requests`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal, TypeAlias

from ragloop.core.errors import ConfigError
from ragloop.providers.anthropic import AnthropicModel
from ragloop.providers.embeddings import OpenAICompatibleEmbedder
from ragloop.providers.http import RetryPolicy
from ragloop.providers.openai_compat import OpenAICompatibleModel
from ragloop.providers.pricing import ModelPrice, describe_price, lookup_price
from ragloop.providers.registry import get_embedder, get_model, resolve_model

AllowRequests: TypeAlias = bool | Literal["loopback"]

ALLOW_MODEL_REQUESTS: AllowRequests = True


@contextmanager
def override_allow_model_requests(allow: AllowRequests) -> Iterator[None]:
    """Set ``ALLOW_MODEL_REQUESTS`` to ``allow`` inside the block."""
    global ALLOW_MODEL_REQUESTS
    if allow not in (True, False, "loopback"):
        raise ConfigError("allow", f"must be True, False or 'loopback', got {allow!r}")
    before = ALLOW_MODEL_REQUESTS
    ALLOW_MODEL_REQUESTS = allow
    try:
        yield
    finally:
        ALLOW_MODEL_REQUESTS = before


__all__ = [
    "ALLOW_MODEL_REQUESTS",
    "AnthropicModel",
    "ModelPrice",
    "OpenAICompatibleEmbedder",
    "OpenAICompatibleModel",
    "RetryPolicy",
    "describe_price",
    "get_embedder",
    "get_model",
    "lookup_price",
    "override_allow_model_requests",
    "resolve_model",
]
