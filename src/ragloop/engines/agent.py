"""AgentLoop: a controller LLM calls tools until it answers, gives up or runs out (seed 001).

Arcana.Loop's rules:

- each iteration is one controller turn: the conversation and the tools in, text or tool calls
  out; a reply with text and no tool calls is the answer;
- ``search`` shows the full text of its top 5 chunks after their ids; ``answer`` ends the run
  answered; ``give_up`` ends it with "Could not answer: <reason>";
- a failed tool call (missing query, a failing search, an unknown tool, a failing custom tool)
  becomes the tool result the controller reads, and the loop goes on;
- the collection scope shapes the search schema and is enforced in the search
  (:mod:`ragloop.engines.tools`);
- at ``max_iterations`` one tool-less synthesis call writes the answer from the conversation
  (``synthesizer``, else the answerer, else the controller), recorded as a ``synthesis`` entry;
- with an ``answerer`` the ``answer`` tool's text is a draft the answerer rewrites (the draft
  stands if it fails); ``give_up`` is never rewritten;
- a failing controller ends the run with ``StopReason.ERROR``: recorded, never raised.

Every model call is bounded (``max_tokens``: one bound for all, or one per role, ``controller``,
``answerer``, ``synthesizer``; default ``DEFAULT_MAX_TOKENS``) and its conversation fitted to
the model's context window: the system prompt, the question and the latest turn stay, older
tool results give way first (:func:`ragloop.components.llm.fitting.fit_messages`). The run keeps
the whole conversation in ``messages``; ``llm_calls`` says what each call was sent without.

And beyond Arcana: budgets checked before every model call and tool batch, a cap on tool calls
per turn, a duplicate-search guard, exceptions from tools caught, the searches of one turn run
concurrently in ``arun``, calls after a terminating one recorded as not run, ``chunk_cap``
evicting by rank instead of incomparable scores, grounding against every chunk shown, and
after a controller error a fallback synthesis by a *different* model (answerer or synthesizer).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, Unpack

from ragloop.components.calibration import Calibration
from ragloop.components.llm.prompts import agent_system_prompt
from ragloop.core.budget import Budget, check_budget
from ragloop.core.calls import ChatFn, call, has_method, is_chat_model
from ragloop.core.errors import ConfigError
from ragloop.core.limits import check_max_tokens
from ragloop.core.protocols import ChatModel, Evaluator, Retriever
from ragloop.core.records import Tool
from ragloop.core.records.agent import AgentResult
from ragloop.engines._run import Engine
from ragloop.engines.agent_run import AgentRun
from ragloop.engines.grounding import aground, ground
from ragloop.engines.options import (
    AgentLoopOptions,
    SearchFn,
    Synthesizer,
    SystemPromptFn,
    calibration_of,
    check_count,
    check_target_precision,
)
from ragloop.engines.tools import CollectionScope, SearchBackend, builtin_tools, tool_set
from ragloop.observability.run import RunTelemetry

__all__ = ["AgentLoop", "AgentLoopOptions", "default_system_prompt"]

# -- the system prompt and the old argument names -----------------------------------------------


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


# -- the loop -----------------------------------------------------------------------------------


MODEL_ROLES = ("controller", "answerer", "synthesizer")


def _reply_bounds(value: object) -> dict[str, int | None]:
    """``max_tokens`` per role: one bound for every role, or a mapping of some roles."""
    if isinstance(value, Mapping):
        unknown = set(value) - set(MODEL_ROLES)
        if unknown:
            raise ConfigError("max_tokens", f"unknown roles {sorted(unknown)}; use {MODEL_ROLES}")
        return {role: check_max_tokens(value.get(role)) for role in MODEL_ROLES}
    return dict.fromkeys(MODEL_ROLES, check_max_tokens(value))


def _chat(value: object, name: str) -> ChatModel | ChatFn:
    # a ChatModel, or a function of (messages, tools) returning a ModelResponse
    if not (is_chat_model(value) or callable(value)):
        raise ConfigError(name, f"must be a ChatModel or a chat function, got {value!r}")
    return value  # type: ignore[return-value]


class AgentLoop(Engine[AgentResult, None]):
    """The agentic tool loop. See the module docstring for its rules and ``docs/agent-loop.md``
    for a guide. A loop holds no per-run state: one instance may serve concurrent runs.

    ``controller`` and ``answerer`` are :class:`~ragloop.ChatModel` s or functions of
    ``(messages, tools)`` returning a :class:`~ragloop.ModelResponse` (a callable is a function,
    by ragloop's one rule). ``search`` is a retriever (``retrieve``/``aretrieve``) or a function
    ``search(query, *, limit, collection=None, collections=None) -> list[Chunk]``;
    ``search_opts`` are extra keyword arguments for every search. ``tools`` is the tool set
    (see :func:`ragloop.engines.tools.tool_set`: built-ins may be replaced or removed; custom
    :class:`~ragloop.Tool` s with a ``callback`` alone are added to the built-ins);
    ``synthesizer(messages) -> str`` overrides the fallback synthesis call; ``system_prompt``
    replaces the default prompt, as text or as a function of the options
    (:meth:`default_system_prompt` is the default one). ``max_tokens`` bounds each model reply:
    an integer for every call, or a mapping such as ``{"controller": 256, "answerer": 1024}``
    (roles left out, and None, take ``DEFAULT_MAX_TOKENS``); it is not the run's budget
    (``budget=Budget(max_tokens=...)``). ``evaluator`` judges the final answer: the result's
    ``probability`` is its score read through ``calibration`` (a
    :class:`~ragloop.components.calibration.Calibration` or the path of one; None: the score
    itself), and an answer below ``target_precision`` is not :attr:`AgentResult.confident`. A run
    that is not confident carries its evidence gaps (``result.gaps``).
    """

    def __init__(
        self,
        controller: ChatModel | ChatFn,
        search: Retriever | SearchFn,
        *,
        collections: str | Sequence[str] | None = None,
        answerer: ChatModel | ChatFn | None = None,
        max_iterations: int = 10,
        chunk_cap: int = 30,
        fallback_synthesis: bool = True,
        synthesizer: Synthesizer | None = None,
        tools: Sequence[Tool | str] | None = None,
        system_prompt: str | SystemPromptFn | None = None,
        budget: Budget | None = None,
        max_tool_calls_per_turn: int = 8,
        search_opts: Mapping[str, Any] | None = None,
        max_tokens: int | Mapping[str, int | None] | None = None,
        evaluator: Evaluator | None = None,
        target_precision: float | None = None,
        calibration: Calibration | str | os.PathLike[str] | None = None,
    ) -> None:
        self.controller = _chat(controller, "controller")
        if evaluator is not None and not has_method(evaluator, "evaluate"):
            raise ConfigError("evaluator", "must have evaluate(query, chunks, answer), or be None")
        self.evaluator = evaluator
        self.target_precision = check_target_precision(target_precision)
        self.calibration = calibration_of(calibration)
        self.reply_bounds = _reply_bounds(max_tokens)
        self.answerer = None if answerer is None else _chat(answerer, "answerer")
        self.max_iterations = check_count(max_iterations, "max_iterations")
        self.chunk_cap = check_count(chunk_cap, "chunk_cap")
        self.max_tool_calls_per_turn = check_count(
            max_tool_calls_per_turn, "max_tool_calls_per_turn"
        )
        if not isinstance(fallback_synthesis, bool):
            raise ConfigError("fallback_synthesis", "must be True or False")
        if synthesizer is not None and not callable(synthesizer):
            raise ConfigError("synthesizer", "must be a function of the messages, or None")
        check_budget(budget)
        if system_prompt is not None and not (
            isinstance(system_prompt, str) or callable(system_prompt)
        ):
            raise ConfigError(
                "system_prompt", "must be a string, a function of the options, or None"
            )
        self.fallback_synthesis = fallback_synthesis
        self.synthesizer = synthesizer
        self.budget = budget
        self.scope = CollectionScope.of(collections)
        self.search = search
        self.backend = SearchBackend(search, self.scope, search_opts)
        self.tools, self.custom_tools = tool_set(tools, self.scope)
        self._default_prompt = system_prompt is None
        self.system_prompt: str | SystemPromptFn = system_prompt or default_system_prompt(
            self.prompt_options(budget)
        )

    @classmethod
    def offline(cls, kb_or_retriever: Any, **options: Unpack[AgentLoopOptions]) -> AgentLoop:
        """An agent loop over a :class:`~ragloop.KnowledgeBase` or a retriever that needs no
        model: :class:`~ragloop.OfflineController` drives it and, over a knowledge base, each
        search runs :meth:`RetrievalLoop.offline <ragloop.RetrievalLoop.offline>` (a
        :class:`~ragloop.engines.loop_search.LinkedSearch`); with ``model=`` the model drives
        and searches the knowledge base directly. ``options``
        (:class:`~ragloop.engines.options.AgentLoopOptions`) are ``AgentLoop``'s
        (``max_iterations=``, ``collections=``, ``budget=``, ...) and ``model=``; an unknown
        name is a :class:`~ragloop.ConfigError`. The parts are chosen in
        :mod:`ragloop.engines.defaults.agent`."""
        # imported when asked: the defaults bring the knowledge base and the components,
        # which a loop built from the caller's own parts never needs
        from ragloop.engines.defaults.agent import agent_parts

        parts = agent_parts(kb_or_retriever, **options)
        search = parts.search
        if parts.retrieval_loop_over is not None:
            from ragloop.engines.loop_search import LinkedSearch

            search = LinkedSearch(parts.retrieval_loop_over)
        return cls(parts.controller, search, **parts.settings)

    @staticmethod
    def default_tools(collections: str | Sequence[str] | None = None) -> list[Tool]:
        """The built-in tools, ``search`` shaped by ``collections`` (Arcana's
        ``Tools.default``): a start for a ``tools=`` list that replaces or removes some."""
        return builtin_tools(CollectionScope.of(collections))

    def prompt_options(self, budget: Budget | None, query: str | None = None) -> dict[str, Any]:
        """What a ``system_prompt`` function is given: ``query`` (None when the prompt is
        written before a run), ``tools``, ``collections`` (those the controller picks from,
        else None), ``max_iterations`` (the turns a run may take, the budget's when lower),
        ``max_tool_calls_per_turn``, ``chunk_cap`` and ``budget``."""
        cap = budget.max_iter if budget is not None and budget.max_iter is not None else None
        return {
            "query": query,
            "tools": list(self.tools),
            "collections": self.scope.choices,
            "max_iterations": self.max_iterations if cap is None else min(self.max_iterations, cap),
            "max_tool_calls_per_turn": self.max_tool_calls_per_turn,
            "chunk_cap": self.chunk_cap,
            "budget": budget,
        }

    # the default system prompt, written from prompt_options(): a start for your own
    default_system_prompt = staticmethod(default_system_prompt)

    @property
    def collections(self) -> list[str] | None:
        """The collections searches may touch (None: unrestricted)."""
        return None if self.scope.allowed is None else list(self.scope.allowed)

    # Arcana's Loop.ground: the same functions as ragloop.ground / ragloop.aground
    ground = staticmethod(ground)
    aground = staticmethod(aground)

    def run(
        self, query: str | None = None, *, budget: Budget | None = None, question: str | None = None
    ) -> AgentResult:
        """Run the loop to an answer, a give-up or a stop. Never raises for a failing model or
        tool; sync components run inline. ``budget`` replaces the loop's for this run;
        ``question=`` is the old name of ``query`` (deprecated)."""
        return super().run(renamed_question(query, question), budget=budget)

    async def arun(
        self, query: str | None = None, *, budget: Budget | None = None, question: str | None = None
    ) -> AgentResult:
        """Async :meth:`run`: sync components run in worker threads, and the searches of one
        turn run concurrently."""
        return await super().arun(renamed_question(query, question), budget=budget)

    async def _start(self, query: str, budget: Budget | None, given: None) -> AgentRun:
        budget = self.budget if budget is None else budget
        telemetry = RunTelemetry("agent", span_kind="AGENT", tools=self.tools)
        # the default prompt mentions the budget: a run with its own gets its own prompt
        prompt = default_system_prompt if self._default_prompt else self.system_prompt
        text = await system_prompt_text(prompt, self.prompt_options(budget, query))
        return AgentRun(self, query, telemetry, budget, text)

    def _settings(self) -> dict[str, Any]:
        return {
            "max_iterations": self.max_iterations,
            "tool_count": len(self.tools),
            "chunk_cap": self.chunk_cap,
            "collections": self.collections,
            "target_precision": self.target_precision,
        }
