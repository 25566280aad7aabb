"""The run skeleton the three engines share, written once: ``run`` (blocking), ``arun`` and
``astream``, and the steps every run takes before its engine's own: check the query and the
budget, open the run's telemetry (its span, ``run_started``, the events a stream reads), count
the budget and the LLM calls, and run sync components inline or in worker threads.

An engine says only how a run starts (:meth:`Engine._start`: the run's state, with its
telemetry and budget tracker) and what the run span records of its settings
(:meth:`Engine._settings`); the run's ``execute()`` is the engine's loop.
"""

from __future__ import annotations

from typing import Any, Generic, Protocol, TypeVar

from pydantic import BaseModel

from ragloop.core.budget import Budget, BudgetSpend, BudgetTracker, check_budget
from ragloop.core.calls import run_sync, sync_calls_in_threads
from ragloop.core.errors import check_query
from ragloop.core.limits import calls_so_far, with_llm_calls
from ragloop.core.records import StopReason
from ragloop.observability.run import RunTelemetry
from ragloop.observability.stream import RunStream, stream_run

R = TypeVar("R", bound=BaseModel)  # an engine's result
R_co = TypeVar("R_co", bound=BaseModel, covariant=True)
H = TypeVar("H")  # what a run is given besides its query and budget (None for most engines)


class RunState(Protocol[R_co]):
    """One run in progress: what the skeleton needs of it."""

    telemetry: RunTelemetry
    tracker: BudgetTracker

    async def execute(self) -> R_co: ...


class Outcome(Protocol):
    """What every engine's result says of how its run ended."""

    @property
    def stop_reason(self) -> StopReason: ...
    @property
    def iterations(self) -> int: ...
    @property
    def budget_used(self) -> BudgetSpend: ...
    @property
    def error(self) -> str | None: ...


Finished = TypeVar("Finished", bound=Outcome)


def finish(
    telemetry: RunTelemetry,
    result: Finished,
    *,
    chunk_count: int,
    attributes: dict[str, Any] | None = None,
    content: dict[str, Any] | None = None,
) -> Finished:
    """``result``, after its run's telemetry recorded how it ended (``run_finished``, the run
    span's outcome) with the engine's own ``attributes`` and ``content``, how many model calls
    the run made (``llm_calls``) and whether it stands by its answer (``confident``)."""
    telemetry.finish(
        stop_reason=result.stop_reason,
        iterations=result.iterations,
        budget_used=result.budget_used,
        chunk_count=chunk_count,
        error=result.error,
        attributes={
            "llm_calls": calls_so_far(),
            "confident": getattr(result, "confident", None),  # the retrieval loop answers none
            **(attributes or {}),
        },
        content=content,
    )
    return result


class Engine(Generic[R, H]):
    """The base of the three engines: their ``run``, ``arun`` and ``astream``. ``R`` is the
    engine's result; ``H`` what a run may be given besides query and budget (RetrievalLoop's
    callbacks), None for an engine whose runs take nothing else."""

    def run(self, query: str, *, budget: Budget | None = None) -> R:
        """Run the loop to its stop. Blocks; sync components run inline, in the calling
        thread's order. ``budget`` replaces the engine's own for this run."""
        return run_sync(lambda: self._run(query, budget, None, in_threads=False))

    async def arun(self, query: str, *, budget: Budget | None = None) -> R:
        """Async :meth:`run`: sync components run in worker threads, independent searches
        concurrently."""
        return await self._run(query, budget, None, in_threads=True)

    def astream(self, query: str, *, budget: Budget | None = None) -> RunStream[R]:
        """:meth:`arun` as a stream of its events (``async for event in loop.astream(q)``):
        each search and the chunks it returned, the engine's own steps, then ``run_finished``;
        the result is the stream's ``result``. Closing the stream early cancels the run. See
        ``docs/streaming.md``."""
        return stream_run(lambda: self._run(query, budget, None, in_threads=True))

    async def _run(
        self, query: str, budget: Budget | None, given: H | None, *, in_threads: bool
    ) -> R:
        check_query(query)
        check_budget(budget)
        run = await self._start(query, budget, given)
        started = run.telemetry.active(attributes=self._settings(), content={"question": query})
        with sync_calls_in_threads(in_threads), run.tracker.active(), started:
            return await with_llm_calls(run.execute())

    async def _start(self, query: str, budget: Budget | None, given: H | None) -> RunState[R]:
        """The state of a new run (``budget`` is the run's own, None for the engine's)."""
        raise NotImplementedError

    def _settings(self) -> dict[str, Any]:
        """What the run span and ``run_started`` record of the engine's settings."""
        raise NotImplementedError
