"""Query understanding, refiners and the cost estimator of the retrieval loop."""

from __future__ import annotations

import pytest

from ragloop import (
    Chunk,
    ConfigError,
    DefaultCostEstimator,
    EntityBridgeRefiner,
    HeuristicUnderstander,
    KeywordRefiner,
    LLMUnderstander,
    PseudoRelevanceRefiner,
    QueryShape,
    RefineContext,
    RefinerChain,
    Usage,
)
from ragloop.components.refiners import keyword
from ragloop.components.understanding import classify_shape
from ragloop.testing import ScriptedModel

# -- seed 003's keyword rule -------------------------------------------------------------------

CHUNK_1 = (
    "Our company requires that all staff members adhere to internal policies such as "
    "punctuality, dress code, and ethical behavior..."
)
CHUNK_2 = (
    "Regulations for staff emphasize adherence to both internal policies and government "
    "standards, covering conduct, reporting, ..."
)
QUERY = "Tell me about the regulations for staff members"


def test_keyword_on_the_seeds_own_example_follows_its_code_not_its_prose():
    # the lesson's prose says "internal"; its code picks the longest word over four letters
    assert keyword(CHUNK_1, QUERY) == "punctuality"
    refined = f"{QUERY} punctuality"
    assert keyword(CHUNK_2, refined) == "government"
    # "requires", "internal", "policies" and "behavior" tie at 8 letters: as Rust's max_by_key,
    # the last one wins
    assert keyword(CHUNK_1, refined) == "behavior"
    assert KeywordRefiner.keyword is keyword


def test_keyword_details():
    assert keyword("tiny bits only here", "q") == ""  # none over four letters
    assert keyword("", "q") == ""
    assert keyword("Alpha bravo; CHARLIE!", "q") == "charlie"  # lower-cased, punctuation gone
    assert keyword("first second", "q") == "second"  # longest
    assert keyword("aaaaaa bbbbbb", "q") == "bbbbbb"  # the last on ties (max_by_key)
    assert keyword("bbbbbb aaaaaa bbbbbb", "q") == "bbbbbb"
    assert keyword("naïve plain", "q") == "plain"  # characters, not UTF-8 bytes, are counted
    assert keyword("because there would", "q") == ""  # stopwords are skipped
    assert keyword("refund refunds", "refund") == "refunds"  # query words are excluded
    assert keyword("e-mail policy", "policy") == "email"  # the lesson strips, not splits


def context(**fields) -> RefineContext:
    defaults: dict = {
        "original": QUERY,
        "index": 0,
        "queries": [QUERY],
        "history": [],
        "last_chunks": [],
        "new_chunks": [],
        "chunks": [],
    }
    return RefineContext(**{**defaults, **fields})


def test_keyword_refiner_appends_the_word_or_stops():
    best = Chunk(content=CHUNK_1, source="a", score=0.87)
    refiner = KeywordRefiner()
    assert refiner.refine(context(last_chunks=[best])) == f"{QUERY} punctuality"
    assert refiner.refine(context(last_chunks=[])) is None
    dull = Chunk(content="the staff members", source="b", score=0.5)
    assert refiner.refine(context(last_chunks=[dull])) is None


# -- entity bridges and feedback -----------------------------------------------------------------

BRIDGE_Q = "Where was the star of the film directed by Scott Derrickson born?"
SINISTER = Chunk(
    content="Sinister is a 2012 horror film directed by Scott Derrickson, starring Ethan Hawke.",
    source="sinister",
    score=0.9,
)


def test_entity_bridge_from_the_text_issues_one_sub_query_per_new_name():
    refiner = EntityBridgeRefiner()  # the context's retriever has no link graph
    out = refiner.refine(context(original=BRIDGE_Q, new_chunks=[SINISTER]))
    assert out == [
        "Sinister star film directed born",
        "Ethan Hawke star film directed born",
    ]
    one = EntityBridgeRefiner(max_queries=1).refine(
        context(original=BRIDGE_Q, new_chunks=[SINISTER])
    )
    assert one == ["Sinister star film directed born"]
    tried = frozenset({"sinister star film directed born", "ethan hawke star film directed born"})
    assert refiner.refine(context(original=BRIDGE_Q, new_chunks=[SINISTER], tried=tried)) is None
    assert refiner.refine(context(original=BRIDGE_Q, new_chunks=[])) is None


