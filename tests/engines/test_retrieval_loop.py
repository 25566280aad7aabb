"""RetrievalLoop (seeds 003 and 004): stop rules in the seed's order, callbacks, budgets,
sub-queries, ranking of the evidence, sync/async parity."""

from __future__ import annotations

import asyncio

import pytest

from ragloop import (
    Budget,
    ComponentError,
    ConfigError,
    DefaultCostEstimator,
    RefineContext,
    RetrievalIteration,
    RetrievalLoop,
    RetrievalLoopConfig,
    RetrievalLoopError,
    RetrievalResult,
    StopReason,
    Usage,
    record_usage,
)
from tests.helpers import SlowAsyncRetriever, TableRetriever, chunk

Q = "regulations for staff members"
TABLE = {
    Q: [chunk("staff rules", 0.6, "a"), chunk("dress code", 0.5, "b")],
    "q1": [chunk("staff rules", 0.7, "a"), chunk("internal policies", 0.65, "c")],
    "q2": [chunk("forms", 0.8, "d"), chunk("reporting", 0.4, "e"), chunk("conduct", 0.3, "f")],
    "q3": [chunk("ethics", 0.9, "g"), chunk("travel", 0.2, "h")],
}


class ListRefiner:
    """Returns the scripted refinements in order (None when they run out); records contexts."""

    def __init__(self, *outputs: object) -> None:
        self.outputs = list(outputs)
        self.contexts: list[RefineContext] = []

    def refine(self, context: RefineContext) -> object:
        self.contexts.append(context)
        return self.outputs.pop(0) if self.outputs else None


def make(refiner=None, table=None, **config) -> tuple[RetrievalLoop, TableRetriever]:
    retriever = TableRetriever(table or TABLE)
    loop = RetrievalLoop(retriever, config=RetrievalLoopConfig(**config), refiner=refiner)
    return loop, retriever


def queries_of(result: RetrievalResult) -> list[str]:
    return [it.query for it in result.trace]


# -- the loop ------------------------------------------------------------------------------------


def test_iterations_record_exactly_the_listed_fields():
    assert list(RetrievalIteration.model_fields) == [
        "index",
        "query",
        "route",
        "results_n",
        "new_chunks_n",
        "best_score",
        "plan_reused",
        "sticky",
        "cache_hits",
        "cache_misses",
        "elapsed_ms",
        "chunks",
        "decision",
    ]


def test_a_run_searches_each_refinement_and_gathers_the_evidence():
    loop, retriever = make(ListRefiner("q1", ["q2", "q3"]), min_new_chunks_per_iter=0)
    result = loop.run(Q)
    assert result.stop_reason == StopReason.NO_NEW_QUERIES  # the refiner ran out, not the caller
    assert queries_of(result) == [Q, "q1", "q2 | q3"]
    assert [q for q, _ in retriever.calls] == [Q, "q1", "q2", "q3"]
    assert all(k == 10 for _, k in retriever.calls)  # top_k
    first, second, third = result.trace
    assert (first.index, first.results_n, first.new_chunks_n, first.best_score) == (0, 2, 2, 0.6)
    assert (second.results_n, second.new_chunks_n, second.best_score) == (2, 1, 0.7)
    assert (third.results_n, third.new_chunks_n, third.best_score) == (5, 5, 0.9)
    assert first.route == "default"  # a plain retriever with no mode
    ids = [c.id for c in result.chunks]
    assert len(ids) == len(set(ids)) == 8  # deduplicated by id


def test_evidence_is_ranked_by_best_position_with_half_a_place_per_iteration():
    loop, _ = make(ListRefiner("q1", ["q2", "q3"]), min_new_chunks_per_iter=0)
    result = loop.run(Q)
    # ranks: staff rules 0, dress code 1; internal policies 1 + 0.5; forms and ethics 0 + 1,
    # reporting and travel 1 + 1, conduct 2 + 1 (earlier discovery first on ties)
    assert [c.content for c in result.chunks] == [
        "staff rules",
        "dress code",
        "forms",
        "ethics",
        "internal policies",
        "reporting",
        "travel",
        "conduct",
    ]


def test_without_a_refiner_the_last_queries_run_again_until_diminishing_returns():
    loop, _ = make()
    result = loop.run(Q)
    assert result.stop_reason == StopReason.DIMINISHING_RETURNS
    assert queries_of(result) == [Q, Q]
    assert result.trace[1].new_chunks_n == 0


def test_sub_queries_come_first_then_the_refiner():
    refiner = ListRefiner("q3")
    loop, _ = make(refiner, min_new_chunks_per_iter=0)
    result = loop.run(Q, sub_queries=["q1", "q2"])
    assert queries_of(result) == [Q, "q1", "q2", "q3"]
    assert len(refiner.contexts) == 2  # after q2, then after q3 (it returned None)
    assert result.stop_reason == StopReason.NO_NEW_QUERIES


