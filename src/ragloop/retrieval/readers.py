"""Readers: turn a file's text into a title and a list of structural blocks.

Every format becomes the same shape, so one chunker serves them all: headings (with a level),
text paragraphs, and records (a row of a CSV, an item of a JSON list, a line of a JSONL file).
Readers raise :class:`ReadError` with a reason a person understands; ingestion records it in the
report's ``skipped`` list and goes on.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ragloop.core.errors import ReadError as ReadError

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


# -- markdown ---------------------------------------------------------------------------------

_ATX = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_FENCE = re.compile(r"^ {0,3}(```|~~~)")
_SETEXT = re.compile(r"^ {0,3}(=+|-+)\s*$")
_FRONT_MATTER = re.compile(r"\A---\s*\n(.*?)\n---\s*\n", re.DOTALL)


def _paragraphs(lines: list[str]) -> Iterable[str]:
    buffer: list[str] = []
    for line in lines:
        if line.strip():
            buffer.append(line.rstrip())
        elif buffer:
            yield "\n".join(buffer)
            buffer = []
    if buffer:
        yield "\n".join(buffer)


_TABLE_RULE = re.compile(r"^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$")


def _table_cells(line: str) -> list[str]:
    cells = line.strip().removeprefix("|").removesuffix("|").split("|")
    return [cell.strip() for cell in cells]


def table_header(cells: list[str]) -> str:
    """A table's header as the readers write it: its cells joined by `` | `` over a markdown
    rule (``Level | Watts`` then ``--- | ---``). The rule is what tells a reader of the chunk
    text (:func:`ragloop.core.text.passage_units`) that the first row is a header; a
    table written without one has none."""
    return " | ".join(cells) + "\n" + " | ".join("---" for _ in cells)


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
        blocks.extend(_text_block(p) for p in _paragraphs(pending))
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
        title_from_name(path), [Block("text", p) for p in _paragraphs(text.splitlines())]
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
        blocks.extend(Block("text", p) for p in _paragraphs(pending))
        pending = []
        if char not in levels:
            levels.append(char)
        blocks.append(Block("heading", title, level=min(levels.index(char) + 1, 6)))
    blocks.extend(Block("text", p) for p in _paragraphs(pending))
    first = next((b.text for b in blocks if b.kind == "heading"), None)
    return ParsedDocument(first or title_from_name(path), blocks)


# -- HTML -------------------------------------------------------------------------------------


def read_html(text: str, path: Path) -> ParsedDocument:
    """The page's main content as written: see :mod:`ragloop.retrieval.html_reader`."""
    from ragloop.retrieval.html_reader import read_html as read_page

    return read_page(text, path)


# -- structured data: JSON, JSONL, CSV -----------------------------------------------------------

_TEXT_FIELDS = (
    "text",
    "content",
    "contents",
    "body",
    "paragraph",
    "paragraph_text",
    "page_content",
    "passage",
    "abstract",
    "description",
)
_TITLE_FIELDS = ("title", "name", "heading", "question")


def _scalar(value: object) -> str:
    if isinstance(value, str):
        return value.strip()
    return json.dumps(value, ensure_ascii=False)


def record_block(record: object, index: int) -> Block:
    """One record as a block: its text field when it has one, else ``key: value`` lines; its
    title field becomes the block's heading (kept in ``meta``)."""
    if not isinstance(record, dict):
        return Block("record", _scalar(record), meta={"record": index})
    lowered = {str(k).lower(): k for k in record}
    title_key = next((lowered[f] for f in _TITLE_FIELDS if f in lowered), None)
    text_key = next((lowered[f] for f in _TEXT_FIELDS if f in lowered), None)
    title = _scalar(record[title_key]) if title_key is not None else ""
    if text_key is not None:
        value = record[text_key]
        body = " ".join(map(_scalar, value)) if isinstance(value, list) else _scalar(value)
    else:
        body = "\n".join(
            f"{k}: {_scalar(v)}"
            for k, v in record.items()
            if k != title_key and v not in ("", None)
        )
    meta: dict[str, Any] = {"record": index}
    if title:
        meta["title"] = title
    return Block("record", body, meta=meta)


# Records (CSV rows, JSON items, JSONL lines) a file may hold: each becomes at least one chunk,
# and the chunks of a file are written in one transaction, so this bounds the memory an ingest
# takes (about 3.5 kB a chunk with its vector). Raise it to ingest bigger files.
MAX_RECORDS = 100_000


