"""Corpus: what the offline components may ask of the knowledge base."""

from __future__ import annotations

import pytest

from ragloop import Chunk, Corpus, Document, KnowledgeBase
from ragloop.testing import InMemoryRetriever


def test_mentions_tells_words_the_documents_use_from_words_they_never_use(shop_kb):
    corpus = Corpus.of(shop_kb)
    assert corpus.mentions("hire")
    assert corpus.mentions("hiring")  # same stem as "hire"
    assert not corpus.mentions("rent")


def test_substitutes_are_embedding_neighbours_among_the_passages_a_word_points_to(
    shop_kb, shop_kb_dense
):
    question = "Do you rent out stoves?"
    assert "hire" in Corpus.of(shop_kb_dense).substitutes("rent", question)
    # without an embedder there is no evidence of meaning, so no guesses
    assert Corpus.of(shop_kb).substitutes("rent", question) == []


def test_related_terms_come_from_a_wider_search_and_leave_out_the_question(shop_kb):
    corpus = Corpus.of(shop_kb)
    related = corpus.related_terms("hire fees for tents", ["hire", "fees", "tents"], limit=4)
    assert related
    assert not {"hire", "fees", "tents", "tent", "fee"} & set(related)
    assert 0 < len(corpus.sample("hire fees for tents")) <= corpus.sample_size


def test_bridges_name_other_documents_through_the_link_graph(shop_kb):
    corpus = Corpus.of(shop_kb)
    picks = shop_kb.search("Priya Shah wild camping", top_k=1)
    assert picks[0].source == "staff/staff-picks.md"
    names = corpus.bridges(picks, limit=5)
    assert "Skylark 2" in names
    assert all(c.source != "staff/staff-picks.md" for c in corpus.linked(picks))


def test_fetch_returns_chunks_with_their_metadata(shop_kb):
    corpus = Corpus.of(shop_kb)
    found = shop_kb.search("Skylark 2 weighs", top_k=1)
    fetched = corpus.fetch([found[0].id])
    assert fetched[0].content == found[0].content
    assert fetched[0].metadata["title"] == "Skylark 2"


def test_a_plain_retriever_gives_search_only():
    corpus = Corpus.of(InMemoryRetriever({"a.md": "Tents can be hired.", "b.md": "Boots."}))
    assert corpus.search("hired", top_k=1)[0].source == "a.md"
    assert corpus.mentions("hired")
    assert not corpus.has_links
    assert corpus.bridges([Chunk(content="x", source="a.md", score=1.0)]) == []
    assert corpus.fetch(["anything"]) == []


def test_a_knowledge_base_retriever_keeps_its_collection():
    kb = KnowledgeBase.in_memory(embedder=None)
    kb.add_documents(
        [Document(text="Tents are hired by the night.", source="a.md")], collection="shop"
    )
    kb.add_documents(
        [Document(text="Tents are hired by the week.", source="b.md")], collection="other"
    )
    corpus = Corpus.of(kb.retriever(collection="shop"))
    assert {c.source for c in corpus.search("tents hired", top_k=5)} == {"a.md"}


def test_anything_else_is_refused():
    with pytest.raises(TypeError, match="KnowledgeBase, a retriever"):
        Corpus.of(42)


def test_vectors_come_back_for_every_text_when_the_bounded_cache_drops_what_it_held():
    from ragloop.kb.embedding.hash_embedder import HashEmbedder

    corpus = Corpus(InMemoryRetriever([]).retrieve, embedder=HashEmbedder(16))
    corpus._vectors.size = 2  # a cache smaller than one call's texts: words fall out meanwhile
    first = corpus.vectors(["arguments", "options"])
    again = corpus.vectors(["arguments", "flags", "switches", "arguments"])
    assert again.shape == (4, 16)
    assert (again[0] == first[0]).all()
    assert (again[3] == first[0]).all()
    assert len(corpus._vectors) == 2
