"""Model calls wrapped in a ``chat {model}`` span: what engines and LLM components call.

Every call here is bounded and recorded: it asks for at most ``max_tokens`` reply tokens
(:func:`ragloop.core.limits.reply_bound`; the role's default from
:data:`~ragloop.core.limits.DEFAULT_MAX_TOKENS` when not given) and leaves an
:class:`~ragloop.core.limits.LLMCall` (role, bound, finish reason, tokens, what fitting the
prompt left out) for the run's trace.

Chat models may say who they are with ``model_name`` and ``provider`` attributes (the HTTP
providers do); otherwise the span names the model by its ``name`` (the testing fakes), its
``__name__`` (a function) or its class, and the provider ``unknown``.

When the run in progress is streamed (``astream()``) and a chat model that can stream
(``astream(messages)``, as the HTTP providers do) writes an answer (the roles in
:data:`ANSWER_ROLES`, called without tools), its text arrives piece by piece as
``answer_delta`` events; a generator's JSON reply is read as it comes, and only its
``"answer"`` text is sent on.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, cast

from ragloop.core import calls
from ragloop.core.budget import model_call
from ragloop.core.calls import ChatFn, GenerateFn
from ragloop.core.limits import LLMCall, PromptFit, default_max_tokens, record_call, reply_bound
from ragloop.core.protocols import ChatModel
from ragloop.core.records import Message, ModelResponse, Tool, Usage
from ragloop.observability import otel
from ragloop.observability.events import EventKind
from ragloop.observability.run import current_run
from ragloop.observability.stream import streaming

# Model calls whose text is an answer a reader waits for; "generator" replies in JSON.
ANSWER_ROLES = frozenset({"generator", "answerer", "synthesizer"})


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
    if not tools and _streams(model, role):
        send = lambda: _streamed(model, messages, role)  # noqa: E731
    else:
        send = lambda: calls.complete(model, messages, tools)  # noqa: E731
    return await _traced(model, messages, role, max_tokens, fit, send)


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
    if _streams(llm, role):
        send = lambda: _streamed(llm, messages, role)  # noqa: E731
    else:
        send = lambda: calls.ask(cast(GenerateFn, llm), prompt)  # noqa: E731
    return await _traced(llm, messages, role, max_tokens, fit, send)


async def ask_text(
    llm: GenerateFn | ChatModel, prompt: str, *, role: str = "llm", max_tokens: int | None = None
) -> str:
    """The text of :func:`ask`."""
    return (await ask(llm, prompt, role=role, max_tokens=max_tokens)).text


# -- answers streamed as they are written ------------------------------------------------------


def _streams(model: object, role: str) -> bool:
    return (
        role in ANSWER_ROLES
        and streaming()
        and calls.is_chat_model(model)
        and callable(getattr(model, "astream", None))
    )


async def _streamed(model: Any, messages: list[Message], role: str) -> ModelResponse:
    """The reply of ``model.astream``, its answer text sent on as ``answer_delta`` events (the
    provider charges the stream's usage to the run itself). The reply carries the usage and
    finish reason the stream holds once it ended (an HTTP provider's ``TextStream``), so the
    call's record has them and a reply cut by its bound is read as such."""
    run = current_run()
    answer = JsonStringField("answer") if role == "generator" else None
    pieces: list[str] = []
    name, _ = model_identity(model)
    async with model_call(model, f"model {name!r}"):  # admitted by the run's budget, as any call
        stream = cast(AsyncIterator[str], model.astream(messages))
        async for piece in stream:
            pieces.append(piece)
            delta = answer.feed(piece) if answer is not None else piece
            if delta and run is not None:
                run.event(
                    EventKind.ANSWER_DELTA, attributes={"role": role}, content={"delta": delta}
                )
    usage, finish = getattr(stream, "usage", None), getattr(stream, "finish_reason", None)
    return ModelResponse(
        text="".join(pieces),
        usage=usage if isinstance(usage, Usage) else None,
        finish_reason=finish if isinstance(finish, str) else None,
    )


class JsonStringField:
    """Reads a JSON object as it arrives and returns, piece by piece, the text of one of its
    string fields (``{"answer": "..."}``), unescaped. A reply that does not start as a JSON
    object is passed on whole, as it comes: the model answered in plain text."""

    def __init__(self, name: str) -> None:
        self.key = json.dumps(name)
        self.buffer = ""
        self.state = "start"  # start, seek, text, plain, done
        self.escape = ""

    def feed(self, piece: str) -> str:
        if self.state == "plain":
            return piece
        if self.state == "done":
            return ""
        self.buffer += piece
        if self.state == "start":
            head = self.buffer.lstrip()
            if not head:
                return ""
            if not head.startswith(("{", "`")):  # a fenced reply is JSON too
                self.state = "plain"
                return self.buffer
            self.state = "seek"
        if self.state == "seek":
            at = self.buffer.find(self.key)
            if at < 0:
                return ""
            rest = self.buffer[at + len(self.key) :].lstrip()
            if not rest.startswith(":"):
                return ""
            rest = rest[1:].lstrip()
            if not rest.startswith('"'):
                return ""
            self.buffer, self.state = rest[1:], "text"
        return self._text()

    def _text(self) -> str:
        out: list[str] = []
        text, self.buffer = self.escape + self.buffer, ""
        self.escape = ""
        i = 0
        while i < len(text):
            ch = text[i]
            if ch == '"':
                self.state = "done"
                break
            if ch != "\\":
                out.append(ch)
                i += 1
                continue
            size = 6 if text[i + 1 : i + 2] == "u" else 2
            if i + size > len(text):  # the escape continues in the next piece
                self.escape = text[i:]
                break
            try:
                out.append(json.loads(f'"{text[i : i + size]}"'))
            except ValueError:
                out.append(text[i + 1 : i + size])
            i += size
        return "".join(out)
