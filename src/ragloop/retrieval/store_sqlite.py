"""The embedded store: one SQLite file with the chunks, an FTS5 keyword index, the vectors and
the link graph.

SQLite done properly: WAL journal (readers never block the writer), a busy timeout, foreign keys
on, one ``BEGIN IMMEDIATE`` transaction per batch of documents, numbered migrations recorded in
``_ragloop_migrations`` (applied under the write lock, so processes opening a new file at once
do not race; a file of a newer schema is refused). Vectors are float32 blobs keyed by (model id,
text hash), which makes the table the embedding cache too. Exact vector search runs in numpy
over a matrix loaded once and reloaded only when a write (by this process or another) bumps the
``generation`` counter.

Failures surface as :class:`~ragloop.retrieval.store.StoreError` with SQLite's reason: a full
disk, a damaged file, tampered rows. A failed write leaves nothing behind, in the file or in
the caches. A file this process may not write (a read-only mount, another user's file) is opened
read-only: search works, writes are refused.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sqlite3
import threading
import urllib.parse
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from itertools import chain, filterfalse
from pathlib import Path
from typing import Any, Concatenate, ParamSpec, TypeVar

import numpy as np
import numpy.typing as npt

from ragloop.core.errors import StoreError
from ragloop.core.records import Chunk, Scope
from ragloop.core.sqlite_wal import use_wal
from ragloop.core.text import tokenize
from ragloop.retrieval import ann, saved_arrays
from ragloop.retrieval.ann import ApproximateIndex
from ragloop.retrieval.bm25 import (
    BM25Index,
    PostingsBlock,
    analyze,
    block,
    pack,
    pack_batch,
    renumber,
    term_frequencies,
    unpack,
)
from ragloop.retrieval.exact import exact_hits, exact_terms, term_patterns
from ragloop.retrieval.fusion import fuse
from ragloop.retrieval.store import (
    ChunkRecord,
    CollectionInfo,
    DocumentRecord,
    Link,
    StoreStats,
    index_text,
)

MIGRATIONS: list[tuple[int, str]] = [
    (
        1,
        """
        CREATE TABLE documents (
            id INTEGER PRIMARY KEY,
            collection TEXT NOT NULL,
            source TEXT NOT NULL,
            title TEXT NOT NULL,
            content_hash TEXT NOT NULL,
            metadata TEXT NOT NULL DEFAULT '{}',
            updated_at TEXT NOT NULL,
            UNIQUE (collection, source)
        );
        CREATE INDEX documents_source ON documents (source);
        CREATE TABLE chunks (
            pk INTEGER PRIMARY KEY,
            id TEXT NOT NULL UNIQUE,
            document_id INTEGER NOT NULL REFERENCES documents (id) ON DELETE CASCADE,
            position INTEGER NOT NULL,
            content TEXT NOT NULL,
            heading_path TEXT NOT NULL DEFAULT '[]',
            text_hash TEXT NOT NULL,
            metadata TEXT NOT NULL DEFAULT '{}'
        );
        CREATE INDEX chunks_document ON chunks (document_id);
        CREATE VIRTUAL TABLE chunks_fts USING fts5 (
            text, tokenize = 'porter unicode61 remove_diacritics 2'
        );
        CREATE TABLE vectors (
            model_id TEXT NOT NULL,
            text_hash TEXT NOT NULL,
            vector BLOB NOT NULL,
            PRIMARY KEY (model_id, text_hash)
        ) WITHOUT ROWID;
        CREATE TABLE links (
            chunk_pk INTEGER NOT NULL REFERENCES chunks (pk) ON DELETE CASCADE,
            target_pk INTEGER NOT NULL REFERENCES chunks (pk) ON DELETE CASCADE,
            mention TEXT NOT NULL,
            PRIMARY KEY (chunk_pk, target_pk)
        ) WITHOUT ROWID;
        CREATE INDEX links_target ON links (target_pk);
        CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        INSERT INTO meta (key, value) VALUES ('generation', '0');
        """,
    ),
    (
        2,
        # keyword search moved from FTS5's bm25() to an in-memory index over each chunk's term
        # frequencies (see ragloop.retrieval.bm25); FTS5 stays for phrase lookups
        """
        ALTER TABLE chunks ADD COLUMN terms BLOB;
        CREATE TABLE vocabulary (id INTEGER PRIMARY KEY, term TEXT NOT NULL UNIQUE);
        """,
    ),
    (
        3,
        # vectors in a rowid table: a WITHOUT ROWID row holds at most about 1 KB in its page,
        # so every 1.5 KB vector spilled into an overflow page of its own (4.9 KB a vector on
        # disk, 2.1 KB now)
        """
        CREATE TABLE vectors_by_rowid (
            model_id TEXT NOT NULL,
            text_hash TEXT NOT NULL,
            vector BLOB NOT NULL,
            UNIQUE (model_id, text_hash)
        );
        INSERT INTO vectors_by_rowid SELECT model_id, text_hash, vector FROM vectors;
        DROP TABLE vectors;
        ALTER TABLE vectors_by_rowid RENAME TO vectors;
        """,
    ),
    (
        4,
        # random tokens replaced by every write of text and of vectors: they name the indexes
        # saved beside the file (ragloop.retrieval.saved_arrays), so an index saved for one
        # state of the file is never read for another, not even for a copy written since
        """
        INSERT OR REPLACE INTO meta VALUES ('text_state', lower(hex(randomblob(8))));
        INSERT OR REPLACE INTO meta VALUES ('vector_state', lower(hex(randomblob(8))));
        """,
    ),
    (
        5,
        # where the search for chunks without a vector of a model starts: every chunk with a
        # smaller row number has one (SQLiteStore._first_missing), so embedding the chunks of
        # one more ingest no longer reads the whole table twice (20 s at 1M chunks)
        """
        CREATE TABLE embedded_below (model_id TEXT PRIMARY KEY, pk INTEGER NOT NULL);
        """,
    ),
    (
        6,
        # the phrase index (chunks_fts) may lack the chunks from meta 'phrases_from' on: it is
        # filled when a phrase is first looked up (SQLiteStore._complete_phrases), so an older
        # ragloop, which trusts it to hold every chunk, must not write or link this file
        "",
    ),
]
_NEW_STATE = "UPDATE meta SET value = lower(hex(randomblob(8))) WHERE key = ?"
# the phrase index holds each chunk's text: a phrase search finds candidates for the title
# links, which links.mentions_name then checks in that text
_INDEX_PHRASES = "INSERT INTO chunks_fts (rowid, text) SELECT pk, content FROM chunks WHERE pk >= ?"

# Columns that filters may name directly; any other key is looked up in the chunk's metadata,
# then the document's.
_COLUMNS = {
    "collection": "d.collection",
    "source": "d.source",
    "title": "d.title",
    "position": "c.position",
}

_CHUNK_COLUMNS = (
    "c.pk, c.id, c.position, c.content, c.heading_path, c.metadata, "
    "d.collection, d.source, d.title, d.metadata"
)
BLOCK = 8192  # rows read at a time when an index is loaded
CHECKPOINT_PAGES = 16384  # pages of write-ahead log (4 KB each) copied into the file at once

_SELECT_CHUNKS = f"SELECT {_CHUNK_COLUMNS} FROM chunks c JOIN documents d ON d.id = c.document_id"
SCHEMA_VERSION = MIGRATIONS[-1][0]

P = ParamSpec("P")
R = TypeVar("R")
# What reading a damaged or tampered file raises besides sqlite3.Error: numbers and JSON that do
# not parse, blobs of the wrong length, ids past the end of an array.
_DAMAGE = (sqlite3.Error, ValueError, TypeError, IndexError, KeyError, OverflowError)


def _guarded(
    method: Callable[Concatenate[SQLiteStore, P], R],
) -> Callable[Concatenate[SQLiteStore, P], R]:
    """Raise what a store operation hits in the file as :class:`StoreError`, with the reason."""

    @functools.wraps(method)
    def guarded(self: SQLiteStore, /, *args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return method(self, *args, **kwargs)
        except StoreError:
            raise
        except _DAMAGE as error:
            raise self._failure(error) from error

    return guarded


@dataclass
class _Rows:
    """Which chunk each position of an index holds: its row pk and its collection (as a
    number into ``names``: one int32 a chunk, whatever the name's length)."""

    pks: npt.NDArray[np.int64]
    collections: npt.NDArray[np.int32]
    names: list[str]

    @classmethod
    def read(cls, parts: list[tuple[npt.NDArray[np.int64], npt.NDArray[np.int32]]],
             names: dict[str, int]) -> _Rows:  # fmt: skip
        if not parts:
            return cls(np.zeros(0, np.int64), np.zeros(0, np.int32), list(names))
        pks, collections = (np.concatenate(arrays) for arrays in zip(*parts, strict=True))
        return cls(pks, collections, list(names))


def _rows_problem(rows: _Rows) -> str:
    """What is wrong with an index's rows read from a saved file ("" when nothing): row pks are
    in increasing order, one collection number each, naming a collection."""
    if len(rows.collections) != len(rows.pks):
        return f"{len(rows.pks)} rows but {len(rows.collections)} collection numbers"
    if rows.pks.dtype != np.int64 or (len(rows.pks) > 1 and not (np.diff(rows.pks) > 0).all()):
        return "its row numbers are not in increasing order"
    codes = rows.collections
    if len(codes) and (int(codes.min()) < 0 or int(codes.max()) >= len(rows.names)):
        return "its collection numbers name no collection"
    return ""


def _row_block(
    rows: list[Any], names: dict[str, int]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int32]]:
    """The pks and collection numbers of rows that start (pk, collection, ...)."""
    pks = np.fromiter((row[0] for row in rows), dtype=np.int64, count=len(rows))
    codes = np.fromiter(
        (names.setdefault(row[1], len(names)) for row in rows), dtype=np.int32, count=len(rows)
    )
    return pks, codes


