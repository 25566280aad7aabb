"""Budgets: what a run may spend, what it has spent, and the meter that checks before each step.

A :class:`Budget` caps tokens, dollars, wall-clock milliseconds and iterations. ``None`` means
uncapped and ``0`` means already exhausted. Engines create one :class:`BudgetTracker` per run,
check it *before* every step, and return their best partial result with the matching
``StopReason`` when it runs out.

Model calls made anywhere inside a run (an evaluator's LLM, a generator's LLM) report their usage
with :func:`record_usage`; the tracker of the innermost active run receives it, and so does every
enclosing run, so a loop used as a tool of another loop is charged to both.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TypeVar

from pydantic import BaseModel, ConfigDict, Field

from ragloop.core.errors import BudgetExceeded, ConfigError
from ragloop.core.records import StopReason, Usage

T = TypeVar("T")


class Budget(BaseModel):
    """Caps on one run. ``None`` means uncapped; ``0`` means exhausted before the first step."""

    model_config = ConfigDict(frozen=True)

    max_tokens: int | None = Field(default=None, ge=0)
    max_dollars: float | None = Field(default=None, ge=0)
    max_wall_ms: float | None = Field(default=None, ge=0)
    max_iter: int | None = Field(default=None, ge=0)


def check_budget(budget: object) -> Budget | None:
    """``budget`` as given to an engine or a run, refused with a :class:`ConfigError` when it
    is neither None nor a :class:`Budget`."""
    if budget is not None and not isinstance(budget, Budget):
        raise ConfigError("budget", f"must be a ragloop.Budget, got {budget!r}")
    return budget


class BudgetSpend(BaseModel):
    """What a run spent. ``dollars`` counts only calls whose price is known."""

    tokens: int = 0
    dollars: float = 0.0
    wall_ms: float = 0.0
    iters: int = 0


_active: ContextVar[BudgetTracker | None] = ContextVar("ragloop_budget_tracker", default=None)


class BudgetTracker:
    """Meters one run against a :class:`Budget`."""

    def __init__(
        self, budget: Budget | None = None, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.budget = budget or Budget()
        self._clock = clock
        self._started = clock()
        self._usage = Usage()
        self._usage_known = False
        self._iters = 0
        self._parent: BudgetTracker | None = None

    # -- spending ---------------------------------------------------------------------------
    def record(self, usage: Usage) -> None:
        """Add a model call's usage to this run and to every enclosing run."""
        tracker: BudgetTracker | None = self
        while tracker is not None:
            tracker._usage = tracker._usage + usage
            tracker._usage_known = True
            tracker = tracker._parent

    def count_iteration(self) -> None:
        self._iters += 1

    @property
    def usage(self) -> Usage | None:
        """Total usage recorded so far, or None if no call reported any."""
        return self._usage if self._usage_known else None

    @property
    def wall_ms(self) -> float:
        return (self._clock() - self._started) * 1000.0

    @property
    def spend(self) -> BudgetSpend:
        return BudgetSpend(
            tokens=self._usage.total_tokens,
            dollars=self._usage.cost_usd or 0.0,
            wall_ms=round(self.wall_ms, 3),
            iters=self._iters,
        )

    # -- checking ---------------------------------------------------------------------------
    def exhausted(self, *, starting_iteration: bool = False) -> StopReason | None:
        """The budget stop that applies now, or None. Call before every step.

        With ``starting_iteration=True`` the iteration cap is checked too: a run may not start
        iteration ``max_iter + 1``.
        """
        b = self.budget
        if starting_iteration and b.max_iter is not None and self._iters >= b.max_iter:
            return StopReason.BUDGET_ITER
        if b.max_tokens is not None and self._usage.total_tokens >= b.max_tokens:
            return StopReason.BUDGET_TOKENS
        if b.max_dollars is not None and (self._usage.cost_usd or 0.0) >= b.max_dollars:
            return StopReason.BUDGET_DOLLARS
        if b.max_wall_ms is not None and self.wall_ms >= b.max_wall_ms:
            return StopReason.BUDGET_WALL_MS
        return None

    def check(self, *, starting_iteration: bool = False) -> None:
        """Raise :class:`BudgetExceeded` if the budget is spent."""
        reason = self.exhausted(starting_iteration=starting_iteration)
        if reason is not None:
            raise BudgetExceeded(reason)

    def remaining_wall_s(self) -> float | None:
        if self.budget.max_wall_ms is None:
            return None
        return max(0.0, (self.budget.max_wall_ms - self.wall_ms) / 1000.0)

    async def bounded(self, awaitable: Awaitable[T]) -> T:
        """Await a step, cutting it off when the wall-clock budget runs out mid-step."""
        remaining = self.remaining_wall_s()
        if remaining is None:
            return await awaitable
        try:
            async with asyncio.timeout(remaining) as deadline:
                return await awaitable
        except TimeoutError:
            if deadline.expired():
                raise BudgetExceeded(StopReason.BUDGET_WALL_MS) from None
            raise

    @contextmanager
    def active(self) -> Iterator[BudgetTracker]:
        """Make this tracker the one :func:`record_usage` reports to, inside the block."""
        self._parent = _active.get()
        token = _active.set(self)
        try:
            yield self
        finally:
            _active.reset(token)
            self._parent = None


def record_usage(usage: Usage) -> None:
    """Charge a model call's usage to the run in progress (no-op outside a run).

    Components that call an LLM themselves (a custom generator, say) call this so the run's
    token and dollar budgets and its trace see the spend.
    """
    tracker = _active.get()
    if tracker is not None:
        tracker.record(usage)


def remaining_wall_s() -> float | None:
    """Seconds left before the wall-clock budget of the run in progress, or of any run enclosing
    it, runs out; None outside a run or when no budget caps wall-clock time.

    Code that waits inside a run (a provider sleeping before a retry) checks this first, so a
    wait never outlasts the run.
    """
    tracker = _active.get()
    left: float | None = None
    while tracker is not None:
        mine = tracker.remaining_wall_s()
        if mine is not None:
            left = mine if left is None else min(left, mine)
        tracker = tracker._parent
    return left
