"""Bounded replies and prompts fitted to the context window, with the testing fakes."""

from __future__ import annotations

import pytest

from ragloop import (
    AgentLoop,
    Chunk,
    ContextOverflowError,
    EvaluationResult,
    LLMEvaluator,
    LLMGenerator,
    LLMReformulator,
    LoopConfig,
    LoopIteration,
    ModelResponse,
    RAGLoop,
    StopReason,
    ToolCall,
)
from ragloop.components.llm.fitting import estimate_tokens, fit_chunks, fit_messages
from ragloop.components.llm.prompts import fence_chunk
from ragloop.core.jsonparse import close_cut_json, parse_llm_json
from ragloop.core.limits import DEFAULT_MAX_TOKENS
from ragloop.core.records.rag import GeneratorOutput
from ragloop.testing import FunctionModel, InMemoryRetriever, ScriptedModel

Q = "What is the refund window?"
VERDICT = '{"is_grounded": true, "is_complete": true, "score": 0.9, "reason": "ok"}'


def chunks(n: int, words: int = 60) -> list[Chunk]:
    return [
        Chunk(
            content="common " + " ".join([f"fact{i}"] * words),
            source=f"doc{i}.md",
            score=1 - i / 100,
        )
        for i in range(1, n + 1)
    ]


# -- cut JSON ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ('{"answer": "Paris is the cap', {"answer": "Paris is the cap"}),
        ('{"answer": "Paris", "confid', {"answer": "Paris"}),
        ('{"answer": "Paris", "confidence": 0.', {"answer": "Paris"}),
        ('Sure: {"queries": ["a", "b', {"queries": ["a", "b"]}),
        ('{"q": "a \\', {"q": "a "}),
        ('{"q": "a \\\\', {"q": "a \\"}),
        ('{"a": {"b": [1, 2', {"a": {"b": [1]}}),  # 2 may have been 25
    ],
)
def test_a_cut_reply_is_read_as_far_as_it_goes(reply, expected):
    assert close_cut_json(reply) == expected


def test_nothing_is_invented_for_a_reply_without_an_object():
    assert close_cut_json("no JSON here") is None
    assert close_cut_json('{"') is None or close_cut_json('{"') == {}


def test_parse_reads_a_cut_reply_only_when_told_it_was_cut():
    from ragloop.components.generators import _GeneratorReply

    cut = '{"answer": "Refunds within 30 da'
    assert parse_llm_json(cut, _GeneratorReply).__class__.__name__ == "ParseFailure"
    parsed = parse_llm_json(cut, _GeneratorReply, cut=True)
    assert parsed.value.answer == "Refunds within 30 da"  # type: ignore[union-attr]
    assert parsed.value.confidence == 0.5  # type: ignore[union-attr]


# -- bounds per role ----------------------------------------------------------------------------


def test_each_component_asks_for_its_roles_bound_or_its_own():
    model = ScriptedModel(['{"answer": "a", "confidence": 0.5}', VERDICT, VERDICT])
    LLMGenerator(model).generate(Q, [])
    LLMEvaluator(model).evaluate(Q, [], "a")
    LLMEvaluator(model, max_tokens=64).evaluate(Q, [], "a")
    assert [c.max_tokens for c in model.calls] == [
        DEFAULT_MAX_TOKENS["generator"],
        DEFAULT_MAX_TOKENS["evaluator"],
        64,
    ]
    assert DEFAULT_MAX_TOKENS["evaluator"] < DEFAULT_MAX_TOKENS["generator"]


def test_a_models_own_bound_caps_the_roles():
    model = ScriptedModel(['{"answer": "a"}'])
    model.max_tokens = 100  # type: ignore[attr-defined]
    LLMGenerator(model).generate(Q, [])
    assert model.calls[0].max_tokens == 100


def test_a_cut_answer_is_kept_and_its_call_recorded_as_cut():
    cut = ModelResponse(text='{"answer": "Refunds within 30 days [1', finish_reason="length")
    model = ScriptedModel([cut, VERDICT])
    retriever = InMemoryRetriever(["Refunds within 30 days."])
    loop = RAGLoop(retriever, LLMGenerator(model), LLMEvaluator(model), LLMReformulator(model))
    result = loop.run("refund window")
    assert result.answer.startswith("Refunds within 30 days [1")
    calls = result.trace[0].llm_calls
    assert [(c.role, c.finish_reason) for c in calls] == [
        ("generator", "length"),
        ("evaluator", None),
    ]
    assert calls[0].truncated