def test_entity_bridge_prefers_the_link_graph():
    class Graph:
        def __init__(self) -> None:
            self.asked: list[tuple[list[str], int]] = []

        def linked_chunks(self, ids: list[str], *, limit: int = 10) -> list[Chunk]:
            self.asked.append((ids, limit))
            target = Chunk(content="Ethan Hawke is an actor.", source="hawke", score=1.0)
            target.metadata.update(linked_from=SINISTER.id, mention="Ethan Hawke")
            return [target]

    class Retriever:
        def __init__(self) -> None:
            self.kb = Graph()

    retriever = Retriever()
    ctx = context(original=BRIDGE_Q, new_chunks=[SINISTER], retriever=retriever)
    assert EntityBridgeRefiner().refine(ctx) == ["Ethan Hawke star film directed born"]
    assert retriever.kb.asked == [([SINISTER.id], 16)]
    text_only = EntityBridgeRefiner(use_links=False).refine(ctx)
    assert text_only is not None
    assert text_only[0].startswith("Sinister")


def test_pseudo_relevance_feedback_appends_the_heaviest_new_terms():
    chunks = [
        Chunk(
            content="Refunds are reimbursed within 30 days; reimbursed refunds",
            source="a",
            score=1.0,
        ),
        Chunk(content="Reimbursed purchases ship again", source="b", score=0.5),
    ]
    refiner = PseudoRelevanceRefiner(terms=2)
    out = refiner.refine(context(original="When are refunds issued?", chunks=chunks))
    assert out == "When are refunds issued reimbursed days"
    tried = frozenset({"when are refunds issued reimbursed days"})
    assert refiner.refine(context(original="refunds", chunks=chunks[:0])) is None
    again = context(original="When are refunds issued?", chunks=chunks, tried=tried)
    assert refiner.refine(again) is None


async def test_a_refiner_chain_takes_the_first_that_has_something():
    class Nothing:
        def refine(self, context: RefineContext) -> None:
            return None

    class Async:
        async def arefine(self, context: RefineContext) -> str:
            return "from async"

    chain = RefinerChain(Nothing(), Async(), KeywordRefiner())
    assert await chain.arefine(context()) == "from async"
    assert RefinerChain(Nothing()).refine(context()) is None
    with pytest.raises(ConfigError, match="refiners"):
        RefinerChain()


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: EntityBridgeRefiner(max_queries=0), "max_queries"),
        (lambda: EntityBridgeRefiner(from_top=0), "from_top"),
        (lambda: PseudoRelevanceRefiner(terms=0), "terms"),
    ],
)
def test_refiner_settings_are_checked(make, field):
    with pytest.raises(ConfigError, match=field):
        make()


# -- understanding -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("query", "shape"),
    [
        ("error E1234 in parse_config", QueryShape.KEYWORD),
        ('"exact phrase" search', QueryShape.KEYWORD),
        ("tent weight", QueryShape.KEYWORD),
        ("how does reciprocal rank fusion combine rankings?", QueryShape.SEMANTIC),
        ("why do retrieval loops help with vague questions", QueryShape.SEMANTIC),
        ("Who directed the film Sinister?", QueryShape.HYBRID),
        ("What happened in 1945 to the treaty?", QueryShape.HYBRID),
        ("what does error E1234 mean when parsing the config?", QueryShape.HYBRID),
        ("refund rules for the staff travelling abroad on business", QueryShape.SEMANTIC),
    ],
)
def test_shape_classification(query, shape):
    assert classify_shape(query)[0] is shape


