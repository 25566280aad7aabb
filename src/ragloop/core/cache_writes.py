"""Writes that only save work later (a cache of embeddings): when the store refuses one (a full
disk, a read-only file) the write is skipped and the answer still comes back; the reason is
logged once per process and kind of cache, not with every question."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from ragloop.core.errors import StoreError

logger = logging.getLogger("ragloop")
_warned: set[str] = set()
_lock = threading.Lock()


def skip_failed_cache_write(what: str, write: Callable[[], object]) -> bool:
    """Run ``write``; a :class:`StoreError` skips it (warned once per ``what``). Whether it
    was written."""
    try:
        write()
    except StoreError as error:
        with _lock:
            first = what not in _warned
            _warned.add(what)
        if first:
            logger.warning("could not save %s, so it is skipped (only a cache): %s", what, error)
        return False
    return True
