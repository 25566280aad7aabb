"""The one answer format every generator writes: sentences with ``[n]`` markers, then a
``Sources: [1] returns.md; [2] ...`` line naming the chunks the markers cite.

:func:`strip_citations` gives the bare text back (what evaluators and metrics should read);
:data:`NO_ANSWER` is what a generator says when nothing in the chunks answers, and an
extractive answer that is probably wrong starts with :data:`UNSURE`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

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
