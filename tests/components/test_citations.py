"""Citations resolved through the Sources line, whoever numbered them."""

from __future__ import annotations

from ragloop import Chunk, ExtractiveGenerator
from ragloop.components.citations import resolve_citations


def chunk(text: str, source: str, title: str | None = None, score: float = 0.5) -> Chunk:
    return Chunk(
        content=text, source=source, score=score, metadata={"title": title} if title else {}
    )


def test_each_marker_resolves_to_the_chunk_its_label_names():
    chunks = [
        chunk("Tents cost 12 pounds a night to hire.", "hire.md", "Gear library", 0.9),
        chunk("The Skylark 2 weighs 2 kg.", "skylark.md", "Skylark 2", 0.7),
    ]
    answer = (
        "It weighs 2 kg [1]. Hire costs 12 pounds [2].\n\n"
        "Sources: [1] skylark.md (Skylark 2); [2] hire.md (Gear library)"
    )
    cited = resolve_citations(answer, chunks)
    assert [(c.number, c.chunk_id, c.source, c.title, c.score) for c in cited] == [
        (1, chunks[1].id, "skylark.md", "Skylark 2", 0.7),
        (2, chunks[0].id, "hire.md", "Gear library", 0.9),
    ]


def test_a_label_no_chunk_has_keeps_its_text_and_no_id():
    (cited,) = resolve_citations("x [1]\n\nSources: [1] gone.md; and more", [])
    assert (cited.chunk_id, cited.source, cited.label) == (
        None,
        "gone.md; and more",
        "gone.md; and more",
    )
    assert resolve_citations("no sources here [1]", []) == []
    assert resolve_citations(None, []) == []


def test_the_extractive_generators_answers_resolve_fully():
    chunks = [
        chunk("Refunds are issued within 30 days of the return.", "returns.md", "Returns"),
        chunk("Exchanges are free for 60 days.", "exchanges.md", "Exchanges"),
    ]
    answer = ExtractiveGenerator().generate("When are refunds issued?", chunks).answer
    cited = resolve_citations(answer, chunks)
    assert cited
    assert {c.chunk_id for c in cited} <= {c.id for c in chunks}
    assert all(c.chunk_id for c in cited)
