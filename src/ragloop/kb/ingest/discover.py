"""Finding and loading files for ingestion: every failure becomes a reason, never a crash.

:func:`discover` walks the given files and folders (recursively, skipping hidden and VCS
folders, not following symlinks out of a folder); :func:`read_file` reads one file and
:func:`parse_file` decodes and parses it (:func:`load_file` does both), so an unchanged file is
recognised by its :func:`fingerprint` (size and times) or its raw bytes' hash
before any parsing. Problems become ``(path, reason)`` pairs for the report's ``skipped``: a
file or folder that cannot be read, a symlink loop, a name that is not UTF-8 or too long, a
parser that fails in a way nobody foresaw. A folder that cannot be listed is reported too, and
``sync`` never removes what it held (:attr:`Discovery.unread`).
"""

from __future__ import annotations

import codecs
import dataclasses
import errno
import hashlib
import logging
import os
import re
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Literal, TypeVar

from pydantic import BaseModel, Field

from ragloop.core.errors import ReadError
from ragloop.kb.readers import (
    BINARY_READERS,
    SUPPORTED_SUFFIXES,
    TEXT_READERS,
    ParsedDocument,
)
from ragloop.kb.stores.base import DocumentRecord

logger = logging.getLogger("ragloop")
T = TypeVar("T")

SKIPPED_DIRS = frozenset({"__pycache__", "node_modules", "CVS", "_darcs", "venv", ".venv"})
DEFAULT_MAX_FILE_BYTES = 50 * 1024 * 1024
DEFAULT_ENCODINGS = ("cp1252",)

_BOMS = [
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
]


class IngestReport(BaseModel):
    """What an ingest did. ``skipped`` holds ``(path, reason)`` for each file not ingested."""

    added: int = 0
    updated: int = 0
    unchanged: int = 0
    removed: int = 0
    skipped: list[tuple[str, str]] = Field(default_factory=list)
    chunks_added: int = 0
    chunks_embedded: int = 0
    vectors_missing: int = 0  # chunks still without a vector (``vectors="later"``)

    @property
    def documents(self) -> int:
        return self.added + self.updated + self.unchanged


class IngestProgress(BaseModel):
    """Where an ingest stands, given to ``on_progress`` after every file read and every
    batch embedded. Text is read and stored first (``phase="reading"``: keyword search sees
    each document as soon as it is stored), then the chunks without a vector are embedded
    (``phase="embedding"``), then the search indexes are built and saved
    (``phase="indexing"``: at hundreds of thousands of vectors, the approximate-search graph,
    counted in ``vectors_indexed`` of ``vectors_to_index``), so the first search finds them
    ready. ``rate`` is files, chunks or vectors per second in the current phase, ``eta_s`` the
    seconds it still needs at that rate (None until there is a rate)."""

    phase: Literal["reading", "embedding", "indexing", "done"]
    files_done: int = 0
    files_total: int = 0
    chunks_stored: int = 0
    chunks_embedded: int = 0
    chunks_to_embed: int = 0
    vectors_indexed: int = 0
    vectors_to_index: int = 0
    source: str = ""
    elapsed_s: float = 0.0
    rate: float = 0.0
    eta_s: float | None = None


class IngestInterrupted(KeyboardInterrupt):
    """Ctrl-C (or another KeyboardInterrupt) stopped an ingest. It is still a
    ``KeyboardInterrupt``; ``report`` says what was saved before it: every document it counts
    as added or updated is in the knowledge base, and ingesting the same paths again resumes
    (those documents are then unchanged and cost nothing)."""

    def __init__(self, report: IngestReport) -> None:
        super().__init__("ingest interrupted")
        self.report = report


class SkipFile(Exception):
    """This file is not ingested; the message is the reason."""


@dataclass(frozen=True)
class Candidate:
    path: Path  # absolute, resolved
    root: Path | None  # the folder it was found in, None for a file given directly


