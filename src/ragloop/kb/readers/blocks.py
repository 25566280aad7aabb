"""What every reader returns: a :class:`ParsedDocument`, a title and its structural
:class:`Block` s (headings with a level, text paragraphs, records), so one chunker serves every
format; and the small rules readers share (a title from a file name, paragraphs from lines, a
table's header row)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

BlockKind = Literal["heading", "text", "record", "end"]


@dataclass(frozen=True)
class Block:
    """A structural unit of a document.

    ``heading`` blocks have a ``level`` (1 and up: an API signature sits one level below the
    heading it is documented under); an ``end`` block closes the section opened by the heading
    of its ``level``, so what follows is back under the heading above. ``meta["code"]`` marks
    code kept verbatim, ``meta["table"]`` a table given row by row (its value is the header
    row with the rule under it, :func:`table_header`, "" when the table has no header row):
    the chunker cuts both between lines, never inside one, and starts every piece of a table
    with its header.
    """

    kind: BlockKind
    text: str
    level: int = 0
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class ParsedDocument:
    title: str
    blocks: list[Block]
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def text(self) -> str:
        return "\n\n".join(b.text for b in self.blocks if b.text)


def title_from_name(path: Path) -> str:
    """A readable title from a file name: ``refund-policy_v2.md`` -> ``refund policy v2``."""
    return re.sub(r"[_\-]+", " ", path.stem).strip() or path.name


def paragraphs(lines: list[str]) -> Iterable[str]:
    """The paragraphs of ``lines``: runs of non-blank lines, right-stripped."""
    buffer: list[str] = []
    for line in lines:
        if line.strip():
            buffer.append(line.rstrip())
        elif buffer:
            yield "\n".join(buffer)
            buffer = []
    if buffer:
        yield "\n".join(buffer)


def table_header(cells: list[str]) -> str:
    """A table's header as the readers write it: its cells joined by `` | `` over a markdown
    rule (``Level | Watts`` then ``--- | ---``). The rule is what tells a reader of the chunk
    text (:func:`ragloop.core.text.passage_units`) that the first row is a header; a
    table written without one has none."""
    return " | ".join(cells) + "\n" + " | ".join("---" for _ in cells)
