"""The database the SQLite store's parts share: one SQLite file, its connections (one a
thread), transactions under this process's write lock, the numbered migrations, the meta
table, the vocabulary's ids, reading chunk rows, and failures raised as
:class:`~ragloop.StoreError` with SQLite's reason.

The store is one object: :class:`Database` and the parts built on it (:mod:`.write`,
:mod:`.keyword`, :mod:`.dense`), joined in :mod:`.store`.
"""

from __future__ import annotations

import functools
import json
import os
import sqlite3
import threading
import urllib.parse
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from itertools import filterfalse
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

from ragloop.core.errors import StoreError
from ragloop.core.files import use_wal
from ragloop.core.records import Chunk, Scope
from ragloop.kb.index.bm25 import (
    pack,
    term_frequencies,
)
from ragloop.kb.stores.base import (
    index_text,
)
from ragloop.kb.stores.rows import chunk_from_row, model_from_meta
from ragloop.kb.stores.sqlite.schema import (
    CHECKPOINT_PAGES,
    FILTER_COLUMNS,
    MIGRATIONS,
    NEW_STATE,
    SCHEMA_VERSION,
    SELECT_CHUNKS,
)

P = ParamSpec("P")

R = TypeVar("R")
S = TypeVar("S", bound="Database")

# What reading a damaged or tampered file raises besides sqlite3.Error: numbers and JSON that do
# not parse, blobs of the wrong length, ids past the end of an array.
DAMAGE = (sqlite3.Error, ValueError, TypeError, IndexError, KeyError, OverflowError)