def file_of(document: DocumentRecord) -> Path:
    """The file a stored document was read from: its ``root`` metadata joined with its source
    (a source without a root is a path already, as stored before sources were relative)."""
    root = document.metadata.get("root")
    return Path(str(root)) / document.source if root else Path(document.source)


def _is_hidden(name: str) -> bool:
    return name.startswith(".")


def _inside(path: Path, root: Path) -> bool:
    try:
        path.relative_to(root)
    except ValueError:
        return False
    return True


def printable(path: str | os.PathLike[str]) -> str:
    """A path as text that can always be printed and stored: bytes of a file name that are not
    UTF-8 appear as ``\\xff`` escapes."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def _problem(error: BaseException) -> str:
    """Why a path could not be looked at, for the report."""
    if isinstance(error, RecursionError):  # a RuntimeError too, but no loop
        return "nested too deeply to look at"
    if isinstance(error, RuntimeError) or getattr(error, "errno", None) == errno.ELOOP:
        return "symlink loop"
    if isinstance(error, OSError):
        return f"cannot read: {error.strerror or error}"
    return f"cannot read: {type(error).__name__}: {error}"


@dataclass
class Discovery:
    """What :func:`discover` found: the files to ingest, the paths skipped with a reason, the
    folders walked, and the folders (or files) that could not be read: ``sync`` must keep
    the documents it has from those, since it cannot tell whether they are gone."""

    found: list[Candidate] = dataclasses.field(default_factory=list)
    skipped: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    roots: list[Path] = dataclasses.field(default_factory=list)
    unread: list[Path] = dataclasses.field(default_factory=list)

    def skip(self, path: str | os.PathLike[str], reason: str, *, unread: bool = False) -> None:
        self.skipped.append((printable(path), reason))
        if unread:
            self.unread.append(Path(path))

    def may_remove(self, source: str) -> bool:
        """Whether ``sync`` may remove a document whose file was not found this time."""
        return not any(Path(source).is_relative_to(p) for p in self.unread)


def discover(paths: Sequence[str | os.PathLike[str]]) -> Discovery:
    """Files to ingest, paths skipped with a reason, the folders walked and what was unread."""
    out = Discovery()
    seen: set[Path] = set()

    def consider(path: Path, root: Path | None) -> None:
        if not _utf8(path):
            out.skip(path, "file name is not valid UTF-8")
            return
        if path.is_symlink():
            target = path.resolve()
            if root is not None and not _inside(target, root):
                out.skip(path, f"symlink points outside {root}")
                return
        resolved = path.resolve()
        if resolved in seen:
            return
        seen.add(resolved)
        if (unsupported := unsupported_type(path)) is not None:
            out.skip(path, unsupported)
            return
        out.found.append(Candidate(resolved, root))

    def walk(root: Path) -> None:
        # an explicit stack, not recursion (os.walk recurses on Python 3.11): a folder 1,000
        # levels deep is walked like any other; sorted names, depth first, as os.walk goes
        stack = [root]
        while stack:
            folder = stack.pop()
            listed = _listing(folder, out)
            if listed is None:
                continue
            dirs, files = listed
            kept = []
            for name in dirs:
                sub = folder / name
                try:
                    if sub.is_symlink():
                        if not _inside(sub.resolve(), root):
                            out.skip(sub, f"symlink points outside {root}")
                        continue  # a link inside the root repeats files the walk reaches anyway
                except (OSError, RuntimeError) as error:
                    out.skip(sub, _problem(error), unread=not isinstance(error, RuntimeError))
                    continue
                kept.append(sub)
            for name in files:
                try:
                    consider(folder / name, root)
                except (OSError, RuntimeError) as error:
                    # this file may hold a document: sync must not remove it
                    out.skip(folder / name, _problem(error), unread=True)
            stack.extend(reversed(kept))

    for given in paths:
        path = Path(given).expanduser()
        try:
            if not path.exists() and not path.is_symlink():
                out.skip(path, "no such file or directory")
            elif path.is_symlink() and not path.exists():
                out.skip(path, "broken symlink or symlink loop")
            elif path.is_dir():
                root = path.resolve(strict=True)
                out.roots.append(root)
                walk(root)
            else:
                consider(path, None)
        except (OSError, RuntimeError) as error:
            out.skip(path, _problem(error), unread=True)
    return out


def _listing(folder: Path, out: Discovery) -> tuple[list[str], list[str]] | None:
    """A folder's sub-folders and files to look at (sorted; hidden ones and ``SKIPPED_DIRS``
    left out), or None, reported, when it cannot be listed."""
    dirs, files = [], []
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                if _is_hidden(entry.name):
                    continue
                try:
                    is_dir = entry.is_dir()  # a symlink to a folder too: checked by the caller
                except OSError:
                    is_dir = False
                if not is_dir:
                    files.append(entry.name)
                elif entry.name not in SKIPPED_DIRS:
                    dirs.append(entry.name)
    except OSError as error:
        out.skip(error.filename or folder, f"cannot read folder: {error.strerror}", unread=True)
        return None
    return sorted(dirs), sorted(files)


def _utf8(path: Path) -> bool:
    """File names are stored as text: one whose bytes are not UTF-8 cannot be."""
    try:
        str(path).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _decode(data: bytes, encodings: Iterable[str]) -> tuple[str, str]:
    for bom, name in _BOMS:
        if data.startswith(bom):
            try:
                return data.decode(name), name
            except UnicodeDecodeError as error:  # a BOM, then bytes that are not that encoding
                raise SkipFile(
                    f"cannot decode the text as {name} (its BOM says so): {error.reason}"
                ) from None
    if b"\x00" in data[:8192]:
        raise SkipFile("binary file (contains NUL bytes)")
    tried = ["utf-8"]
    try:
        return data.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        pass
    for name in encodings:
        tried.append(name)
        try:
            return data.decode(name), name
        except (UnicodeDecodeError, LookupError):
            continue
    raise SkipFile(f"cannot decode the text (tried {', '.join(tried)})")


def _looks_binary(text: str) -> bool:
    sample = text[:4096]
    if not sample:
        return False
    controls = sum(1 for ch in sample if ord(ch) < 32 and ch not in "\n\r\t\f\v")
    return controls / len(sample) > 0.1


@dataclass(frozen=True)
class LoadedFile:
    document: ParsedDocument
    raw_hash: str
    metadata: dict[str, object]


def check_size(size: int, max_bytes: int) -> None:
    """:class:`SkipFile` for content over ``max_bytes`` or empty."""
    if size > max_bytes:
        raise SkipFile(
            f"file is {size / 1e6:.1f} MB, over the {max_bytes / 1e6:.1f} MB limit (max_file_bytes)"
        )
    if size == 0:
        raise SkipFile("empty file")


def unsupported_type(path: Path) -> str | None:
    """Why a file of this name is not read (its suffix is none ragloop reads), else None."""
    if path.suffix.lower() in SUPPORTED_SUFFIXES:
        return None
    return f"unsupported file type {f'{path.suffix!r}' if path.suffix else 'without an extension'}"


READ_PIECE = 1 << 20  # what a file that grows while it is read is read on by


def _read_at_most(file: BinaryIO, limit: int, *, first: int) -> bytes:
    """Up to ``limit`` bytes of ``file``: ``first`` (its size and one byte, so a file that
    did not change is one read), then pieces, so a file growing while it is read (a log being
    written) never costs more than the limit, and a small file never costs a buffer of the
    limit's size."""
    data = bytearray(file.read(min(first, limit)))
    while len(data) < limit and (piece := file.read(min(READ_PIECE, limit - len(data)))):
        data += piece
    return bytes(data)