def test_a_cut_verdict_counts_when_its_score_came_before_the_cut():
    reply = ModelResponse(
        text='{"is_grounded": true, "is_complete": false, "score": 0.6, "reason": "missing the',
        finish_reason="length",
    )
    result = LLMEvaluator(ScriptedModel([reply])).evaluate(Q, [], "a")
    assert (result.score, result.parse_failed, result.reason) == (0.6, False, "missing the")
    early = ModelResponse(text='{"is_grounded": true, "is_comp', finish_reason="length")
    failed = LLMEvaluator(ScriptedModel([early])).evaluate(Q, [], "a")
    assert failed.parse_failed
    assert "cut by its token bound" in failed.reason


# -- fitting ------------------------------------------------------------------------------------


def test_chunks_are_kept_in_rank_order_and_dropped_or_cut_from_the_bottom():
    given = chunks(6)
    one = estimate_tokens(fence_chunk(given[0], 1)) + 1
    kept, fit = fit_chunks(given, one * 3 + 60, fence_chunk)
    assert [c.id for c in kept] == [c.id for c in given[:4]]
    assert kept[3].content.endswith("…")
    assert len(kept[3].content) < len(given[3].content)
    assert (fit.chunks_kept, fit.chunks_dropped, fit.chunks_cut) == (4, 2, 1)
    assert fit.notes == [
        "chunk 4 cut to fit the context window",
        "chunks 5-6 of 6 left out (lowest ranked)",
    ]
    everything, none_cut = fit_chunks(given, None, fence_chunk)
    assert everything == given
    assert not none_cut.omitted


def test_the_generator_prompt_fits_the_window_the_model_declares():
    model = ScriptedModel(['{"answer": "x [1]", "confidence": 0.4}'])
    model.context_window = 900  # type: ignore[attr-defined]
    retriever = InMemoryRetriever(chunks(12))
    loop = RAGLoop(
        retriever,
        LLMGenerator(model, max_tokens=100),
        LLMEvaluator(ScriptedModel([VERDICT])),
        LLMReformulator(model),
        LoopConfig(top_k=12, max_iterations=1),
    )
    result = loop.run("fact1 fact2 fact3 fact4 fact5 fact6 fact7 fact8 fact9 fact10 fact11")
    prompt = model.calls[0].prompt
    assert estimate_tokens(prompt) <= 900 - 100
    assert 'n="1"' in prompt
    assert 'n="12"' not in prompt
    assert "lower-ranked chunk(s) left out to fit the model's context window" in prompt
    fit = result.trace[0].llm_calls[0].fit
    assert fit is not None
    assert fit.context_window == 900
    assert fit.reply_tokens == 100
    assert fit.chunks_dropped > 0
    assert fit.chunks_kept + fit.chunks_dropped == len(result.trace[0].chunks)


def test_the_question_is_never_cut():
    model = ScriptedModel(['{"answer": "x"}'])
    model.context_window = 200  # type: ignore[attr-defined]
    question = "why " * 400
    LLMGenerator(model, max_tokens=50).generate(question, chunks(3))
    assert question.strip() in model.calls[0].prompt


def test_the_reformulator_keeps_the_latest_attempts_and_lists_the_queries_of_the_older():
    def attempt(n: int) -> LoopIteration:
        return LoopIteration(
            iteration=n,
            query=f"query {n}",
            queries=[f"query {n}"],
            chunks=[],
            answer="an answer " * 80,
            confidence=0.2,
            evaluation=EvaluationResult(
                is_grounded=False, is_complete=False, score=0.1, reason="vague " * 60
            ),
        )

    model = ScriptedModel(['{"strategy": "expand", "queries": ["new one"]}'])
    model.context_window = 1300  # type: ignore[attr-defined]
    history = [attempt(n) for n in range(1, 6)]
    LLMReformulator(model, max_tokens=100).reformulate(Q, history)
    prompt = model.calls[0].prompt
    assert "left out to fit the context window) tried" in prompt
    assert "<query>query 1</query>" in prompt  # an old attempt, by its query only
    assert "Attempt 5 (strategy" in prompt  # the last, in full
    assert "Attempt 1 (strategy" not in prompt


