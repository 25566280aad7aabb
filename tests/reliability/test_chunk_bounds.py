"""Issue 17, item 4: every chunk has a hard size bound, in every language and for text without
spaces.

A 49 MB file holding one token became one 51 MB chunk; 300 kB of base64 and 3,000 CJK
characters without spaces each became one chunk. Chunks are now bounded by
:func:`~ragloop.kb.ingest.chunking.chunk_size` (``max_tokens + min_tokens``), which counts each
character of an unspaced script and at least one token per ``CHARS_PER_TOKEN`` characters, so
no chunk is longer than ``CHARS_PER_TOKEN * (max_tokens + min_tokens)`` characters; and no
character is lost.
"""

from __future__ import annotations

import base64
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ragloop import Document, KnowledgeBase
from ragloop.kb.ingest.chunking import (
    CHARS_PER_TOKEN,
    ChunkingConfig,
    chunk_document,
    chunk_size,
)
from ragloop.kb.readers import Block, ParsedDocument


def _doc(*blocks: Block) -> ParsedDocument:
    return ParsedDocument("t", list(blocks))


def _bounded(chunks, config: ChunkingConfig) -> None:
    limit = config.max_tokens + config.min_tokens
    for chunk in chunks:
        assert chunk_size(chunk.text) <= limit, chunk_size(chunk.text)
        assert len(chunk.text) <= CHARS_PER_TOKEN * limit


def _kept_in_order(source: str, chunks) -> bool:
    """Every non-space character of the source, in order, in the chunks (overlaps repeat
    some, which a subsequence allows)."""
    wanted = iter("".join(c.text for c in chunks).split())
    joined = "".join(wanted)
    position = 0
    for char in "".join(source.split()):
        position = joined.find(char, position)
        if position < 0:
            return False
        position += 1
    return True


CJK = "".join(chr(c) for c in range(0x4E00, 0x4E00 + 3000))
THAI = "".join(random.Random(1).choice("กขคงจฉชซญดตถทนบปผพฟภมยรลวศสหอ") for _ in range(4000))
KANA = "".join(chr(c) for c in range(0x3041, 0x3097)) * 40
BASE64 = base64.b64encode(random.Random(2).randbytes(225_000)).decode()  # 300 kB
ONE_TOKEN = "a" * 2_000_000


@pytest.mark.parametrize(
    "text",
    [CJK, THAI, KANA, BASE64, ONE_TOKEN, "🙂" * 5000, "x" * 100 + " " + CJK + " tail"],
    ids=["cjk", "thai", "kana", "base64", "one-token", "emoji", "mixed"],
)
@pytest.mark.parametrize("kind", ["text", "record", "code"])
def test_text_without_spaces_is_cut_to_the_bound(text, kind):
    config = ChunkingConfig()
    meta = {"code": True} if kind == "code" else {}
    chunks = chunk_document(_doc(Block(kind if kind != "code" else "text", text, meta=meta)))
    assert len(chunks) > 1
    _bounded(chunks, config)
    assert _kept_in_order(text, chunks)


def _single_token_file(tmp_path, size: int) -> None:
    path = tmp_path / "token.txt"
    path.write_text("z" * size)
    kb = KnowledgeBase(tmp_path / "kb.sqlite", embedder=None, max_file_bytes=60_000_000)
    report = kb.ingest(path)
    assert report.added == 1
    sizes = kb.store._conn().execute("SELECT max(length(content)), count(*) FROM chunks")
    longest, count = sizes.fetchone()
    assert longest <= CHARS_PER_TOKEN * (200 + 20)
    assert count >= size // (CHARS_PER_TOKEN * 220)


def test_a_single_token_file_is_bounded_chunks(tmp_path):
    _single_token_file(tmp_path, 5_000_000)


@pytest.mark.fuzz
def test_a_49_mb_single_token_file_is_bounded_chunks(tmp_path):
    _single_token_file(tmp_path, 49_000_000)


def test_cjk_documents_are_stored_in_bounded_chunks(tmp_path):
    kb = KnowledgeBase(tmp_path / "kb.sqlite", embedder=None)
    kb.add_documents([Document(text=CJK, source="cjk.txt")])
    sizes = kb.store._conn().execute("SELECT max(length(content)), count(*) FROM chunks")
    longest, count = sizes.fetchone()
    assert longest <= 220  # one token per ideograph
    assert count >= 3000 // 220


UNSPACED_ALPHABETS = st.sampled_from([CJK[:200], THAI[:60], KANA[:80], "abcXYZ09+/=", "ـبتث"])
texts = st.lists(
    st.one_of(
        st.text(alphabet=st.characters(codec="utf-8", categories=["L", "N", "P", "Zs"])),
        UNSPACED_ALPHABETS.flatmap(lambda a: st.text(alphabet=a, min_size=1, max_size=6000)),
        st.integers(1, 20_000).map(lambda n: "q" * n),
    ),
    min_size=1,
    max_size=6,
)


@settings(max_examples=settings.default.max_examples * 2, deadline=None)
@given(texts, st.integers(16, 300), st.sampled_from(["text", "record", "code", "table"]))
def test_property_every_chunk_is_bounded_and_nothing_is_lost(parts, max_tokens, kind):
    config = ChunkingConfig(max_tokens=max_tokens, overlap=max_tokens // 4, min_tokens=8)
    meta = {"code": True} if kind == "code" else {"table": "a | b"} if kind == "table" else {}
    block_kind = "record" if kind == "record" else "text"
    blocks = [Block(block_kind, p, meta=meta) for p in parts if p.strip()]
    chunks = chunk_document(_doc(*blocks), config)
    _bounded(chunks, config)
    for part in parts:
        assert _kept_in_order(part, chunks)


def test_a_merged_tail_counts_its_separator():
    """A 16-token piece and a 7-token tail merge (23 <= 16 + 8), but the joined text with its
    paragraph separator is 300 characters: 25 tokens by length, over the bound."""
    config = ChunkingConfig(max_tokens=16, overlap=4, min_tokens=8)
    chunks = chunk_document(_doc(Block("text", "0" * 203), Block("text", "1" * 95)), config)
    _bounded(chunks, config)


def test_a_merged_tail_keeps_the_length_bound():
    """A 195-character piece and a 92-character tail: 24 tokens merged, within 16 + 8, but 289
    characters, one over 12 x 24; they stay apart (found by the property test above)."""
    config = ChunkingConfig(max_tokens=16, overlap=4, min_tokens=8)
    chunks = chunk_document(_doc(Block("text", "0" * 195), Block("text", "0" * 92)), config)
    _bounded(chunks, config)
    assert _kept_in_order("0" * 195 + "0" * 92, chunks)
