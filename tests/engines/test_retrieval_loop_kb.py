"""RetrievalLoop over a real knowledge base: routing, sticky routes and plan reuse, embedding
caches, HyDE vectors, cost attribution, the link-graph bridge and the offline wiring."""

from __future__ import annotations

import pytest

from ragloop import (
    Budget,
    ConfigError,
    DefaultCostEstimator,
    DenseSearchUnavailable,
    Document,
    EntityBridgeRefiner,
    ExactEmbeddingCache,
    HeuristicUnderstander,
    KnowledgeBase,
    LLMUnderstander,
    QueryShape,
    RetrievalLoop,
    RetrievalLoopConfig,
    RetrievalRouter,
    SemanticEmbeddingCache,
    StopReason,
    StoreError,
    UnderstoodQuery,
    Usage,
)
from ragloop.testing import HashEmbedder, ScriptedModel

DOCS = [
    Document(
        text="Sinister is a 2012 horror film directed by Scott Derrickson. It stars Ethan Hawke "
        "as a true-crime writer.",
        source="sinister.md",
        title="Sinister",
    ),
    Document(
        text="Ethan Hawke is an American actor and novelist. He was born in Austin, Texas.",
        source="hawke.md",
        title="Ethan Hawke",
    ),
    Document(
        text="Scott Derrickson is an American filmmaker, born in Denver, Colorado.",
        source="derrickson.md",
        title="Scott Derrickson",
    ),
    Document(
        text="Error E1234 means the parse_config step could not read the settings file.",
        source="errors.md",
        title="Error codes",
    ),
]


@pytest.fixture(scope="module")
def kb():
    base = KnowledgeBase.in_memory(embedder=HashEmbedder(64))
    base.add_documents(DOCS)
    yield base
    base.close()


@pytest.fixture(scope="module")
def keyword_kb():
    base = KnowledgeBase.in_memory(embedder=None)
    base.add_documents(DOCS)
    yield base
    base.close()


def plan(shape: QueryShape) -> UnderstoodQuery:
    return UnderstoodQuery(query="q", rewritten="q", shape=shape)


def sources(result) -> list[str]:
    return [c.source for c in result.chunks]


# -- the router ----------------------------------------------------------------------------------


def test_the_router_maps_shapes_to_modes(kb, keyword_kb):
    router = RetrievalRouter(kb)
    assert [router.route(plan(s)) for s in QueryShape] == ["bm25", "dense", "hybrid"]
    assert router.query_embedder("bm25") is None
    embedder = router.query_embedder("dense")
    assert embedder is not None
    assert (embedder.model_id, embedder.dimension) == (kb.embedder.model_id, 64)
    assert embedder.embed(["Sinister"]) == [kb.query_vector("Sinister")]  # the KB's cache
    assert router.query_embedder("hybrid") is not None
    # without an embedder everything goes to bm25
    assert {RetrievalRouter(keyword_kb).route(plan(s)) for s in QueryShape} == {"bm25"}
    custom = RetrievalRouter(kb.retriever(mode="bm25"), routes={"semantic": "hybrid"})
    assert custom.route(plan(QueryShape.SEMANTIC)) == "hybrid"


def test_router_settings_are_checked(kb):
    with pytest.raises(ConfigError, match="routes"):
        RetrievalRouter(kb, routes={"semantic": "fuzzy"})  # type: ignore[dict-item]
    with pytest.raises(ConfigError, match="routes"):
        RetrievalRouter(kb, routes={"vague": "bm25"})
    with pytest.raises(ConfigError, match="retriever"):
        RetrievalRouter(object())  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="route"):
        RetrievalRouter(kb).search("x", route="graph", top_k=3)


