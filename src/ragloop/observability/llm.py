"""Model calls wrapped in a ``chat {model}`` span: what engines and LLM components call.

Every call here is bounded and recorded: it asks for at most ``max_tokens`` reply tokens
(:func:`ragloop.core.limits.reply_bound`; the role's default from
:data:`~ragloop.core.limits.DEFAULT_MAX_TOKENS` when not given) and leaves an
:class:`~ragloop.core.limits.LLMCall` (role, bound, finish reason, tokens, what fitting the
prompt left out) for the run's trace.

Chat models may say who they are with ``model_name`` and ``provider`` attributes (the HTTP
providers do); otherwise the span names the model by its ``name`` (the testing fakes), its
``__name__`` (a function) or its class, and the provider ``unknown``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import cast

from ragloop.core import calls
from ragloop.core.calls import ChatFn, GenerateFn
from ragloop.core.limits import LLMCall, PromptFit, default_max_tokens, record_call, reply_bound
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
    max_tokens: int | None,
    fit: PromptFit | None,
    send: Callable[[], Awaitable[ModelResponse]],
) -> ModelResponse:
    name, provider = model_identity(model)
    bound = default_max_tokens(role) if max_tokens is None else max_tokens
    run = current_run()
    with (
        otel.chat_span(
            name,
            provider=provider,
            role=role,
            messages=messages,
            run_id=run.run_id if run else None,
            max_tokens=bound,
        ) as span,
        reply_bound(bound),
    ):
        response = await send()
        span.set(otel.chat_response(response))
    usage = response.usage
    record_call(
        LLMCall(
            role=role,
            model=name,
            max_tokens=bound,
            finish_reason=response.finish_reason,
            input_tokens=usage.input_tokens if usage else None,
            output_tokens=usage.output_tokens if usage else None,
            fit=fit,
        )
    )
    return response


async def complete(
    model: ChatModel | ChatFn,
    messages: list[Message],
    tools: list[Tool] | None = None,
    *,
    role: str = "llm",
    max_tokens: int | None = None,
    fit: PromptFit | None = None,
) -> ModelResponse:
    """:func:`ragloop.core.calls.complete` in a ``chat`` span; ``role`` says what the call is
    for (``controller``, ``answerer``, ``evaluator``, ...), ``max_tokens`` bounds the reply
    (default: the role's), ``fit`` is what fitting the messages left out."""
    return await _traced(
        model, messages, role, max_tokens, fit, lambda: calls.complete(model, messages, tools)
    )


async def ask(
    llm: GenerateFn | ChatModel,
    prompt: str,
    *,
    role: str = "llm",
    max_tokens: int | None = None,
    fit: PromptFit | None = None,
) -> ModelResponse:
    """:func:`ragloop.core.calls.ask` (one prompt, to a model or a ``generate_fn``) in a span,
    bounded and recorded like :func:`complete`."""
    messages = [Message(role="user", content=prompt)]
    return await _traced(
        llm, messages, role, max_tokens, fit, lambda: calls.ask(cast(GenerateFn, llm), prompt)
    )


async def ask_text(
    llm: GenerateFn | ChatModel, prompt: str, *, role: str = "llm", max_tokens: int | None = None
) -> str:
    """The text of :func:`ask`."""
    return (await ask(llm, prompt, role=role, max_tokens=max_tokens)).text