def read_file(path: Path, *, max_bytes: int) -> bytes:
    """A file's bytes, or :class:`SkipFile` with the reason (too big, empty, unreadable); never
    more than ``max_bytes + 1`` bytes are read."""
    try:
        status = path.stat()
    except OSError as error:
        raise SkipFile(f"cannot read: {error.strerror or error}") from None
    if not stat.S_ISREG(status.st_mode):  # a pipe or a device: opening it could block forever
        raise SkipFile("not a regular file")
    size = status.st_size
    if size > max_bytes:  # known too big: not even opened
        check_size(size, max_bytes)
    try:
        with open(path, "rb") as file:
            data = _read_at_most(file, max_bytes + 1, first=size + 1)
    except PermissionError:
        raise SkipFile("permission denied") from None
    except OSError as error:
        raise SkipFile(f"cannot read: {error.strerror or error}") from None
    if len(data) > max_bytes:
        raise SkipFile(
            f"file grew past the {max_bytes / 1e6:.1f} MB limit (max_file_bytes) while it was read"
        )
    check_size(len(data), max_bytes)
    return data


def parse_file(data: bytes, path: Path, *, encodings: Sequence[str]) -> LoadedFile:
    """Decode and parse a file's bytes, or raise :class:`SkipFile` with the reason."""
    suffix = path.suffix.lower()
    metadata: dict[str, object] = {"format": suffix.lstrip("."), "bytes": len(data)}
    try:
        if suffix in BINARY_READERS:
            document = BINARY_READERS[suffix](data, path)
        else:
            text, encoding = _decode(data, encodings)
            if _looks_binary(text):
                raise SkipFile("binary file (mostly control characters)")
            metadata["encoding"] = encoding
            document = TEXT_READERS[suffix](text, path)
    except (ReadError, SkipFile) as error:
        raise SkipFile(str(error)) from None
    except RecursionError:
        raise SkipFile("too deeply nested to parse") from None
    except Exception as error:  # a parser failing in a way nobody foresaw skips this file only
        # the reason is the skip's, in the report; the traceback only for who asks for it
        logger.debug("could not parse %s", printable(path), exc_info=True)
        raise SkipFile(f"could not parse: {type(error).__name__}: {error}") from None
    if not any(block.text.strip() for block in document.blocks):
        raise SkipFile("no text found")
    metadata.update(document.metadata)
    return LoadedFile(document, raw_hash(data), metadata)


