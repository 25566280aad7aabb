"""Readers of prose: markdown (headings, fenced code, pipe tables, front matter), plain text
and reStructuredText."""

from __future__ import annotations

import re
from pathlib import Path

from ragloop.kb.readers.blocks import (
    Block,
    ParsedDocument,
    paragraphs,
    table_header,
    title_from_name,
)

_ATX = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_FENCE = re.compile(r"^ {0,3}(```|~~~)")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)\s*$")
_FRONT_MATTER = re.compile(r"\A---\s*\n(.*?)\n---\s*\n", re.DOTALL)


_TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$")


def _table_cells(line: str) -> list[str]:
    cells = line.strip().removeprefix("|").removesuffix("|").split("|")
    return [cell.strip() for cell in cells]


def _text_block(paragraph: str) -> Block:
    """A paragraph, or a pipe table (header, rule, rows) as rows under their header."""
    lines = paragraph.splitlines()
    if len(lines) >= 2 and "|" in lines[0] and _TABLE_RULE.match(lines[1]):
        header = table_header(_table_cells(lines[0]))
        rows = [" | ".join(_table_cells(line)) for line in lines[2:]]
        return Block("text", "\n".join([header, *rows]), meta={"table": header})
    return Block("text", paragraph)


def markdown_blocks(text: str) -> list[Block]:
    """Headings (ATX and setext), fenced code kept verbatim, pipe tables row by row,
    paragraphs split at blank lines."""
    blocks: list[Block] = []
    pending: list[str] = []

    def flush() -> None:
        blocks.extend(_text_block(p) for p in paragraphs(pending))
        pending.clear()

    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if fence := _FENCE.match(line):
            flush()
            end = next(
                (j for j in range(i + 1, len(lines)) if lines[j].strip().startswith(fence[1])),
                len(lines),
            )
            code = "\n".join(lines[i + 1 : end]).strip("\n")
            if code.strip():
                blocks.append(Block("text", code, meta={"code": True}))
            i = end + 1
            continue
        if heading := _ATX.match(line):
            flush()
            if heading[2].strip():
                blocks.append(Block("heading", heading[2].strip(), level=len(heading[1])))
        elif (
            _SETEXT.match(line)
            and pending
            and pending[-1].strip()
            and not (line.strip().startswith("-") and len(line.strip()) < 3)
        ):
            title = pending.pop().strip()
            flush()
            blocks.append(Block("heading", title, level=1 if "=" in line else 2))
        else:
            pending.append(line)
        i += 1
    flush()
    return blocks


def _front_matter_title(text: str) -> tuple[str | None, str]:
    match = _FRONT_MATTER.match(text)
    if not match:
        return None, text
    title = None
    for line in match[1].splitlines():
        key, _, value = line.partition(":")
        if key.strip().lower() == "title" and value.strip():
            title = value.strip().strip("\"'")
    return title, text[match.end() :]


def read_markdown(text: str, path: Path) -> ParsedDocument:
    title, body = _front_matter_title(text)
    blocks = markdown_blocks(body)
    first_h1 = next((b.text for b in blocks if b.kind == "heading" and b.level == 1), None)
    return ParsedDocument(title or first_h1 or title_from_name(path), blocks)


def read_plain_text(text: str, path: Path) -> ParsedDocument:
    return ParsedDocument(
        title_from_name(path), [Block("text", p) for p in paragraphs(text.splitlines())]
    )


# -- reStructuredText ---------------------------------------------------------------------------

_RST_UNDERLINE = re.compile(r"^([=\-`:'\"~^_*+#<>.])\1{2,}\s*$")


def read_rst(text: str, path: Path) -> ParsedDocument:
    """Section titles are lines under- (and optionally over-) lined with punctuation; the order
    in which underline characters first appear gives the levels, as in docutils."""
    lines = text.splitlines()
    levels: list[str] = []
    blocks: list[Block] = []
    pending: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        nxt = lines[i + 1] if i + 1 < len(lines) else ""
        overline = _RST_UNDERLINE.match(line) and i + 2 < len(lines)
        if overline and _RST_UNDERLINE.match(lines[i + 2]) and lines[i + 1].strip():
            title, char, i = lines[i + 1].strip(), line.strip()[0] + "o", i + 3
        elif line.strip() and _RST_UNDERLINE.match(nxt) and len(nxt.strip()) >= len(line.strip()):
            title, char, i = line.strip(), nxt.strip()[0], i + 2
        else:
            if not line.lstrip().startswith(".. "):  # comments and directives are not prose
                pending.append(line)
            i += 1
            continue
        blocks.extend(Block("text", p) for p in paragraphs(pending))
        pending = []
        if char not in levels:
            levels.append(char)
        blocks.append(Block("heading", title, level=min(levels.index(char) + 1, 6)))
    blocks.extend(Block("text", p) for p in paragraphs(pending))
    first = next((b.text for b in blocks if b.kind == "heading"), None)
    return ParsedDocument(first or title_from_name(path), blocks)
