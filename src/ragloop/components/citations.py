"""An answer's citations resolved to the chunks they name.

ragloop's generators write answers as sentences with ``[n]`` markers followed by a line
``Sources: [1] returns.md (Refunds); [2] ...`` (see :mod:`ragloop.components.generators`). The
numbers are the generator's own (the extractive generator numbers the chunks it cites, an LLM
the chunks of its prompt), so citations are resolved through the labels of that line, which
name each chunk the same way whoever wrote them: :func:`resolve_citations` finds the chunk
behind each label among the chunks the answer was drawn from.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from pydantic import BaseModel

from ragloop.components.generators import source_label
from ragloop.core.records import Chunk

_SOURCES = re.compile(r"(?:^|\n)Sources:[ \t]*([^\n]*)\s*$")
_ENTRY = re.compile(r"\[(\d+)\]\s+(.*?)\s*(?=;\s*\[\d+\]\s|$)")


class Citation(BaseModel):
    """One ``[n]`` of an answer: the chunk it names (None when none of the chunks given has
    that label), its source, title and retrieval score."""

    number: int
    label: str
    chunk_id: str | None = None
    source: str
    title: str | None = None
    score: float | None = None


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
        citations.append(
            Citation(
                number=int(number),
                label=label,
                chunk_id=cited.id,
                source=cited.source,
                title=title if isinstance(title, str) else None,
                score=round(cited.score, 6),
            )
        )
    return citations


def citation_refs(answer: str | None, chunks: Sequence[Chunk]) -> list[dict[str, object]]:
    """:func:`resolve_citations` as plain data, for events."""
    return [c.model_dump() for c in resolve_citations(answer, chunks)]