@dataclass
class _KeywordIndex:
    generation: int
    rows: _Rows
    bm25: BM25Index
    saved: bool = False  # mapped from the file saved beside the knowledge base


@dataclass
class _DenseIndex:
    generation: str
    model_id: str
    rows: _Rows
    # (dimension, chunks), one column per chunk: ``query @ columns`` runs 2 to 3 times faster
    # than ``rows @ query`` here (BLAS walks contiguous memory in that layout)
    columns: npt.NDArray[np.float32]
    approximate: ApproximateIndex | None = None  # above ann.MIN_VECTORS, with usearch


class SQLiteStore:
    """A :class:`~ragloop.retrieval.store.Store` in one SQLite file (created if missing)."""

    uses_counted_terms = True  # replace_documents stores ChunkRecord.counted_terms when given

    def __init__(self, path: str | os.PathLike[str], *, timeout_s: float = 30.0) -> None:
        self.path = Path(path)
        self._timeout_s = timeout_s
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()  # one writer at a time in this process
        self._dense: _DenseIndex | None = None
        self._keyword: _KeywordIndex | None = None
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
            if not _not_writable(error):
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
            conn.execute(_NEW_STATE, ("text_state",))

    def _failure(self, error: BaseException) -> StoreError:
        """The error to raise for what an operation hit in the file."""
        reason = str(error) or type(error).__name__
        if _not_writable(error):
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

    def _packed_terms(self, conn: sqlite3.Connection, chunks: list[ChunkRecord]) -> list[bytes]:
        """Each chunk's term frequencies packed with this store's term ids, from the ingest
        worker's count (``counted_terms``) or counted here in the same form."""
        terms, blobs = pack_batch([c.index_text for c in chunks if c.counted_terms is None])
        here = iter(blobs)
        counted = [c.counted_terms or (terms, next(here)) for c in chunks]
        # a list of terms is shared by the chunks counted together
        lists = {id(found[0]): found[0] for found in counted}
        self._look_up_terms(conn, chain.from_iterable(lists.values()), add=True)
        ids = self._vocabulary.__getitem__
        numbered = {
            key: np.fromiter(map(ids, words), dtype=np.uint32, count=len(words))
            for key, words in lists.items()
        }
        return [renumber(blob, numbered[id(words)]) for words, blob in counted]

    def _pack(self, conn: sqlite3.Connection, text: str) -> bytes:
        frequencies = term_frequencies(text)
        ids = self._term_ids(conn, frequencies, add=True)
        return pack(frequencies, ids)

    def _generation(self) -> int:
        row = self._conn().execute("SELECT value FROM meta WHERE key = 'generation'").fetchone()
        return int(row[0])

    def close(self) -> None:
        with self._lock:
            for conn in self._connections:
                conn.close()
            self._connections.clear()
        self._local = threading.local()
        self._closed = True

    # -- documents ---------------------------------------------------------------------------
    @_guarded
    def document_hash(self, collection: str, source: str) -> str | None:
        row = (
            self._conn()
            .execute(
                "SELECT content_hash FROM documents WHERE collection = ? AND source = ?",
                (collection, source),
            )
            .fetchone()
        )
        return row[0] if row else None

    @_guarded
    def replace_document(
        self, doc: DocumentRecord, chunks: list[ChunkRecord], links: Sequence[Link] = ()
    ) -> list[str]:
        """Replace a document, its chunks, vectors and the links given, in one transaction."""
        self.replace_documents([(doc, chunks)], links)
        return [c.id for c in chunks]

    @_guarded
    def replace_documents(
        self, documents: Sequence[tuple[DocumentRecord, list[ChunkRecord]]], links: Sequence[Link]
    ) -> None:
        """Replace documents in one transaction (a commit costs more than a document's rows),
        then add the links given. Each table's rows of the whole batch go in by one
        ``executemany`` (a handful of statements a batch instead of six a document: 471
        instead of 60,388 for 20,000 documents); a source given twice keeps its last
        version."""
        latest = {(doc.collection, doc.source): (doc, chunks) for doc, chunks in documents}
        batch = list(latest.values())
        with self._write() as conn:
            model = self._model(conn)
            packed = iter(self._packed_terms(conn, [c for _, chunks in batch for c in chunks]))
            self._delete_ids(conn, self._document_ids(conn, list(latest)))
            # the row numbers SQLite would give, chosen here so each table's rows go in together
            (document_id,) = conn.execute("SELECT coalesce(max(id), 0) FROM documents").fetchone()
            (pk,) = conn.execute("SELECT coalesce(max(pk), 0) FROM chunks").fetchone()
            # row numbers of deleted chunks may be given again, to chunks without vectors
            conn.execute("UPDATE embedded_below SET pk = min(pk, ?)", (pk + 1,))
            documents_rows, chunk_rows, vector_rows = _batch_rows(
                batch, document_id, pk, packed, None if model is None else model[0]
            )
            conn.executemany(
                "INSERT INTO documents (id, collection, source, title, content_hash, metadata, "
                "updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                documents_rows,
            )
            conn.executemany(
                "INSERT INTO chunks (pk, id, document_id, position, content, heading_path, "
                "text_hash, metadata, terms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                chunk_rows,
            )
            self._index_phrases(conn, pk + 1, pk + len(chunk_rows))
            conn.executemany("INSERT OR IGNORE INTO vectors VALUES (?, ?, ?)", vector_rows)
            self._insert_links(conn, links)

    def _index_phrases(self, conn: sqlite3.Connection, first: int, last: int) -> None:
        """Index the phrases of chunks ``first`` to ``last`` (just written), or record that
        the phrase index lacks them. Only the title links read the phrase index, so it is
        filled when a phrase is first looked up (:meth:`_complete_phrases`) and kept full from
        then on: an ingest without links does not write it (a fifth of such an ingest's time
        at 300,000 chunks). Every chunk from meta 'phrases_from' on lacks its phrases, every
        one before has them."""
        lacking = self._meta(conn, "phrases_from")
        # a row number below 'phrases_from' is given again only after every chunk from it on
        # was deleted, so the chunks from the smaller of the two on are the ones lacking
        start = first if lacking is None else min(int(lacking), first)
        if self._phrases_wanted:
            conn.execute(_INDEX_PHRASES, (start,))
            conn.execute("DELETE FROM meta WHERE key = 'phrases_from'")
        elif last >= first:
            conn.execute("INSERT OR REPLACE INTO meta VALUES ('phrases_from', ?)", (str(start),))

    def _complete_phrases(self) -> None:
        """Index the phrases of the chunks written without them, and keep the phrase index
        full from now on (a read-only file is searched as it is)."""
        self._phrases_wanted = True
        conn = self._conn()
        if self.read_only or self._meta(conn, "phrases_from") is None:
            return
        with self._transaction(conn):
            lacking = self._meta(conn, "phrases_from")  # again, under the write lock
            if lacking is not None:
                conn.execute(_INDEX_PHRASES, (int(lacking),))
                conn.execute("DELETE FROM meta WHERE key = 'phrases_from'")

    @staticmethod
    def _document_ids(conn: sqlite3.Connection, keys: list[tuple[str, str]]) -> list[int]:
        """The ids of the stored documents among ``(collection, source)`` keys."""
        by_collection: dict[str, list[str]] = {}
        for collection, source in keys:
            by_collection.setdefault(collection, []).append(source)
        found: list[int] = []
        for collection, sources in by_collection.items():
            for start in range(0, len(sources), 500):
                part = sources[start : start + 500]
                found += [
                    row[0]
                    for row in conn.execute(
                        "SELECT id FROM documents WHERE collection = ? AND source IN "
                        f"({','.join('?' * len(part))})",
                        (collection, *part),
                    )
                ]
        return found

    @staticmethod
    def _delete_ids(conn: sqlite3.Connection, ids: list[int]) -> None:
        """Delete documents (their chunks and links go by cascade) and their phrase-index
        rows, which no foreign key reaches."""
        for start in range(0, len(ids), 500):
            part = ids[start : start + 500]
            marks = ",".join("?" * len(part))
            conn.execute(
                "DELETE FROM chunks_fts WHERE rowid IN "
                f"(SELECT pk FROM chunks WHERE document_id IN ({marks}))",
                part,
            )
            conn.execute(f"DELETE FROM documents WHERE id IN ({marks})", part)

    def _delete(self, conn: sqlite3.Connection, source: str, collection: str | None) -> int:
        where = "source = ?" + (" AND collection = ?" if collection is not None else "")
        params: tuple[str, ...] = (source,) if collection is None else (source, collection)
        ids = [row[0] for row in conn.execute(f"SELECT id FROM documents WHERE {where}", params)]
        self._delete_ids(conn, ids)
        return len(ids)

    @_guarded
    def update_document_metadata(self, collection: str, updates: dict[str, dict[str, Any]]) -> None:
        """Merge keys into documents' metadata. Not through _write(): no index holds document
        metadata (filters read it from the rows), so nothing needs reloading."""
        if not updates:
            return
        with self._transaction(self._conn()) as conn:
            conn.executemany(
                "UPDATE documents SET metadata = json_patch(metadata, ?) "
                "WHERE collection = ? AND source = ?",
                [(json.dumps(keys), collection, source) for source, keys in updates.items()],
            )

    @_guarded
    def delete_document(self, source: str, collection: str | None = None) -> int:
        with self._write() as conn:
            return self._delete(conn, source, collection)

    @_guarded
    def sources(self, collection: str) -> list[str]:
        rows = self._conn().execute(
            "SELECT source FROM documents WHERE collection = ? ORDER BY source", (collection,)
        )
        return [row[0] for row in rows]

    @_guarded
    def documents(self, collection: str | None = None) -> list[DocumentRecord]:
        """The documents of a collection (every collection when None), by source."""
        where, params = (
            ("WHERE collection = ?", (collection,)) if collection is not None else ("", ())
        )
        rows = self._conn().execute(
            "SELECT collection, source, title, content_hash, metadata FROM documents "
            f"{where} ORDER BY collection, source",
            params,
        )
        return [
            DocumentRecord(coll, source, title, digest, _parse_json(meta))
            for coll, source, title, digest, meta in rows
        ]

    @_guarded
    def get_chunks(self, ids: Sequence[str]) -> list[Chunk]:
        if not ids:
            return []
        marks = ",".join("?" * len(ids))
        rows = self._conn().execute(f"{_SELECT_CHUNKS} WHERE c.id IN ({marks})", list(ids))
        found = {row[1]: _to_chunk(row, 1.0) for row in rows}
        return [found[i] for i in ids if i in found]

    # -- keyword search ------------------------------------------------------------------------
    def _scope_sql(self, scope: Scope) -> tuple[str, list[Any]]:
        clauses: list[str] = []
        params: list[Any] = []
        if scope.collections is not None:
            clauses.append(f"d.collection IN ({','.join('?' * len(scope.collections))})")
            params.extend(scope.collections)
        for key, wanted in scope.filters:
            column = _COLUMNS.get(key)
            if column is None:
                path = '$."' + key.replace('"', "") + '"'
                column = f"COALESCE(json_extract(c.metadata, '{path}'), "
                column += f"json_extract(d.metadata, '{path}'))"
            values = (
                list(wanted) if isinstance(wanted, list | tuple | set | frozenset) else [wanted]
            )
            clauses.append(f"{column} IN ({','.join('?' * len(values))})")
            params.extend(_sql_value(v) for v in values)
        return (" AND ".join(clauses), params)

    def _keyword_index(self) -> _KeywordIndex:
        """The BM25 index, rebuilt when a write changed the file: mapped from the file saved
        beside the knowledge base for this state of it, else built from the rows and saved."""
        generation = self._generation()
        index = self._keyword
        if index is not None and index.generation == generation:
            return index
        conn = self._conn()
        with _snapshot(conn):  # the state and the rows from one state of the file
            generation = self._generation()
            state = self._meta(conn, "text_state")
            path = self._saved_path("keyword", state)
            index = self._saved_keyword(path, generation) or self._build_keyword(conn, generation)
        if not index.saved and self._save(path, "keyword", index.rows, index.bm25.arrays(), {}):
            # searched from the saved copy, as every later process does: its pages are the
            # kernel's to drop and read again, where the built arrays would stay resident
            index = self._saved_keyword(path, generation) or index
        self._keyword = index
        return index

    def _build_keyword(self, conn: sqlite3.Connection, generation: int) -> _KeywordIndex:
        """Rows are read a block at a time and kept as compact arrays, never as a list of
        every row."""
        vocabulary, words = conn.execute(
            "SELECT coalesce(max(id), 0) + 1, count(*) FROM vocabulary"
        ).fetchone()
        if vocabulary > 2 * words + 1024:  # ids are dense; a damaged one must not size arrays
            raise ValueError(f"vocabulary id {vocabulary - 1} for {words} words")
        cursor = conn.execute(
            "SELECT c.pk, d.collection, c.terms FROM chunks c "
            "JOIN documents d ON d.id = c.document_id ORDER BY c.pk"
        )
        parts: list[tuple[npt.NDArray[np.int64], npt.NDArray[np.int32]]] = []
        names: dict[str, int] = {}

        def blocks() -> Iterator[PostingsBlock]:
            while rows := cursor.fetchmany(BLOCK):
                parts.append(_row_block(rows, names))
                yield block([unpack(row[2]) for row in rows])

        bm25 = BM25Index.from_blocks(blocks(), vocabulary)
        return _KeywordIndex(generation, _Rows.read(parts, names), bm25)

    def _saved_keyword(self, path: Path | None, generation: int) -> _KeywordIndex | None:
        saved = self._load_saved(path)
        if saved is None:
            return None
        arrays, _, rows = saved
        bm25 = BM25Index.from_arrays(len(rows.pks), arrays)
        if bm25 is None:
            saved_arrays.damaged(path, "its postings do not hold together")
            return None
        return _KeywordIndex(generation, rows, bm25, saved=True)

    def _meta(self, conn: sqlite3.Connection, key: str) -> str | None:
        row = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def _saved_path(self, kind: str, state: str | None) -> Path | None:
        """Where the index of ``kind`` for this state of the file is saved (None: a file
        without state tokens, which only an older ragloop wrote)."""
        if state is None:
            return None
        return self.path.with_name(f"{self.path.name}-{kind}-{state}.arrays")

    def _save(
        self,
        path: Path | None,
        kind: str,
        rows: _Rows,
        arrays: dict[str, npt.NDArray[Any]],
        info: dict[str, Any],
    ) -> bool:
        """Save an index's rows and ``arrays`` at ``path`` (beside the file, for this state of
        it) and remove the ones saved for earlier states. False when it was not saved."""
        if path is None or self.read_only:
            return False
        arrays = {"pks": rows.pks, "collections": rows.collections, **arrays}
        if not saved_arrays.save(path, arrays, {**info, "names": rows.names}):
            return False
        saved_arrays.remove_others(path, f"{self.path.name}-{kind}-*.arrays")
        return True

    def _load_saved(
        self, path: Path | None
    ) -> tuple[dict[str, npt.NDArray[Any]], dict[str, Any], _Rows] | None:
        """The arrays, info and rows :meth:`_save` wrote at ``path``; None when there is no
        such file or its rows do not hold together (said in a warning: it is built again)."""
        saved = saved_arrays.load(path) if path else None
        if path is None or saved is None:
            return None
        arrays, info = saved
        try:
            rows = _Rows(arrays["pks"], arrays["collections"], list(info["names"]))
        except (KeyError, TypeError):
            saved_arrays.damaged(path, "its rows are missing")
            return None
        problem = _rows_problem(rows)
        if problem:
            saved_arrays.damaged(path, problem)
            return None
        return arrays, info, rows

    def _scope_mask(self, rows: _Rows, scope: Scope) -> npt.NDArray[np.bool_] | None:
        """Which rows of an index the scope admits (None: all)."""
        if scope.collections is None and not scope.filters:
            return None
        pks = rows.pks
        mask = np.ones(len(pks), dtype=bool)
        if scope.collections is not None:
            wanted = [code for code, name in enumerate(rows.names) if name in scope.collections]
            mask &= np.isin(rows.collections, wanted)
        if scope.filters:
            where, params = self._scope_sql(scope)
            allowed = [
                row[0]
                for row in self._conn().execute(
                    "SELECT c.pk FROM chunks c JOIN documents d ON d.id = c.document_id "
                    f"WHERE {where}",
                    params,
                )
            ]
            mask &= np.isin(pks, np.array(allowed, dtype=np.int64))
        return mask

    @_guarded
    def load_indexes(self, *, keyword: bool = True, dense: bool = True) -> None:
        """Load (or reload, after writes) the in-memory indexes a search reads, before it
        needs them: the knowledge base does it while the query is embedded."""
        if keyword:
            self._keyword_index()
        if dense:
            self._dense_index()

    @_guarded
    def keyword_search(self, query: str, top_k: int, scope: Scope) -> list[Chunk]:
        hits = [
            (pk, score, {"bm25": round(score, 6), "bm25_raw": round(raw, 6)})
            for pk, score, raw in self._keyword_hits(query, top_k, scope)
        ]
        return self._chunks(hits, scope)

    def _keyword_hits(self, query: str, top_k: int, scope: Scope) -> list[tuple[int, float, float]]:
        """(row pk, normalised score, raw BM25) of the ``top_k`` best rows, best first."""
        terms = analyze(query)
        if not terms or scope.empty or top_k < 1:
            return []
        index = self._keyword_index()
        ids = self._term_ids(self._conn(), terms, add=False)
        mask = self._scope_mask(index.rows, scope)
        hits = index.bm25.search([ids[t] for t in terms if t in ids], top_k, mask)
        return [(int(index.rows.pks[i]), score, raw) for i, score, raw in hits]

    @_guarded
    def hybrid_search(
        self,
        query: str,
        vector: Sequence[float],
        top_k: int,
        scope: Scope,
        *,
        depth: int,
        k: int,
        weights: dict[str, float],
    ) -> list[Chunk]:
        """Keyword and vector search fused by reciprocal rank fusion on row numbers, so only
        the ``top_k`` fused rows are read (the knowledge base's generic fusion reads every
        row of both lists: ``2 * depth``). A query with exact terms
        (:mod:`ragloop.retrieval.exact`) reads every candidate's text to rank those holding
        them first."""
        rankings = {
            "bm25": [(pk, score) for pk, score, _ in self._keyword_hits(query, depth, scope)],
            "dense": self._vector_hits(vector, depth, scope),
        }
        terms = exact_terms(query)
        rows = None
        exact = None
        if terms:
            pks = list({pk for ranking in rankings.values() for pk, _ in ranking})
            rows = self._rows_by_pk(pks, scope)
            patterns = term_patterns(terms)
            held = {pk: exact_hits(patterns, _index_text(row)) for pk, row in rows.items()}
            exact = (held, len(terms))
        hits = fuse(rankings, top_k=top_k, k=k, weights=weights, exact=exact)
        return self._chunks(hits, scope, rows)

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
            chunk = _to_chunk(row, score)
            chunk.metadata["scores"] = signals
            out.append(chunk)
        return out

    # -- vectors ---------------------------------------------------------------------------------
    def _model(self, conn: sqlite3.Connection) -> tuple[str, int] | None:
        rows = dict(
            conn.execute(
                "SELECT key, value FROM meta WHERE key IN ('embedding_model', 'dimension')"
            ).fetchall()
        )
        if "embedding_model" not in rows:
            return None
        return rows["embedding_model"], int(rows["dimension"])

    @_guarded
    def embedding_model(self) -> tuple[str, int] | None:
        return self._model(self._conn())

    @_guarded
    def set_embedding_model(self, model_id: str, dimension: int) -> None:
        current = self.embedding_model()
        if current == (model_id, dimension):  # no write: an unchanged re-ingest changes nothing
            return
        if current is not None:
            raise StoreError(
                f"this knowledge base holds vectors of {current[0]} ({current[1]}-d); "
                f"it cannot mix in {model_id} ({dimension}-d)"
            )
        with self._write() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO meta VALUES ('embedding_model', ?), ('dimension', ?)",
                (model_id, str(dimension)),
            )

    @_guarded
    def cached_vectors(self, model_id: str, hashes: Sequence[str]) -> dict[str, list[float]]:
        found: dict[str, list[float]] = {}
        conn = self._conn()
        unique = list(dict.fromkeys(hashes))
        for start in range(0, len(unique), 500):
            batch = unique[start : start + 500]
            rows = conn.execute(
                f"SELECT text_hash, vector FROM vectors WHERE model_id = ? AND text_hash IN "
                f"({','.join('?' * len(batch))})",
                [model_id, *batch],
            )
            for text_hash, blob in rows:
                found[text_hash] = np.frombuffer(blob, dtype=np.float32).tolist()
        return found

    @_guarded
    def cache_vectors(self, model_id: str, items: dict[str, Sequence[float]]) -> None:
        if not items:
            return
        if self.read_only:  # a read-only file still answers queries
            return
        try:
            # not through _write(): cached vectors change no search result, so the dense
            # index and term statistics need not be reloaded
            with self._transaction(self._conn()) as conn:
                conn.executemany(
                    "INSERT OR IGNORE INTO vectors VALUES (?, ?, ?)",
                    [(model_id, h, _blob(v)) for h, v in items.items()],
                )
        except sqlite3.OperationalError as error:
            if not _not_writable(error):  # nor does a file made read-only since it was opened
                raise

    @_guarded
    def missing_vectors(self, model_id: str, limit: int) -> list[tuple[str, str]]:
        """Up to ``limit`` (text hash, index text) of chunks that have no vector of
        ``model_id``, each text once, in the order the chunks were stored.

        Each call goes on after the last row the previous one returned, so embedding a corpus
        window by window reads it once (from the start each time, it was quadratic); the
        first call, and a call that finds nothing left after that row (rows may have been
        stored meanwhile under smaller row numbers), start from the first chunk without a
        vector (:meth:`_first_missing`), not from the start of the table."""
        after = self._missing_after.get(model_id)
        rows = [] if after is None else self._missing_rows(model_id, limit, after)
        if not rows:
            rows = self._missing_rows(model_id, limit, self._first_missing(model_id) - 1)
        if rows:
            self._missing_after[model_id] = rows[-1][0]
        found: dict[str, str] = {}
        for _, text_hash, title, heading_path, content in rows:
            if text_hash not in found:
                found[text_hash] = index_text(title, _parse_json(heading_path), content)
        return list(found.items())

    def _missing_rows(self, model_id: str, limit: int, after: int) -> list[Any]:
        return (
            self._conn()
            .execute(
                "SELECT c.pk, c.text_hash, d.title, c.heading_path, c.content FROM chunks c "
                "JOIN documents d ON d.id = c.document_id WHERE c.pk > ? AND NOT EXISTS (SELECT 1 "
                "FROM vectors v WHERE v.model_id = ? AND v.text_hash = c.text_hash) "
                "ORDER BY c.pk LIMIT ?",
                (after, model_id, limit),
            )
            .fetchall()
        )

    @_guarded
    def count_missing_vectors(self, model_id: str) -> int:
        row = (
            self._conn()
            .execute(
                "SELECT count(DISTINCT c.text_hash) FROM chunks c WHERE c.pk >= ? AND NOT EXISTS "
                "(SELECT 1 FROM vectors v WHERE v.model_id = ? AND v.text_hash = c.text_hash)",
                (self._first_missing(model_id), model_id),
            )
            .fetchone()
        )
        return int(row[0])

    def _first_missing(self, model_id: str) -> int:
        """The row number of the first chunk without a vector of ``model_id`` (one past the
        last chunk when none lacks one), looked for from where the last search found one and
        recorded for the next. The store's vectors are never deleted, so a chunk that had one
        keeps it; ``replace_documents`` moves the record back when it gives row numbers
        again. Searched without a write lock (a reader must not wait for a writer) and
        recorded only if no chunks were written meanwhile; a file that cannot take the record
        now (read-only since it was opened, locked past the timeout) is searched the same way
        next time."""
        conn = self._conn()
        generation = self._generation()
        row = conn.execute(
            "SELECT pk FROM embedded_below WHERE model_id = ?", (model_id,)
        ).fetchone()
        start = row[0] if row else 0
        found = (
            conn.execute(
                "SELECT c.pk FROM chunks c WHERE c.pk >= ? AND NOT EXISTS (SELECT 1 FROM vectors v "
                "WHERE v.model_id = ? AND v.text_hash = c.text_hash) ORDER BY c.pk LIMIT 1",
                (start, model_id),
            ).fetchone()
            or conn.execute("SELECT coalesce(max(pk), 0) + 1 FROM chunks").fetchone()
        )
        if found[0] != start and not self.read_only:
            with contextlib.suppress(sqlite3.OperationalError), self._transaction(conn):
                if self._generation() == generation:
                    conn.execute(
                        "INSERT OR REPLACE INTO embedded_below VALUES (?, ?)", (model_id, found[0])
                    )
        return int(found[0])

    @_guarded
    def add_vectors(self, model_id: str, vectors: dict[str, Sequence[float]]) -> None:
        """Vectors of stored chunks (by text hash), in one transaction: dense search sees them
        from the next query on, in this process and others."""
        if not vectors:
            return
        with self._transaction(self._conn()) as conn:
            conn.executemany(
                "INSERT OR IGNORE INTO vectors VALUES (?, ?, ?)",
                [(model_id, h, _blob(v)) for h, v in vectors.items()],
            )
            # the dense index reloads; the keyword index, keyed by 'generation', does not
            conn.execute(
                "INSERT INTO meta VALUES ('vectors', '1') "
                "ON CONFLICT (key) DO UPDATE SET value = value + 1"
            )
            conn.execute(_NEW_STATE, ("vector_state",))

    def _dense_generation(self) -> str:
        """Changes when chunks are written and when vectors are added."""
        rows = dict(
            self._conn()
            .execute("SELECT key, value FROM meta WHERE key IN ('generation', 'vectors')")
            .fetchall()
        )
        return f"{rows.get('generation', 0)}:{rows.get('vectors', 0)}"

    def _dense_index(self) -> _DenseIndex | None:
        model = self.embedding_model()
        if model is None:
            return None
        generation = self._dense_generation()
        index = self._dense
        if index is not None and index.generation == generation and index.model_id == model[0]:
            return index
        with self._dense_lock:  # one thread loads (and builds the graph), the others wait
            index = self._dense
            if index is None or index.generation != generation or index.model_id != model[0]:
                index = self._load_dense(model, generation)
                self._dense = index
            return index

    def _load_dense(self, model: tuple[str, int], generation: str) -> _DenseIndex:
        """The vectors as columns: mapped from the file saved beside the knowledge base for
        this state of it and this model, else read from the rows and saved."""
        conn = self._conn()
        with _snapshot(conn):  # the state and the rows from one state of the file
            texts, vectors = self._meta(conn, "text_state"), self._meta(conn, "vector_state")
            path = self._saved_path("dense", f"{texts}-{vectors}" if texts and vectors else None)
            index = self._saved_dense(path, model, generation) or self._build_dense(
                conn, path, model, generation
            )
        index.approximate = self._approximate(index, self._dense)
        return index

    def _build_dense(
        self, conn: sqlite3.Connection, path: Path | None, model: tuple[str, int], generation: str
    ) -> _DenseIndex:
        """Read the vectors from the rows and save them; returns the saved copy, mapped (as
        the keyword index does; the built columns are freed on return), or the built one when
        saving failed."""
        built = self._read_dense(conn, model, generation)
        if not self._save(
            path, "dense", built.rows, {"columns": built.columns}, {"model_id": model[0]}
        ):
            return built
        return self._saved_dense(path, model, generation) or built

    def _read_dense(
        self, conn: sqlite3.Connection, model: tuple[str, int], generation: str
    ) -> _DenseIndex:
        joined = (
            "FROM chunks c JOIN documents d ON d.id = c.document_id "
            "JOIN vectors v ON v.text_hash = c.text_hash AND v.model_id = ?"
        )
        (count,) = conn.execute(f"SELECT count(*) {joined}", (model[0],)).fetchone()
        # filled a block at a time: the matrix is the only copy of the vectors held
        columns = np.empty((model[1], count), dtype=np.float32)
        cursor = conn.execute(
            f"SELECT c.pk, d.collection, v.vector {joined} ORDER BY c.pk", (model[0],)
        )
        parts: list[tuple[npt.NDArray[np.int64], npt.NDArray[np.int32]]] = []
        names: dict[str, int] = {}
        filled = 0
        while rows := cursor.fetchmany(BLOCK):
            parts.append(_row_block(rows, names))
            matrix = np.frombuffer(b"".join(row[2] for row in rows), dtype=np.float32)
            if not np.isfinite(matrix).all():  # a damaged blob: NaN would rank at random
                raise ValueError("stored vectors hold values that are not finite numbers")
            columns[:, filled : filled + len(rows)] = matrix.reshape(len(rows), model[1]).T
            filled += len(rows)
        return _DenseIndex(generation, model[0], _Rows.read(parts, names), columns)

    def _saved_dense(
        self, path: Path | None, model: tuple[str, int], generation: str
    ) -> _DenseIndex | None:
        saved = self._load_saved(path)
        if saved is None:
            return None
        arrays, info, rows = saved
        columns = arrays.get("columns")
        if columns is None or info.get("model_id") != model[0]:
            return None
        if columns.dtype != np.float32 or columns.shape != (model[1], len(rows.pks)):
            shape = (model[1], len(rows.pks))
            saved_arrays.damaged(path, f"vectors of shape {columns.shape}, not {shape}")
            return None
        return _DenseIndex(generation, model[0], rows, columns)

    def _approximate(
        self, index: _DenseIndex, previous: _DenseIndex | None
    ) -> ApproximateIndex | None:
        """The HNSW graph of a large dense index (:mod:`ragloop.retrieval.ann`): the previous
        one extended when chunks were only appended since, else the saved one, else built and
        saved."""
        if len(index.rows.pks) < ann.MIN_VECTORS or not ann.available():
            return None
        columns = index.columns
        if previous is not None and previous.approximate is not None:
            kept = len(previous.rows.pks)
            if (
                kept <= len(index.rows.pks)
                and previous.columns.shape[0] == columns.shape[0]
                and np.array_equal(previous.rows.pks, index.rows.pks[:kept])
                and np.array_equal(previous.columns, columns[:, :kept])
            ):
                previous.approximate.extend(columns)
                return self._save_graph(previous.approximate, columns)
        found = ApproximateIndex.load(self.path, columns)
        if found is None:
            found = self._save_graph(ApproximateIndex.build(columns), columns)
        return found

    def _save_graph(
        self, graph: ApproximateIndex, columns: npt.NDArray[np.float32]
    ) -> ApproximateIndex:
        """Save a graph beside the file and search the saved one, mapped, as the indexes'
        saved copies are (the built one is freed); the built one when saving failed."""
        if self.read_only:
            return graph
        graph.save(self.path, columns)
        return ApproximateIndex.load(self.path, columns) or graph

    @_guarded
    def vector_search(self, vector: Sequence[float], top_k: int, scope: Scope) -> list[Chunk]:
        hits = self._vector_hits(vector, top_k, scope)
        return self._chunks([(pk, score, {"dense": round(score, 6)}) for pk, score in hits], scope)

    def _vector_hits(
        self, vector: Sequence[float], top_k: int, scope: Scope
    ) -> list[tuple[int, float]]:
        """(row pk, cosine clipped to [0, 1]) of the ``top_k`` nearest rows, best first."""
        index = self._dense_index()
        if index is None or scope.empty or top_k < 1 or not len(index.rows.pks):
            return []
        query = np.asarray(vector, dtype=np.float32)
        norm = float(np.linalg.norm(query))
        if query.shape != (index.columns.shape[0],) or not np.isfinite(norm) or norm == 0.0:
            raise StoreError(
                f"query vector of shape {query.shape} and norm {norm}; the index holds "
                f"{index.columns.shape[0]}-d vectors"
            )
        query = query / norm
        mask = self._scope_mask(index.rows, scope)
        if mask is None and index.approximate is not None:
            # the graph's candidates, ranked by their exact scores
            candidates = index.approximate.candidates(query, max(ann.CANDIDATES, 4 * top_k))
            exact = query @ index.columns[:, candidates]
            best = _best(exact, top_k)
            top, found = candidates[best], exact[best]
        else:
            scores = query @ index.columns
            if mask is None:
                top = _best(scores, top_k)
            else:
                candidates = np.flatnonzero(mask)
                top = candidates[_best(scores[candidates], top_k)]
            found = scores[top]
        return [
            (int(index.rows.pks[i]), float(min(1.0, max(0.0, score))))
            for i, score in zip(top, found, strict=True)
        ]

    def _rows_by_pk(self, pks: list[int], scope: Scope) -> dict[int, tuple[Any, ...]]:
        where, params = self._scope_sql(scope)
        marks = ",".join("?" * len(pks))
        rows = self._conn().execute(
            f"{_SELECT_CHUNKS} WHERE c.pk IN ({marks})" + (f" AND {where}" if where else ""),
            [*pks, *params],
        )
        return {row[0]: tuple(row) for row in rows}

    # -- links ---------------------------------------------------------------------------------
    @_guarded
    def link_targets(self) -> list[tuple[str, str, str]]:
        """(name, chunk id, document key) for every document title and last heading."""
        rows = self._conn().execute(
            "SELECT d.title, c.id, d.collection || char(0) || d.source, "
            "json_extract(c.heading_path, '$[#-1]') "
            "FROM chunks c JOIN documents d ON d.id = c.document_id ORDER BY c.pk"
        )
        targets: list[tuple[str, str, str]] = []
        for title, chunk_id, doc_key, heading in rows:
            targets.extend((str(name), chunk_id, doc_key) for name in (title, heading) if name)
        return targets

    @_guarded
    def chunks_with_phrase(self, phrase: str, limit: int) -> list[tuple[str, str, str]]:
        words = tokenize(phrase)
        if not words:
            return []
        self._complete_phrases()
        match = '"' + " ".join(words).replace('"', "") + '"'
        rows = self._conn().execute(
            "SELECT c.id, d.collection || char(0) || d.source, c.content FROM chunks_fts f "
            "JOIN chunks c ON c.pk = f.rowid JOIN documents d ON d.id = c.document_id "
            "WHERE chunks_fts MATCH ? LIMIT ?",
            (match, limit),
        )
        return [tuple(row) for row in rows]

    @_guarded
    def add_links(self, links: Sequence[Link]) -> None:
        if links:
            with self._write() as conn:
                self._insert_links(conn, links)

    @staticmethod
    def _insert_links(conn: sqlite3.Connection, links: Sequence[Link]) -> None:
        conn.executemany(
            "INSERT OR IGNORE INTO links SELECT a.pk, b.pk, ? FROM chunks a, chunks b "
            "WHERE a.id = ? AND b.id = ?",
            [(link.mention, link.chunk_id, link.target_id) for link in links],
        )

    @_guarded
    def links_from(
        self, chunk_ids: Sequence[str], collections: Sequence[str] | None = None
    ) -> list[Link]:
        if not chunk_ids or (collections is not None and not collections):
            return []
        marks = ",".join("?" * len(chunk_ids))
        scoped, params = "", list(chunk_ids)
        if collections is not None:  # the target's collection, in the query
            scoped = (
                " AND b.document_id IN (SELECT id FROM documents WHERE collection IN "
                f"({','.join('?' * len(collections))}))"
            )
            params += list(collections)
        rows = self._conn().execute(
            "SELECT a.id, b.id, l.mention FROM links l JOIN chunks a ON a.pk = l.chunk_pk "
            f"JOIN chunks b ON b.pk = l.target_pk WHERE a.id IN ({marks}){scoped} "
            "ORDER BY a.pk, b.pk",
            params,
        )
        return [Link(*row) for row in rows]

    # -- bookkeeping --------------------------------------------------------------------------
    @_guarded
    def stats(self) -> StoreStats:
        conn = self._conn()
        collections = [
            CollectionInfo(name=name, documents=docs, chunks=chunks or 0)
            for name, docs, chunks in conn.execute(
                "SELECT d.collection, count(DISTINCT d.id), count(c.pk) FROM documents d "
                "LEFT JOIN chunks c ON c.document_id = d.id GROUP BY d.collection "
                "ORDER BY d.collection"
            )
        ]
        model = self._model(conn)
        size = sum(p.stat().st_size for p in (self.path, Path(f"{self.path}-wal")) if p.exists())
        return StoreStats(
            documents=sum(c.documents for c in collections),
            chunks=sum(c.chunks for c in collections),
            # the chunks that have a vector of the knowledge base's model; the vectors table is
            # a cache by text, so it may also hold texts no chunk has any more
            vectors=conn.execute(
                "SELECT count(*) FROM chunks c JOIN vectors v "
                "ON v.text_hash = c.text_hash AND v.model_id = ?",
                (model[0] if model else "",),
            ).fetchone()[0],
            links=conn.execute("SELECT count(*) FROM links").fetchone()[0],
            collections=collections,
            embedding_model=model[0] if model else None,
            dimension=model[1] if model else None,
            size_bytes=size,
            path=str(self.path),
        )

    @_guarded
    def integrity_check(self) -> str:
        """SQLite's ``PRAGMA integrity_check`` ("ok" when the file is sound)."""
        return str(self._conn().execute("PRAGMA integrity_check").fetchone()[0])


