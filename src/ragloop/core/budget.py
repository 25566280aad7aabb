"""Budgets: what a run may spend, what it has spent, and the meter that checks before each step.

A :class:`Budget` caps tokens, dollars, wall-clock milliseconds and iterations. ``None`` means
uncapped and ``0`` means already exhausted. Engines create one :class:`BudgetTracker` per run,
check it *before* every step, and return their best partial result with the matching
``StopReason`` when it runs out.

Model calls made anywhere inside a run (an evaluator's LLM, a generator's LLM) report their usage
with :func:`record_usage`; the tracker of the innermost active run receives it, and so does every
enclosing run, so a loop used as a tool of another loop is charged to both.

Every model call (:func:`ragloop.core.calls.complete` / ``ask``) is also admitted by
:func:`model_call` first, so a step that makes several (sub-queries understood at once, a batch
of searches that call models, a RetrievalLoop iteration) is checked call by call, not once:

- a call is refused (``BudgetExceeded``) once a budget of its run, or of a run enclosing it, is
  spent, and the run returns its partial result;
- under a token or dollar budget, a run's model calls go one at a time: a call waits while
  another is in flight, then is admitted only if the budget is still not spent. No call's cost
  is known before it ends, so this is what bounds the overshoot to **at most one call** (the
  one that crossed the budget); runs without such a budget keep their calls concurrent;
- a dollar budget needs prices: a call to a model without a known price (``price`` None), or
  that reports no cost, is a ``ConfigError`` rather than a budget that silently never stops.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from contextvars import ContextVar
from typing import TypeVar

from pydantic import BaseModel, ConfigDict, Field

from ragloop.core.errors import BudgetExceeded, ConfigError
from ragloop.core.records import StopReason, Usage

T = TypeVar("T")

DOLLAR_TOLERANCE = 1e-9  # relative: float sums of costs may fall just short of the cap


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
        self._in_flight = 0  # model calls admitted and not yet finished
        self._calls = threading.Lock()

    # -- spending ---------------------------------------------------------------------------
    def record(self, usage: Usage) -> None:
        """Add a model call's usage to this run and to every enclosing run."""
        tracker: BudgetTracker | None = self
        while tracker is not None:
            with tracker._calls:
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
        # costs add up in floating point (1e-4 + 24e-4 + ... falls a hair short of 0.015): a
        # spend within a billionth of the cap has reached it
        spent = self._usage.cost_usd or 0.0
        if b.max_dollars is not None and spent >= b.max_dollars * (1 - DOLLAR_TOLERANCE):
            return StopReason.BUDGET_DOLLARS
        if b.max_wall_ms is not None and self.wall_ms >= b.max_wall_ms:
            return StopReason.BUDGET_WALL_MS
        return None

    def check(self, *, starting_iteration: bool = False) -> None:
        """Raise :class:`BudgetExceeded` if the budget is spent."""
        reason = self.exhausted(starting_iteration=starting_iteration)
        if reason is not None:
            raise BudgetExceeded(reason)

    # -- admitting model calls ---------------------------------------------------------------
    def _chain(self) -> list[BudgetTracker]:
        trackers: list[BudgetTracker] = []
        tracker: BudgetTracker | None = self
        while tracker is not None:
            trackers.append(tracker)
            tracker = tracker._parent
        return trackers

    def _admits_another(self) -> bool:
        """Whether a call may start beside those in flight: under a token or dollar budget,
        only when none is (see the module docstring)."""
        b = self.budget
        return not self._in_flight or (b.max_tokens is None and b.max_dollars is None)

    def try_admit(self) -> bool:
        """Admit a model call of this run (and of every enclosing run): True when it may start
        now, False when it must wait for calls in flight; raises ``BudgetExceeded`` when a
        budget is spent. An admitted call ends with :meth:`release`."""
        chain = self._chain()
        for tracker in chain:
            reason = tracker.exhausted()
            if reason is not None:
                raise BudgetExceeded(reason)
        locks = [tracker._calls for tracker in chain]
        for lock in locks:
            lock.acquire()
        try:
            if not all(tracker._admits_another() for tracker in chain):
                return False
            for tracker in chain:
                tracker._in_flight += 1
            return True
        finally:
            for lock in reversed(locks):
                lock.release()

    def release(self) -> None:
        """A call admitted by :meth:`try_admit` has finished (its usage already recorded)."""
        for tracker in self._chain():
            with tracker._calls:
                tracker._in_flight -= 1

    @property
    def wants_prices(self) -> bool:
        """Whether this run or one enclosing it has a dollar budget."""
        return any(t.budget.max_dollars is not None for t in self._chain())

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
    priced = _priced.get()
    if priced is not None:
        priced.append(usage.cost_usd is not None)


# Set while an admitted model call runs: a call made from inside it (a generate_fn calling a
# chat model) is checked but never waits (it would wait for itself), and the costs it reports
# count for the outer call.
_priced: ContextVar[list[bool] | None] = ContextVar("ragloop_call_priced", default=None)
_ADMISSION_POLL_S = 0.005


@asynccontextmanager
async def model_call(model: object, who: str) -> AsyncIterator[None]:
    """Admit one model call to the run in progress (see the module docstring); ``who`` names
    it in errors. Raises ``BudgetExceeded`` when a budget is spent and ``ConfigError`` when a
    dollar budget meets a model without a price."""
    tracker = _active.get()
    if tracker is None:
        yield
        return
    if tracker.wants_prices and hasattr(model, "price") and model.price is None:
        raise _unpriced(who, "has no known price")
    if _priced.get() is not None:  # inside an admitted call
        for enclosing in tracker._chain():
            reason = enclosing.exhausted()
            if reason is not None:
                raise BudgetExceeded(reason)
        yield
        return
    # polled, not an asyncio.Event: the calls of one run may run on different event loops
    # (a sync generate_fn drives its own) and threads
    while not tracker.try_admit():  # noqa: ASYNC110
        await asyncio.sleep(_ADMISSION_POLL_S)
    priced: list[bool] = []
    token = _priced.set(priced)
    try:
        yield
    finally:
        _priced.reset(token)
        tracker.release()
    if tracker.wants_prices and not any(priced):
        raise _unpriced(who, "reported no cost")


def _unpriced(who: str, why: str) -> ConfigError:
    return ConfigError(
        "max_dollars",
        f"{who} {why}, so a dollar budget cannot be kept: give the model a price "
        "(price=ModelPrice(...), ModelPrice(0, 0) for a free local model), report cost_usd in "
        "its usage, or use max_tokens",
    )


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
