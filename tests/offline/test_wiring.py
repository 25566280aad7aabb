"""RAGLoop.offline and AgentLoop.offline: one call, the offline defaults, a model on request."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest

from ragloop import (
    AgentLoop,
    ConfigError,
    Document,
    ExtractiveGenerator,
    HeuristicEvaluator,
    HeuristicReformulator,
    KnowledgeBase,
    LLMEvaluator,
    LLMGenerator,
    LLMReformulator,
    LoopConfig,
    OfflineController,
    RAGLoop,
    StopReason,
)
from ragloop.offline import LinkedSearch, agent_loop, rag_loop
from ragloop.testing import InMemoryRetriever, ScriptedModel


def test_rag_loop_offline_wires_the_llm_free_components_over_one_corpus(shop_kb):
    loop = RAGLoop.offline(shop_kb, max_iterations=2, top_k=3)
    assert isinstance(loop.generator, ExtractiveGenerator)
    assert isinstance(loop.evaluator, HeuristicEvaluator)
    assert isinstance(loop.reformulator, HeuristicReformulator)
    assert loop.generator.corpus is loop.evaluator.corpus is loop.reformulator.corpus
    assert (loop.config.max_iterations, loop.config.top_k) == (2, 3)
    result = loop.run("How much does the Skylark 2 weigh?")
    assert result.stop_reason is StopReason.CONVERGED
    assert "1.6 kg" in result.answer


def test_config_components_and_plain_retrievers():
    retriever = InMemoryRetriever(
        {"hire.md": "A tent can be hired for £12 a night.", "boots.md": "Boots need wax."}
    )
    config = LoopConfig(max_iterations=1)
    generator = ExtractiveGenerator(max_sentences=1)
    loop = RAGLoop.offline(retriever, config=config, generator=generator)
    assert loop.config is config
    assert loop.generator is generator
    assert "£12" in loop.run("What does it cost to hire a tent?").answer
    with pytest.raises(ConfigError, match="config"):
        RAGLoop.offline(retriever, config=config, top_k=2)
    with pytest.raises(ConfigError, match="top_k"):
        RAGLoop.offline(retriever, top_k=0)
    with pytest.raises(ConfigError, match="has no option 'colour'"):
        RAGLoop.offline(retriever, colour="green")
    with pytest.raises(TypeError, match="KnowledgeBase or a retriever"):
        RAGLoop.offline("not a retriever")


def test_with_a_model_the_llm_components_take_over(shop_kb):
    model = ScriptedModel(
        [
            '{"answer": "It weighs 1.6 kg [1].", "confidence": 0.9}',
            '{"is_grounded": true, "is_complete": true, "score": 0.95, "reason": "all there"}',
        ]
    )
    loop = rag_loop(shop_kb, model=model)
    assert isinstance(loop.generator, LLMGenerator)
    assert isinstance(loop.evaluator, LLMEvaluator)
    assert isinstance(loop.reformulator, LLMReformulator)
    assert loop.reformulator.fallback.corpus is not None
    result = loop.run("How much does the Skylark 2 weigh?")
    assert result.answer.startswith("It weighs 1.6 kg [1].\n\nSources: [1] products/skylark-2.md")


def test_agent_loop_offline_and_with_a_model(shop_kb):
    loop = AgentLoop.offline(shop_kb, max_iterations=4)
    assert isinstance(loop.controller, OfflineController)
    assert loop.max_iterations == 4
    model = ScriptedModel(["The Skylark 2 weighs 1.6 kg."])
    answered = agent_loop(shop_kb, model=model).run("How much does the Skylark 2 weigh?")
    assert answered.answer == "The Skylark 2 weighs 1.6 kg."
    assert len(model.calls) == 1


def test_the_engines_do_not_import_the_wiring_until_asked():
    code = (
        "import sys, ragloop.engines.rag, ragloop.engines.agent, ragloop.engines.retrieval;"
        "wiring = ('ragloop.engines.defaults', 'ragloop.offline',"
        " 'ragloop.kb.knowledge_base', 'ragloop.components.evaluators');"
        "loaded = [m for m in sys.modules if m.startswith(wiring)];"
        "assert not loaded, loaded"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_offline_agent_searches_follow_links_within_the_collections_asked():
    """AgentLoop.offline's search tool over a knowledge base is a LinkedSearch: a search
    brings the document its best chunk names (the link-graph hop), and a search scoped to a
    collection never leaves it."""
    kb = KnowledgeBase.in_memory(embedder=None)
    kb.add_documents(
        [
            Document(
                title="Harbour Bridge",
                source="bridge.md",
                text="The Harbour Bridge was designed by Mara Lind, an engineer from Oslo.",
            ),
            Document(
                title="Mara Lind",
                source="lind.md",
                text="She studied at the polytechnic and later taught structural design.",
            ),
        ],
        collection="engineering",
    )
    kb.add_documents(
        [Document(title="Harbour Bridge Café", source="cafe.md", text="The bridge café.")],
        collection="food",
    )
    loop = AgentLoop.offline(kb)
    assert isinstance(loop.backend.fn, LinkedSearch)
    search = LinkedSearch(kb)
    found = asyncio.run(search("Who designed the Harbour Bridge?", limit=5))
    assert {c.source for c in found} >= {"bridge.md", "lind.md"}  # lind.md only by the link
    scoped = asyncio.run(search("Harbour Bridge", limit=5, collection="food"))
    assert [c.source for c in scoped] == ["cafe.md"]
    assert asyncio.run(search("Harbour Bridge", limit=5, collections=[])) == []