def _batch_rows(
    batch: list[tuple[DocumentRecord, list[ChunkRecord]]],
    document_id: int,
    pk: int,
    packed: Iterator[bytes],
    model_id: str | None,
) -> tuple[list[tuple[Any, ...]], ...]:
    """The rows of the documents, chunks and vectors tables for a batch, with
    row numbers after ``document_id`` and ``pk`` and the chunks' term frequencies ``packed``."""
    now = datetime.now(UTC).isoformat()
    documents: list[tuple[Any, ...]] = []
    chunks: list[tuple[Any, ...]] = []
    vectors: list[tuple[Any, ...]] = []
    for doc, records in batch:
        document_id += 1
        documents.append(
            (document_id, doc.collection, doc.source, doc.title, doc.content_hash,
             json.dumps(doc.metadata), now)
        )  # fmt: skip
        for chunk in records:
            pk += 1
            chunks.append(
                (pk, chunk.id, document_id, chunk.position, chunk.content,
                 json.dumps(chunk.heading_path), chunk.text_hash, json.dumps(chunk.metadata),
                 next(packed))
            )  # fmt: skip
            if model_id is not None and chunk.vector is not None:
                vectors.append((model_id, chunk.text_hash, _blob(chunk.vector)))
    return documents, chunks, vectors