def load_file(path: Path, *, max_bytes: int, encodings: Sequence[str]) -> LoadedFile:
    """Read, decode and parse one file, or raise :class:`SkipFile` with the reason."""
    return parse_file(read_file(path, max_bytes=max_bytes), path, encodings=encodings)


def raw_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def fingerprint(path: Path) -> dict[str, int] | None:
    """What says a file is unchanged without reading it: its size, modification time and
    status-change time (which a ``chmod`` changes: a file made unreadable is read again, and
    reported), or None when it cannot be looked at (loading it then says why)."""
    try:
        status = path.stat()
    except OSError:
        return None
    return {
        "bytes": status.st_size,
        "mtime_ns": status.st_mtime_ns,
        "ctime_ns": status.st_ctime_ns,
    }


_SURROGATE = re.compile("[\ud800-\udfff]")


def storable(value: T) -> T:
    """``value`` with every lone UTF-16 surrogate (a JSON ``"\\ud800"`` escape, a file name
    decoded with ``surrogateescape``) replaced by U+FFFD: such text cannot be encoded as UTF-8,
    so it could be neither stored nor embedded. Walks dicts, lists and tuples."""
    if isinstance(value, str):
        return value if value.isascii() else _SURROGATE.sub("\ufffd", value)  # type: ignore[return-value]
    if isinstance(value, dict):
        return {storable(k): storable(v) for k, v in value.items()}  # type: ignore[return-value]
    if isinstance(value, list | tuple):
        return type(value)(storable(v) for v in value)
    return value


def storable_document(document: ParsedDocument) -> ParsedDocument:
    """A parsed document whose title, blocks and metadata can all be stored (see
    :func:`storable`)."""
    return ParsedDocument(
        storable(document.title),
        [
            dataclasses.replace(block, text=storable(block.text), meta=storable(block.meta))
            for block in document.blocks
        ],
        storable(document.metadata),
    )