def guarded(
    method: Callable[Concatenate[S, P], R],
) -> Callable[Concatenate[S, P], R]:
    """Raise what a store operation hits in the file as :class:`StoreError`, with the reason."""

    @functools.wraps(method)
    def guarded(self: S, /, *args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return method(self, *args, **kwargs)
        except StoreError:
            raise
        except DAMAGE as error:
            raise self._failure(error) from error

    return guarded


class Database:
    """One SQLite file and what every part of the store needs of it."""

    def __init__(self, path: str | os.PathLike[str], *, timeout_s: float = 30.0) -> None:
        self.path = Path(path)
        self._timeout_s = timeout_s
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()  # one writer at a time in this process
        self._vocabulary: dict[str, int] = {}
        self._new_terms: list[str] | None = None  # cached in the open write transaction
        self._missing_after: dict[str, int] = {}  # where missing_vectors goes on, by model
        self._phrases_wanted = False  # a phrase was looked up: writes keep the phrase index full
        self._dense_lock = threading.Lock()
        self._closed = False
        self.read_only = False
        self._uri = f"file:{urllib.parse.quote(str(self.path.absolute()))}"
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._migrate()
        except (sqlite3.Error, OSError) as error:
            if not not_writable(error):
                self.close()
                raise StoreError(
                    f"{self.path} is not a usable ragloop knowledge base: {error}"
                ) from None
            self._open_read_only()

    def _open_read_only(self) -> None:
        """Reopen a file this process may not write. ``mode=ro`` reads it like any reader
        (WAL included) when the folder lets SQLite make its shared-memory file; otherwise the
        file is read as ``immutable``: nobody can be writing to it on a read-only mount, and a
        copy owned by another user is read as it was (open it again to see later writes)."""
        self.close()
        self._closed = False
        self.read_only = True
        for query in ("?mode=ro", "?mode=ro&immutable=1"):
            self._uri = f"file:{urllib.parse.quote(str(self.path.absolute()))}{query}"
            try:
                self._check_schema(self._conn())
                return
            except sqlite3.Error as error:
                self.close()
                self._closed = False
                failure = error
            except StoreError:
                self.close()
                raise
        self._closed = True
        raise StoreError(f"{self.path} cannot be opened, even read-only: {failure}") from None

    # -- connections and transactions -------------------------------------------------------
    def _conn(self) -> sqlite3.Connection:
        if self._closed:
            raise StoreError("the knowledge base is closed")
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(
                self._uri,
                uri=True,
                timeout=self._timeout_s,
                isolation_level=None,
                check_same_thread=False,
            )
            conn.execute(f"PRAGMA busy_timeout = {int(self._timeout_s * 1000)}")
            conn.execute("PRAGMA foreign_keys = ON")
            conn.execute("PRAGMA synchronous = NORMAL")
            # copy the log into the file every 64 MB instead of every 4: a page written by
            # many transactions (an index's, at random keys) is copied once, not once each
            conn.execute(f"PRAGMA wal_autocheckpoint = {CHECKPOINT_PAGES}")
            # no memory map: loading the indexes reads the whole file, and every page read
            # through a map stays in the process's resident memory (700 MB at 100k chunks)
            # for a gain of 0.04 ms a search
            self._local.conn = conn
            with self._lock:
                self._connections.append(conn)
        return conn

    @contextmanager
    def _transaction(self, conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
        """``BEGIN IMMEDIATE`` ... ``COMMIT``, under this process's write lock. On failure the
        transaction is rolled back (unless SQLite already did, as after a full disk) and the
        vocabulary ids cached inside it are forgotten: the rollback freed them for other
        words."""
        if self.read_only:
            raise StoreError(f"{self.path} is read-only here: it can be searched, not changed")
        with self._lock:
            conn.execute("BEGIN IMMEDIATE")
            self._new_terms = []
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                for term in self._new_terms:
                    self._vocabulary.pop(term, None)
                raise
            finally:
                self._new_terms = None

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._transaction(self._conn()) as conn:
            yield conn
            conn.execute("UPDATE meta SET value = value + 1 WHERE key = 'generation'")
            conn.execute(NEW_STATE, ("text_state",))

    def _failure(self, error: BaseException) -> StoreError:
        """The error to raise for what an operation hit in the file."""
        reason = str(error) or type(error).__name__
        if not_writable(error):
            return StoreError(f"{self.path} is read-only here ({reason})")
        if isinstance(error, sqlite3.OperationalError):
            return StoreError(f"the knowledge base {self.path} failed: {reason}")
        return StoreError(
            f"the knowledge base {self.path} is damaged ({type(error).__name__}: {reason}); "
            "rebuild it with: ragloop ingest PATH --kb FILE"
        )

    def _migrate(self) -> None:
        conn = self._conn()
        use_wal(conn, self._timeout_s)
        conn.execute(
            "CREATE TABLE IF NOT EXISTS _ragloop_migrations (version INTEGER PRIMARY KEY, "
            "applied_at TEXT NOT NULL)"
        )
        if self._check_schema(conn, upgrade=True) == SCHEMA_VERSION:
            return
        with self._transaction(conn):
            # read again under the write lock: another process may have migrated meanwhile
            done = {row[0] for row in conn.execute("SELECT version FROM _ragloop_migrations")}
            for version, script in MIGRATIONS:
                if version in done:
                    continue
                for statement in script.split(";"):
                    if statement.strip():
                        conn.execute(statement)
                if version == 2:
                    self._backfill_terms(conn)
                conn.execute(
                    "INSERT INTO _ragloop_migrations VALUES (?, ?)",
                    (version, datetime.now(UTC).isoformat()),
                )

    def _check_schema(self, conn: sqlite3.Connection, *, upgrade: bool = False) -> int:
        """The file's schema version; refuses one newer than this code, or (when it cannot
        upgrade) an older one."""
        row = conn.execute("SELECT max(version) FROM _ragloop_migrations").fetchone()
        version = int(row[0] or 0)
        if version > SCHEMA_VERSION:
            raise StoreError(
                f"{self.path} was written by a newer ragloop (schema version {version}; this one "
                f"reads up to {SCHEMA_VERSION}): upgrade ragloop to open it"
            )
        if version < SCHEMA_VERSION and not upgrade:
            raise StoreError(
                f"{self.path} has schema version {version} and needs an upgrade to "
                f"{SCHEMA_VERSION}, which a read-only file cannot take: open it once with write "
                "access"
            )
        return version

    def _backfill_terms(self, conn: sqlite3.Connection) -> None:
        """Term frequencies for chunks written before migration 2."""
        rows = conn.execute(
            "SELECT c.pk, d.title, c.heading_path, c.content FROM chunks c "
            "JOIN documents d ON d.id = c.document_id WHERE c.terms IS NULL"
        ).fetchall()
        for pk, title, heading_path, content in rows:
            text = index_text(title, json.loads(heading_path), content)
            conn.execute("UPDATE chunks SET terms = ? WHERE pk = ?", (self._pack(conn, text), pk))

    def _term_ids(
        self, conn: sqlite3.Connection, terms: Iterable[str], *, add: bool
    ) -> dict[str, int]:
        """Vocabulary ids of ``terms``; with ``add``, new terms get ids (inside the caller's
        write transaction). Unknown terms are left out when not adding."""
        wanted = list(dict.fromkeys(terms))
        self._look_up_terms(conn, wanted, add=add)
        return {t: self._vocabulary[t] for t in wanted if t in self._vocabulary}

    def _look_up_terms(self, conn: sqlite3.Connection, terms: Iterable[str], *, add: bool) -> None:
        """Bring the ids of ``terms`` this process has not seen into ``self._vocabulary``
        (giving new terms ids with ``add``), in one pass in C over the terms (a batch of 1,024
        chunks brings about 20,000: half the time of the passes in Python it replaced)."""
        missing = list(dict.fromkeys(filterfalse(self._vocabulary.__contains__, terms)))
        if missing and add:
            conn.executemany(
                "INSERT OR IGNORE INTO vocabulary (term) VALUES (?)", [(t,) for t in missing]
            )
            if self._new_terms is not None:
                self._new_terms.extend(missing)
        for start in range(0, len(missing), 500):
            batch = missing[start : start + 500]
            rows = conn.execute(
                f"SELECT term, id FROM vocabulary WHERE term IN ({','.join('?' * len(batch))})",
                batch,
            )
            self._vocabulary.update(rows)

    def _pack(self, conn: sqlite3.Connection, text: str) -> bytes:
        frequencies = term_frequencies(text)
        ids = self._term_ids(conn, frequencies, add=True)
        return pack(frequencies, ids)

    def _generation(self) -> int:
        row = self._conn().execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()
        return int(row[0])

    def _meta(self, conn: sqlite3.Connection, key: str) -> str | None:
        row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def _model(self, conn: sqlite3.Connection) -> tuple[str, int] | None:
        return model_from_meta(conn)

    def close(self) -> None:
        with self._lock:
            for conn in self._connections:
                conn.close()
            self._connections.clear()
        self._local = threading.local()
        self._closed = True

    # -- keyword search ------------------------------------------------------------------------
    def _scope_sql(self, scope: Scope) -> tuple[str, list[Any]]:
        clauses: list[str] = []
        params: list[Any] = []
        if scope.collections is not None:
            clauses.append(f"d.collection IN ({','.join('?' * len(scope.collections))})")
            params.extend(scope.collections)
        for key, wanted in scope.filters:
            column = FILTER_COLUMNS.get(key)
            if column is None:
                path = '$."' + key.replace('"', "") + '"'
                column = f"COALESCE(json_extract(c.metadata, '{path}'), "
                column += f"json_extract(d.metadata, '{path}'))"
            values = (
                list(wanted) if isinstance(wanted, list | tuple | set | frozenset) else [wanted]
            )
            clauses.append(f"{column} IN ({','.join('?' * len(values))})")
            params.extend(sql_value(v) for v in values)
        return (" AND ".join(clauses), params)

    def _rows_by_pk(self, pks: list[int], scope: Scope) -> dict[int, tuple[Any, ...]]:
        where, params = self._scope_sql(scope)
        marks = ",".join("?" * len(pks))
        rows = self._conn().execute(
            f"{SELECT_CHUNKS} WHERE c.pk IN ({marks})" + (f" AND {where}" if where else ""),
            [*pks, *params],
        )
        return {row[0]: tuple(row) for row in rows}

    def _chunks(
        self,
        hits: Sequence[tuple[int, float, dict[str, float]]],
        scope: Scope,
        rows: dict[int, tuple[Any, ...]] | None = None,
    ) -> list[Chunk]:
        """The chunks of (row pk, score, signals), in order; each signal dict becomes the
        chunk's ``metadata["scores"]``. Rows are read with the scope in the query (``rows``
        holds rows read so already): a writer may have replaced a row since the index was
        loaded, and SQLite gives a freed row number to the next chunk inserted, which may
        belong to another collection."""
        if not hits:
            return []
        by_pk = rows if rows is not None else self._rows_by_pk([pk for pk, _, _ in hits], scope)
        out = []
        for pk, score, signals in hits:
            row = by_pk.get(pk)
            if row is None:  # replaced by a writer since the index was loaded: skip it
                continue
            chunk = chunk_from_row(row, score)
            chunk.metadata["scores"] = signals
            out.append(chunk)
        return out


@contextmanager
def snapshot(conn: sqlite3.Connection) -> Iterator[None]:
    """Reads that see one state of the file (a read transaction, unless one is open)."""
    if conn.in_transaction:
        yield
        return
    conn.execute("BEGIN")
    try:
        yield
    finally:
        conn.execute("COMMIT")


def not_writable(error: BaseException) -> bool:
    """Whether SQLite failed because this process may not write the file or its folder."""
    if isinstance(error, PermissionError):
        return True
    message = str(error)
    return isinstance(error, sqlite3.OperationalError) and (
        "readonly" in message or "unable to open database file" in message
    )


def sql_value(value: Any) -> Any:
    if isinstance(value, bool):
        return int(value)
    return value
