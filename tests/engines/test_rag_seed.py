"""Every rule of seed 000 (ragsnag's RAGLoop), one test per rule."""

from __future__ import annotations

import dataclasses

import pytest

from ragloop import (
    Chunk,
    ConfigError,
    EvaluationResult,
    GeneratorOutput,
    HeuristicReformulator,
    LLMEvaluator,
    LLMReformulator,
    LoopConfig,
    LoopIteration,
    LoopResult,
    RAGLoop,
    ReformulationOutput,
    ReformulationStrategy,
    StopReason,
)
from ragloop.testing import ScriptedModel
from tests.helpers import EchoGenerator, ListReformulator, ScoreEvaluator, TableRetriever, chunk

Q = "What is the refund policy for international orders?"


def make_loop(scores, queries=(["q2"], ["q3"], ["q4"]), table=None, **config):
    retriever = TableRetriever(table or {Q: [chunk("refunds take 5 days", 0.6)]})
    generator = EchoGenerator()
    evaluator = ScoreEvaluator(scores)
    reformulator = ListReformulator(list(queries))
    loop = RAGLoop(retriever, generator, evaluator, reformulator, LoopConfig(**config))
    return loop, retriever, generator, evaluator, reformulator


def test_original_query_goes_to_generator_and_evaluator_every_iteration():
    loop, _retriever, generator, evaluator, _ = make_loop([0.1, 0.2, 0.3])
    result = loop.run(Q)
    assert result.iterations == 3
    assert generator.queries == [Q, Q, Q]
    assert [call[0] for call in evaluator.calls] == [Q, Q, Q]


def test_reformulated_queries_are_used_for_retrieval_only():
    loop, retriever, *_ = make_loop([0.1, 0.2, 0.3])
    result = loop.run(Q)
    assert [q for q, _ in retriever.calls] == [Q, "q2", "q3"]
    assert [it.query for it in result.trace] == [Q, "q2", "q3"]


def test_converges_at_threshold_inclusive_and_returns_that_iteration():
    loop, *_ = make_loop([0.3, 0.8, 0.95], confidence_threshold=0.8)
    result = loop.run(Q)
    assert result.stop_reason == StopReason.CONVERGED
    assert result.stop_reason == "converged"  # a str enum compares equal to its value
    assert result.iterations == 2
    assert result.answer == result.trace[1].answer
    assert result.best_iteration is result.trace[-1]


def test_confidence_is_the_generators_not_the_evaluators():
    loop, _retriever, generator, *_ = make_loop([0.9])
    generator.confidence = 0.42
    result = loop.run(Q)
    assert result.confidence == 0.42
    assert result.best_iteration.evaluation.score == 0.9


def test_max_iterations_returns_highest_scoring_iteration_not_the_last():
    table = {Q: [chunk("first")], "q2": [chunk("second")], "q3": [chunk("third")]}
    loop, *_ = make_loop([0.3, 0.7, 0.6], table=table)
    result = loop.run(Q)
    assert result.stop_reason == StopReason.MAX_ITERATIONS
    assert result.iterations == 3
    assert result.answer == "second"
    assert result.best_iteration.iteration == 2


def test_ties_go_to_the_earliest_iteration():
    table = {Q: [chunk("first")], "q2": [chunk("second")], "q3": [chunk("third")]}
    loop, *_ = make_loop([0.5, 0.5, 0.5], table=table)
    result = loop.run(Q)
    assert result.answer == "first"
    assert result.best_iteration.iteration == 1


def test_threshold_zero_converges_on_first_iteration():
    loop, *_, reformulator = make_loop([0.0], confidence_threshold=0.0)
    result = loop.run(Q)
    assert result.stop_reason == StopReason.CONVERGED
    assert result.iterations == 1
    assert reformulator.calls == []


def test_decompose_retrieves_each_sub_query_with_top_k_as_keyword():
    table = {
        Q: [chunk("nothing", 0.1)],
        "pricing tiers": [chunk("Pro costs $10", 0.7, "a"), chunk("shared", 0.4, "a")],
        "billing cycle": [chunk("billed monthly", 0.9, "b"), chunk("shared", 0.8, "b")],
    }
    loop, retriever, *_ = make_loop(
        [0.2, 0.9], queries=[["pricing tiers", "billing cycle"]], table=table, top_k=2
    )
    result = loop.run(Q)
    assert retriever.calls[1:] == [("pricing tiers", 2), ("billing cycle", 2)]
    it = result.trace[1]
    # merged, deduplicated by exact content (first occurrence wins, keeping its source and
    # score), sorted by score descending
    assert [c.content for c in it.chunks] == ["billed monthly", "Pro costs $10", "shared"]
    assert next(c for c in it.chunks if c.content == "shared").source == "a"
    assert it.query == "pricing tiers | billing cycle"
    assert it.queries == ["pricing tiers", "billing cycle"]