def test_a_given_vector_replaces_the_query_embedding(kb, keyword_kb):
    router = RetrievalRouter(kb.retriever(collection="default"))
    vector = kb.query_vector("Ethan Hawke American actor born Austin Texas")
    found = router.search("unrelated words", route="dense", top_k=1, vector=vector)
    assert [c.source for c in found] == ["hawke.md"]
    with pytest.raises(StoreError, match="vectors"):
        kb.search("x", mode="dense", vector=[1.0, 0.0])
    with pytest.raises(DenseSearchUnavailable):
        keyword_kb.search("x", mode="dense", vector=[0.0] * 64)


# -- sticky routes and plan reuse ------------------------------------------------------------------


def routed_loop(kb, *, switch: bool) -> RetrievalLoop:
    return RetrievalLoop(
        kb.retriever(),
        config=RetrievalLoopConfig(
            max_iterations=4, allow_route_switch=switch, min_new_chunks_per_iter=0
        ),
        understander=HeuristicUnderstander(),
        router=RetrievalRouter(kb),
    )


SUBS = ["Ethan Hawke birthplace", "tent weight", "Who was born in Austin, Texas?"]


def test_sticky_routing_keeps_iteration_0s_route_and_measures_plan_reuse(kb):
    result = routed_loop(kb, switch=False).run("Who directed the film Sinister?", sub_queries=SUBS)
    # shapes: hybrid, keyword, keyword, hybrid
    assert [it.route for it in result.trace] == ["hybrid"] * 4
    assert [it.sticky for it in result.trace] == [False, True, True, True]
    # asked, the router would pick bm25, bm25, then hybrid: only the last fits the held route
    assert [it.plan_reused for it in result.trace] == [False, False, False, True]
    assert result.sticky_route_rate == 1.0
    assert result.plan_reuse_rate == pytest.approx(1 / 3)


def test_with_route_switching_each_iteration_asks_the_router(kb):
    result = routed_loop(kb, switch=True).run("Who directed the film Sinister?", sub_queries=SUBS)
    assert [it.route for it in result.trace] == ["hybrid", "bm25", "bm25", "hybrid"]
    assert [it.sticky for it in result.trace] == [False] * 4
    assert [it.plan_reused for it in result.trace] == [False, False, True, False]
    assert result.plan_reuse_rate == pytest.approx(1 / 3)
    assert result.sticky_route_rate == 0.0


def test_without_a_router_the_retrievers_mode_is_the_route(kb):
    loop = RetrievalLoop(kb.retriever(mode="bm25"), config=RetrievalLoopConfig(max_iterations=2))
    result = loop.run("Sinister", sub_queries=["Ethan Hawke"])
    assert [(it.route, it.plan_reused, it.sticky) for it in result.trace] == [
        ("bm25", False, False),
        ("bm25", True, True),
    ]
    assert result.cache_stats.hits + result.cache_stats.misses == 0  # nothing embedded


# -- embedding caches ----------------------------------------------------------------------------


def test_the_exact_cache_is_shared_across_iterations_and_runs(kb):
    cache = ExactEmbeddingCache()
    loop = RetrievalLoop(
        kb.retriever(),
        config=RetrievalLoopConfig(max_iterations=3, min_new_chunks_per_iter=0),
        router=RetrievalRouter(kb),
        embedding_cache=cache,
    )
    first = loop.run("Sinister horror film", sub_queries=["sinister  HORROR film", "Ethan Hawke"])
    assert [(it.cache_hits, it.cache_misses) for it in first.trace] == [(0, 1), (1, 0), (0, 1)]
    assert (first.cache_stats.hits, first.cache_stats.misses) == (1, 2)
    assert first.cache_stats.rate == pytest.approx(1 / 3)
    second = loop.run("Ethan Hawke", budget=Budget(max_iter=1))
    assert (second.cache_stats.hits, second.cache_stats.misses) == (1, 0)
    assert (cache.stats.hits, cache.stats.misses) == (2, 2)  # the cache's own, across runs
    assert len(cache) == 2