@contextmanager
def _snapshot(conn: sqlite3.Connection) -> Iterator[None]:
    """Reads that see one state of the file (a read transaction, unless one is open)."""
    if conn.in_transaction:
        yield
        return
    conn.execute("BEGIN")
    try:
        yield
    finally:
        conn.execute("COMMIT")


def _not_writable(error: BaseException) -> bool:
    """Whether SQLite failed because this process may not write the file or its folder."""
    if isinstance(error, PermissionError):
        return True
    message = str(error)
    return isinstance(error, sqlite3.OperationalError) and (
        "readonly" in message or "unable to open database file" in message
    )


def _best(scores: npt.NDArray[np.floating[Any]], k: int) -> npt.NDArray[np.intp]:
    """Positions of the ``k`` highest scores, best first (stable on ties)."""
    k = min(k, len(scores))
    if not k:
        return np.zeros(0, dtype=np.intp)
    top = np.argpartition(-scores, k - 1)[:k]
    return top[np.argsort(-scores[top], kind="stable")]


def _blob(vector: Sequence[float] | npt.NDArray[np.float32]) -> bytes:
    return np.asarray(vector, dtype=np.float32).tobytes()


def _sql_value(value: Any) -> Any:
    if isinstance(value, bool):
        return int(value)
    return value


def _to_chunk(row: Sequence[Any], score: float) -> Chunk:
    (
        _pk,
        chunk_id,
        position,
        content,
        heading_path,
        chunk_meta,
        collection,
        source,
        title,
        doc_meta,
    ) = row
    metadata: dict[str, Any] = {**_parse_json(doc_meta), **_parse_json(chunk_meta)}
    metadata.update(
        collection=collection,
        title=title,
        heading_path=_parse_json(heading_path),
        position=position,
    )
    # the row was validated when it was written; a search returns many, so skip revalidation
    return Chunk.model_construct(
        content=content, source=source, score=score, metadata=metadata, id=chunk_id
    )


def _index_text(row: Sequence[Any]) -> str:
    """What keyword search indexed for a chunk row: title, headings, text."""
    return index_text(row[8], _parse_json(row[4]), row[3])


def _parse_json(text: str) -> Any:
    """A stored JSON value; the empty containers most rows hold skip the parser."""
    if text == "{}":
        return {}
    if text == "[]":
        return []
    return json.loads(text)
