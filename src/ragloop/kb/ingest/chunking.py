"""Structure-aware chunking: headings and paragraphs first, a token limit with overlap second.

Paragraphs under the same heading are packed together up to ``max_tokens``; a heading starts a
new chunk; each record (CSV row, JSON item) is its own chunk. Only a paragraph too long for one
chunk is cut, at sentence boundaries where it can be and at word windows otherwise, and those
pieces overlap by ``overlap`` tokens so a fact on a boundary stays whole in one of them. Code
and tables are cut between lines instead, never inside one that fits, and every piece of a
table with a header row starts with it (and the rule under it); a table without one is cut
into rows alone.
Every chunk keeps its heading path, its position in the document and its page or record number.

Sizes are measured by :func:`chunk_size`, which counts every character of a script written
without spaces (Chinese, Japanese, Thai, ...) as a token and never less than a token per
``CHARS_PER_TOKEN`` characters, so the bound holds in every language and for text without
spaces (base64, a minified file, one 50 MB "word"): such text is cut between characters. No
chunk is larger than ``max_tokens + min_tokens`` by that measure (a small tail may merge into
the chunk before it), hence never longer than ``CHARS_PER_TOKEN`` times that in characters.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ragloop.core.errors import ConfigError
from ragloop.core.text import split_sentences
from ragloop.kb.readers import Block, ParsedDocument

_WORDS = re.compile(r"\S+")
# scripts written without spaces between words: Thai, Lao, Myanmar, Khmer, CJK radicals and
# punctuation, kana, bopomofo, ideographs (with the extensions and compatibility forms)
_UNSPACED = (
    "\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff\u2e80-\u2fdf\u3000-\u303f\u3040-\u30ff"
    "\u3100-\u312f\u3190-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003134f"
)
_MEASURE = re.compile(rf"[{_UNSPACED}]|[^\W{_UNSPACED}]+|[^\w\s]")
SEPARATOR = "\n\n"  # between the paragraphs of a chunk
CHARS_PER_TOKEN = 12  # longer runs count as more than one token (English averages about 5)


def chunk_size(text: str) -> int:
    """The size chunking bounds: words and punctuation marks (as ``count_tokens`` counts
    them), each character of an unspaced script, and at least one per ``CHARS_PER_TOKEN``
    characters."""
    marks = len(_MEASURE.findall(text))
    return max(marks, len(text) // CHARS_PER_TOKEN)


@dataclass(frozen=True)
class ChunkingConfig:
    """``max_tokens`` per chunk (estimated: words and punctuation), ``overlap`` between the pieces
    of a cut paragraph, and ``min_tokens``: a smaller tail merges into the chunk before it."""

    max_tokens: int = 200
    overlap: int = 40
    min_tokens: int = 20

    def __post_init__(self) -> None:
        if self.max_tokens < 16:
            raise ConfigError("max_tokens", f"must be >= 16, got {self.max_tokens}")
        if not 0 <= self.overlap < self.max_tokens // 2:
            raise ConfigError("overlap", f"must be in [0, max_tokens / 2), got {self.overlap}")
        if not 0 <= self.min_tokens < self.max_tokens:
            raise ConfigError("min_tokens", f"must be in [0, max_tokens), got {self.min_tokens}")


@dataclass
class DraftChunk:
    """A chunk before it is stored: its text, heading path and where it came from."""

    text: str
    heading_path: list[str]
    position: int = 0
    meta: dict[str, Any] = field(default_factory=dict)


def _windows(text: str, config: ChunkingConfig) -> Iterator[str]:
    """Cut an over-long paragraph: whole sentences packed up to the limit, and word windows
    with overlap for a sentence that is itself too long."""
    sentences = split_sentences(text) or [text]
    buffer: list[str] = []
    size = 0
    for sentence in sentences:
        tokens = chunk_size(sentence)
        if tokens > config.max_tokens:
            if buffer:
                yield " ".join(buffer)
                buffer, size = [], 0
            yield from _word_windows(sentence, config)
            continue
        if size + tokens > config.max_tokens and buffer:
            yield " ".join(buffer)
            # carry whole trailing sentences worth up to `overlap` tokens into the next piece
            carried: list[str] = []
            carried_size = 0
            for previous in reversed(buffer):
                cost = chunk_size(previous)
                if carried_size + cost > config.overlap:
                    break
                carried.insert(0, previous)
                carried_size += cost
            buffer, size = carried, carried_size
        buffer.append(sentence)
        size += tokens
    if buffer:
        yield " ".join(buffer)


def _word_windows(text: str, config: ChunkingConfig) -> Iterator[str]:
    """Windows of whole words up to ``max_tokens``, overlapping by up to ``overlap``; a word
    too large for a window (a run of an unspaced script, base64) is cut between characters."""
    units = [
        (piece, chunk_size(piece))
        for word in _WORDS.findall(text)
        for piece in _cut(word, config.max_tokens)
    ]
    start = 0
    while start < len(units):
        end, size = start, 0
        while end < len(units) and (end == start or size + units[end][1] <= config.max_tokens):
            size += units[end][1]
            end += 1
        yield " ".join(piece for piece, _ in units[start:end])
        if end >= len(units):
            break
        carried = 0  # the next window starts with the last `overlap` tokens of this one
        back = end
        while back - 1 > start and carried + units[back - 1][1] <= config.overlap:
            back -= 1
            carried += units[back][1]
        start = back


def _cut(word: str, limit: int) -> Iterator[str]:
    """``word`` in pieces of at most ``limit`` by :func:`chunk_size`: slices short enough by
    their length, halved again where an unspaced script makes them count more."""
    if chunk_size(word) <= limit:
        yield word
        return
    width = max(1, limit * CHARS_PER_TOKEN)
    for start in range(0, len(word), width):
        piece = word[start : start + width]
        while chunk_size(piece) > limit:
            half = max(1, len(piece) // 2)
            yield from _cut(piece[:half], limit)
            piece = piece[half:]
        if piece:
            yield piece


def chunk_document(doc: ParsedDocument, config: ChunkingConfig | None = None) -> list[DraftChunk]:
    """Chunk a parsed document; positions are 0-based and consecutive."""
    config = config or ChunkingConfig()
    chunks: list[DraftChunk] = []
    headings: list[tuple[int, str]] = []
    section: list[Block] = []

    def path() -> list[str]:
        return [text for _, text in headings]

    def flush() -> None:
        chunks.extend(_pack(section, path(), config))
        section.clear()

    for block in doc.blocks:
        if block.kind == "heading":
            flush()
            while headings and headings[-1][0] >= block.level:
                headings.pop()
            headings.append((block.level, block.text))
        elif block.kind == "end":
            flush()
            while headings and headings[-1][0] >= block.level:
                headings.pop()
        elif block.kind == "record":
            flush()
            title = block.meta.get("title")
            record_path = [*path(), title] if title else path()
            meta = {k: v for k, v in block.meta.items() if k != "title"}
            for piece, _ in _pieces(block.text, config):
                chunks.append(DraftChunk(piece, record_path, meta=dict(meta)))
        else:
            section.append(block)
    flush()
    for position, chunk in enumerate(chunks):
        chunk.position = position
    return chunks


def _pieces(text: str, config: ChunkingConfig) -> list[tuple[str, int]]:
    """(piece, its chunk_size): measuring is most of chunking's time, so it is done once."""
    text = text.strip()
    size = chunk_size(text)
    if size <= config.max_tokens:
        return [(text, size)] if text else []
    return [(piece, chunk_size(piece)) for piece in _windows(text, config)]