async def test_an_overflow_naming_the_sizes_is_fitted_once_more_then_raised():
    prompts: list[str] = []

    def server(messages, tools):
        prompts.append(messages[-1].content)
        if len(prompts) == 1:
            raise ContextOverflowError(400, "too long", prompt_tokens=3000, context_window=1000)
        return '{"answer": "fits now", "confidence": 0.7}'

    model = FunctionModel(server)  # declares no window: the error teaches it
    out = await LLMGenerator(model, max_tokens=100).agenerate(Q, chunks(20))
    assert out.answer == "fits now"
    assert len(prompts[1]) < len(prompts[0])
    assert estimate_tokens(prompts[1]) < 1000

    def always(messages, tools):
        raise ContextOverflowError(400, "too long", prompt_tokens=5000, context_window=1000)

    with pytest.raises(ContextOverflowError):
        await LLMGenerator(FunctionModel(always)).agenerate("why " * 2000, [])


def test_a_context_overflow_reaches_the_loops_on_error():
    def server(messages, tools):
        raise ContextOverflowError(400, "too long", prompt_tokens=5000, context_window=1000)

    model = FunctionModel(server)
    retriever = InMemoryRetriever(["a refund document"])
    components = (LLMGenerator(model), LLMEvaluator(model), LLMReformulator(model))
    result = RAGLoop(retriever, *components, LoopConfig(on_error="stop")).run("refund")
    assert result.stop_reason is StopReason.ERROR
    assert "generator failed in iteration 1: ContextOverflowError" in (result.error or "")


# -- the agent loop -----------------------------------------------------------------------------


def test_agent_calls_are_bounded_per_role_and_old_tool_results_give_way():
    search = ModelResponse(tool_calls=[ToolCall(name="search", arguments={"query": "common"})])
    search2 = ModelResponse(
        tool_calls=[ToolCall(name="search", arguments={"query": "common fact2"})]
    )
    controller = ScriptedModel([search, search2, "the answer"])
    controller.context_window = 1400  # type: ignore[attr-defined]
    retriever = InMemoryRetriever(chunks(12, words=80))
    loop = AgentLoop(
        controller,
        retriever,
        max_tokens={"controller": 64},
        system_prompt="Search, then answer.",
    )
    result = loop.run("fact1 and fact2?")
    assert result.stop_reason is StopReason.ANSWERED
    assert [c.max_tokens for c in controller.calls] == [64, 64, 64]
    assert [c.role for c in result.llm_calls] == ["controller"] * 3
    third = controller.calls[2].messages
    assert sum(estimate_tokens(m.content) for m in third) <= 1400 - 64
    assert "[this tool result was left out to fit the context window]" in third[3].content
    assert result.llm_calls[2].fit is not None
    assert result.llm_calls[2].fit.history_dropped >= 1
    # the run keeps the whole conversation
    assert "left out" not in result.messages[3].content


def test_fit_messages_leaves_a_conversation_that_fits_alone():
    from ragloop import Message

    messages = [Message(role="system", content="s"), Message(role="user", content="q")]
    assert fit_messages(messages, 1000)[0] == messages
    assert fit_messages(messages, None)[0] == messages


def test_agent_max_tokens_is_checked():
    with pytest.raises(ValueError, match="max_tokens"):
        AgentLoop(ScriptedModel([]), InMemoryRetriever(["x"]), max_tokens={"judge": 5})
    with pytest.raises(ValueError, match="max_tokens"):
        AgentLoop(ScriptedModel([]), InMemoryRetriever(["x"]), max_tokens=0)


def test_generator_output_is_unchanged_by_fitting_when_nothing_is_known():
    model = ScriptedModel(['{"answer": "Thirty days [1]", "confidence": 0.8}'])
    out = LLMGenerator(model).generate(Q, chunks(2))
    assert out == GeneratorOutput(answer="Thirty days [1]\n\nSources: [1] doc1.md", confidence=0.8)


def test_numbers_and_markup_are_estimated_by_what_tokenizers_make_of_them():
    # Llama's and Gemma's tokenizers split numbers into digits and escaped markup into its marks
    assert estimate_tokens("(score 0.466)") == 2 + 2 + 4  # "score ", "(.)", "0466"
    assert estimate_tokens("&lt;chunk&gt;") == 3 + 2  # "ltchunkgt", "&;&;"
    assert estimate_tokens("plain words here") == 5  # 16 letters and spaces
