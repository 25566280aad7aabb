"""Switching a SQLite file to write-ahead logging when several processes may create it at once.

Switching a new file to WAL takes a lock that SQLite reports busy at once, without waiting for
the busy timeout, so processes opening one new file together (two servers sharing a trace file,
workers sharing a knowledge base) retry until the deadline rather than fail.
"""

from __future__ import annotations

import sqlite3
import time


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