def test_decompose_can_return_up_to_n_times_top_k_chunks():
    table = {
        Q: [],
        "a": [chunk(f"a{i}", 0.5) for i in range(3)],
        "b": [chunk(f"b{i}", 0.5) for i in range(3)],
    }
    loop, *_ = make_loop([0.1, 0.1], queries=[["a", "b"]], table=table, top_k=3, max_iterations=2)
    result = loop.run(Q)
    assert len(result.trace[1].chunks) == 6
    # equal scores keep retrieval order (the sort is stable)
    assert [c.content for c in result.trace[1].chunks] == ["a0", "a1", "a2", "b0", "b1", "b2"]


def test_chunks_do_not_carry_over_between_iterations():
    table = {Q: [chunk("first")], "q2": [chunk("second")]}
    loop, *_ = make_loop([0.1, 0.1], table=table, max_iterations=2)
    result = loop.run(Q)
    assert [c.content for c in result.trace[1].chunks] == ["second"]


def test_on_iteration_sees_every_iteration_including_the_converging_one():
    seen: list[LoopIteration] = []
    loop, *_ = make_loop([0.2, 0.9], on_iteration=seen.append)
    result = loop.run(Q)
    assert [it.iteration for it in seen] == [1, 2]
    assert seen[-1].evaluation.score == 0.9
    assert result.stop_reason == StopReason.CONVERGED


def test_reformulator_is_never_called_after_the_last_iteration():
    loop, *_, reformulator = make_loop([0.1, 0.1, 0.1], max_iterations=3)
    loop.run(Q)
    assert len(reformulator.calls) == 2


def test_reformulator_gets_the_original_query_and_the_history_so_far():
    loop, *_, reformulator = make_loop([0.1, 0.1, 0.1])
    loop.run(Q)
    assert [original for original, _ in reformulator.calls] == [Q, Q]
    assert [len(history) for _, history in reformulator.calls] == [1, 2]
    assert reformulator.calls[1][1][1].query == "q2"


def test_iterations_are_one_indexed_and_recorded_in_order():
    loop, *_ = make_loop([0.1, 0.2, 0.3])
    result = loop.run(Q)
    assert [it.iteration for it in result.trace] == [1, 2, 3]
    assert isinstance(result, LoopResult)


def test_loop_config_defaults_match_the_seed():
    config = LoopConfig()
    assert (config.max_iterations, config.confidence_threshold, config.top_k) == (3, 0.8, 5)
    assert config.on_iteration is None
    assert [f.name for f in dataclasses.fields(LoopConfig)][:4] == [
        "max_iterations",
        "confidence_threshold",
        "top_k",
        "on_iteration",
    ]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_iterations", 0),
        ("max_iterations", -1),
        ("max_iterations", 2.5),
        ("top_k", 0),
        ("confidence_threshold", -0.1),
        ("confidence_threshold", 1.01),
        ("confidence_threshold", float("nan")),
        ("on_error", "ignore"),
        ("on_iteration", "print"),
        ("max_sub_queries", 0),
        ("budget", 5),
    ],
)
def test_bad_config_values_raise_value_error_naming_the_field(field, value):
    with pytest.raises(ValueError, match=field) as caught:
        LoopConfig(**{field: value})
    assert isinstance(caught.value, ConfigError)
    assert caught.value.field == field


def test_threshold_bounds_are_inclusive():
    LoopConfig(confidence_threshold=0.0)
    LoopConfig(confidence_threshold=1.0)


def test_llm_evaluator_calls_generate_fn_once_positionally_with_question_chunks_and_answer():
    prompts: list[str] = []

    def generate_fn(prompt, /):
        prompts.append(prompt)
        return '{"is_grounded": true, "is_complete": true, "score": 0.9, "reason": "all there"}'

    result = LLMEvaluator(generate_fn).evaluate(Q, [chunk("Refunds take 5 days")], "5 days")
    assert len(prompts) == 1
    assert Q in prompts[0]
    assert "Refunds take 5 days" in prompts[0]
    assert "5 days" in prompts[0]
    assert result == EvaluationResult(
        is_grounded=True, is_complete=True, score=0.9, reason="all there"
    )


def test_llm_evaluator_unparseable_reply_scores_zero_with_the_raw_reply_in_the_reason():
    result = LLMEvaluator(lambda prompt: "I think it's fine").evaluate(Q, [], "x")
    assert result.score == 0.0
    assert result.is_grounded is False
    assert result.is_complete is False
    assert "I think it's fine" in result.reason
    assert result.parse_failed