def _block_pieces(block: Block, config: ChunkingConfig) -> list[tuple[str, int]]:
    """A block's text in pieces of at most ``max_tokens`` with their sizes: code and tables
    by lines."""
    if "code" not in block.meta and "table" not in block.meta:
        return _pieces(block.text, config)
    text = block.text.strip("\n")
    if not text.strip():
        return []
    size = chunk_size(text)
    if size <= config.max_tokens:
        return [(text, size)]
    header = block.meta.get("table") or ""  # the header row and its rule: two lines
    lines = text.split("\n")
    header_lines = header.split("\n") if header else []
    if header_lines and lines[: len(header_lines)] == header_lines:
        del lines[: len(header_lines)]
    budget = config.max_tokens - (chunk_size(header) if header else 0)
    if budget < config.max_tokens // 2:  # a header too long to repeat: rows alone
        header, budget = "", config.max_tokens
    pieces: list[str] = []
    part: list[str] = []
    size = 0

    def emit() -> None:
        if any(line.strip() for line in part):
            pieces.append("\n".join([header, *part] if header else part))
        part.clear()

    for line in lines:
        tokens = chunk_size(line)
        if tokens > budget:
            emit()
            size = 0
            pieces.extend(_word_windows(line, config))
            continue
        if part and size + tokens > budget:
            emit()
            size = 0
        part.append(line)
        size += tokens
    emit()
    return [(piece, chunk_size(piece)) for piece in pieces]


