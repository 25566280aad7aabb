"""Calling components whether they are sync or async, and running async code from sync code.

Engines are written once, async. ``run()`` drives them on a private event loop and calls plain
functions inline (exactly like a sync library would, so thread-bound resources such as a
sqlite3 connection keep working); ``arun()`` calls plain functions in worker threads so they do
not block the caller's event loop and sub-queries really run concurrently. The choice travels
in a context variable, so components that call other callables (an LLM evaluator calling its
``generate_fn``) follow it without being told.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, TypeVar, cast

from ragloop.core.budget import model_call, record_usage
from ragloop.core.errors import ComponentError, ConfigError
from ragloop.core.protocols import ChatModel
from ragloop.core.records import Message, ModelResponse, Tool

T = TypeVar("T")

# A prompt-in, text-out function (ragsnag's ``generate_fn``), sync or async.
GenerateFn = Callable[[str], "str | Awaitable[str]"]

_offload_sync: contextvars.ContextVar[bool] = contextvars.ContextVar(
    "ragloop_offload_sync", default=False
)


@contextmanager
def sync_calls_in_threads(enabled: bool) -> Iterator[None]:
    """Inside the block, :func:`call` runs plain functions in worker threads when enabled."""
    token = _offload_sync.set(enabled)
    try:
        yield
    finally:
        _offload_sync.reset(token)


def is_async_callable(fn: object) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004 - objects with an async __call__
    )


async def call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """Call ``fn`` and return its result, awaiting it if it is async."""
    if is_async_callable(fn):
        return await fn(*args, **kwargs)
    if _offload_sync.get():
        result = await asyncio.to_thread(fn, *args, **kwargs)
    else:
        result = fn(*args, **kwargs)
    if inspect.isawaitable(result):
        result = await result
    return result


def method(component: object, name: str, role: str) -> Callable[..., Any]:
    """The component's ``a<name>`` method if it has one, else ``<name>``."""
    for attr in (f"a{name}", name):
        found = getattr(component, attr, None)
        if callable(found):
            return cast(Callable[..., Any], found)
    raise TypeError(
        f"{role} {type(component).__name__!r} has neither {name}() nor a{name}(); "
        f"see ragloop.{role.capitalize()} for the expected method"
    )


def has_method(component: object, name: str) -> bool:
    return any(callable(getattr(component, a, None)) for a in (f"a{name}", name))