def test_the_refiner_sees_the_whole_run():
    refiner = ListRefiner("q1")
    loop, _ = make(refiner, min_new_chunks_per_iter=0)
    loop.run(Q)
    first, second = refiner.contexts
    assert (first.original, first.index, first.queries) == (Q, 0, [Q])
    assert [c.content for c in first.last_chunks] == ["staff rules", "dress code"]
    assert first.new_chunks == first.last_chunks
    assert len(first.history) == 1
    assert first.tried == frozenset({"regulations for staff members"})
    assert first.retriever is loop.retriever
    assert second.index == 1
    assert [c.content for c in second.new_chunks] == ["internal policies"]
    assert [c.content for c in second.chunks] == ["staff rules", "dress code", "internal policies"]


def test_a_refiner_returning_the_wrong_type_is_a_component_error():
    loop, _ = make(ListRefiner(42))
    with pytest.raises(ComponentError, match="refiner returned int"):
        loop.run(Q)


def test_a_failing_component_raises_with_a_note_naming_it():
    class Broken:
        def retrieve(self, query: str, top_k: int = 5) -> list:
            raise OSError("index offline")

    with pytest.raises(OSError, match="index offline") as caught:
        RetrievalLoop(Broken()).run(Q)
    assert "raised by the retriever in iteration 0" in caught.value.__notes__[0]


# -- stop rules, in the seed's order -------------------------------------------------------------


def test_max_iterations_and_the_refiner_is_not_asked_after_the_last():
    refiner = ListRefiner("q1", "q2", "q3")
    loop, _ = make(refiner, max_iterations=2, min_new_chunks_per_iter=0)
    result = loop.run(Q)
    assert result.stop_reason == StopReason.MAX_ITERATIONS
    assert len(result.trace) == 2
    assert len(refiner.contexts) == 1


def test_diminishing_returns_never_on_iteration_0_and_zero_disables_it():
    table = {Q: [chunk("only one", 0.5)], "q1": [chunk("only one", 0.5), chunk("new", 0.4)]}
    loop, _ = make(ListRefiner("q1", "q1"), table=table, min_new_chunks_per_iter=2)
    result = loop.run(Q)
    # iteration 0 found 1 new chunk (< 2) and went on; iteration 1 found 1 new chunk and stopped
    assert result.stop_reason == StopReason.DIMINISHING_RETURNS
    assert [it.new_chunks_n for it in result.trace] == [1, 1]
    loop, _ = make(ListRefiner("q1", "q1"), table=table, min_new_chunks_per_iter=0)
    assert loop.run(Q).stop_reason == StopReason.NO_NEW_QUERIES  # ran until the refiner stopped


def test_no_improvement_follows_seed_003s_code():
    # best scores 0.5, 0.75, 1.0: improvements 0.5 (over 0.0), 0.25, 0.25
    table = {
        Q: [chunk("a", 0.5)],
        "q1": [chunk("b", 0.75), chunk("x", 0.125)],
        "q2": [chunk("c", 1.0), chunk("y", 0.125)],
    }
    loop, _ = make(ListRefiner("q1", "q2"), table=table, improvement_threshold=0.375)
    result = loop.run(Q)
    assert result.stop_reason == StopReason.NO_IMPROVEMENT
    assert len(result.trace) == 2  # the non-improving iteration is recorded
    loop, _ = make(ListRefiner("q1", "q2"), table=table, improvement_threshold=0.25)
    assert loop.run(Q).stop_reason == StopReason.NO_NEW_QUERIES  # only "less than" stops
    # the first iteration is compared with 0.0, as in the seed's code
    loop, _ = make(ListRefiner("q1"), table=table, improvement_threshold=0.625)
    result = loop.run(Q)
    assert (result.stop_reason, len(result.trace)) == (StopReason.NO_IMPROVEMENT, 1)


def test_stop_rules_apply_in_the_seeds_order():
    same = {Q: [chunk("a", 0.5)]}
    # should_continue False beats diminishing returns and no improvement
    loop, _ = make(table=same, improvement_threshold=0.5)
    result = loop.run(Q, should_continue=lambda history: len(history) < 2)
    assert (result.stop_reason, len(result.trace)) == (StopReason.CALLER_STOP, 2)
    # diminishing returns beats no improvement (iteration 1 adds nothing and improves nothing)
    loop, _ = make(table=same, improvement_threshold=0.5)
    result = loop.run(Q, should_continue=lambda history: True)
    assert (result.stop_reason, len(result.trace)) == (StopReason.DIMINISHING_RETURNS, 2)
    loop, _ = make(table=same, improvement_threshold=0.5, min_new_chunks_per_iter=0)
    assert loop.run(Q).stop_reason == StopReason.NO_IMPROVEMENT
    # no improvement beats the refiner's None, which is then never asked
    refiner = ListRefiner()
    loop, _ = make(refiner, table={Q: [chunk("a", 0.1)]}, improvement_threshold=0.5)
    assert loop.run(Q).stop_reason == StopReason.NO_IMPROVEMENT
    assert refiner.contexts == []


