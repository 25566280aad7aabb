"""Readers for every supported format, and the structure-aware chunker."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragloop.core.errors import ConfigError
from ragloop.core.text import count_tokens
from ragloop.kb.ingest.chunking import ChunkingConfig, chunk_document, chunk_size
from ragloop.kb.readers import (
    Block,
    ParsedDocument,
    ReadError,
    read_csv,
    read_json,
    read_jsonl,
    read_markdown,
    read_pdf_bytes,
    read_plain_text,
    read_rst,
)

P = Path("notes/refund-policy_v2.md")


def texts(doc: ParsedDocument, kind: str | None = None) -> list[str]:
    return [b.text for b in doc.blocks if kind is None or b.kind == kind]


def test_markdown_headings_paragraphs_and_code_fences():
    doc = read_markdown(
        "---\ntitle: Refunds\n---\n# Refund policy\n\nFirst para\nstill first.\n\n"
        "## Exceptions\n\nSale items.\n\n```python\nprint('# not a heading')\n\nx = 1\n```\n"
        "Setext heading\n--------------\nBody.\n",
        P,
    )
    assert doc.title == "Refunds"  # front matter wins over the first heading
    assert [(b.kind, b.level, b.text) for b in doc.blocks] == [
        ("heading", 1, "Refund policy"),
        ("text", 0, "First para\nstill first."),
        ("heading", 2, "Exceptions"),
        ("text", 0, "Sale items."),
        ("text", 0, "print('# not a heading')\n\nx = 1"),
        ("heading", 2, "Setext heading"),
        ("text", 0, "Body."),
    ]


def test_plain_text_title_from_file_name():
    doc = read_plain_text("one\n\n\ntwo\nlines\n", P)
    assert doc.title == "refund policy v2"
    assert texts(doc) == ["one", "two\nlines"]


def test_rst_section_levels_follow_underline_order():
    doc = read_rst(
        "=====\nGuide\n=====\n\nIntro.\n\nSetup\n-----\n\nSteps.\n\n.. note:: hidden\n\n"
        "Detail\n~~~~~~\n\nMore.\n",
        P,
    )
    headings = [(b.level, b.text) for b in doc.blocks if b.kind == "heading"]
    assert headings == [(1, "Guide"), (2, "Setup"), (3, "Detail")]
    assert "hidden" not in doc.text
    assert doc.title == "Guide"


def test_json_list_of_records_and_object():
    doc = read_json(json.dumps([{"title": "A", "text": "alpha"}, {"name": "B", "x": 1}]), P)
    assert [(b.kind, b.text, b.meta.get("title")) for b in doc.blocks] == [
        ("record", "alpha", "A"),
        ("record", "x: 1", "B"),
    ]
    doc = read_json(json.dumps({"title": "Doc", "items": [{"text": "one"}, {"text": "two"}]}), P)
    assert doc.title == "Doc"
    assert texts(doc) == ["one", "two"]
    with pytest.raises(ReadError, match="invalid JSON at line 1"):
        read_json("{oops", P)


def test_jsonl_skips_bad_lines_and_rejects_files_with_none_good():
    doc = read_jsonl('{"title": "T", "paragraph_text": "p"}\nnot json\n{"text": "q"}\n', P)
    assert texts(doc) == ["p", "q"]
    assert doc.metadata["bad_lines"] == [2]
    with pytest.raises(ReadError, match="no valid JSON line"):
        read_jsonl("nope\nnope\n", P)


def test_csv_rows_become_records():
    doc = read_csv("name;price;notes\nRidgeline;249;light\nBasecamp;399;\n", P)
    assert texts(doc) == ["price: 249\nnotes: light", "price: 399"]
    assert [b.meta["title"] for b in doc.blocks] == ["Ridgeline", "Basecamp"]


def make_pdf(pages: list[str]) -> bytes:
    """A minimal valid PDF with one Helvetica text line per page (offsets computed)."""
    objects = ["<< /Type /Catalog /Pages 2 0 R >>"]
    kids = " ".join(f"{3 + 2 * i} 0 R" for i in range(len(pages)))
    objects.append(f"<< /Type /Pages /Kids [{kids}] /Count {len(pages)} >>")
    font = 3 + 2 * len(pages)
    for i, text in enumerate(pages):
        stream = f"BT /F1 12 Tf 72 720 Td ({text}) Tj ET".encode()
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {4 + 2 * i} 0 R "
            f"/Resources << /Font << /F1 {font} 0 R >> >> >>"
        )
        objects.append(f"<< /Length {len(stream)} >>\nstream\n{stream.decode()}\nendstream")
    objects.append("<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    out = b"%PDF-1.4\n"
    offsets = []
    for number, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n{body}\nendobj\n".encode()
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{o:010d} 00000 n \n".encode() for o in offsets)
    out += (
        f"trailer\n<< /Size {len(objects) + 1} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n".encode()
    )
    return out


def test_pdf_pages_become_paragraphs_with_page_numbers():
    doc = read_pdf_bytes(make_pdf(["Tents weigh 1.4 kg.", "Stoves burn gas."]), Path("gear.pdf"))
    assert doc.title == "gear"
    assert [(b.text, b.meta["page"]) for b in doc.blocks] == [
        ("Tents weigh 1.4 kg.", 1),
        ("Stoves burn gas.", 2),
    ]
    with pytest.raises(ReadError, match="unreadable PDF"):
        read_pdf_bytes(b"%PDF-1.4 garbage", Path("bad.pdf"))


# -- chunking -----------------------------------------------------------------------------------


def doc_of(*blocks: Block) -> ParsedDocument:
    return ParsedDocument("T", list(blocks))


def test_paragraphs_pack_under_their_heading_and_headings_start_chunks():
    doc = doc_of(
        Block("heading", "A", 1),
        Block("text", "one two three."),
        Block("text", "four five."),
        Block("heading", "B", 2),
        Block("text", "six."),
        Block("heading", "C", 1),
        Block("text", "seven."),
    )
    chunks = chunk_document(doc, ChunkingConfig(max_tokens=50, overlap=5, min_tokens=0))
    assert [(c.text, c.heading_path, c.position) for c in chunks] == [
        ("one two three.\n\nfour five.", ["A"], 0),
        ("six.", ["A", "B"], 1),
        ("seven.", ["C"], 2),
    ]


def test_long_paragraphs_are_cut_at_sentences_with_overlap():
    sentences = [f"Sentence number {i} talks about tents." for i in range(40)]
    doc = doc_of(Block("text", " ".join(sentences)))
    config = ChunkingConfig(max_tokens=40, overlap=10, min_tokens=0)
    chunks = chunk_document(doc, config)
    assert len(chunks) > 1
    assert all(count_tokens(c.text) <= config.max_tokens for c in chunks)
    for before, after in itertools.pairwise(chunks):
        assert before.text.split(". ")[-1].rstrip(".") in after.text  # overlap carries a sentence
    covered = " ".join(c.text for c in chunks)
    assert all(s in covered for s in sentences)


def test_a_sentence_longer_than_the_limit_is_cut_into_word_windows():
    words = " ".join(f"w{i}" for i in range(300))
    chunks = chunk_document(doc_of(Block("text", words)), ChunkingConfig(max_tokens=64, overlap=16))
    assert len(chunks) >= 5
    assert all(count_tokens(c.text) <= 64 for c in chunks)
    assert chunks[1].text.split()[0] in chunks[0].text.split()  # windows overlap


def test_records_are_chunks_of_their_own_with_their_title_in_the_heading_path():
    doc = doc_of(
        Block("heading", "Gear", 1),
        Block("record", "x: 1", meta={"record": 0, "title": "Tent"}),
        Block("record", "y: 2", meta={"record": 1}),
    )
    chunks = chunk_document(doc)
    assert [(c.text, c.heading_path, c.meta) for c in chunks] == [
        ("x: 1", ["Gear", "Tent"], {"record": 0}),
        ("y: 2", ["Gear"], {"record": 1}),
    ]


def test_pages_do_not_share_a_chunk_and_keep_their_number():
    doc = doc_of(Block("text", "a.", meta={"page": 1}), Block("text", "b.", meta={"page": 2}))
    chunks = chunk_document(doc, ChunkingConfig(min_tokens=0))
    assert [(c.text, c.meta) for c in chunks] == [("a.", {"page": 1}), ("b.", {"page": 2})]


def test_a_tiny_tail_merges_into_the_previous_chunk():
    doc = doc_of(Block("text", "word " * 30), Block("text", "tail."))
    chunks = chunk_document(doc, ChunkingConfig(max_tokens=32, overlap=4, min_tokens=8))
    assert len(chunks) == 1
    assert chunks[0].text.endswith("tail.")


@pytest.mark.parametrize(
    ("field", "values"),
    [
        ("max_tokens", {"max_tokens": 8}),
        ("overlap", {"overlap": 150}),
        ("min_tokens", {"min_tokens": 500}),
    ],
)
def test_bad_chunking_config(field, values):
    with pytest.raises(ConfigError, match=field):
        ChunkingConfig(**values)


prose = st.lists(
    st.text(alphabet=st.characters(codec="utf-8", categories=["L", "N", "P", "Zs"]), max_size=400),
    min_size=1,
    max_size=12,
)


@settings(max_examples=150, deadline=None)
@given(prose, st.integers(16, 120))
def test_property_chunks_respect_the_limit_and_lose_no_word(paragraphs, max_tokens):
    config = ChunkingConfig(max_tokens=max_tokens, overlap=max_tokens // 4, min_tokens=0)
    doc = doc_of(*(Block("text", p) for p in paragraphs if p.strip()))
    chunks = chunk_document(doc, config)
    assert [c.position for c in chunks] == list(range(len(chunks)))
    for chunk in chunks:
        assert count_tokens(chunk.text) <= max_tokens * 1.4  # word windows count words, not marks
    # a word larger than a chunk (a long run of an unspaced script) is cut: the others are whole
    source_words = [w for p in paragraphs for w in p.split() if chunk_size(w) <= max_tokens]
    chunk_words = {w for c in chunks for w in c.text.split()}
    assert all(w in chunk_words for w in source_words)
