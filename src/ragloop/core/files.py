"""Local files, as pure rules (no settings read): whether a knowledge base's location is a
PostgreSQL URL, the trace file beside a knowledge base's file, and switching a SQLite file to
write-ahead logging when several processes may create it at once. The defaults that depend on
the settings (the knowledge base when none is named, the traces of a PostgreSQL one) are in
:mod:`ragloop.config`.

Switching a new file to WAL takes a lock that SQLite reports busy at once, without waiting for
the busy timeout, so processes opening one new file together (two servers sharing a trace file,
workers sharing a knowledge base) retry until the deadline rather than fail.
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path


def is_postgres_dsn(location: str) -> bool:
    """Whether a knowledge base's location names a PostgreSQL database rather than a file."""
    return location.startswith(("postgresql://", "postgres://"))


def traces_path_for(kb_path: str | os.PathLike[str]) -> Path:
    """The trace file beside a knowledge base: ``kb.sqlite`` -> ``kb.traces.sqlite``."""
    path = Path(kb_path)
    return path.with_name(f"{path.stem}.traces.sqlite")


def use_wal(conn: sqlite3.Connection, timeout_s: float) -> None:
    """Put the file of ``conn`` in WAL mode, retrying a busy switch for up to ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as error:
            if "locked" not in str(error) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


def write_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` whole or not at all: a crash midway leaves the old file."""
    target = Path(path)
    partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
    partial.write_text(text, encoding="utf-8")
    os.replace(partial, target)
