"""Finding and loading files for ingestion: every failure becomes a reason, never a crash.

:func:`discover` walks the given files and folders (recursively, skipping hidden and VCS
folders, not following symlinks out of a folder); :func:`load_file` reads, decodes and parses
one file. Both report problems as ``(path, reason)`` pairs for the ingest report's ``skipped``.
"""

from __future__ import annotations

import codecs
import hashlib
import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, Field

from ragloop.retrieval.readers import (
    BINARY_READERS,
    SUPPORTED_SUFFIXES,
    TEXT_READERS,
    ParsedDocument,
    ReadError,
)
from ragloop.retrieval.store import DocumentRecord

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

    @property
    def documents(self) -> int:
        return self.added + self.updated + self.unchanged


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


def source_of(candidate: Candidate) -> tuple[str, Path]:
    """A file's source and the folder it is relative to: its path within the folder given
    (``/`` separators), or its name when the file was given by itself."""
    root = candidate.root or candidate.path.parent
    return candidate.path.relative_to(root).as_posix(), root


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


def discover(
    paths: Sequence[str | os.PathLike[str]],
) -> tuple[list[Candidate], list[tuple[str, str]], list[Path]]:
    """Files to ingest, files skipped with a reason, and the folders walked (for sync)."""
    found: list[Candidate] = []
    skipped: list[tuple[str, str]] = []
    roots: list[Path] = []
    seen: set[Path] = set()

    def consider(path: Path, root: Path | None) -> None:
        if path.is_symlink():
            target = path.resolve()
            if root is not None and not _inside(target, root):
                skipped.append((str(path), f"symlink points outside {root}"))
                return
        resolved = path.resolve()
        if resolved in seen:
            return
        seen.add(resolved)
        if path.suffix.lower() not in SUPPORTED_SUFFIXES:
            kind = f"'{path.suffix}'" if path.suffix else "without an extension"
            skipped.append((str(path), f"unsupported file type {kind}"))
            return
        found.append(Candidate(resolved, root))

    for given in paths:
        path = Path(given).expanduser()
        if not path.exists() and not path.is_symlink():
            skipped.append((str(path), "no such file or directory"))
        elif path.is_symlink() and not path.exists():
            skipped.append((str(path), "broken symlink"))
        elif path.is_dir():
            root = path.resolve()
            roots.append(root)
            for folder, dirs, files in os.walk(root):
                current = Path(folder)
                kept = []
                for name in sorted(dirs):
                    sub = current / name
                    if _is_hidden(name) or name in SKIPPED_DIRS:
                        continue
                    if sub.is_symlink():
                        if not _inside(sub.resolve(), root):
                            skipped.append((str(sub), f"symlink points outside {root}"))
                        continue  # a link inside the root repeats files the walk reaches anyway
                    kept.append(name)
                dirs[:] = kept
                for name in sorted(files):
                    if not _is_hidden(name):
                        consider(current / name, root)
        else:
            consider(path, None)
    return found, skipped, roots


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


def load_file(path: Path, *, max_bytes: int, encodings: Sequence[str]) -> LoadedFile:
    """Read, decode and parse one file, or raise :class:`SkipFile` with the reason."""
    try:
        size = path.stat().st_size
    except OSError as error:
        raise SkipFile(f"cannot read: {error.strerror or error}") from None
    if size > max_bytes:
        raise SkipFile(
            f"file is {size / 1e6:.1f} MB, over the {max_bytes / 1e6:.1f} MB limit (max_file_bytes)"
        )
    if size == 0:
        raise SkipFile("empty file")
    try:
        data = path.read_bytes()
    except PermissionError:
        raise SkipFile("permission denied") from None
    except OSError as error:
        raise SkipFile(f"cannot read: {error.strerror or error}") from None
    suffix = path.suffix.lower()
    metadata: dict[str, object] = {"format": suffix.lstrip("."), "bytes": size}
    try:
        if suffix in BINARY_READERS:
            document = BINARY_READERS[suffix](data, path)
        else:
            text, encoding = _decode(data, encodings)
            if _looks_binary(text):
                raise SkipFile("binary file (mostly control characters)")
            metadata["encoding"] = encoding
            document = TEXT_READERS[suffix](text, path)
    except ReadError as error:
        raise SkipFile(str(error)) from None
    except RecursionError:
        raise SkipFile("too deeply nested to parse") from None
    if not any(block.text.strip() for block in document.blocks):
        raise SkipFile("no text found")
    metadata.update(document.metadata)
    return LoadedFile(document, hashlib.sha256(data).hexdigest(), metadata)
