"""Arrays saved in one file beside a knowledge base and memory-mapped when read.

A search in a new process (``ragloop search``, a worker of a server) would otherwise rebuild its
keyword and vector indexes from the SQLite rows: on the Python docs (15,791 chunks) 0.11 s for
the BM25 postings and 0.17 s for the vectors, more than the rest of the search together. Saved
once, they are mapped in well under a millisecond and read from the page cache, shared by every
process that maps them.

The file: ``MAGIC``, the header's length (8 bytes, little-endian), the header (JSON: caller's
``info`` and each array's dtype, shape and offset), then the arrays, each at a 64-byte boundary.
It is written aside and renamed, so a reader sees all of it or nothing; one that does not read
back exactly as described is ignored (the caller builds the index again).
"""

from __future__ import annotations

import json
import logging
import mmap
import os
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

logger = logging.getLogger("ragloop")

MAGIC = b"RAGLOOP-ARRAYS-1"
_ALIGN = 64
_DTYPES = {"<f4", "<f8", "<i4", "<i8", "<u2", "<u4"}  # what the indexes hold


def save(path: Path, arrays: dict[str, npt.NDArray[Any]], info: dict[str, Any]) -> bool:
    """Write ``arrays`` and ``info`` to ``path`` (aside, then renamed). False, with a warning,
    when the folder cannot take it (read-only, full): the index is simply built again later."""
    entries: dict[str, dict[str, Any]] = {}
    offset = 0
    for name, array in arrays.items():
        offset = -(-offset // _ALIGN) * _ALIGN
        dtype = array.dtype.newbyteorder("<").str
        entries[name] = {"dtype": dtype, "shape": list(array.shape), "offset": offset}
        offset += array.nbytes
    header = json.dumps({"info": info, "arrays": entries}).encode()
    start = -(-(len(MAGIC) + 8 + len(header)) // _ALIGN) * _ALIGN
    partial = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        with open(partial, "wb") as out:
            out.write(MAGIC + len(header).to_bytes(8, "little") + header)
            for name, array in arrays.items():
                out.seek(start + entries[name]["offset"])
                # written from the array's own memory: a bytes copy of the vectors would
                # double the peak memory of the process that builds a large index
                out.write(np.ascontiguousarray(array, dtype=entries[name]["dtype"]).data)
            out.truncate(start + offset)  # the file ends where the last array does, even empty
        os.replace(partial, path)
    except OSError:
        logger.warning("could not save the index %s", path, exc_info=True)
        partial.unlink(missing_ok=True)
        return False
    return True


def load(path: Path) -> tuple[dict[str, npt.NDArray[Any]], dict[str, Any]] | None:
    """The arrays (read-only, mapped from the file) and info of a file :func:`save` wrote; None
    when there is none or it does not read back as written."""
    try:
        with open(path, "rb") as file:
            mapped = mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError):  # missing, unreadable or empty
        return None
    try:
        return _read(mapped)
    except (ValueError, KeyError, TypeError, AttributeError):
        logger.warning("ignoring the unreadable index %s", path, exc_info=True)
        return None


def _read(mapped: mmap.mmap) -> tuple[dict[str, npt.NDArray[Any]], dict[str, Any]]:
    if mapped[: len(MAGIC)] != MAGIC:
        raise ValueError("not a ragloop index file")
    length = int.from_bytes(mapped[len(MAGIC) : len(MAGIC) + 8], "little")
    header = json.loads(mapped[len(MAGIC) + 8 : len(MAGIC) + 8 + length])
    start = -(-(len(MAGIC) + 8 + length) // _ALIGN) * _ALIGN
    arrays: dict[str, npt.NDArray[Any]] = {}
    for name, entry in header["arrays"].items():
        if entry["dtype"] not in _DTYPES:
            raise ValueError(f"array {name!r} of dtype {entry['dtype']!r}")
        dtype = np.dtype(entry["dtype"])
        shape = tuple(int(size) for size in entry["shape"])
        count = int(np.prod(shape, dtype=np.int64))
        offset = start + int(entry["offset"])
        if min(shape, default=0) < 0 or offset + count * dtype.itemsize > len(mapped):
            raise ValueError(f"array {name!r} runs past the end of the file")
        arrays[name] = np.frombuffer(mapped, dtype, count, offset).reshape(shape)
    return arrays, dict(header["info"])


def remove_others(keep: Path, pattern: str) -> None:
    """Delete the files beside ``keep`` matching ``pattern`` (earlier states' indexes); a
    process that still maps one keeps reading it."""
    for old in keep.parent.glob(pattern):
        if old != keep:
            old.unlink(missing_ok=True)
