"""Fault injection at every seam: the retriever, the embedder, the model and the tools raise,
hang, return garbage, or fail one call in N. Every engine ends with a clear stop reason and its
partial trace, budgets hold, the stored trace is never lost, and nothing hangs: every run here is
awaited under ``asyncio.wait_for``, so a hang fails the test instead of stalling the suite."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ragloop import (
    AgentLoop,
    Budget,
    Document,
    KnowledgeBase,
    LLMEvaluator,
    LLMGenerator,
    LLMReformulator,
    LoopConfig,
    ModelResponse,
    RAGLoop,
    RetrievalLoop,
    RetrievalLoopConfig,
    StopReason,
    Usage,
)
from ragloop.observability.traces import TraceRecorder
from ragloop.testing import FunctionModel, HashEmbedder, InMemoryRetriever
from tests.helpers import answer_call, search_call, turn

DOCS = {
    "tents.md": "The Skylark 2 tent has two doors and is covered by the Fellside Guarantee.",
    "guarantee.md": "Fellside Guarantee: tents are guaranteed for 3 years from purchase.",
    "stoves.md": "We do not rent out stoves; camping stoves are for sale only.",
    "returns.md": "Returns are accepted within 30 days with a receipt.",
}
QUESTION = "What is the warranty on the Skylark 2 tent?"
DEADLINE_S = 20.0  # a run that takes this long is hung
HANG_S = 3600.0


class Fault(RuntimeError):
    """The injected failure."""


class Faulty:
    """Wraps a real part and injects ``mode`` into its calls: ``raise``, ``hang``, ``garbage``
    or ``flaky`` (every ``every``-th call raises)."""

    def __init__(self, mode: str | None, garbage: Any = "garbage", every: int = 2) -> None:
        self.mode = mode
        self.garbage = garbage
        self.every = every
        self.calls = 0

    async def inject(self) -> tuple[bool, Any]:
        """(True, value) to return ``value`` instead of calling the real part."""
        self.calls += 1
        if self.mode == "raise" or (self.mode == "flaky" and self.calls % self.every == 0):
            raise Fault(f"injected failure on call {self.calls}")
        if self.mode == "hang":
            await asyncio.sleep(HANG_S)
        if self.mode == "garbage":
            return True, self.garbage
        return False, None


class FaultyRetriever(Faulty):
    def __init__(self, mode: str | None, **kw: Any) -> None:
        super().__init__(mode, **kw)
        self.real = InMemoryRetriever(DOCS)

    async def aretrieve(self, query: str, top_k: int = 5) -> Any:
        fake, value = await self.inject()
        return value if fake else self.real.retrieve(query, top_k)


def llm_reply(prompt: str) -> str:
    """A well-behaved model for the LLM components: never satisfied, so loops keep going."""
    if "grading an answer" in prompt:
        return '{"is_grounded": true, "is_complete": false, "score": 0.3, "reason": "partial"}'
    if "rewrite search queries" in prompt:
        n = prompt.count("Attempt ")
        return f'{{"strategy": "expand", "queries": ["guarantee years {n}"], "reasoning": "r"}}'
    return '{"answer": "Three years [1].", "confidence": 0.6}'


def faulty_llm(fault: Faulty, role_marker: str | None):
    async def generate(prompt: str) -> Any:
        if role_marker is None or role_marker in prompt:
            fake, value = await fault.inject()
            if fake:
                return value
        return llm_reply(prompt)

    return generate


RAG_ROLES = {
    "retriever": None,
    "generator": "Answer the question from the retrieved chunks",
    "evaluator": "grading an answer",
    "reformulator": "rewrite search queries",
}


def rag_loop(role: str, fault: Faulty, **config: Any) -> RAGLoop:
    marker = RAG_ROLES[role]
    llm = faulty_llm(fault, marker) if role != "retriever" else faulty_llm(Faulty(None), None)
    retriever = fault if role == "retriever" else FaultyRetriever(None)
    return RAGLoop(
        retriever=retriever,
        generator=LLMGenerator(llm),
        evaluator=LLMEvaluator(llm),
        reformulator=LLMReformulator(llm),
        config=LoopConfig(max_iterations=4, on_error="stop", **config),
    )


def wall(mode: str) -> Budget:
    """A short wall-clock budget where a part hangs; elsewhere one no healthy run reaches."""
    return Budget(max_wall_ms=300 if mode == "hang" else 15_000)


async def bounded(awaitable: Any) -> Any:
    return await asyncio.wait_for(awaitable, timeout=DEADLINE_S)


@pytest.mark.parametrize("role", list(RAG_ROLES))
@pytest.mark.parametrize("mode", ["raise", "hang", "garbage", "flaky"])
async def test_rag_loop_ends_with_a_stop_reason_and_its_trace(role, mode):
    garbage: Any = 12345 if role == "retriever" else "\x00 {{ not json"
    fault = FaultyRetriever(mode, garbage=garbage) if role == "retriever" else None
    fault = fault or Faulty(mode, garbage=garbage)
    loop = rag_loop(role, fault, budget=wall(mode))
    with TraceRecorder() as recorder:
        result = await bounded(loop.arun(QUESTION))
    assert len(result.trace) == result.iterations <= 4
    if mode == "raise":
        assert result.stop_reason is StopReason.ERROR
        assert role in result.error
    elif mode == "hang":
        assert result.stop_reason is StopReason.BUDGET_WALL_MS
    elif mode == "garbage" and role == "retriever":
        assert result.stop_reason is StopReason.ERROR  # a contract break, named as such
        assert "retriever" in result.error
    elif mode == "garbage":  # unreadable model replies fall back; the loop goes on
        assert result.stop_reason in (StopReason.MAX_ITERATIONS, StopReason.CONVERGED)
        assert result.iterations >= 1
    else:  # flaky: the failing call ends the run, the iterations before it are kept
        assert result.stop_reason is StopReason.ERROR
        assert "injected failure on call 2" in result.error
    stored = list(recorder.records.values())
    assert [r.stop_reason for r in stored] == [result.stop_reason.value]


async def test_a_raising_run_still_stores_its_trace():
    loop = rag_loop("retriever", FaultyRetriever("flaky"))
    loop.config = LoopConfig(max_iterations=4, on_error="raise")
    with TraceRecorder() as recorder, pytest.raises(Fault):
        await bounded(loop.arun(QUESTION))
    (record,) = recorder.records.values()
    assert record.stop_reason == "error"
    assert record.iterations == 1  # the iteration before the failure
    assert recorder._events == {}  # nothing left waiting for a run_finished


async def test_a_cancelled_run_still_stores_its_trace():
    loop = rag_loop("retriever", FaultyRetriever("hang"))
    with TraceRecorder() as recorder, pytest.raises(TimeoutError):
        await asyncio.wait_for(loop.arun(QUESTION), timeout=0.3)
    (record,) = recorder.records.values()
    assert record.stop_reason == "cancelled"


async def test_token_budget_holds_against_a_model_that_never_converges():
    llm = FunctionModel(
        lambda messages, tools: llm_reply(messages[-1].content),
        usage=Usage(input_tokens=100, output_tokens=100),
    )
    loop = RAGLoop(
        retriever=FaultyRetriever(None),
        generator=LLMGenerator(llm),
        evaluator=LLMEvaluator(llm),
        reformulator=LLMReformulator(llm),
        config=LoopConfig(max_iterations=50, budget=Budget(max_tokens=1000)),
    )
    result = await bounded(loop.arun(QUESTION))
    assert result.stop_reason is StopReason.BUDGET_TOKENS
    # a step starts only while tokens remain; one step (one call, 200 tokens) may overshoot
    assert result.budget_used.tokens <= 1000 + 200
    assert len(llm.calls) < 10


# -- AgentLoop -----------------------------------------------------------------------------------


def controller_script(fault: Faulty | None):
    """A controller that searches twice, then answers; ``fault`` is applied to every turn."""

    async def reply(messages, tools) -> Any:
        if fault is not None:
            fake, value = await fault.inject()
            if fake:
                return value
        turns = sum(1 for m in messages if m.role == "assistant")
        if turns < 2:
            return turn(search_call(f"tent guarantee {turns}"))
        return turn(answer_call("Three years."))

    return FunctionModel(reply)


@pytest.mark.parametrize("mode", ["raise", "hang", "garbage", "flaky"])
async def test_agent_loop_survives_a_faulty_search(mode):
    search = FaultyRetriever(mode, garbage={"not": "chunks"})
    loop = AgentLoop(controller_script(None), search, budget=wall(mode))
    result = await bounded(loop.arun(QUESTION))
    if mode == "hang":
        assert result.stop_reason is StopReason.BUDGET_WALL_MS
    else:  # a failing tool is a message the controller reads; the run goes on
        assert result.stop_reason is StopReason.ANSWERED
        assert result.answer == "Three years."
        failed = [h for h in result.tool_history if "error" in h.summary.lower()]
        assert failed if mode != "flaky" else len(failed) == 1
    assert result.iterations <= 10


@pytest.mark.parametrize("mode", ["raise", "hang", "garbage", "flaky"])
async def test_agent_loop_ends_cleanly_on_a_faulty_controller(mode):
    garbage = ModelResponse(text="", tool_calls=[search_call(None, limit="x" * 50)])
    fault = Faulty(mode, garbage=garbage)
    loop = AgentLoop(
        controller_script(fault),
        FaultyRetriever(None),
        max_iterations=4,
        fallback_synthesis=False,
        budget=wall(mode),
    )
    with TraceRecorder() as recorder:
        result = await bounded(loop.arun(QUESTION))
    expected = {
        "raise": StopReason.ERROR,
        "hang": StopReason.BUDGET_WALL_MS,
        "garbage": StopReason.MAX_ITERATIONS,  # bad arguments are tool errors, turn after turn
        "flaky": StopReason.ERROR,
    }[mode]
    assert result.stop_reason is expected
    assert result.iterations <= 4
    if mode == "flaky":
        assert result.iterations == 2  # the first turn's search is kept
        assert len(result.tool_history) == 1
    (record,) = recorder.records.values()
    assert record.stop_reason == expected.value


# -- RetrievalLoop -------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["raise", "hang", "garbage", "flaky"])
async def test_retrieval_loop_ends_with_a_stop_reason_and_its_evidence(mode):
    retriever = FaultyRetriever(mode, garbage=[1, 2, 3])
    loop = RetrievalLoop(
        retriever,
        config=RetrievalLoopConfig(max_iterations=4, min_new_chunks_per_iter=0, on_error="stop"),
    )
    refine = lambda original, history, i: f"{original} {i}"  # noqa: E731
    result = await bounded(loop.arun(QUESTION, budget=wall(mode), refine_query=refine))
    expected = {
        "raise": StopReason.ERROR,
        "hang": StopReason.BUDGET_WALL_MS,
        "garbage": StopReason.ERROR,
        "flaky": StopReason.ERROR,
    }[mode]
    assert result.stop_reason is expected
    if mode == "flaky":
        assert result.iterations == 1
        assert result.chunks  # the evidence of the iteration before the failure
    if expected is StopReason.ERROR:
        assert "retriever" in (result.error or "") or "search" in (result.error or "")


class FaultyEmbedder(Faulty):
    def __init__(self, mode: str | None) -> None:
        super().__init__(mode, garbage=[[float("nan")] * 3])
        self.real = HashEmbedder(64)
        self.model_id = self.real.model_id
        self.dimension = self.real.dimension
        self.armed = False

    def embed(self, texts: list[str]) -> Any:
        if self.armed:
            if self.mode in ("raise", "flaky") and (self.mode == "raise" or len(texts) % 2 == 0):
                raise Fault("injected embedder failure")
            if self.mode == "garbage":
                return self.garbage
        return self.real.embed(texts)


@pytest.mark.parametrize("mode", ["raise", "garbage"])
async def test_a_failing_embedder_never_escapes_the_retrieval_loop(mode):
    embedder = FaultyEmbedder(mode)
    kb = KnowledgeBase.in_memory(embedder=embedder)
    kb.add_documents([Document(text=t, source=s) for s, t in DOCS.items()])
    embedder.armed = True
    loop = RetrievalLoop(
        kb.retriever(mode="hybrid"),
        config=RetrievalLoopConfig(max_iterations=2, on_error="stop"),
    )
    result = await bounded(loop.arun(QUESTION))
    # either the knowledge base degrades to keyword search, or the loop stops naming the failure
    assert result.stop_reason is StopReason.ERROR or result.chunks
    if result.stop_reason is StopReason.ERROR:
        assert result.error