def _pack(blocks: list[Block], heading_path: list[str], config: ChunkingConfig) -> list[DraftChunk]:
    """Greedily pack a section's paragraphs into chunks; merge a tiny tail into its neighbour."""
    out: list[DraftChunk] = []
    parts: list[str] = []
    size = 0
    chars = 0  # of the joined text: the separators count towards its length bound too
    meta: dict[str, Any] = {}

    def emit() -> None:
        nonlocal parts, size, chars, meta
        if parts:
            out.append(DraftChunk(SEPARATOR.join(parts), list(heading_path), meta=meta))
        parts, size, chars, meta = [], 0, 0, {}

    for block in blocks:
        for piece, tokens in _block_pieces(block, config):
            page = block.meta.get("page")
            joined = max(size + tokens, (chars + len(SEPARATOR) + len(piece)) // CHARS_PER_TOKEN)
            if parts and (joined > config.max_tokens or meta.get("page", page) != page):
                emit()
            chars += (len(SEPARATOR) if parts else 0) + len(piece)
            parts.append(piece)
            size += tokens
            if page is not None:
                meta.setdefault("page", page)
    emit()
    if len(out) > 1:
        tail, previous = out[-1], out[-2]
        merged = f"{previous.text}{SEPARATOR}{tail.text}"
        limit = config.max_tokens + config.min_tokens
        # chunk_size counts a token per whole CHARS_PER_TOKEN characters: the length bound is
        # checked on its own
        fits = chunk_size(merged) <= limit and len(merged) <= CHARS_PER_TOKEN * limit
        if chunk_size(tail.text) < config.min_tokens and fits and previous.meta == tail.meta:
            previous.text = merged
            out.pop()
    return out


# -- back to a document --------------------------------------------------------------------------

OVERLAP_PROBE = 24  # characters of a chunk's start looked for in the end of the one before


def rejoin(chunks: Sequence[tuple[Sequence[str], str]]) -> str:
    """A document's text again from its chunks in order, each given as (heading path, text):
    a section's headings as Markdown headings where the section starts (the first one, the
    document's title, as ``#``), and the words two pieces of one section share at their cut
    (the overlap the chunker carries) written once."""
    out: list[str] = []
    shown: list[str] = []
    previous = ""
    for path, text in chunks:
        headings = [h for h in path if h.strip()]
        if headings != shown:
            common = 0
            while common < min(len(headings), len(shown)) and headings[common] == shown[common]:
                common += 1
            out.extend(
                f"{'#' * min(depth + 1, 6)} {h}"
                for depth, h in enumerate(headings)
                if depth >= common
            )
            shown, previous = headings, ""
        text = text.strip()
        cut = _overlap(previous, text)
        if text[cut:].strip():
            out.append(text[cut:].strip())
        previous = text
    return "\n\n".join(out) + ("\n" if out else "")


def _overlap(before: str, after: str) -> int:
    """How many characters at the start of ``after`` repeat the end of ``before``."""
    if not before or len(after) < OVERLAP_PROBE:
        return 0
    probe = after[:OVERLAP_PROBE]
    at = before.find(probe)
    while at >= 0:
        tail = before[at:]
        if after.startswith(tail):
            return len(tail)
        at = before.find(probe, at + 1)
    return 0
