"""Readers of data: JSON, JSONL and CSV (a record a block) and PDF (the text of each page).
Readers raise :class:`~ragloop.ReadError` with a reason a person understands."""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from ragloop.core.errors import ReadError
from ragloop.kb.readers.blocks import Block, ParsedDocument, paragraphs, title_from_name

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
                "ragloop.kb.readers.data.MAX_RECORDS"
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
        for p in paragraphs(page.splitlines())
    ]
    return ParsedDocument(pdf_title or title_from_name(path), blocks, {"pages": len(pages)})
