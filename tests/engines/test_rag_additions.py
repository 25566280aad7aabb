"""What RAGLoop does beyond seed 000: budgets, error stops, repeat handling, a richer trace."""

from __future__ import annotations

import asyncio
import json

import pytest

from ragloop import (
    Budget,
    ComponentError,
    EmptyTraceError,
    GeneratorOutput,
    HeuristicReformulator,
    LLMEvaluator,
    LLMReformulator,
    LoopConfig,
    LoopResult,
    RAGLoop,
    ReformulationStrategy,
    StopReason,
    Usage,
    record_usage,
)
from ragloop.testing import InMemoryRetriever, ScriptedModel
from tests.helpers import (
    EchoGenerator,
    ListReformulator,
    ScoreEvaluator,
    SlowAsyncRetriever,
    TableRetriever,
    chunk,
    raising,
)

Q = "What is the refund policy for international orders?"
TABLE = {Q: [chunk("refunds", 0.5)], "q2": [chunk("second", 0.6)], "q3": [chunk("third", 0.7)]}


def loop_with(scores=(0.1, 0.2, 0.3), queries=(["q2"], ["q3"]), table=None, **config):
    retriever = TableRetriever(table or TABLE)
    evaluator = ScoreEvaluator(scores)
    reformulator = ListReformulator(list(queries))
    loop = RAGLoop(retriever, EchoGenerator(), evaluator, reformulator, LoopConfig(**config))
    return loop, retriever, evaluator, reformulator


# -- trace -------------------------------------------------------------------------------------


def test_trace_records_strategy_reasoning_and_sub_queries():
    loop, *_ = loop_with(queries=(["q2", "q3"],))
    loop.reformulator.strategy = ReformulationStrategy.DECOMPOSE  # type: ignore[attr-defined]
    result = loop.run(Q)
    first, second = result.trace[:2]
    assert first.strategy is None
    assert first.reasoning is None
    assert first.queries == [Q]
    assert second.strategy == ReformulationStrategy.DECOMPOSE
    assert second.reasoning == "call 1"
    assert second.queries == ["q2", "q3"]


def test_trace_records_timings_of_each_step():
    loop, *_ = loop_with()
    result = loop.run(Q)
    assert set(result.trace[0].timings_ms) == {"retrieve", "generate", "evaluate"}
    assert set(result.trace[1].timings_ms) == {"reformulate", "retrieve", "generate", "evaluate"}
    assert all(v >= 0 for it in result.trace for v in it.timings_ms.values())
    assert result.budget_used.wall_ms >= 0
    assert result.budget_used.iters == 3


def test_usage_is_recorded_per_iteration_and_in_total():
    model = ScriptedModel(
        ['{"is_grounded": 1, "is_complete": 0, "score": 0.2, "reason": "vague"}'] * 2,
        usage=Usage(input_tokens=100, output_tokens=10),
    )
    loop = RAGLoop(
        TableRetriever(TABLE),
        EchoGenerator(),
        LLMEvaluator(model),
        ListReformulator([["q2"]]),
        LoopConfig(max_iterations=2),
    )
    result = loop.run(Q)
    assert [it.usage for it in result.trace] == [Usage(input_tokens=100, output_tokens=10)] * 2
    assert result.usage == Usage(input_tokens=200, output_tokens=20)
    assert result.budget_used.tokens == 220


def test_usage_is_none_when_no_component_reports_any():
    loop, *_ = loop_with()
    result = loop.run(Q)
    assert result.usage is None
    assert all(it.usage is None for it in result.trace)


def test_result_and_trace_round_trip_through_json():
    loop, *_ = loop_with(queries=(["q2", "q3"],))
    result = loop.run(Q)
    text = result.model_dump_json()
    loaded = LoopResult.model_validate_json(text)
    assert loaded == result
    assert loaded.best_iteration.iteration == result.best_iteration.iteration
    assert json.loads(text)["stop_reason"] == "max_iterations"


# -- budgets -----------------------------------------------------------------------------------


def test_budget_of_zero_iterations_returns_an_empty_partial_result():
    loop, retriever, *_ = loop_with(budget=Budget(max_iter=0))
    result = loop.run(Q)
    assert result.stop_reason == StopReason.BUDGET_ITER
    assert result.iterations == 0
    assert result.answer == ""
    assert result.confidence == 0.0
    assert retriever.calls == []
    with pytest.raises(EmptyTraceError):
        _ = result.best_iteration


