"""One AgentLoop run: the conversation, the controller's turns and their tool calls (searches,
``answer``, ``give_up``, custom tools), the answerer's rewrite, the fallback synthesis and the
run's events. :mod:`ragloop.engines.agent` holds the public class and the rules."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from ragloop.components.calibration import IDENTITY, Calibration
from ragloop.components.citations import answer_text, citation_refs
from ragloop.components.llm.fitting import complete_fitted
from ragloop.components.llm.prompts import agent_answer_prompt, agent_synthesis_prompt
from ragloop.core.budget import Budget, BudgetTracker
from ragloop.core.calls import ChatFn, call, method
from ragloop.core.errors import BudgetExceeded, ComponentError
from ragloop.core.protocols import ChatModel, Evaluator
from ragloop.core.records import Chunk, Message, ModelResponse, StopReason, Tool, ToolCall
from ragloop.core.records.agent import AgentResult, ToolHistoryEntry
from ragloop.core.records.gaps import EvidenceGaps
from ragloop.core.records.rag import EvaluationResult
from ragloop.engines._run import finish
from ragloop.engines.gaps import evidence_gaps
from ragloop.engines.options import Synthesizer
from ragloop.engines.tools import (
    ANSWER,
    GIVE_UP,
    SEARCH,
    SHOWN_PER_SEARCH,
    CollectionScope,
    SearchBackend,
    SearchRequest,
    format_results,
    search_request,
)
from ragloop.observability import otel
from ragloop.observability.events import EventKind, chunk_refs
from ragloop.observability.run import RunTelemetry

logger = logging.getLogger("ragloop")


class AgentSetup(Protocol):
    """What a run reads of its loop (an :class:`~ragloop.AgentLoop`'s attributes)."""

    controller: ChatModel | ChatFn
    answerer: ChatModel | ChatFn | None
    synthesizer: Synthesizer | None
    tools: list[Tool]
    custom_tools: dict[str, Tool]
    scope: CollectionScope
    backend: SearchBackend
    max_iterations: int
    max_tool_calls_per_turn: int
    chunk_cap: int
    fallback_synthesis: bool
    reply_bounds: dict[str, int | None]
    evaluator: Evaluator | None
    target_precision: float | None
    calibration: Calibration | None


@dataclass
class _Step:
    """One tool call of a turn: what to run, and what came of it."""

    call: ToolCall
    summary: str = ""
    request: SearchRequest | None = None
    tool: Tool | None = None
    ends: StopReason | None = None
    text: str = ""
    closest: str | None = None  # a give_up's nearest supported answer
    chunks: list[Chunk] = field(default_factory=list)
    failed: bool = False


class AgentRun:
    """The state of one run: conversation, history, gathered chunks, budget tracker."""

    def __init__(
        self,
        loop: AgentSetup,
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
        self.closest: str | None = None  # what a give_up offered instead of an answer
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
        judged = sorted(self.shown.values(), key=lambda c: self.rank.get(c.id, (len(self.rank), 0)))
        judged = judged or chunks  # what the controller read, best first
        try:
            verdict = await self._judge(judged)
        except Exception as error:  # the run never raises; its answer stands, unjudged
            logger.warning("ragloop: the agent's evaluator failed on the answer: %s", error)
            verdict = None
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
            probability=(
                None
                if verdict is None
                else (self.loop.calibration or IDENTITY).probability(verdict.score)
            ),
            target_precision=self.loop.target_precision,
        )
        if not result.confident or (verdict is not None and not verdict.is_complete):
            result.gaps = await self._gaps(result, judged, verdict)
        gaps = result.gaps.model_dump() if result.gaps else None
        return finish(
            self.telemetry,
            result,
            chunk_count=len(chunks),
            attributes={"citations": citations, "probability": result.probability},
            content={"answer": self.answer, "gaps": gaps},
        )

    @property
    def judged_answer(self) -> str | None:
        """What the evaluator judges: the answer, or the nearest answer a give_up offered (its
        chance is that of what the run puts before the user, as a loop's best attempt's is;
        the "Could not answer" around it is no claim to ground)."""
        return self.closest or self.answer

    async def _judge(self, chunks: list[Chunk]) -> EvaluationResult | None:
        """The loop's evaluator's verdict of the answer (None without an evaluator or answer)."""
        if self.loop.evaluator is None or not self.judged_answer or not chunks:
            return None
        evaluate = method(self.loop.evaluator, "evaluate", "evaluator")
        verdict = await call(evaluate, self.question, chunks, self.judged_answer)
        if not isinstance(verdict, EvaluationResult):
            raise ComponentError(
                f"evaluator returned {type(verdict).__name__}; expected ragloop.EvaluationResult"
            )
        return verdict

    async def _gaps(
        self, result: AgentResult, judged: list[Chunk], verdict: EvaluationResult | None
    ) -> EvidenceGaps:
        """The evidence gaps of a run that is not confident: every search with what it
        returned, judged against the chunks the controller read."""
        known = {**self.found, **self.shown}
        searches = [
            (entry.query, [known[i] for i in entry.returned_chunk_ids if i in known])
            for entry in self.history
            if entry.query is not None
        ]
        return await evidence_gaps(
            self.loop.evaluator,
            self.question,
            self.judged_answer or "",
            judged,
            searches,
            verdict=verdict,
            probability=result.probability,
            target=result.target_precision,
        )

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
        self.answer, self.closest = ending.text, ending.closest
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
            closest = args.get("closest")
            step.closest = closest.strip() if isinstance(closest, str) and closest.strip() else None
            step.ends, step.text = StopReason.GAVE_UP, f"Could not answer: {why}"
            if step.closest and answer_text(step.closest) not in why:
                step.text = f"{step.text.rstrip('. ')}. The closest they come: {step.closest}"
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
