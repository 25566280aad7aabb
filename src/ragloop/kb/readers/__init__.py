"""Readers: turn a file's text into a title and a list of structural blocks.

Every format becomes the same shape, so one chunker serves them all: headings (with a level),
text paragraphs, and records (a row of a CSV, an item of a JSON list, a line of a JSONL file).
Readers raise :class:`~ragloop.ReadError` with a reason a person understands; ingestion records
it in the report's ``skipped`` list and goes on.

``blocks.py`` holds the shapes every reader returns; ``text.py`` markdown, plain text and rst;
``html.py`` HTML pages; ``data.py`` JSON, JSONL, CSV and PDF. This module maps a file's suffix to
its reader.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ragloop.core.errors import ReadError as ReadError
from ragloop.kb.readers.blocks import Block as Block
from ragloop.kb.readers.blocks import BlockKind as BlockKind
from ragloop.kb.readers.blocks import ParsedDocument as ParsedDocument
from ragloop.kb.readers.blocks import table_header as table_header
from ragloop.kb.readers.blocks import title_from_name as title_from_name
from ragloop.kb.readers.data import MAX_RECORDS as MAX_RECORDS
from ragloop.kb.readers.data import read_csv as read_csv
from ragloop.kb.readers.data import read_json as read_json
from ragloop.kb.readers.data import read_jsonl as read_jsonl
from ragloop.kb.readers.data import read_pdf_bytes as read_pdf_bytes
from ragloop.kb.readers.data import record_block as record_block
from ragloop.kb.readers.html import read_html as read_html
from ragloop.kb.readers.text import markdown_blocks as markdown_blocks
from ragloop.kb.readers.text import read_markdown as read_markdown
from ragloop.kb.readers.text import read_plain_text as read_plain_text
from ragloop.kb.readers.text import read_rst as read_rst

TextReader = Callable[[str, Path], ParsedDocument]

TEXT_READERS: dict[str, TextReader] = {
    ".txt": read_plain_text,
    ".md": read_markdown,
    ".markdown": read_markdown,
    ".rst": read_rst,
    ".html": read_html,
    ".htm": read_html,
    ".json": read_json,
    ".jsonl": read_jsonl,
    ".csv": read_csv,
}
BINARY_READERS = {".pdf": read_pdf_bytes}
SUPPORTED_SUFFIXES = frozenset(TEXT_READERS) | frozenset(BINARY_READERS)