def test_iteration_budget_stops_before_a_useless_reformulation():
    loop, _retriever, _, reformulator = loop_with(scores=(0.1, 0.5, 0.2), budget=Budget(max_iter=2))
    result = loop.run(Q)
    assert result.stop_reason == StopReason.BUDGET_ITER
    assert result.iterations == 2
    assert len(reformulator.calls) == 1  # not called after the last affordable iteration
    assert result.answer == "second"  # the best finished iteration


def test_token_budget_is_checked_before_each_step():
    model = ScriptedModel(
        ['{"is_grounded": true, "is_complete": false, "score": 0.4, "reason": "vague"}'] * 5,
        usage=Usage(input_tokens=60, output_tokens=0),
    )
    loop = RAGLoop(
        TableRetriever(TABLE),
        EchoGenerator(),
        LLMEvaluator(model),
        ListReformulator([["q2"], ["q3"]]),
        LoopConfig(max_iterations=3, budget=Budget(max_tokens=100)),
    )
    result = loop.run(Q)
    # iteration 1 spends 60 tokens, iteration 2 reaches 120 >= 100: the reformulation is refused
    assert result.stop_reason == StopReason.BUDGET_TOKENS
    assert result.iterations == 2
    assert len(model.calls) == 2
    assert result.budget_used.tokens == 120


def test_dollar_budget_uses_reported_costs():
    class PricedGenerator:
        def generate(self, query, chunks):
            record_usage(Usage(input_tokens=1, output_tokens=1, cost_usd=0.01))
            return GeneratorOutput(answer="x", confidence=0.5)

    loop = RAGLoop(
        TableRetriever(TABLE),
        PricedGenerator(),
        ScoreEvaluator([0.1]),
        ListReformulator([["q2"], ["q3"]]),
        LoopConfig(max_iterations=10, budget=Budget(max_dollars=0.025)),
    )
    result = loop.run(Q)
    # iteration 3 starts at $0.02, its generator spends to $0.03: the evaluation is refused, so
    # iteration 3 never finishes
    assert result.stop_reason == StopReason.BUDGET_DOLLARS
    assert result.iterations == 2
    assert result.budget_used.iters == 3
    assert result.budget_used.dollars == pytest.approx(0.03)


async def test_wall_clock_budget_cuts_a_slow_async_step():
    class HangingGenerator:
        async def generate(self, query, chunks):
            await asyncio.sleep(30)
            return GeneratorOutput(answer="never", confidence=1)

    loop = RAGLoop(
        TableRetriever(TABLE),
        HangingGenerator(),
        ScoreEvaluator([0.1]),
        ListReformulator([["q2"]]),
        LoopConfig(budget=Budget(max_wall_ms=50)),
    )
    result = await loop.arun(Q)
    assert result.stop_reason == StopReason.BUDGET_WALL_MS
    assert result.iterations == 0


def test_wall_clock_budget_of_zero_stops_before_the_first_step():
    loop, retriever, *_ = loop_with(budget=Budget(max_wall_ms=0))
    result = loop.run(Q)
    assert result.stop_reason == StopReason.BUDGET_WALL_MS
    assert retriever.calls == []


def test_a_component_may_end_the_run_by_raising_budget_exceeded():
    from ragloop import BudgetExceeded

    loop, *_ = loop_with()
    loop.generator = type(
        "G", (), {"generate": raising(BudgetExceeded(StopReason.BUDGET_TOKENS))}
    )()
    result = loop.run(Q)
    assert result.stop_reason == StopReason.BUDGET_TOKENS


