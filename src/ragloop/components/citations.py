"""The one answer format every generator writes, and its citations resolved to chunks.

Answers are sentences with ``[n]`` markers, then a line ``Sources: [1] returns.md (Refunds);
[2] ...`` naming the chunks the markers cite (:func:`with_sources`). :func:`strip_citations`
gives the bare text back (what evaluators and metrics should read); :data:`NO_ANSWER` is what a
generator says when nothing in the chunks answers, and an extractive answer that is probably
wrong starts with :data:`UNSURE`.

The numbers are the generator's own (the extractive generator numbers the chunks it cites, an
LLM the chunks of its prompt), so citations are resolved through the labels of that line, which
name each chunk the same way whoever wrote them: :func:`resolve_citations` finds the chunk
behind each label among the chunks the answer was drawn from.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from pydantic import BaseModel

from ragloop.core.records import Chunk

NO_ANSWER = "The documents retrieved do not answer this question."
UNSURE = "The documents may not answer this; the closest they come:"
_SOURCES_LINE = re.compile(r"\n+Sources:[^\n]*\s*$")
_MARKER = re.compile(r"\s*\[\d+(?:,\s*\d+)*\]")


def strip_citations(answer: str) -> str:
    """The answer without its ``[n]`` markers and its ``Sources:`` line."""
    return _MARKER.sub("", _SOURCES_LINE.sub("", answer)).strip()


def answer_text(answer: str) -> str:
    """What an answer says: without citations, its ``Sources:`` line or the :data:`UNSURE`
    lead an unsure extractive answer starts with."""
    return strip_citations(answer).removeprefix(UNSURE).strip()


def source_label(chunk: Chunk) -> str:
    """How a chunk is named in a ``Sources:`` line: its source and, in brackets, the heading
    (or title) it sits under."""
    title = chunk.metadata.get("title")
    heading = (chunk.metadata.get("heading_path") or [None])[-1]
    where = heading if heading and heading != title else title
    if isinstance(where, str):
        where = where.replace("¶", "").strip()
    return f"{chunk.source} ({where})" if where and where != chunk.source else chunk.source


def with_sources(text: str, chunks: Sequence[Chunk]) -> str:
    """``text`` with a ``Sources:`` line for the chunk numbers its ``[n]`` markers cite."""
    cited = sorted({int(n) for m in _MARKER.findall(text) for n in re.findall(r"\d+", m)})
    labels = [f"[{n}] {source_label(chunks[n - 1])}" for n in cited if 1 <= n <= len(chunks)]
    return f"{text}\n\nSources: {'; '.join(labels)}" if labels else text


_SOURCES = re.compile(r"(?:^|\n)Sources:[ \t]*([^\n]*)\s*$")
_ENTRY = re.compile(r"\[(\d+)\]\s+(.*?)\s*(?=;\s*\[\d+\]\s|$)")


class Citation(BaseModel):
    """One ``[n]`` of an answer: the chunk it names (None when none of the chunks given has
    that label), its source, title and retrieval score, and the collection and version (the
    content hash) of the document it came from, when the chunk says (a knowledge base's do):
    what tells later whether the answer's evidence has changed."""

    number: int
    label: str
    chunk_id: str | None = None
    source: str
    title: str | None = None
    score: float | None = None
    collection: str | None = None
    version: str | None = None


def resolve_citations(answer: str | None, chunks: Sequence[Chunk]) -> list[Citation]:
    """The citations of ``answer``'s ``Sources:`` line, each resolved to the first of
    ``chunks`` with its label (in their order, so pass the best-ranked first)."""
    if not answer:
        return []
    line = _SOURCES.search(answer)
    if line is None:
        return []
    by_label: dict[str, Chunk] = {}
    for given in chunks:
        by_label.setdefault(source_label(given), given)
    citations = []
    for number, label in _ENTRY.findall(line.group(1)):
        cited = by_label.get(label)
        if cited is None:
            citations.append(Citation(number=int(number), label=label, source=label))
            continue
        title = cited.metadata.get("title")
        collection = cited.metadata.get("collection")
        version = cited.metadata.get("document_version")
        citations.append(
            Citation(
                number=int(number),
                label=label,
                chunk_id=cited.id,
                source=cited.source,
                title=title if isinstance(title, str) else None,
                score=round(cited.score, 6),
                collection=collection if isinstance(collection, str) else None,
                version=version if isinstance(version, str) else None,
            )
        )
    return citations


def citation_refs(answer: str | None, chunks: Sequence[Chunk]) -> list[dict[str, object]]:
    """:func:`resolve_citations` as plain data, for events."""
    return [c.model_dump() for c in resolve_citations(answer, chunks)]