def test_the_semantic_cache_reuses_a_near_duplicates_vector(kb):
    cache = SemanticEmbeddingCache(threshold=0.6)
    loop = RetrievalLoop(
        kb.retriever(),
        config=RetrievalLoopConfig(max_iterations=3, min_new_chunks_per_iter=0),
        router=RetrievalRouter(kb),
        embedding_cache=cache,
    )
    # content words {sinister, horror, film} / {sinister, horror, film, directed}: Jaccard 0.75
    result = loop.run(
        "Sinister horror film",
        sub_queries=["the Sinister horror film directed", "Austin Texas"],
    )
    assert [it.cache_hits for it in result.trace] == [0, 1, 0]
    assert cache.semantic_hits == 1
    assert (cache.stats.hits, cache.stats.misses) == (1, 2)
    assert cache.exact.stats.hits == 0


def test_cache_hits_cost_nothing(kb):
    loop = RetrievalLoop(
        kb.retriever(),
        router=RetrievalRouter(kb),
        embedding_cache=ExactEmbeddingCache(),
        cost_estimator=DefaultCostEstimator(),
    )
    cold = loop.run("Sinister horror film", budget=Budget(max_iter=1))
    assert cold.budget_used.tokens == 3  # the query's three tokens, embedded
    warm = loop.run("Sinister horror film", budget=Budget(max_iter=1))
    assert (warm.cache_stats.hits, warm.budget_used.tokens) == (1, 0)


# -- understanding in the loop ---------------------------------------------------------------------


def test_a_hyde_passage_is_embedded_in_place_of_the_query(kb):
    reply = (
        '{"rewritten": "zzz qqq", "shape": "semantic", '
        '"hyde": "Ethan Hawke is an American actor and novelist born in Austin Texas"}'
    )
    cache = ExactEmbeddingCache()
    loop = RetrievalLoop(
        kb.retriever(),
        config=RetrievalLoopConfig(top_k=1),
        understander=LLMUnderstander(ScriptedModel([reply])),
        router=RetrievalRouter(kb),
        embedding_cache=cache,
    )
    result = loop.run("zzz qqq", budget=Budget(max_iter=1))
    assert result.trace[0].route == "dense"
    assert sources(result) == ["hawke.md"]
    model = kb.embedder.model_id
    assert cache.lookup(model, "Ethan Hawke is an American actor and novelist born in Austin Texas")
    assert cache.lookup(model, "zzz qqq") is None


def test_understanding_cost_reported_by_the_model_wins_over_the_estimate(keyword_kb):
    reply = '{"rewritten": "Sinister film", "shape": "keyword"}'
    estimator = DefaultCostEstimator(prompt_overhead_tokens=100)

    def loop_with(model: ScriptedModel) -> RetrievalLoop:
        return RetrievalLoop(
            keyword_kb.retriever(),
            understander=LLMUnderstander(model),
            router=RetrievalRouter(keyword_kb),
            cost_estimator=estimator,
        )

    reported = ScriptedModel([reply], usage=Usage(input_tokens=500, output_tokens=9))
    result = loop_with(reported).run("sinister?", budget=Budget(max_iter=1))
    assert result.budget_used.tokens == 509
    estimated = loop_with(ScriptedModel([reply])).run("sinister?", budget=Budget(max_iter=1))
    assert estimated.budget_used.tokens == 100 + 2 + 2  # overhead + "sinister ?" in, 2 out


def test_a_token_budget_stops_an_llm_understood_run(keyword_kb):
    model = ScriptedModel(
        ['{"rewritten": "Sinister", "shape": "keyword"}'] * 3,
        usage=Usage(input_tokens=60, output_tokens=5),
    )
    loop = RetrievalLoop(
        keyword_kb.retriever(),
        config=RetrievalLoopConfig(min_new_chunks_per_iter=0),
        understander=LLMUnderstander(model),
    )
    result = loop.run("Sinister", budget=Budget(max_tokens=100))
    assert (result.stop_reason, len(result.trace)) == (StopReason.BUDGET_TOKENS, 2)
    assert result.budget_used.tokens == 130