# -- errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize("role", ["retriever", "generator", "evaluator", "reformulator"])
def test_on_error_stop_keeps_the_partial_trace(role):
    loop, *_ = loop_with()
    method = {
        "retriever": "retrieve",
        "generator": "generate",
        "evaluator": "evaluate",
        "reformulator": "reformulate",
    }[role]
    calls = {"n": 0}
    component = getattr(loop, role)
    original = getattr(component, method)

    def fail_second_time(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 2:
            raise ConnectionError("index unreachable")
        return original(*args, **kwargs)

    setattr(component, method, fail_second_time)
    loop.config.on_error = "stop"
    result = loop.run(Q)
    assert result.stop_reason == StopReason.ERROR
    assert result.error is not None
    assert role in result.error
    assert "ConnectionError: index unreachable" in result.error
    assert result.iterations >= 1
    assert result.answer == result.best_iteration.answer


def test_on_error_raise_propagates_the_original_exception_with_a_note():
    loop, *_ = loop_with()
    loop.evaluator.evaluate = raising(KeyError("boom"))  # type: ignore[method-assign]
    with pytest.raises(KeyError) as caught:
        loop.run(Q)
    assert any("evaluator in iteration 1" in note for note in caught.value.__notes__)


def test_on_iteration_exception_is_an_error_stop_with_on_error_stop():
    loop, *_ = loop_with(on_error="stop", on_iteration=raising(RuntimeError("abort")))
    result = loop.run(Q)
    assert result.stop_reason == StopReason.ERROR
    assert "on_iteration" in (result.error or "")
    assert result.iterations == 1


def test_on_iteration_returning_false_stops_the_run():
    loop, *_ = loop_with(on_iteration=lambda it: it.iteration < 2)
    result = loop.run(Q)
    assert result.stop_reason == StopReason.CALLER_STOP
    assert result.iterations == 2


def test_converging_beats_a_caller_stop():
    loop, *_ = loop_with(scores=(0.9,), on_iteration=lambda it: False)
    assert loop.run(Q).stop_reason == StopReason.CONVERGED


async def test_async_on_iteration_is_awaited():
    seen = []

    async def on_iteration(it):
        await asyncio.sleep(0)
        seen.append(it.iteration)

    loop, *_ = loop_with(on_iteration=on_iteration)
    await loop.arun(Q)
    assert seen == [1, 2, 3]


@pytest.mark.parametrize(
    ("role", "bad"),
    [
        ("retriever", "retrieve"),
        ("generator", "generate"),
        ("evaluator", "evaluate"),
        ("reformulator", "reformulate"),
    ],
)
def test_wrong_return_types_are_component_errors(role, bad):
    loop, *_ = loop_with()
    setattr(getattr(loop, role), bad, lambda *a, **k: "oops")
    with pytest.raises(ComponentError, match=f"{role} returned str"):
        loop.run(Q)


def test_retriever_returning_non_chunks_is_a_component_error():
    loop, *_ = loop_with()
    loop.retriever.retrieve = lambda q, top_k=5: [{"content": "x"}]  # type: ignore[method-assign]
    with pytest.raises(ComponentError, match="dict"):
        loop.run(Q)


def test_components_without_their_method_are_rejected_at_construction():
    with pytest.raises(TypeError, match="retriever must have a retrieve"):
        RAGLoop(object(), EchoGenerator(), ScoreEvaluator([1]), HeuristicReformulator())  # type: ignore[arg-type]


@pytest.mark.parametrize("query", ["", "   "])
def test_empty_query_is_rejected(query):
    loop, *_ = loop_with()
    with pytest.raises(ValueError, match="non-empty"):
        loop.run(query)


def test_non_string_query_is_rejected():
    loop, *_ = loop_with()
    with pytest.raises(TypeError, match="string"):
        loop.run(None)  # type: ignore[arg-type]


# -- repeats -----------------------------------------------------------------------------------


def test_a_repeated_query_is_served_from_the_run_cache_and_marked():
    loop, retriever, *_ = loop_with(queries=([Q.upper()], ["q2", Q]))
    result = loop.run(Q)
    assert [q for q, _ in retriever.calls] == [Q, "q2"]  # the repeats never reach the retriever
    assert result.trace[1].repeated_queries == [Q.upper()]
    assert result.trace[1].is_repeat
    assert result.trace[1].chunks == result.trace[0].chunks
    assert result.trace[2].repeated_queries == [Q]
    assert not result.trace[2].is_repeat
    assert result.iterations == 3  # by default the repeat still runs, as in the seed


def test_stop_on_repeat_ends_with_no_improvement():
    loop, _retriever, evaluator, _ = loop_with(queries=([Q],), stop_on_repeat=True)
    result = loop.run(Q)
    assert result.stop_reason == StopReason.NO_IMPROVEMENT
    assert result.iterations == 1
    assert len(evaluator.calls) == 1


def test_stop_on_repeat_lets_a_new_combination_of_tried_queries_run():
    loop, *_ = loop_with(queries=(["q2"], [Q, "q2"]), stop_on_repeat=True)
    result = loop.run(Q)
    assert result.iterations == 3
    assert result.trace[2].is_repeat


def test_sub_queries_beyond_the_cap_are_dropped_and_noted():
    loop, _retriever, *_ = loop_with(
        queries=(["a", "b", "c", "d"],), max_sub_queries=2, max_iterations=2
    )
    result = loop.run(Q)
    assert result.trace[1].queries == ["a", "b"]
    assert "2 sub-queries beyond max_sub_queries=2 dropped" in (result.trace[1].reasoning or "")


# -- sync and async ----------------------------------------------------------------------------


def scripted_llm_loop(retriever):
    evaluator = ScriptedModel(
        [
            '{"is_grounded": true, "is_complete": false, "score": 0.3, "reason": "vague"}',
            '```json\n{"is_grounded": "true", "is_complete": "yes", "score": "0.85", '
            '"reason": "ok"}\n```',
        ]
    )
    reformulator = ScriptedModel(
        [
            '{"strategy": "Decompose", "queries": ["refund policy", "international orders"], '
            '"reasoning": "two parts"}'
        ]
    )
    return RAGLoop(
        retriever, EchoGenerator(), LLMEvaluator(evaluator), LLMReformulator(reformulator)
    )


DOCS = {
    "returns.md": "Refund policy: refunds are paid within 14 days of the return.",
    "shipping.md": "International orders ship worldwide within 5 business days.",
}


async def test_sync_and_async_runs_give_the_same_result():
    sync_result = await asyncio.to_thread(scripted_llm_loop(InMemoryRetriever(DOCS)).run, Q)
    async_result = await scripted_llm_loop(InMemoryRetriever(DOCS)).arun(Q)
    strip = {"timings_ms"}
    assert sync_result.stop_reason == async_result.stop_reason == StopReason.CONVERGED
    assert [it.model_dump(exclude=strip) for it in sync_result.trace] == [
        it.model_dump(exclude=strip) for it in async_result.trace
    ]
    assert sync_result.answer == async_result.answer


async def test_arun_retrieves_sub_queries_concurrently():
    retriever = SlowAsyncRetriever()
    loop = RAGLoop(
        retriever,
        EchoGenerator(),
        ScoreEvaluator([0.1, 0.9]),
        ListReformulator([["a", "b", "c"]]),
    )
    result = await loop.arun(Q)
    assert retriever.max_active == 3
    assert [c.source for c in result.trace[1].chunks] == ["a", "b", "c"]


async def test_arun_runs_sync_components_off_the_event_loop_thread():
    retriever = TableRetriever(TABLE)
    loop = RAGLoop(retriever, EchoGenerator(), ScoreEvaluator([0.9]), ListReformulator([["x"]]))
    await loop.arun(Q)
    assert retriever.threads[0] != "MainThread"


def test_run_calls_sync_components_inline():
    retriever = TableRetriever(TABLE)
    loop = RAGLoop(retriever, EchoGenerator(), ScoreEvaluator([0.9]), ListReformulator([["x"]]))
    loop.run(Q)
    assert retriever.threads == ["MainThread"]


async def test_run_works_inside_a_running_event_loop():
    loop, *_ = loop_with()
    result = loop.run(Q)  # e.g. a notebook cell: must not deadlock or raise
    assert result.iterations == 3


async def test_one_loop_serves_concurrent_runs_independently():
    retriever = InMemoryRetriever(DOCS)
    loop = RAGLoop(
        retriever,
        EchoGenerator(),
        ScoreEvaluator([0.1, 0.2]),
        HeuristicReformulator(),
        LoopConfig(max_iterations=2),
    )
    questions = [f"refund policy question {i}" for i in range(8)]
    results = await asyncio.gather(*(loop.arun(q) for q in questions))
    assert [r.query for r in results] == questions
    assert all(r.iterations == 2 for r in results)
