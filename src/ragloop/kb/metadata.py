"""What of a chunk's metadata clients see.

A knowledge base keeps bookkeeping in each document's metadata: the folder a file was ingested
from (``root``, an absolute path on the machine that ingested it, or an upload's temporary
folder) and the file's times (``mtime_ns``, ``ctime_ns``), which say whether a file changed
without reading it. They are the knowledge base's, not the document's: every place that shows
chunks to a client (the HTTP API, the MCP tools, ``--json`` output) drops them, with any other
value that is an absolute file path, through :func:`public_metadata`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import PurePosixPath, PureWindowsPath
from typing import Any

INTERNAL_METADATA = frozenset({"root", "mtime_ns", "ctime_ns"})


def public_metadata(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """``metadata`` without the knowledge base's own keys (:data:`INTERNAL_METADATA`) and
    without values that are absolute file paths (they name folders of the serving machine)."""
    return {
        key: value
        for key, value in metadata.items()
        if key not in INTERNAL_METADATA and not is_absolute_path(value)
    }


def is_absolute_path(value: object) -> bool:
    """Whether ``value`` is text naming an absolute file path (``/home/...``, ``C:\\...``,
    ``~/...``); URLs and relative paths are not."""
    if not isinstance(value, str) or not value or "\n" in value or "://" in value:
        return False
    return (
        value.startswith(("~/", "~\\"))
        or PurePosixPath(value).is_absolute()
        or PureWindowsPath(value).is_absolute()
    )
