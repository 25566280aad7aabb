"""How an ingest names the files it found: no file is lost for its name.

- one folder given: sources are relative to it (``library/os.html`` when the folder holding
  ``library/`` is given); files given by themselves, all in one folder: their names;
- several folders (or files in several folders) given in one run: sources are relative to
  their common parent folder (``library/logging.html`` and ``howto/logging.html``);
- a file already stored keeps its source (the stored document's ``root`` joined with its source
  is that file), whatever the folder given this time;
- a source already held by a document of a *different* file that still exists is lengthened
  with the folders above it (``faq/index.html``, then ``python/faq/index.html``, ...) until it
  is free: a later run never replaces another file's document, nor one given as text. A
  document whose file no longer exists is replaced.

Uploads (:func:`upload_names`) are named by the relative path each part carries; a bad name or
two parts of one name refuse the whole request before anything is ingested.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ragloop.core.errors import ConfigError
from ragloop.kb.ingest.discover import Candidate, file_of
from ragloop.kb.stores.base import DocumentRecord


@dataclass(frozen=True)
class Named:
    """A file found, its source, and the folder the source is relative to (kept as
    ``root``)."""

    path: Path
    source: str
    root: Path


def base_folder(found: Sequence[Candidate], roots: Sequence[Path]) -> Path | None:
    """The folder the run's sources are relative to: the one folder given (or the folder of the
    files given), else the common parent of everything given. None when nothing was found."""
    anchors = {*roots, *(c.path.parent for c in found if c.root is None)}
    if not anchors:
        return None
    if len(anchors) == 1:
        return anchors.pop()
    parents = [*(r.parent for r in roots), *(c.path.parent for c in found if c.root is None)]
    return Path(os.path.commonpath([str(p) for p in parents]))


def name_files(
    found: Sequence[Candidate],
    roots: Sequence[Path],
    stored: Iterable[DocumentRecord],
    *,
    base: Path | None = None,
) -> list[Named]:
    """Each file found with a source no other file holds, in this run or in the collection
    (``stored``: its documents); relative to ``base`` when given, else to
    :func:`base_folder`."""
    base = base or base_folder(found, roots)
    known = {doc.source: doc for doc in stored}
    by_file = {file_of(doc): doc for doc in known.values() if doc.metadata.get("root")}
    used: set[str] = set()

    def taken(source: str, path: Path) -> bool:
        if source in used:
            return True
        holder = known.get(source)
        if holder is None:
            return False
        held = file_of(holder)
        if not holder.metadata.get("root") and not Path(holder.source).is_absolute():
            return True  # a document given as text: no file of its own to be replaced by
        return held != path and file_exists(held)

    named = []
    for candidate in found:
        path = candidate.path
        same = by_file.get(path)
        if same is not None and same.source not in used:  # the same file keeps its source
            choice = Named(path, same.source, Path(str(same.metadata["root"])))
        else:
            choice = _free_name(path, base or path.parent, taken)
        used.add(choice.source)
        named.append(choice)
    return named


def _free_name(path: Path, base: Path, taken: Callable[[str, Path], bool]) -> Named:
    """``path`` relative to ``base``, or to the nearest folder above it that makes the source
    free (relative to ``/`` at most: that is unique to the file)."""
    folder = base
    while True:
        source = path.relative_to(folder).as_posix()
        if folder.parent == folder or not taken(source, path):
            return Named(path, source, folder)
        folder = folder.parent


def file_exists(path: Path) -> bool:
    try:
        return path.exists()
    except OSError:  # cannot be looked at: treat it as there, never replace it
        return True


MAX_NAME_BYTES = 255  # a file name's limit on most file systems, in UTF-8 bytes


def upload_names(names: Sequence[str | None]) -> list[str]:
    """The sources of uploaded files: each part's relative path, normalised (``\\`` read as
    ``/``, ``./`` and doubled slashes dropped). :class:`ConfigError` naming the part when a
    name is empty, absolute, climbs out (``..``), holds a NUL byte or a component over 255
    bytes, or when two parts have the same name: nothing of such a request is ingested."""
    sources: dict[str, int] = {}
    for number, name in enumerate(names):
        source = _upload_source(number, name)
        if source in sources:
            raise ConfigError(
                "files",
                f"parts {sources[source]} and {number} are both named {source!r}; "
                "give each file its own name (a folder in the name keeps them apart: a/notes.md)",
            )
        sources[source] = number
    return list(sources)


def _upload_source(number: int, name: str | None) -> str:
    def bad(reason: str) -> ConfigError:
        return ConfigError("files", f"part {number} ({name!r}): {reason}")

    if not name or not name.strip():
        raise bad("the file name is empty")
    if "\0" in name:
        raise bad("the file name holds a NUL byte")
    text = name.replace("\\", "/")
    if text.startswith("/") or (len(text) > 1 and text[1] == ":" and text[0].isalpha()):
        raise bad("an absolute path; give a relative one (notes.md, a/notes.md)")
    parts = [part for part in text.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise bad("'..' in a file name would leave the upload")
    if not parts:
        raise bad("the name names no file")
    for part in parts:
        if len(part.encode("utf-8", "surrogatepass")) > MAX_NAME_BYTES:
            raise bad(f"a part of the name is over {MAX_NAME_BYTES} bytes")
    return "/".join(parts)
