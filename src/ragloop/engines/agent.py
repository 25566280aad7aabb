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
tool results give way first (:func:`ragloop.components.fitting.fit_messages`). The run keeps
the whole conversation in ``messages``; ``llm_calls`` says what each call was sent without.

And beyond Arcana: budgets checked before every model call and tool batch, a cap on tool calls
per turn, a duplicate-search guard, exceptions from tools caught, the searches of one turn run
concurrently in ``arun``, calls after a terminating one recorded as not run, ``chunk_cap``
evicting by rank instead of incomparable scores, grounding against every chunk shown, and
after a controller error a fallback synthesis by a *different* model (answerer or synthesizer).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Unpack

from ragloop.components.citations import citation_refs
from ragloop.components.fitting import complete_fitted
from ragloop.components.prompts import agent_answer_prompt, agent_synthesis_prompt
from ragloop.core.agent_records import AgentResult, ToolHistoryEntry
from ragloop.core.budget import Budget, BudgetTracker, check_budget
from ragloop.core.calls import (
    ChatFn,
    call,
    is_chat_model,
    run_sync,
    sync_calls_in_threads,
)
from ragloop.core.errors import BudgetExceeded, ComponentError, ConfigError, check_query
from ragloop.core.limits import check_max_tokens, with_llm_calls
from ragloop.core.protocols import ChatModel, Retriever
from ragloop.core.records import Chunk, Message, ModelResponse, StopReason, Tool, ToolCall
from ragloop.engines.agent_options import (
    AgentLoopOptions,
    SearchFn,
    Synthesizer,
    SystemPromptFn,
    default_system_prompt,
    renamed_question,
    system_prompt_text,
)
from ragloop.engines.grounding import aground, ground
from ragloop.engines.tools import (
    ANSWER,
    GIVE_UP,
    SEARCH,
    SHOWN_PER_SEARCH,
    CollectionScope,
    SearchBackend,
    SearchRequest,
    builtin_tools,
    format_results,
    search_request,
    tool_set,
)
from ragloop.observability import otel
from ragloop.observability.events import EventKind, chunk_refs
from ragloop.observability.run import RunTelemetry
from ragloop.observability.stream import RunStream, stream_run

logger = logging.getLogger("ragloop")

# -- the loop -----------------------------------------------------------------------------------