def test_heuristic_understander_normalises_expands_and_decomposes():
    understander = HeuristicUnderstander(
        {"RAG": "retrieval-augmented generation", "KB": ["knowledge base"]}
    )
    plan = understander.understand("  what is RAG?   and how do I build a KB? ")
    assert plan.query == "  what is RAG?   and how do I build a KB? "
    assert plan.rewritten == (
        "what is RAG? and how do I build a KB? retrieval-augmented generation knowledge base"
    )
    assert plan.sub_queries == [
        "what is RAG retrieval-augmented generation",
        "and how do I build a KB? knowledge base",
    ]
    assert plan.shape is QueryShape.HYBRID
    assert plan.searches == plan.sub_queries
    assert plan.hyde is None
    assert not plan.by_model
    assert "glossary expanded" in plan.reason
    simple = understander.understand("rag pipelines")  # whole words, any case
    assert simple.rewritten == "rag pipelines retrieval-augmented generation"
    assert simple.sub_queries == []
    assert simple.searches == [simple.rewritten]
    assert understander.understand("dragon").rewritten == "dragon"  # not inside a word
    said = understander.understand("RAG (retrieval-augmented generation)")
    assert said.rewritten == "RAG (retrieval-augmented generation)"  # already there


def test_glossary_is_checked():
    with pytest.raises(ConfigError, match="glossary"):
        HeuristicUnderstander({"RAG": ""})
    with pytest.raises(ConfigError, match="glossary"):
        HeuristicUnderstander(["RAG"])  # type: ignore[arg-type]


async def test_llm_understander_reads_the_models_json():
    model = ScriptedModel(
        [
            """```json
            {"rewritten": "retrieval augmented generation definition", "sub_queries": "one part",
             "shape": "Semantic", "hyde": "RAG  retrieves documents, then generates."}
            ```""",
        ],
        usage=Usage(input_tokens=120, output_tokens=30),
    )
    understander = LLMUnderstander(model, glossary={"RAG": "retrieval-augmented generation"})
    plan = await understander.aunderstand("what's RAG")
    assert plan.rewritten == "retrieval augmented generation definition"
    assert plan.sub_queries == []  # one part is no decomposition
    assert plan.shape is QueryShape.SEMANTIC
    assert plan.hyde == "RAG retrieves documents, then generates."
    assert plan.by_model
    prompt = model.calls[0].prompt
    assert "<question>what's RAG</question>" in prompt
    assert "retrieval-augmented generation" in prompt  # the glossary is in the prompt


def test_llm_understander_falls_back_to_the_heuristic_on_an_unusable_reply():
    model = ScriptedModel(["I cannot help with that.", '{"rewritten": "  "}'])
    understander = LLMUnderstander(model)
    plan = understander.understand("tent weight")
    assert plan.rewritten == "tent weight"
    assert plan.shape is QueryShape.KEYWORD
    assert plan.by_model
    assert plan.reason.startswith("model reply unusable")
    assert "no rewritten query" in understander.understand("tent weight").reason


# -- cost ----------------------------------------------------------------------------------------


def test_default_cost_estimator_attributes_tokens_per_stage():
    estimator = DefaultCostEstimator(prompt_overhead_tokens=100, usd_per_million={"embed": 2.0})
    assert estimator.estimate("understand", ["what is rag?"], ["rag definition"]) == Usage(
        input_tokens=104, output_tokens=2
    )
    embed = estimator.estimate("embed", ["what is rag?", "x"])
    assert (embed.input_tokens, embed.output_tokens) == (5, 0)
    assert embed.cost_usd == pytest.approx(5 * 2.0 / 1e6)
    assert estimator.estimate("retrieve", ["a", "b"]) == Usage()
    assert DefaultCostEstimator(retrieve_tokens_per_query=3).estimate("retrieve", ["a"]) == Usage(
        input_tokens=3
    )
    assert estimator.estimate("rerank", ["q passage"]).input_tokens == 2
    with pytest.raises(ConfigError, match="stage"):
        estimator.estimate("generate", ["x"])
    with pytest.raises(ConfigError, match="usd_per_million"):
        DefaultCostEstimator(usd_per_million={"generate": 1.0})
    with pytest.raises(ConfigError, match="prompt_overhead_tokens"):
        DefaultCostEstimator(prompt_overhead_tokens=-1)
