"""What an ingest reads: an :class:`Item` (a file, bytes given, a text given) and how each is
read and parsed."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from ragloop.kb.ingest.discover import (
    SkipFile,
    check_size,
    fingerprint,
    parse_file,
    printable,
    raw_hash,
    read_file,
    unsupported_type,
)
from ragloop.kb.readers import ParsedDocument


class Item(Protocol):
    """One document to ingest. ``fingerprint`` (a file's size and times) says it
    is unchanged without reading it; ``read()`` returns the hash of its raw content;
    ``parse()`` its blocks and metadata. Both raise :class:`SkipFile` with a reason."""

    source: str
    fingerprint: dict[str, Any] | None

    @property
    def shown(self) -> str: ...  # how the report names it when it is skipped

    @property
    def size(self) -> int: ...  # bytes read (a file) or characters given (a text), about

    def read(self) -> str: ...
    def parse(self) -> tuple[ParsedDocument, dict[str, Any]]: ...


@dataclass
class FileItem:
    path: Path
    root: Path
    source: str
    max_bytes: int
    encodings: Sequence[str]
    fingerprint: dict[str, Any] | None = None
    data: bytes = b""

    def __post_init__(self) -> None:
        found = fingerprint(self.path)
        self.fingerprint = None if found is None else {**found, "root": str(self.root)}

    @property
    def shown(self) -> str:
        return printable(self.path)

    @property
    def size(self) -> int:
        return len(self.data)

    def read(self) -> str:
        self.data = read_file(self.path, max_bytes=self.max_bytes)
        return raw_hash(self.data)

    def parse(self) -> tuple[ParsedDocument, dict[str, Any]]:
        loaded = parse_file(self.data, self.path, encodings=self.encodings)
        self.data = b""
        return loaded.document, {**loaded.metadata, **(self.fingerprint or {})}


@dataclass
class BytesItem:
    """A file's content given as bytes (an upload), named by ``source``: read as a file of
    that name would be, with no folder of its own (no ``root``)."""

    source: str
    data: bytes
    max_bytes: int
    encodings: Sequence[str]
    fingerprint: dict[str, Any] | None = None

    @property
    def shown(self) -> str:
        return printable(self.source)

    @property
    def size(self) -> int:
        return len(self.data)

    def read(self) -> str:
        if (unsupported := unsupported_type(Path(self.source))) is not None:
            raise SkipFile(unsupported)
        check_size(len(self.data), self.max_bytes)
        return raw_hash(self.data)

    def parse(self) -> tuple[ParsedDocument, dict[str, Any]]:
        loaded = parse_file(self.data, Path(self.source), encodings=self.encodings)
        self.data = b""
        return loaded.document, dict(loaded.metadata)


@dataclass
class TextItem:
    source: str
    digest: str
    parsed: Callable[[], ParsedDocument]
    metadata: dict[str, Any] = field(default_factory=dict)
    fingerprint: dict[str, Any] | None = None
    length: int = 0  # of the text

    @property
    def shown(self) -> str:
        return printable(self.source)

    @property
    def size(self) -> int:
        return self.length

    def read(self) -> str:
        return self.digest

    def parse(self) -> tuple[ParsedDocument, dict[str, Any]]:
        return self.parsed(), dict(self.metadata)
