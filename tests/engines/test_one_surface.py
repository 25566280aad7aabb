"""One API across the three engines (issue 18, item 7): the same names and types on every
result, run(query) everywhere, one error type for a bad or mistyped option, typed keyword
options, and the old names kept working with a deprecation warning."""

from __future__ import annotations

import dataclasses
import inspect
import json
import warnings

import pytest

from ragloop import (
    AgentLoop,
    AgentResult,
    Budget,
    ConfigError,
    Document,
    KnowledgeBase,
    LoopConfig,
    LoopResult,
    RAGLoop,
    RetrievalLoop,
    RetrievalLoopConfig,
    RetrievalResult,
    StopReason,
)
from ragloop.core.limits import LLMCall
from ragloop.engines.options import AgentLoopOptions, RAGLoopOptions, RetrievalLoopOptions
from ragloop.testing import HashEmbedder, InMemoryRetriever

Q = "How long does a refund take?"
ENGINES = (RAGLoop, AgentLoop, RetrievalLoop)


@pytest.fixture(scope="module")
def kb():
    base = KnowledgeBase.in_memory(embedder=HashEmbedder(64))
    base.add_documents(
        [
            Document(title="Returns", source="returns.md", text="Refunds take 30 days."),
            Document(title="Shipping", source="shipping.md", text="Orders ship in 2 days."),
        ]
    )
    yield base
    base.close()


def run_each(kb, **run_options):
    return [engine.offline(kb).run(Q, **run_options) for engine in ENGINES]


def test_every_result_has_the_same_names_with_the_same_types(kb):
    for result in run_each(kb):
        assert type(result.iterations) is not list
        assert isinstance(result.iterations, int)
        assert result.iterations >= 1
        assert isinstance(result.trace, list)
        assert result.trace
        assert result.query == Q
        assert isinstance(result.stop_reason, StopReason)
        assert isinstance(result.chunks, list)
        assert result.chunks
        assert result.run_id
        assert result.error is None
        assert result.budget_used.iters >= 1
        assert "usage" in type(result).model_fields
        assert all(isinstance(call, LLMCall) for call in result.llm_calls)
    rag, agent, retrieval = run_each(kb)
    assert rag.iterations == len(rag.trace)
    assert retrieval.iterations == len(retrieval.trace)
    assert agent.trace is agent.tool_history  # the agent's steps are its tool calls


def test_run_takes_query_on_every_engine_and_a_budget_for_the_run(kb):
    for engine in ENGINES:
        loop = engine.offline(kb)
        assert list(inspect.signature(loop.run).parameters)[:2] == ["query", "budget"]
        assert list(inspect.signature(loop.arun).parameters)[:2] == ["query", "budget"]
        result = loop.run(query=Q, budget=Budget(max_iter=0))
        assert (result.stop_reason, result.iterations) == (StopReason.BUDGET_ITER, 0)


def test_the_agent_keeps_question_as_a_deprecated_name(kb):
    loop = AgentLoop.offline(kb)
    with pytest.warns(DeprecationWarning, match="question=.*deprecated"):
        result = loop.run(question=Q)
    assert result.query == result.question == Q  # Arcana's ctx.question still reads
    with pytest.raises(TypeError, match="once"):
        loop.run(Q, question=Q)
    assert AgentResult.model_validate({"question": Q, "stop_reason": "answered"}).query == Q


@pytest.mark.parametrize("engine", ENGINES, ids=lambda e: e.__name__)
def test_a_mistyped_option_is_a_config_error_naming_it_on_every_engine(kb, engine):
    with pytest.raises(ConfigError, match=r"has no option 'max_iteration'.*'max_iterations'"):
        engine.offline(kb, max_iteration=3)
    with pytest.raises(TypeError):  # also what Python raises for an unexpected keyword
        engine.offline(kb, max_iteration=3)
    with pytest.raises(ConfigError, match="max_iterations"):
        engine.offline(kb, max_iterations=0)
    with pytest.raises(ConfigError, match="budget"):
        engine.offline(kb).run(Q, budget="lots")


def test_a_component_of_the_wrong_kind_is_a_config_error_on_every_engine():
    with pytest.raises(ConfigError, match="retriever"):
        RAGLoop(object(), object(), object(), object())
    with pytest.raises(ConfigError, match="retriever"):
        RetrievalLoop(object())
    with pytest.raises(ConfigError, match="controller"):
        AgentLoop(object(), lambda query, limit: [])
    with pytest.raises(ConfigError, match="search must be"):
        AgentLoop(lambda messages, tools: None, object())
    with pytest.raises(ConfigError, match="config"):
        RetrievalLoop(InMemoryRetriever(["a"]), config=LoopConfig())  # type: ignore[arg-type]


def test_offline_options_are_typed_and_cover_every_setting():
    # editors complete **options: Unpack[...]; the option sets cannot drift from the configs
    for engine, options in (
        (RAGLoop, RAGLoopOptions),
        (AgentLoop, AgentLoopOptions),
        (RetrievalLoop, RetrievalLoopOptions),
    ):
        assert inspect.signature(engine.offline).parameters["options"].annotation == (
            f"Unpack[{options.__name__}]"
        )
    rag_fields = {f.name for f in dataclasses.fields(LoopConfig)}
    assert set(RAGLoopOptions.__annotations__) == rag_fields | {
        "model",
        "config",
        "generator",
        "evaluator",
        "reformulator",
    }
    agent_kwargs = set(inspect.signature(AgentLoop).parameters) - {"controller", "search"}
    assert set(AgentLoopOptions.__annotations__) == agent_kwargs | {"model"}
    retrieval_fields = {f.name for f in dataclasses.fields(RetrievalLoopConfig)}
    assert set(RetrievalLoopOptions.__annotations__) == retrieval_fields | {
        "model",
        "glossary",
        "config",
    }


def test_retrieval_iterations_as_a_list_still_reads_the_trace_with_a_warning(kb):
    result = RetrievalLoop.offline(kb).run(Q)
    assert result.iterations == len(result.trace)
    with pytest.warns(DeprecationWarning, match="RetrievalResult.trace"):
        assert result.iterations[0] is result.trace[0]
    with pytest.warns(DeprecationWarning, match="iteration records"):
        assert [it.index for it in result.iterations] == [it.index for it in result.trace]
    with pytest.warns(DeprecationWarning, match="iteration records"):
        assert len(result.iterations) == result.iterations
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        data = json.loads(result.model_dump_json())  # the count, never the list
        assert data["iterations"] == len(data["trace"])
        assert result.iterations + 0 >= 1
        assert RetrievalResult.model_validate(data) == result
        # a result saved by an earlier release kept its records under "iterations"
        old = {**data, "iterations": data.pop("trace")}
        assert RetrievalResult.model_validate(old).trace == result.trace


def test_every_result_round_trips_through_json(kb):
    for result in run_each(kb):
        assert type(result).model_validate_json(result.model_dump_json()) == result


def test_the_loop_result_names_the_chunks_its_answer_came_from(kb):
    result = RAGLoop.offline(kb).run(Q)
    assert result.chunks == result.best_iteration.chunks
    empty = LoopResult(answer="", confidence=0, iterations=0, stop_reason="budget_iter", trace=[])
    assert empty.chunks == []