def run_sync(factory: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run a coroutine to completion from sync code.

    Outside an event loop this is ``asyncio.run``. Inside one (a notebook, an async web app)
    blocking that loop would deadlock, so the coroutine runs on a fresh loop in a worker thread,
    with the caller's context variables.
    """
    results: list[T] = []

    async def main() -> None:
        # The task returns None and the result travels in a list: on Python 3.11, asyncio.run
        # formats the main task's repr (result included) when it restores the SIGINT handler,
        # which for a large result costs more than the whole run.
        results.append(await factory())

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        asyncio.run(main())
        return results[0]
    context = contextvars.copy_context()
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="ragloop-sync") as pool:
        pool.submit(context.run, lambda: asyncio.run(main())).result()
    return results[0]


def is_chat_model(obj: object) -> bool:
    """The one rule for telling a chat model from a function, everywhere ragloop takes an LLM.

    A callable is a function (of the prompt for a ``generate_fn``; of the messages and tools for
    a controller), whatever other attributes it has: ragsnag's tests pass
    ``MagicMock(return_value=reply)``, which also answers to ``complete``. Only an object that
    is not callable and has ``complete()`` or ``acomplete()`` is a chat model, unless
    :func:`resolve_llm` was told otherwise with ``model=``.
    """
    return not callable(obj) and has_method(obj, "complete")


class _ExplicitChatModel:
    """A callable chat model given as ``model=``: the rule would call it as a function, the
    caller said it is a chat model. Forwards everything but the call."""

    def __init__(self, model: object) -> None:
        self.model = model

    def __getattr__(self, name: str) -> Any:
        return getattr(self.model, name)


def resolve_llm(
    generate_fn: GenerateFn | ChatModel | None, model: ChatModel | None, *, owner: str
) -> GenerateFn | ChatModel:
    """The LLM a component calls, from its ``generate_fn`` or its ``model=``; exactly one.

    ``generate_fn`` follows :func:`is_chat_model`: a callable is called as a function of the
    prompt; an object that is not callable is a chat model. ``model=`` is always a chat model
    (it must have ``complete()`` or ``acomplete()``), even one that is also callable.
    """
    if (generate_fn is None) == (model is None):
        raise ConfigError(
            "generate_fn",
            f"{owner} needs exactly one of generate_fn (a function of the prompt, or a chat "
            "model) and model= (a chat model)",
        )
    if model is None:
        if not callable(generate_fn) and not is_chat_model(generate_fn):
            raise ConfigError(
                "generate_fn",
                f"{owner} takes a function of the prompt or a chat model with complete(); "
                f"got {type(generate_fn).__name__}",
            )
        return cast("GenerateFn | ChatModel", generate_fn)
    if not has_method(model, "complete"):
        raise ConfigError(
            "model",
            f"{owner}: model= takes a chat model with complete() or acomplete(), got "
            f"{type(model).__name__}; pass a function of the prompt as generate_fn",
        )
    return cast(ChatModel, _ExplicitChatModel(model)) if callable(model) else model


# A chat model given as a plain function of the messages and the tools, sync or async.
ChatFn = Callable[[list[Message], "list[Tool] | None"], "ModelResponse | Awaitable[ModelResponse]"]


async def complete(
    model: ChatModel | ChatFn, messages: list[Message], tools: list[Tool] | None = None
) -> ModelResponse:
    """Call a chat model (sync or async, or a function of the messages and tools) and charge
    its usage to the run in progress; the run's budget admits the call first
    (:func:`~ragloop.core.budget.model_call`)."""
    if is_chat_model(model):
        who = f"{type(model).__name__}.complete()"
        function = method(model, "complete", "model")
        async with model_call(model, _named(model, who)):
            response = _check_response(await call(function, messages, tools=tools), who)
    elif callable(model):
        who = f"chat function {getattr(model, '__name__', type(model).__name__)!r}"
        async with model_call(model, who):
            response = _check_response(await call(model, messages, tools), who)
    else:
        raise TypeError(
            f"expected a chat model or a function of (messages, tools), got {type(model).__name__}"
        )
    return response


def _check_response(response: object, who: str) -> ModelResponse:
    """Refuse what is not a ModelResponse; charge the usage of one."""
    if not isinstance(response, ModelResponse):
        raise ComponentError(
            f"{who} returned {type(response).__name__}; expected ragloop.ModelResponse"
        )
    if response.usage is not None:
        record_usage(response.usage)
    return response


def _named(model: object, who: str) -> str:
    name = getattr(model, "model_name", None)
    return f"model {name!r}" if isinstance(name, str) else who


async def ask(llm: GenerateFn | ChatModel, prompt: str) -> ModelResponse:
    """Send one prompt to a ``generate_fn`` or a chat model; the reply as a ModelResponse."""
    if is_chat_model(llm):
        return await complete(cast(ChatModel, llm), [Message(role="user", content=prompt)])
    if not callable(llm):
        raise TypeError(
            f"expected a chat model or a function of the prompt, got {type(llm).__name__}"
        )
    async with model_call(llm, "generate_fn"):
        reply: object = await call(llm, prompt)
        if isinstance(reply, ModelResponse):
            if reply.usage is not None:
                record_usage(reply.usage)
            return reply
    if not isinstance(reply, str):
        raise ComponentError(f"generate_fn returned {type(reply).__name__}; expected str")
    return ModelResponse(text=reply)


async def ask_text(llm: GenerateFn | ChatModel, prompt: str) -> str:
    """Send one prompt to a ``generate_fn`` or a chat model and return the reply text."""
    return (await ask(llm, prompt)).text


def as_generate_fn(llm: GenerateFn | ChatModel) -> Callable[[str], str]:
    """A sync prompt-in, text-out function (ragsnag's ``generate_fn``) backed by a chat model
    (or by an async ``generate_fn``).

    Each call sends the prompt as one user message and charges the reply's usage to the run in
    progress. Components that take a ``generate_fn`` accept a chat model directly too; this is
    for code that needs a plain function.
    """

    def generate(prompt: str) -> str:
        return run_sync(lambda: ask_text(llm, prompt))

    return generate


def as_async_generate_fn(llm: GenerateFn | ChatModel) -> Callable[[str], Awaitable[str]]:
    """:func:`as_generate_fn` for async code: ``await generate(prompt)``."""

    async def generate(prompt: str) -> str:
        return await ask_text(llm, prompt)

    return generate