# -- callbacks -----------------------------------------------------------------------------------


def test_refine_query_gets_the_original_the_history_and_the_iteration_index():
    seen: list[tuple[str, list[int], int]] = []

    def refine(original, history, iter_idx):
        seen.append((original, [it.index for it in history], iter_idx))
        return ["q1", "q2", None][iter_idx]

    refiner = ListRefiner("q3")
    loop, _ = make(refiner, min_new_chunks_per_iter=0)
    result = loop.run(Q, refine_query=refine)
    assert seen == [(Q, [0], 0), (Q, [0, 1], 1), (Q, [0, 1, 2], 2)]
    assert queries_of(result) == [Q, "q1", "q2"]
    assert result.stop_reason == StopReason.CALLER_STOP
    assert refiner.contexts == []  # refine_query wins over the loop's refiner


async def test_callbacks_may_be_async():
    async def refine(original, history, iter_idx):
        await asyncio.sleep(0)
        return "q1"

    async def keep_going(history):
        await asyncio.sleep(0)
        return len(history) < 2

    loop, _ = make(min_new_chunks_per_iter=0)
    result = await loop.arun(Q, refine_query=refine, should_continue=keep_going)
    assert queries_of(result) == [Q, "q1"]
    assert result.stop_reason == StopReason.CALLER_STOP


@pytest.mark.parametrize("which", ["refine_query", "should_continue"])
def test_a_failing_callback_raises_retrieval_loop_error_with_the_iteration(which):
    def explode(*args):
        if len(args[1] if which == "refine_query" else args[0]) == 2:
            raise KeyError("boom")
        return "q1" if which == "refine_query" else True

    loop, _ = make(min_new_chunks_per_iter=0)
    with pytest.raises(RetrievalLoopError) as caught:
        loop.run(Q, **{which: explode})
    assert caught.value.iteration == 1
    assert isinstance(caught.value.__cause__, KeyError)
    assert which in str(caught.value)


def test_should_continue_sees_every_iteration_so_far():
    lengths: list[int] = []

    def keep_going(history: list[RetrievalIteration]) -> bool:
        lengths.append(len(history))
        return True

    loop, _ = make(max_iterations=3, min_new_chunks_per_iter=0)
    loop.run(Q, should_continue=keep_going)
    assert lengths == [1, 2, 3]


# -- budgets -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("budget", "reason"),
    [
        (Budget(max_tokens=0), StopReason.BUDGET_TOKENS),
        (Budget(max_dollars=0), StopReason.BUDGET_DOLLARS),
        (Budget(max_wall_ms=0), StopReason.BUDGET_WALL_MS),
        (Budget(max_iter=0), StopReason.BUDGET_ITER),
    ],
)
def test_zero_is_exhausted_before_the_first_iteration(budget, reason):
    loop, retriever = make()
    result = loop.run(Q, budget=budget)
    assert (result.stop_reason, result.trace, result.chunks) == (reason, [], [])
    assert retriever.calls == []


def test_none_is_uncapped_and_max_iter_caps_iterations():
    loop, _ = make(ListRefiner("q1", "q2", "q3"), min_new_chunks_per_iter=0)
    assert loop.run(Q, budget=Budget()).stop_reason == StopReason.NO_NEW_QUERIES
    loop, _ = make(ListRefiner("q1", "q2", "q3"), min_new_chunks_per_iter=0)
    result = loop.run(Q, budget=Budget(max_iter=2))
    assert (result.stop_reason, len(result.trace)) == (StopReason.BUDGET_ITER, 2)
    assert result.budget_used.iters == 2


def test_reported_usage_counts_against_tokens_and_dollars():
    class PaidRetriever(TableRetriever):
        def retrieve(self, query: str, top_k: int = 5) -> list:
            record_usage(Usage(input_tokens=40, cost_usd=0.01))
            return super().retrieve(query, top_k)

    retriever = PaidRetriever(TABLE)
    refiner = ListRefiner("q1", "q2", "q3")
    config = RetrievalLoopConfig(min_new_chunks_per_iter=0)
    loop = RetrievalLoop(retriever, config=config, refiner=refiner)
    result = loop.run(Q, budget=Budget(max_tokens=100))
    assert (result.stop_reason, len(result.trace)) == (StopReason.BUDGET_TOKENS, 3)
    assert result.budget_used.tokens == 120
    refiner.outputs = ["q1", "q2", "q3"]
    result = loop.run(Q, budget=Budget(max_dollars=0.015))
    assert (result.stop_reason, len(result.trace)) == (StopReason.BUDGET_DOLLARS, 2)
    assert result.budget_used.dollars == pytest.approx(0.02)