def test_decomposed_parts_are_searched_separately(keyword_kb):
    retriever = keyword_kb.retriever()
    loop = RetrievalLoop(retriever, understander=HeuristicUnderstander())
    result = loop.run(
        "Who directed Sinister? Where was Ethan Hawke born?", budget=Budget(max_iter=1)
    )
    assert {"sinister.md", "hawke.md"} <= set(sources(result)[:3])


# -- the bridge over the link graph, and the offline wiring ----------------------------------------


def test_the_entity_bridge_follows_the_link_graph_to_the_second_hop(keyword_kb):
    loop = RetrievalLoop(
        keyword_kb.retriever(),
        config=RetrievalLoopConfig(top_k=2),
        refiner=EntityBridgeRefiner(),
    )
    result = loop.run("Where was the star of the film Sinister born?")
    # the names the first passage links to, in the order it mentions them
    assert result.trace[1].query == ("Scott Derrickson star film born | Ethan Hawke star film born")
    assert sources(result)[:1] == ["sinister.md"]
    assert {"derrickson.md", "hawke.md"} <= set(sources(result)[:4])


def test_offline_wires_the_offline_components(kb):
    loop = RetrievalLoop.offline(kb, max_iterations=3, glossary={"KB": "knowledge base"})
    assert loop.config.max_iterations == 3
    assert isinstance(loop.understander, HeuristicUnderstander)
    assert loop.understander.glossary == {"KB": ["knowledge base"]}
    assert isinstance(loop.router, RetrievalRouter)
    assert isinstance(loop.refiner, EntityBridgeRefiner)
    assert isinstance(loop.embedding_cache, SemanticEmbeddingCache)
    # one copy of each query's vector however many loops run: the knowledge base's own cache
    assert loop.embedding_cache.exact is kb.query_vector_cache
    assert RetrievalLoop.offline(kb).embedding_cache.exact is kb.query_vector_cache
    assert isinstance(loop.cost_estimator, DefaultCostEstimator)
    result = loop.run("Where was the star of the film Sinister born?")
    assert "hawke.md" in sources(result)[:3]
    with pytest.raises(TypeError, match="KnowledgeBase"):
        RetrievalLoop.offline(object())  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="top_k"):
        RetrievalLoop.offline(kb, top_k=0)


# -- the caches on their own -----------------------------------------------------------------------


def test_exact_cache_keys_lower_case_collapsed_text_per_model_and_evicts_the_oldest():
    cache = ExactEmbeddingCache(max_entries=2)
    cache.store("m", "What  is RAG?", [1.0])
    assert cache.lookup("m", "what is rag?") == [1.0]
    assert cache.lookup("other", "what is rag?") is None
    cache.store("m", "b", [2.0])
    cache.lookup("m", "what is rag?")  # now the most recent
    cache.store("m", "c", [3.0])
    assert cache.lookup("m", "b") is None
    assert cache.lookup("m", "What is RAG?") == [1.0]
    assert (cache.stats.hits, cache.stats.misses) == (3, 2)
    cache.clear()
    assert (len(cache), cache.stats.hits) == (0, 0)
    with pytest.raises(ConfigError, match="max_entries"):
        ExactEmbeddingCache(max_entries=0)


def test_semantic_cache_picks_the_most_similar_entry_above_the_threshold():
    cache = SemanticEmbeddingCache(threshold=0.5)
    cache.store("m", "refund policy international orders", [1.0])
    cache.store("m", "refund policy", [2.0])
    # content words against {refund, policy, international, orders} and {refund, policy}
    assert cache.lookup("m", "the refund policy for orders") == [1.0]  # 3/4 beats 2/3
    assert cache.lookup("m", "refund policy please") == [2.0]  # 2/3 beats 2/5
    assert cache.lookup("m", "shipping times") is None
    assert cache.lookup("other", "refund policy") is None
    assert cache.semantic_hits == 2
    with pytest.raises(ConfigError, match="threshold"):
        SemanticEmbeddingCache(threshold=0)