def _records_document(records: Iterable[object], path: Path, fmt: str) -> ParsedDocument:
    """The records as blocks, read one at a time (a file over MAX_RECORDS is refused before
    the rest is read)."""
    blocks: list[Block] = []
    count = 0
    for index, record in enumerate(records):
        if index >= MAX_RECORDS:
            raise ReadError(
                f"more than {MAX_RECORDS:,} records; split the file, or raise "
                "ragloop.retrieval.readers.MAX_RECORDS"
            )
        count += 1
        block = record_block(record, index)
        if block.text.strip():
            blocks.append(block)
    return ParsedDocument(title_from_name(path), blocks, {"records": count})


_JSON_SPACE = re.compile(r"[ \t\n\r]*")


def _after_space(text: str, position: int) -> int:
    match = _JSON_SPACE.match(text, position)
    return match.end() if match else position


def _json_items(text: str) -> Iterator[object]:
    """The items of a JSON list, decoded one at a time (a huge list is never built whole)."""
    decoder = json.JSONDecoder()
    position = _after_space(text, _after_space(text, 0) + 1)  # past the "["
    closing = text.startswith("]", position)
    while not closing:
        item, position = decoder.raw_decode(text, position)
        yield item
        position = _after_space(text, position)
        closing = text.startswith("]", position)
        if not closing:
            if not text.startswith(",", position):
                raise json.JSONDecodeError("Expecting ',' delimiter", text, position)
            position = _after_space(text, position + 1)
    end = _after_space(text, position + 1)
    if end != len(text):
        raise json.JSONDecodeError("Extra data", text, end)


def read_json(text: str, path: Path) -> ParsedDocument:
    try:
        if text.lstrip(" \t\n\r").startswith("["):
            return _records_document(_json_items(text), path, "json")
        data = json.loads(text)
    except json.JSONDecodeError as error:
        raise ReadError(f"invalid JSON at line {error.lineno}: {error.msg}") from None
    if isinstance(data, list):
        return _records_document(data, path, "json")
    if isinstance(data, dict):
        list_field = next((v for v in data.values() if isinstance(v, list) and v), None)
        if list_field is not None and all(isinstance(r, dict) for r in list_field):
            doc = _records_document(list_field, path, "json")
        else:
            doc = ParsedDocument(title_from_name(path), [record_block(data, 0)])
        title = next((data[k] for k in _TITLE_FIELDS if isinstance(data.get(k), str)), None)
        doc.title = title or doc.title
        return doc
    return ParsedDocument(title_from_name(path), [Block("text", _scalar(data))])


def read_jsonl(text: str, path: Path) -> ParsedDocument:
    bad: list[int] = []

    def records() -> Iterator[object]:
        for number, line in enumerate(io.StringIO(text, newline=None), 1):
            if not line.strip():
                continue
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                bad.append(number)

    doc = _records_document(records(), path, "jsonl")
    if bad and not doc.metadata["records"]:
        raise ReadError(f"no valid JSON line (first bad line: {bad[0]})")
    if bad:
        doc.metadata["bad_lines"] = bad[:20]
    return doc


def read_csv(text: str, path: Path) -> ParsedDocument:
    sample = text[:8192]
    try:
        dialect: type[csv.Dialect] | csv.Dialect = csv.Sniffer().sniff(sample, ",;\t|")
    except csv.Error:
        dialect = csv.excel
    rows = csv.DictReader(io.StringIO(text), dialect=dialect)
    records = (
        {str(k): v for k, v in row.items() if k is not None and v not in (None, "")} for row in rows
    )
    try:
        return _records_document(records, path, "csv")
    except csv.Error as error:
        raise ReadError(f"malformed CSV: {error}") from None


# -- PDF ---------------------------------------------------------------------------------------


def read_pdf_bytes(data: bytes, path: Path) -> ParsedDocument:
    """Text of each page (pypdf, the ``pdf`` extra), paragraphs tagged with their page."""
    try:
        from pypdf import PdfReader
    except ImportError:
        raise ReadError("PDF support needs the pdf extra: pip install 'ragloop[pdf]'") from None
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            raise ReadError("encrypted PDF")
        pages = [page.extract_text() or "" for page in reader.pages]
        info = reader.metadata
        pdf_title = str(info.title).strip() if info and info.title else ""
    except ReadError:
        raise
    except Exception as error:  # pypdf raises many kinds (LimitReachedError, NotImplementedError)
        raise ReadError(f"unreadable PDF: {type(error).__name__}: {error}") from None
    blocks = [
        Block("text", p, meta={"page": number})
        for number, page in enumerate(pages, 1)
        for p in _paragraphs(page.splitlines())
    ]
    return ParsedDocument(pdf_title or title_from_name(path), blocks, {"pages": len(pages)})


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
