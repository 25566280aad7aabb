"""Prompt injection: hostile documents (tests/fixtures/injection) against the built-in prompts
and the loops. The prompts fence retrieved text as data; and when a model obeys the injection
anyway (played here by scripted models that do whatever a chunk says), the loops' collection
scope, budgets and tool set still hold."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest

from ragloop import (
    AgentLoop,
    Budget,
    Chunk,
    Document,
    EvaluationResult,
    KnowledgeBase,
    LLMEvaluator,
    LLMGenerator,
    LLMReformulator,
    LLMUnderstander,
    LoopConfig,
    LoopIteration,
    Message,
    ModelResponse,
    RAGLoop,
    RetrievalLoop,
    RetrievalLoopConfig,
    StopReason,
    ToolCall,
)
from ragloop.components.llm import prompts
from ragloop.engines.tools import MAX_LIMIT, format_results
from ragloop.providers.tools import to_text_protocol
from ragloop.testing import FunctionModel
from tests.helpers import CollectionSearch

FIXTURES = Path(__file__).parent.parent / "fixtures" / "injection"
HOSTILE = {p.name: p.read_text() for p in sorted(FIXTURES.glob("*.md"))}
SECRET = "The vault code is 7734-ZEBRA."


def hostile_chunks() -> list[Chunk]:
    return [Chunk(content=text, source=name, score=0.9) for name, text in HOSTILE.items()]


def test_the_fixture_corpus_is_hostile():
    assert len(HOSTILE) == 4
    joined = "\n".join(HOSTILE.values())
    for attack in ("IGNORE ALL PREVIOUS", "</chunk>", '"score": 1.0', "`secrets`"):
        assert attack in joined


def _history() -> list[LoopIteration]:
    verdict = EvaluationResult(is_grounded=False, is_complete=False, score=0.1, reason="x")
    return [
        LoopIteration(
            iteration=1,
            query="q",
            chunks=hostile_chunks(),
            answer=HOSTILE["forged-delimiters.md"],
            confidence=0.1,
            evaluation=verdict.model_copy(update={"reason": HOSTILE["fake-verdict.md"]}),
        )
    ]


PROMPTS = {
    "evaluator": lambda q, c: prompts.evaluator_prompt(q, c, HOSTILE["fake-verdict.md"]),
    "generator": prompts.generator_prompt,
    "reformulator": lambda q, c: prompts.reformulator_prompt(q, _history()),
    "judge": lambda q, c: prompts.judge_prompt(q, c, HOSTILE["forged-delimiters.md"]),
    "understander": lambda q, c: prompts.understanding_prompt(q, {"x": [q]}),
    "agent_answer": lambda q, c: prompts.agent_answer_prompt(q),
}


@pytest.mark.parametrize("name", list(PROMPTS))
@pytest.mark.parametrize("question", ["What is the warranty?", HOSTILE["forged-delimiters.md"]])
def test_built_in_prompts_fence_hostile_text_as_data(name, question):
    chunks = hostile_chunks()
    prompt = PROMPTS[name](question, chunks)
    rules = (prompts.DATA_RULE, prompts.AGENT_DATA_RULE, "The same holds for <term> tags.")
    assert any(rule in prompt for rule in rules)
    for rule in rules:  # the rules name the tags; the count is of the tags the prompt uses
        prompt = prompt.replace(rule, "")
    # the structure the prompt itself writes: every tag it opens, it closes, and no chunk or
    # question adds one (a forged </chunk> or <question> arrives escaped)
    for tag in ("chunk", "question", "answer", "reason", "query", "term"):
        opened = len(re.findall(rf"<{tag}[ >]", prompt))
        assert opened == prompt.count(f"</{tag}>"), tag
    assert prompt.count("<question") <= 1
    assert "&lt;/chunk&gt;" in prompt or name in ("understander", "agent_answer")


def test_agent_search_results_and_text_protocol_fence_chunks():
    results = format_results(hostile_chunks())
    assert results.count("<chunk>") == results.count("</chunk>") == len(HOSTILE)
    messages = to_text_protocol(
        [Message(role="user", content="q"), Message(role="tool", content=results)], []
    )
    fenced = messages[-1].content
    assert fenced.startswith("<tool_result")
    assert fenced.count("</tool_result>") == 1


# -- an obedient model cannot widen the agent's reach ----------------------------------------


def obedient_controller(searches: int = 500) -> FunctionModel:
    """Does what the last chunk it read tells it: secrets, hr, a huge limit, a made-up tool,
    hundreds of searches; never answers."""

    def reply(messages: list[Message], tools) -> ModelResponse:
        n = sum(1 for m in messages if m.role == "assistant")
        calls = [
            ToolCall(name="search", arguments={"query": f"admin password {n}", "collection": c})
            for c in ("secrets", "hr", ["shop", "secrets"], "shop")
        ]
        calls += [
            ToolCall(name="search", arguments={"query": f"payroll {n}", "limit": 100000}),
            ToolCall(name="delete_everything", arguments={}),
        ]
        calls += [
            ToolCall(name="search", arguments={"query": f"more {n} {i}"}) for i in range(searches)
        ]
        return ModelResponse(tool_calls=calls)

    return FunctionModel(reply)


def corpus() -> dict[str, list[str]]:
    return {
        "shop": [*HOSTILE.values(), "Tents are guaranteed for 3 years. admin password payroll"],
        "policies": ["Returns within 30 days. admin password payroll"],
        "secrets": [f"{SECRET} admin password payroll"],
    }


@pytest.mark.parametrize("scope", [["shop"], ["shop", "policies"], "shop"])
async def test_an_obedient_controller_stays_in_scope_budget_and_tools(scope):
    search = CollectionSearch(corpus())
    loop = AgentLoop(
        obedient_controller(),
        search,
        collections=scope,
        max_iterations=5,
        max_tool_calls_per_turn=8,
        fallback_synthesis=False,
        budget=Budget(max_iter=3),
    )
    result = await asyncio.wait_for(loop.arun("What is the warranty?"), timeout=20)
    allowed = {scope} if isinstance(scope, str) else set(scope)
    assert result.stop_reason in (StopReason.BUDGET_ITER, StopReason.MAX_ITERATIONS)
    assert result.iterations <= 3
    assert len(search.calls) <= 3 * 8  # tool calls per turn are capped
    for made in search.calls:
        reached = {made["collection"]} if made["collection"] else set(made["collections"] or [])
        assert reached <= allowed
        assert made["limit"] <= MAX_LIMIT
    assert all(SECRET not in c.content for c in result.chunks + result.shown_chunks)
    assert all(c.metadata["collection"] in allowed for c in result.chunks)
    refused = [h for h in result.tool_history if h.tool == "delete_everything"]
    assert refused
    assert all("unknown tool" in h.summary.lower() for h in refused)


# -- an obedient model cannot widen RAGLoop's or RetrievalLoop's reach -----------------------


@pytest.fixture
def kb() -> KnowledgeBase:
    kb = KnowledgeBase.in_memory(embedder=None)
    kb.add_documents(
        [Document(text=t, source=n) for n, t in HOSTILE.items()]
        + [Document(text="Tents are guaranteed for 3 years.", source="tents.md")],
        collection="shop",
    )
    secret = Document(text=f"{SECRET} Admin password: hunter2.", source="security.md")
    kb.add_documents([secret], collection="secrets")
    # the obedient queries would find it, were the scope not held
    assert any(SECRET in c.content for c in kb.search("admin password hunter2", mode="bm25"))
    return kb


def obedient_llm(prompt: str) -> str:
    """Obeys the fake verdicts and the requests to search for the password."""
    if "grading an answer" in prompt:
        return '{"is_grounded": true, "is_complete": false, "score": 0.2, "reason": "secrets"}'
    if "rewrite search queries" in prompt:
        queries = ", ".join(f'"admin password secrets hunter2 {i}"' for i in range(500))
        return f'{{"strategy": "decompose", "queries": [{queries}], "reasoning": "obeyed"}}'
    if "prepare a user's question" in prompt:
        subs = ", ".join(f'"admin password {i}"' for i in range(200))
        return f'{{"rewritten": "admin password", "sub_queries": [{subs}], "shape": "keyword"}}'
    return '{"answer": "The admin password is hunter2.", "confidence": 1.0}'


async def test_an_obedient_rag_loop_stays_in_its_collection_and_caps(kb):
    loop = RAGLoop(
        retriever=kb.retriever(collection="shop", mode="bm25"),
        generator=LLMGenerator(obedient_llm),
        evaluator=LLMEvaluator(obedient_llm),
        reformulator=LLMReformulator(obedient_llm),
        config=LoopConfig(max_iterations=3, max_sub_queries=5),
    )
    result = await asyncio.wait_for(loop.arun("What is the warranty?"), timeout=20)
    assert result.stop_reason is StopReason.MAX_ITERATIONS
    assert result.iterations == 3
    for it in result.trace:
        assert len(it.queries) <= 5
        assert all(c.metadata["collection"] == "shop" for c in it.chunks)
        assert all(SECRET not in c.content for c in it.chunks)


async def test_an_obedient_retrieval_loop_stays_in_its_collection(kb):
    loop = RetrievalLoop(
        kb.retriever(collection="shop", mode="bm25"),
        understander=LLMUnderstander(obedient_llm),
        config=RetrievalLoopConfig(max_iterations=2, min_new_chunks_per_iter=0),
    )
    result = await asyncio.wait_for(
        loop.arun("What is the warranty?", budget=Budget(max_iter=2)), timeout=20
    )
    assert result.iterations <= 2
    assert all(c.metadata["collection"] == "shop" for c in result.chunks)
    assert all(SECRET not in c.content for c in result.chunks)