def test_the_cost_estimator_charges_only_what_no_provider_reported():
    estimator = DefaultCostEstimator(retrieve_tokens_per_query=7)
    retriever = TableRetriever(TABLE)
    loop = RetrievalLoop(retriever, cost_estimator=estimator)
    result = loop.run(Q, budget=Budget(max_tokens=10))
    # 7 tokens per retrieval: iteration 0 (7), iteration 1 (14 >= 10 ends the run at the top
    # of iteration 2... which diminishing returns reaches first)
    assert result.budget_used.tokens == 14
    loop = RetrievalLoop(retriever, cost_estimator=estimator)
    result = loop.run(Q, budget=Budget(max_tokens=5))
    assert (result.stop_reason, result.budget_used.tokens) == (StopReason.BUDGET_TOKENS, 7)

    class Reporting(TableRetriever):
        def retrieve(self, query: str, top_k: int = 5) -> list:
            record_usage(Usage(input_tokens=1))
            return super().retrieve(query, top_k)

    loop = RetrievalLoop(Reporting(TABLE), cost_estimator=estimator)
    assert loop.run(Q).budget_used.tokens == 2  # the provider's figure wins


async def test_the_wall_clock_budget_cuts_off_a_slow_step():
    loop = RetrievalLoop(SlowAsyncRetriever(delay=5.0))
    result = await loop.arun(Q, budget=Budget(max_wall_ms=50))
    assert result.stop_reason == StopReason.BUDGET_WALL_MS
    assert result.trace == []


# -- sync and async ------------------------------------------------------------------------------


def comparable(result: RetrievalResult) -> dict:
    data = result.model_dump(exclude={"run_id", "budget_used"})
    for it in data["trace"]:
        it.pop("elapsed_ms")
    return data


async def test_run_and_arun_give_the_same_result():
    loop, _ = make(ListRefiner("q1", ["q2", "q3"]), min_new_chunks_per_iter=0)
    in_sync = await asyncio.to_thread(loop.run, Q)
    loop, _ = make(ListRefiner("q1", ["q2", "q3"]), min_new_chunks_per_iter=0)
    in_async = await loop.arun(Q)
    assert comparable(in_sync) == comparable(in_async)


async def test_arun_searches_an_iterations_queries_concurrently():
    retriever = SlowAsyncRetriever(delay=0.05)
    loop = RetrievalLoop(retriever, refiner=ListRefiner(["a", "b", "c"]))
    result = await loop.arun(Q, budget=Budget(max_iter=2))
    assert result.trace[1].query == "a | b | c"
    assert retriever.max_active == 3


def test_results_round_trip_through_json():
    loop, _ = make(ListRefiner("q1"))
    result = loop.run(Q)
    data = result.model_dump(mode="json")
    assert data["cache_stats"] == {"hits": 0, "misses": 0, "rate": 0.0}
    assert {"plan_reuse_rate", "sticky_route_rate"} <= set(data)
    assert RetrievalResult.model_validate_json(result.model_dump_json()) == result


# -- configuration -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_iterations", 0),
        ("max_iterations", True),
        ("min_new_chunks_per_iter", -1),
        ("top_k", 0),
        ("improvement_threshold", 1.5),
        ("improvement_threshold", float("nan")),
        ("allow_route_switch", "yes"),
    ],
)
def test_invalid_settings_name_the_field(field, value):
    with pytest.raises(ConfigError, match=field):
        RetrievalLoopConfig(**{field: value})


def test_invalid_components_and_arguments_are_refused():
    with pytest.raises(TypeError, match="retriever"):
        RetrievalLoop(object())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="refiner must have a refine"):
        RetrievalLoop(TableRetriever(), refiner=object())  # type: ignore[arg-type]
    loop, _ = make()
    with pytest.raises(ValueError, match="non-empty"):
        loop.run("  ")
    with pytest.raises(ConfigError, match="budget"):
        loop.run(Q, budget={"max_iter": 1})  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="sub_queries"):
        loop.run(Q, sub_queries="q1")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="should_continue"):
        loop.run(Q, should_continue=True)  # type: ignore[arg-type]


def test_should_continue_returning_none_has_no_opinion():
    loop, _ = make(ListRefiner("q1"), min_new_chunks_per_iter=0)
    result = loop.run(Q, should_continue=lambda history: None)
    assert (result.stop_reason, len(result.trace)) == (StopReason.NO_NEW_QUERIES, 2)
    assert queries_of(result) == [Q, "q1"]  # the refiner, not the callback, ended it