def test_llm_reformulator_reads_strategy_queries_and_reasoning():
    model = ScriptedModel(
        ['{"strategy": "decompose", "queries": ["pricing", "billing"], "reasoning": "two parts"}']
    )
    history = [_iteration(Q, "multi-part question")]
    out = LLMReformulator(model).reformulate(Q, history)
    assert out == ReformulationOutput(
        queries=["pricing", "billing"],
        strategy=ReformulationStrategy.DECOMPOSE,
        reasoning="two parts",
    )
    prompt = model.calls[0].prompt
    assert "Attempt 1" in prompt
    assert "multi-part question" in prompt


def test_llm_reformulator_falls_back_to_the_heuristic_strategy_on_a_bad_reply():
    history = [_iteration(Q, "the terminology differs from the documents")]
    out = LLMReformulator(lambda prompt: "not json").reformulate(Q, history)
    assert out.strategy == ReformulationStrategy.PERSPECTIVE_SHIFT
    assert "fell back to heuristic" in out.reasoning


@pytest.mark.parametrize(
    ("reason", "strategy"),
    [
        ("vocabulary mismatch", ReformulationStrategy.PERSPECTIVE_SHIFT),
        ("uses different terminology", ReformulationStrategy.PERSPECTIVE_SHIFT),
        ("no chunk mentions 'international'", ReformulationStrategy.PERSPECTIVE_SHIFT),
        ("the answer was not retrieved", ReformulationStrategy.PERSPECTIVE_SHIFT),
        ("industry jargon", ReformulationStrategy.PERSPECTIVE_SHIFT),
        ("results too generic", ReformulationStrategy.NARROW),
        ("answer is too broad", ReformulationStrategy.NARROW),
        ("surface level answer", ReformulationStrategy.NARROW),
        ("vague", ReformulationStrategy.NARROW),
        ("the answer is incomplete", ReformulationStrategy.NARROW),
        ("multi-part question", ReformulationStrategy.DECOMPOSE),
        ("multiple questions asked", ReformulationStrategy.DECOMPOSE),
        ("missing second part", ReformulationStrategy.DECOMPOSE),
        ("the user also asked about billing", ReformulationStrategy.DECOMPOSE),
        ("no relevant chunks", ReformulationStrategy.STEP_BACK),
        ("completely off topic", ReformulationStrategy.STEP_BACK),
        ("unrelated documents", ReformulationStrategy.STEP_BACK),
        ("abstract question", ReformulationStrategy.STEP_BACK),
        ("a conceptual question", ReformulationStrategy.HYDE),
        ("how does it work is not answered", ReformulationStrategy.HYDE),
        ("needs to explain the mechanism", ReformulationStrategy.HYDE),
        ("looks fine", ReformulationStrategy.EXPAND),
        ("", ReformulationStrategy.EXPAND),
    ],
)
def test_heuristic_keyword_table(reason, strategy):
    assert HeuristicReformulator.select_strategy(reason) == strategy


def test_heuristic_table_order_first_match_wins():
    # "vocabulary" (perspective shift) is checked before "incomplete" (narrow)
    reason = "incomplete: vocabulary mismatch"
    assert HeuristicReformulator.select_strategy(reason) == ReformulationStrategy.PERSPECTIVE_SHIFT


def test_heuristic_decompose_splits_on_and():
    history = [_iteration("What is the pricing and billing", "multi-part question")]
    out = HeuristicReformulator().reformulate("What is the pricing and billing", history)
    assert out.strategy == ReformulationStrategy.DECOMPOSE
    assert out.queries[:2] == ["What is the pricing", "billing"]


def test_best_iteration_property_uses_evaluation_score():
    loop, *_ = make_loop([0.4, 0.6, 0.5])
    assert loop.run(Q).best_iteration.iteration == 2


def test_chunk_model_matches_the_seed():
    c = Chunk(content="x", source="s", score=0.5)
    assert c.metadata == {}
    with pytest.raises(ValueError, match="score"):
        Chunk(content="x", source="s", score=1.5)
    with pytest.raises(ValueError, match="score"):
        Chunk(content="x", source="s")  # type: ignore[call-arg]


def test_seed_models_validate_ranges():
    with pytest.raises(ValueError, match="confidence"):
        GeneratorOutput(answer="a", confidence=2)
    with pytest.raises(ValueError, match="score"):
        EvaluationResult(is_grounded=True, is_complete=True, score=-0.1, reason="")
    with pytest.raises(ValueError, match="queries"):
        ReformulationOutput(queries=[], strategy="expand", reasoning="")


def test_reformulation_strategy_values():
    assert [s.value for s in ReformulationStrategy] == [
        "expand",
        "narrow",
        "decompose",
        "step_back",
        "hyde",
        "perspective_shift",
    ]


def _iteration(query: str, reason: str, score: float = 0.3) -> LoopIteration:
    return LoopIteration(
        iteration=1,
        query=query,
        chunks=[],
        answer="",
        confidence=0.0,
        evaluation=EvaluationResult(
            is_grounded=False, is_complete=False, score=score, reason=reason
        ),
    )
