from __future__ import annotations

import asyncio

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ragloop import Budget, BudgetExceeded, StopReason, Usage, record_usage
from ragloop.core.budget import BudgetTracker, remaining_wall_s


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_none_means_uncapped():
    tracker = BudgetTracker(Budget())
    tracker.record(Usage(input_tokens=10**9))
    for _ in range(1000):
        tracker.count_iteration()
    assert tracker.exhausted(starting_iteration=True) is None


@pytest.mark.parametrize(
    ("budget", "reason"),
    [
        (Budget(max_tokens=0), StopReason.BUDGET_TOKENS),
        (Budget(max_dollars=0), StopReason.BUDGET_DOLLARS),
        (Budget(max_wall_ms=0), StopReason.BUDGET_WALL_MS),
        (Budget(max_iter=0), StopReason.BUDGET_ITER),
    ],
)
def test_zero_means_exhausted_before_the_first_step(budget, reason):
    assert BudgetTracker(budget).exhausted(starting_iteration=True) == reason


def test_iteration_cap_is_checked_only_when_starting_an_iteration():
    tracker = BudgetTracker(Budget(max_iter=1))
    tracker.count_iteration()
    assert tracker.exhausted() is None
    assert tracker.exhausted(starting_iteration=True) == StopReason.BUDGET_ITER


def test_wall_clock_uses_the_clock():
    clock = FakeClock()
    tracker = BudgetTracker(Budget(max_wall_ms=500), clock=clock)
    clock.now += 0.499
    assert tracker.exhausted() is None
    clock.now += 0.001
    assert tracker.exhausted() == StopReason.BUDGET_WALL_MS
    assert tracker.spend.wall_ms == pytest.approx(500)


def test_check_raises_budget_exceeded_with_the_reason():
    tracker = BudgetTracker(Budget(max_tokens=5))
    tracker.record(Usage(input_tokens=3, output_tokens=2))
    with pytest.raises(BudgetExceeded) as caught:
        tracker.check()
    assert caught.value.reason == StopReason.BUDGET_TOKENS


def test_record_usage_reaches_the_active_tracker_and_enclosing_ones():
    outer, inner = BudgetTracker(), BudgetTracker()
    record_usage(Usage(input_tokens=1))  # outside any run: ignored
    with outer.active():
        record_usage(Usage(input_tokens=2))
        with inner.active():
            record_usage(Usage(output_tokens=3, cost_usd=0.1))
        record_usage(Usage(input_tokens=4))
    assert inner.usage == Usage(output_tokens=3, cost_usd=0.1)
    assert outer.usage == Usage(input_tokens=6, output_tokens=3, cost_usd=0.1)
    assert outer.spend.dollars == pytest.approx(0.1)
    record_usage(Usage(input_tokens=100))
    assert outer.usage.input_tokens == 6


def test_usage_is_none_until_something_is_recorded():
    assert BudgetTracker().usage is None


async def test_bounded_cuts_a_step_at_the_deadline():
    tracker = BudgetTracker(Budget(max_wall_ms=30))
    with pytest.raises(BudgetExceeded) as caught:
        await tracker.bounded(asyncio.sleep(10))
    assert caught.value.reason == StopReason.BUDGET_WALL_MS


async def test_bounded_lets_a_steps_own_timeout_error_through():
    tracker = BudgetTracker(Budget(max_wall_ms=10_000))

    async def step():
        raise TimeoutError("the provider timed out")

    with pytest.raises(TimeoutError, match="provider"):
        await tracker.bounded(step())


async def test_usage_recorded_in_worker_threads_and_tasks_is_counted():
    tracker = BudgetTracker()
    with tracker.active():
        await asyncio.to_thread(record_usage, Usage(input_tokens=1))
        await asyncio.gather(
            *(asyncio.to_thread(record_usage, Usage(output_tokens=1)) for _ in range(5))
        )
    assert tracker.usage == Usage(input_tokens=1, output_tokens=5)


def test_budget_rejects_negative_caps():
    with pytest.raises(ValueError, match="max_tokens"):
        Budget(max_tokens=-1)


@given(
    st.lists(st.tuples(st.integers(0, 1000), st.integers(0, 1000)), max_size=30),
    st.integers(0, 20000),
)
def test_token_spend_is_the_sum_and_the_cap_triggers_exactly_at_the_limit(calls, cap):
    tracker = BudgetTracker(Budget(max_tokens=cap))
    for i, o in calls:
        tracker.record(Usage(input_tokens=i, output_tokens=o))
    total = sum(i + o for i, o in calls)
    assert tracker.spend.tokens == total
    assert (tracker.exhausted() == StopReason.BUDGET_TOKENS) == (total >= cap)


def test_remaining_wall_s_is_the_tightest_of_the_enclosing_runs():
    clock = FakeClock()
    assert remaining_wall_s() is None
    outer = BudgetTracker(Budget(max_wall_ms=2_000), clock=clock)
    inner = BudgetTracker(Budget(max_wall_ms=5_000), clock=clock)
    with outer.active():
        clock.now += 0.5
        with inner.active():
            assert remaining_wall_s() == pytest.approx(1.5)
        with BudgetTracker(Budget(), clock=clock).active():
            assert remaining_wall_s() == pytest.approx(1.5)
    with BudgetTracker(Budget()).active():
        assert remaining_wall_s() is None
