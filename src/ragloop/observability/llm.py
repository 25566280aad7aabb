"""Model calls wrapped in a ``chat {model}`` span: what engines and LLM components call.

Chat models may say who they are with ``model_name`` and ``provider`` attributes (the HTTP
providers do); otherwise the span names the model by its ``name`` (the testing fakes), its
``__name__`` (a function) or its class, and the provider ``unknown``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import cast

from ragloop.core import calls
from ragloop.core.calls import ChatFn, GenerateFn
from ragloop.core.protocols import ChatModel
from ragloop.core.records import Message, ModelResponse, Tool
from ragloop.observability import otel
from ragloop.observability.run import current_run


def model_identity(model: object) -> tuple[str, str]:
    """``(model name, provider name)`` of a chat model or a model function."""
    name = (
        getattr(model, "model_name", None)
        or getattr(model, "name", None)
        or getattr(model, "__name__", None)
        or type(model).__name__
    )
    provider = getattr(model, "provider", None) or "unknown"
    return str(name), str(provider)


async def _traced(
    model: object,
    messages: list[Message],
    role: str,
    send: Callable[[], Awaitable[ModelResponse]],
) -> ModelResponse:
    name, provider = model_identity(model)
    run = current_run()
    with otel.chat_span(
        name,
        provider=provider,
        role=role,
        messages=messages,
        run_id=run.run_id if run else None,
    ) as span:
        response = await send()
        span.set(otel.chat_response(response))
    return response


async def complete(
    model: ChatModel | ChatFn,
    messages: list[Message],
    tools: list[Tool] | None = None,
    *,
    role: str = "llm",
) -> ModelResponse:
    """:func:`ragloop.core.calls.complete` in a ``chat`` span; ``role`` says what the call is
    for (``controller``, ``answerer``, ``evaluator``, ...)."""
    return await _traced(model, messages, role, lambda: calls.complete(model, messages, tools))


async def ask(llm: GenerateFn | ChatModel, prompt: str, *, role: str = "llm") -> ModelResponse:
    """:func:`ragloop.core.calls.ask` (one prompt, to a model or a ``generate_fn``) in a span."""
    messages = [Message(role="user", content=prompt)]
    return await _traced(llm, messages, role, lambda: calls.ask(cast(GenerateFn, llm), prompt))


async def ask_text(llm: GenerateFn | ChatModel, prompt: str, *, role: str = "llm") -> str:
    """The text of :func:`ask`."""
    return (await ask(llm, prompt, role=role)).text