def _positive_int(value: object, name: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ConfigError(name, f"must be an integer >= 1, got {value!r}")
    return value


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


class AgentLoop:
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
    (``budget=Budget(max_tokens=...)``).
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
    ) -> None:
        self.controller = _chat(controller, "controller")
        self.reply_bounds = _reply_bounds(max_tokens)
        self.answerer = None if answerer is None else _chat(answerer, "answerer")
        self.max_iterations = _positive_int(max_iterations, "max_iterations")
        self.chunk_cap = _positive_int(chunk_cap, "chunk_cap")
        self.max_tool_calls_per_turn = _positive_int(
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
        """An agent loop that needs no model, over a :class:`~ragloop.KnowledgeBase` or a
        retriever: :class:`~ragloop.OfflineController` drives it. ``options``
        (:class:`AgentLoopOptions`) are ``AgentLoop``'s (``max_iterations=``,
        ``collections=``, ...) and ``model=``. See :func:`ragloop.offline.agent_loop`."""
        # The wiring lives in ragloop.offline, a floor above the engines; importing it here,
        # at call time, keeps this module depending on protocols only.
        from ragloop.offline import agent_loop

        return agent_loop(kb_or_retriever, **options)

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
        query = renamed_question(query, question)
        return run_sync(lambda: self._run(query, budget, in_threads=False))

    async def arun(
        self, query: str | None = None, *, budget: Budget | None = None, question: str | None = None
    ) -> AgentResult:
        """Async :meth:`run`: sync components run in worker threads, and the searches of one
        turn run concurrently."""
        return await self._run(renamed_question(query, question), budget, in_threads=True)

    def astream(self, query: str, *, budget: Budget | None = None) -> RunStream[AgentResult]:
        """:meth:`arun` as a stream of its events (``async for event in loop.astream(q)``):
        each search and the chunks it returned, each tool call and controller turn, the answer,
        then ``run_finished``; the result is the stream's ``result``. Closing the stream early
        cancels the run. See ``docs/streaming.md``."""
        return stream_run(lambda: self._run(query, budget, in_threads=True))

    async def _run(self, query: str, budget: Budget | None, *, in_threads: bool) -> AgentResult:
        check_query(query)
        check_budget(budget)
        budget = self.budget if budget is None else budget
        telemetry = RunTelemetry("agent", span_kind="AGENT", tools=self.tools)
        # the default prompt mentions the budget: a run with its own gets its own prompt
        given = default_system_prompt if self._default_prompt else self.system_prompt
        prompt = await system_prompt_text(given, self.prompt_options(budget, query))
        run = _AgentRun(self, query, telemetry, budget, prompt)
        started = telemetry.active(
            attributes={
                "max_iterations": self.max_iterations,
                "tool_count": len(self.tools),
                "chunk_cap": self.chunk_cap,
                "collections": self.collections,
            },
            content={"question": query},
        )
        with sync_calls_in_threads(in_threads), run.tracker.active(), started:
            return await with_llm_calls(run.execute())


@dataclass
class _Step:
    """One tool call of a turn: what to run, and what came of it."""

    call: ToolCall
    summary: str = ""
    request: SearchRequest | None = None
    tool: Tool | None = None
    ends: StopReason | None = None
    text: str = ""
    chunks: list[Chunk] = field(default_factory=list)
    failed: bool = False


class _AgentRun:
    """The state of one run: conversation, history, gathered chunks, budget tracker."""

    def __init__(
        self,
        loop: AgentLoop,
        question: str,
        telemetry: RunTelemetry,
        budget: Budget | None,
        system_prompt: str,
    ) -> None:
        self.loop = loop
        self.question = question
        self.telemetry = telemetry
        self.tracker = BudgetTracker(budget)
        self.offered = {tool.name for tool in loop.tools}
        self.messages = [
            Message(role="system", content=system_prompt),
            Message(role="user", content=question),
        ]
        self.history: list[ToolHistoryEntry] = []
        self.iterations = 0
        self.answer: str | None = None
        self.error: str | None = None
        self.searched: dict[tuple[str, str | None], int] = {}  # search key -> turn
        self.found: dict[str, Chunk] = {}  # gathered, capped
        self.rank: dict[str, tuple[int, int]] = {}  # id -> (best rank, discovery order)
        self.discovered = 0
        self.shown: dict[str, Chunk] = {}  # every chunk shown, first-shown order
        self.turn = 0  # the turn in progress

    async def execute(self) -> AgentResult:
        reason = await self._turns()
        if self.loop.fallback_synthesis and self.found and self._may_synthesize(reason):
            await self._synthesize()
        chunks = sorted(self.found.values(), key=lambda c: self.rank[c.id])
        citations = citation_refs(self.answer, [*self.shown.values(), *chunks])
        if self.answer:
            self.telemetry.event(
                EventKind.ANSWER,
                iteration=self.turn,
                attributes={"citations": citations, "final": True},
                content={"text": self.answer},
            )
        result = AgentResult(
            query=self.question,
            answer=self.answer,
            stop_reason=reason,
            iterations=self.iterations,
            tool_history=self.history,
            chunks=chunks,
            shown_chunks=list(self.shown.values()),
            error=self.error,
            messages=self.messages,
            budget_used=self.tracker.spend,
            usage=self.tracker.usage,
            run_id=self.telemetry.run_id,
        )
        self.telemetry.finish(
            stop_reason=reason,
            iterations=self.iterations,
            budget_used=result.budget_used,
            chunk_count=len(chunks),
            error=self.error,
            attributes={"citations": citations},
            content={"answer": self.answer},
        )
        return result

    # -- turns ----------------------------------------------------------------------------------
    async def _turns(self) -> StopReason:
        loop = self.loop
        while True:
            if self.iterations >= loop.max_iterations:
                return StopReason.MAX_ITERATIONS
            spent = self.tracker.exhausted(starting_iteration=True)
            if spent is not None:
                return spent
            turn = self.iterations
            self.turn = turn
            self.iterations += 1
            self.tracker.count_iteration()
            try:
                response = await self.tracker.bounded(
                    self._complete(loop.controller, self.messages, loop.tools, "controller")
                )
            except BudgetExceeded as stop:
                return stop.reason
            except Exception as error:
                self.telemetry.failed(error)
                self.error = f"controller failed in turn {turn}: {type(error).__name__}: {error}"
                self._turn_event(turn, None)
                return StopReason.ERROR
            # only the first max_tool_calls_per_turn calls run, and only they go back to the
            # model: a reply with thousands of calls must not grow every later request
            cap = loop.max_tool_calls_per_turn
            calls, ignored = response.tool_calls[:cap], max(0, len(response.tool_calls) - cap)
            self.messages.append(Message(role="assistant", content=response.text, tool_calls=calls))
            if not calls:
                self._turn_event(turn, response)
                if response.text.strip():
                    self.answer = response.text
                    return StopReason.ANSWERED
                self.error = f"controller reply in turn {turn} had neither text nor tool calls"
                return StopReason.ERROR
            ended = await self._tools(turn, calls)
            if ignored:
                note = f"{ignored} tool calls over the cap of {cap} were ignored."
                self.messages.append(Message(role="user", content=note))
            self._turn_event(turn, response, calls=calls, ignored=ignored)
            if ended is not None:
                return ended

    async def _tools(self, turn: int, calls: list[ToolCall]) -> StopReason | None:
        """Run one turn's tool calls; the stop reason if they end the run."""
        steps: list[_Step] = []
        ending: _Step | None = None
        keys: set[tuple[str, str | None]] = set()
        for tool_call in calls:  # at most max_tool_calls_per_turn: the rest were dropped
            step = _Step(tool_call)
            if ending is not None:
                step.summary = f"Not run: the {ending.call.name} call before it ended the loop."
            else:
                self._plan(step, keys)
                ending = step if step.ends is not None else None
            steps.append(step)
        pending = [s for s in steps if s.request is not None or s.tool is not None]
        if pending:
            spent = self.tracker.exhausted()
            if spent is not None:
                return spent
            searches = [s for s in pending if s.request is not None]
            outcomes = await asyncio.gather(
                *(self._execute(s) for s in searches), return_exceptions=True
            )
            for outcome in outcomes:
                if isinstance(outcome, BudgetExceeded):
                    return outcome.reason
                if isinstance(outcome, BaseException):
                    raise outcome
            for step in pending:
                if step.tool is not None:
                    try:
                        await self._execute(step)
                    except BudgetExceeded as stop:
                        return stop.reason
        for step in steps:
            self._record(turn, step)
        if ending is None:
            return None
        self.answer = ending.text
        if ending.ends is StopReason.ANSWERED and self.loop.answerer is not None:
            await self._rewrite(self.loop.answerer)
        return ending.ends

    def _plan(self, step: _Step, keys: set[tuple[str, str | None]]) -> None:
        name, args = step.call.name, step.call.arguments
        if name not in self.offered:
            step.failed, step.summary = True, f"Unknown tool: {name}"
        elif name == ANSWER:
            text = args.get("text")
            if isinstance(text, str) and text.strip():
                step.ends, step.text, step.summary = StopReason.ANSWERED, text, "Answered."
            else:
                step.failed, step.summary = True, "answer error: missing text argument"
        elif name == GIVE_UP:
            reason = args.get("reason")
            why = reason.strip() if isinstance(reason, str) else ""
            why = why or "no reason given"
            step.ends, step.text = StopReason.GAVE_UP, f"Could not answer: {why}"
            step.summary = f"Gave up: {step.text}"
        elif name == SEARCH:
            request = search_request(args, self.loop.scope)
            if isinstance(request, str):
                step.failed, step.summary = True, request
            elif request.key in self.searched or request.key in keys:
                turn = self.searched.get(request.key)
                when = f"in turn {turn}" if turn is not None else "earlier in this turn"
                step.summary = (
                    f'Already searched "{request.query}" {when}; its results are above. '
                    "Search for something else, or answer."
                )
            else:
                keys.add(request.key)
                step.request = request
        else:
            step.tool = self.loop.custom_tools[name]

    async def _execute(self, step: _Step) -> None:
        """Run a search or a custom tool; any failure but a budget stop becomes its summary."""
        with self.telemetry.tool(step.call.name, step.call.id, step.call.arguments) as span:
            try:
                if step.request is not None:
                    step.chunks = await self.tracker.bounded(self._search(step.request))
                    step.summary = format_results(step.chunks)
                else:
                    step.summary = await self.tracker.bounded(self._custom(step))
            except BudgetExceeded:
                raise
            except Exception as error:
                prefix = "search error" if step.request is not None else "Tool error"
                step.failed, step.summary = True, f"{prefix}: {type(error).__name__}: {error}"
            span.set(otel.tool_result(step.summary))
            if step.failed:
                span.fail(step.summary)

    async def _search(self, request: SearchRequest) -> list[Chunk]:
        with self.telemetry.retrieval(
            request.query, top_k=request.limit, data_source=request.target.label
        ) as span:
            chunks = await self.loop.backend(request)
            span.set(otel.retrieved(chunks))
        self.telemetry.event(
            EventKind.SEARCH,
            iteration=self.turn,
            attributes={
                "top_k": request.limit,
                "route": None,
                "collection": request.target.label,
                "chunks": chunk_refs(chunks),
            },
            content={"query": request.query},
        )
        return chunks

    async def _custom(self, step: _Step) -> str:
        assert step.tool is not None
        assert step.tool.callback is not None
        out = await call(step.tool.callback, dict(step.call.arguments))
        if not isinstance(out, str):
            step.failed = True
            return f"Tool returned unexpected value: {out!r:.200}"
        return out

    def _record(self, turn: int, step: _Step) -> None:
        if step.request is not None and not step.failed:
            self.searched[step.request.key] = turn
            self._gather(step.chunks)
        self.messages.append(Message(role="tool", content=step.summary, tool_call_id=step.call.id))
        self._add_entry(
            ToolHistoryEntry(
                tool=step.call.name,
                args=dict(step.call.arguments),
                iteration=turn,
                summary=step.summary,
                returned_chunk_ids=[c.id for c in step.chunks],
                call_id=step.call.id,
            ),
            failed=step.failed,
            shown=step.chunks[:SHOWN_PER_SEARCH],
        )

    def _gather(self, chunks: list[Chunk]) -> None:
        """Add one search's chunks; keep the ``chunk_cap`` best-ranked (rank within their
        search, then discovery order), since scores of different queries do not compare."""
        for rank, chunk in enumerate(chunks):
            if rank < SHOWN_PER_SEARCH:
                self.shown.setdefault(chunk.id, chunk)
            if chunk.id in self.found:
                best, order = self.rank[chunk.id]
                self.rank[chunk.id] = (min(best, rank), order)
            else:
                self.found[chunk.id] = chunk
                self.rank[chunk.id] = (rank, self.discovered)
                self.discovered += 1
        if len(self.found) > self.loop.chunk_cap:
            kept = sorted(self.found, key=self.rank.__getitem__)[: self.loop.chunk_cap]
            for cid in set(self.found) - set(kept):
                del self.found[cid], self.rank[cid]

    async def _complete(
        self,
        model: ChatModel | ChatFn,
        messages: list[Message],
        tools: list[Tool] | None,
        role: str,
    ) -> ModelResponse:
        """One bounded model call, its conversation fitted to the model's window."""
        bound = self.loop.reply_bounds[role]
        return await complete_fitted(model, messages, tools, role=role, max_tokens=bound)

    # -- answerer and synthesis -----------------------------------------------------------------
    async def _rewrite(self, answerer: ChatModel | ChatFn) -> None:
        """Let the answerer write the final answer; on any failure the draft stands."""
        if self.tracker.exhausted() is not None:
            return
        prompt = Message(role="user", content=agent_answer_prompt(self.question))
        try:
            response = await self.tracker.bounded(
                self._complete(answerer, [*self.messages, prompt], None, "answerer")
            )
        except Exception as error:
            logger.warning(
                "answerer failed; the controller's draft stands: %s", otel.public_error(error)
            )
            return
        if response.text.strip():
            self.answer = response.text
            self.messages += [prompt, Message(role="assistant", content=response.text)]

    def _may_synthesize(self, reason: StopReason) -> bool:
        if reason is StopReason.MAX_ITERATIONS:
            return True
        # after a controller error, only a different model is worth asking
        other = self.loop.answerer is not None or self.loop.synthesizer is not None
        return reason is StopReason.ERROR and other

    async def _synthesize(self) -> None:
        spent = self.tracker.exhausted()
        if spent is not None:
            self._note(f"fallback synthesis skipped: {spent.value}")
            return
        loop = self.loop
        messages = [
            *self.messages,
            Message(role="user", content=agent_synthesis_prompt(self.question)),
        ]
        try:
            if loop.synthesizer is not None:
                text = await self.tracker.bounded(call(loop.synthesizer, list(messages)))
            else:
                model = loop.answerer or loop.controller
                reply: ModelResponse = await self.tracker.bounded(
                    self._complete(model, messages, None, "synthesizer")
                )
                text = reply.text
            if not isinstance(text, str):
                raise ComponentError(f"synthesizer returned {type(text).__name__}; expected str")
        except Exception as error:
            self.telemetry.failed(error)
            self._note(f"fallback synthesis failed: {type(error).__name__}: {error}")
            return
        if not text.strip():
            self._note("fallback synthesis returned no text")
            return
        self.answer = text
        self.messages = [*messages, Message(role="assistant", content=text)]
        self._add_entry(
            ToolHistoryEntry(
                tool="synthesis",
                args={"text": text},
                iteration=self.iterations,
                summary=f"Synthesized from {len(self.shown)} chunks",
            ),
            failed=False,
        )

    def _note(self, message: str) -> None:
        self.error = message if self.error is None else f"{self.error}; {message}"

    # -- events ---------------------------------------------------------------------------------
    def _add_entry(
        self, entry: ToolHistoryEntry, *, failed: bool, shown: Sequence[Chunk] = ()
    ) -> None:
        self.history.append(entry)
        attributes: dict[str, object] = {
            "tool": entry.tool,
            "call_id": entry.call_id,
            "returned_count": len(entry.returned_chunk_ids),
            "history_size": len(self.history),
            "failed": failed,
        }
        content: dict[str, object] = {"args": entry.args, "summary": entry.summary}
        if shown:
            attributes["chunks"] = chunk_refs(shown)
            content["chunk_texts"] = [c.content for c in shown]
        self.telemetry.event(
            EventKind.TOOL_CALL, iteration=entry.iteration, attributes=attributes, content=content
        )

    def _turn_event(
        self,
        turn: int,
        response: ModelResponse | None,
        *,
        calls: list[ToolCall] | None = None,
        ignored: int = 0,
    ) -> None:
        if calls is None:
            calls = response.tool_calls if response is not None else []
        usage = response.usage if response is not None else None
        self.telemetry.event(
            EventKind.ITERATION,
            iteration=turn,
            attributes={
                "tool_calls": [c.name for c in calls],
                "ignored_tool_calls": ignored,
                "failed": response is None,
                "input_tokens": usage.input_tokens if usage else None,
                "output_tokens": usage.output_tokens if usage else None,
            },
            content={"text": response.text if response is not None else None},
        )
