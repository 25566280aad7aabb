"""ExtractiveGenerator: quoted sentences, numbered citations, a confidence; LLMGenerator."""

from __future__ import annotations

import pytest

from ragloop import Chunk, ConfigError, Corpus, ExtractiveGenerator, LLMGenerator
from ragloop.components.generators import NO_ANSWER, strip_citations
from ragloop.testing import ScriptedModel


def search(kb, *queries, top_k=5):
    seen, out = set(), []
    for query in queries:
        for chunk in kb.search(query, top_k=top_k):
            if chunk.id not in seen:
                seen.add(chunk.id)
                out.append(chunk)
    return out


def test_it_quotes_the_sentence_that_answers_and_cites_its_source(shop_kb):
    question = "How much does the Skylark 2 weigh?"
    out = ExtractiveGenerator(corpus=shop_kb).generate(question, search(shop_kb, question))
    text, sources = out.answer.split("\n\nSources: ")
    assert text == (
        "It weighs 1.6 kg with pegs and poles, packs down to 45 by 15 cm and pitches in about "
        "five minutes. [1]"
    )
    assert sources == "[1] products/skylark-2.md (Skylark 2)"
    assert strip_citations(out.answer) == text.removesuffix(" [1]")
    assert 0.3 < out.confidence < 1.0


def test_each_part_of_a_multi_part_question_gets_its_sentence(shop_kb):
    question = "How long do I have to return an item, and how long does standard delivery take?"
    out = ExtractiveGenerator().generate(question, search(shop_kb, question))
    assert "60 days" in out.answer
    assert "3 to 5 working days" in out.answer
    assert "[1] policies/" in out.answer
    assert "[2] policies/" in out.answer


def test_a_sentence_that_points_to_another_document_is_followed_there(shop_kb):
    question = "What is the warranty on the tent Priya Shah takes wild camping?"
    chunks = search(shop_kb, question, "Fellside Guarantee warranty")
    answer = ExtractiveGenerator().generate(question, chunks).answer
    assert answer.index("Skylark 2") < answer.index("Fellside Guarantee") < answer.index("3 years")


def test_the_answer_type_decides_between_sentences_on_the_same_subject():
    chunks = [
        Chunk(
            content="The Bothy 4 costs £449. The Bothy 4 weighs 7.9 kg.", source="b.md", score=0.9
        )
    ]
    generator = ExtractiveGenerator(max_sentences=1)
    assert "7.9 kg" in generator.generate("How heavy is the Bothy 4?", chunks).answer
    assert "£449" in generator.generate("What does the Bothy 4 cost?", chunks).answer


def test_nothing_to_quote_gives_no_answer_with_zero_confidence(shop_kb):
    generator = ExtractiveGenerator()
    assert generator.generate("anything?", []).answer == NO_ANSWER
    unrelated = [Chunk(content="Boots need wax.", source="b.md", score=0.3)]
    out = generator.generate("What is the capital of Peru?", unrelated)
    assert (out.answer, out.confidence) == (NO_ANSWER, 0.0)


def test_confidence_grows_with_how_much_of_the_question_is_answered(shop_kb):
    generator = ExtractiveGenerator()
    good = generator.generate(
        "What does it cost to hire a tent?", search(shop_kb, "hire tent cost")
    ).confidence
    poor = generator.generate(
        "What does it cost to hire a tent in Peru for a wedding?", search(shop_kb, "wedding")
    ).confidence
    assert good > poor


def test_max_sentences_is_checked():
    with pytest.raises(ConfigError, match="max_sentences"):
        ExtractiveGenerator(max_sentences=0)


def test_the_llm_generator_resolves_its_citations_into_sources():
    chunks = [
        Chunk(content="Tents are hired at £12 a night.", source="hire.md", score=0.9),
        Chunk(content="Boots need wax.", source="boots.md", score=0.2),
    ]
    model = ScriptedModel(['{"answer": "A tent is £12 a night [1].", "confidence": 0.9}'])
    out = LLMGenerator(model).generate("What does a tent cost?", chunks)
    assert out.answer == "A tent is £12 a night [1].\n\nSources: [1] hire.md"
    assert out.confidence == 0.9
    assert '<chunk n="1" source="hire.md">' in model.calls[0].prompt


def test_the_llm_generator_takes_a_reply_that_is_not_json_as_the_answer():
    chunks = [Chunk(content="Tents are hired at £12 a night.", source="hire.md", score=0.9)]
    out = LLMGenerator(ScriptedModel(["Twelve pounds a night."])).generate("Cost?", chunks)
    assert (out.answer, out.confidence) == ("Twelve pounds a night.", 0.5)
    empty = LLMGenerator(ScriptedModel(['{"answer": "", "confidence": 1}'])).generate("C?", chunks)
    assert (empty.answer, empty.confidence) == (NO_ANSWER, 0.0)


def test_only_the_best_sentences_by_words_are_embedded(shop_kb_dense):
    """Embedding is most of an extractive answer's cost: of many candidate sentences only
    ``EMBEDDED_SENTENCES`` (the best without similarity) are embedded, and the answer is
    still the sentence that answers."""
    from ragloop.components.heuristics import extractive

    question = "How much does the Skylark 2 weigh?"
    chunks = search(shop_kb_dense, question, "tents", "delivery", "returns", top_k=5)
    sentences = extractive.split_chunks(chunks)
    assert len(sentences) > extractive.EMBEDDED_SENTENCES
    corpus = Corpus.of(shop_kb_dense)
    embedded: list[str] = []
    embed = corpus.embedder.embed
    corpus.embedder.embed = lambda texts: embedded.extend(texts) or embed(texts)
    try:
        answer = ExtractiveGenerator(corpus=corpus).generate(question, chunks).answer
    finally:
        corpus.embedder.embed = embed
    embedded_sentences = set(embedded) & {extractive.embedded_text(s) for s in sentences}
    assert len(embedded_sentences) == extractive.EMBEDDED_SENTENCES
    assert "It weighs 1.6 kg" in answer
