"""What an AgentLoop is configured with: its option types, the system prompt written from its
options, and the old argument names it still accepts. Kept beside :mod:`ragloop.engines.agent`
so the engine module holds the loop itself."""

from __future__ import annotations

import warnings
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, TypedDict

from ragloop.components.prompts import agent_system_prompt
from ragloop.core.budget import Budget
from ragloop.core.calls import ChatFn, call
from ragloop.core.errors import ConfigError
from ragloop.core.protocols import ChatModel
from ragloop.core.records import Chunk, Message, Tool

Synthesizer = Callable[[list[Message]], "str | Awaitable[str]"]
SearchFn = Callable[..., "list[Chunk] | Awaitable[list[Chunk]]"]
# a system prompt written from the loop's options (Arcana's ``fn opts -> string``)
SystemPromptFn = Callable[[dict[str, Any]], "str | Awaitable[str]"]


class AgentLoopOptions(TypedDict, total=False):
    """The keyword options of :meth:`AgentLoop.offline <ragloop.AgentLoop.offline>`: the
    keyword arguments of :class:`~ragloop.AgentLoop`, and ``model=`` (the model that drives
    instead of the offline controller). An unknown name is a ``ConfigError``."""

    model: ChatModel | ChatFn | None
    collections: str | Sequence[str] | None
    answerer: ChatModel | ChatFn | None
    max_iterations: int
    chunk_cap: int
    fallback_synthesis: bool
    synthesizer: Synthesizer | None
    tools: Sequence[Tool | str] | None
    system_prompt: str | SystemPromptFn | None
    budget: Budget | None
    max_tool_calls_per_turn: int
    search_opts: Mapping[str, Any] | None
    max_tokens: int | Mapping[str, int | None] | None


def default_system_prompt(options: Mapping[str, Any]) -> str:
    """The default system prompt, written from the options a ``system_prompt`` function is given
    (``AgentLoop.prompt_options``); a custom function may start from it."""
    return agent_system_prompt(
        tools=options["tools"],
        collections=options["collections"],
        max_iterations=options["max_iterations"],
        max_tool_calls_per_turn=options["max_tool_calls_per_turn"],
        budget=options["budget"],
    )


async def system_prompt_text(prompt: str | SystemPromptFn, options: dict[str, Any]) -> str:
    """The text of a run's system prompt: ``prompt`` itself, or what it writes from
    ``options``."""
    if isinstance(prompt, str):
        return prompt
    text = await call(prompt, options)
    if not isinstance(text, str) or not text.strip():
        raise ConfigError("system_prompt", f"the function returned {text!r}; expected text")
    return text


def renamed_question(query: str | None, question: str | None) -> str:
    """The query of ``run(query)``, also accepted as ``question=`` (its old name, deprecated)."""
    if question is None:
        return query  # type: ignore[return-value]  # check_query refuses None
    if query is not None:
        raise TypeError("give the question once, as query (question= is its old name)")
    warnings.warn(
        "AgentLoop.run(question=...) is deprecated; the argument is query, as on every engine",
        DeprecationWarning,
        stacklevel=3,
    )
    return question
