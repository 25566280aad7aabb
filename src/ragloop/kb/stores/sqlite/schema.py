"""The SQLite store's schema: numbered migrations (each with why it exists), the statements
and columns the parts share, and how a vector is stored (float32 bytes)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

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
        # frequencies (see ragloop.kb.index.bm25); FTS5 stays for phrase lookups
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
        # saved beside the file (ragloop.kb.index.saved_arrays), so an index saved for one
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
NEW_STATE = "UPDATE meta SET value = lower(hex(randomblob(8))) WHERE key = ?"
# the phrase index holds each chunk's text: a phrase search finds candidates for the title
# links, which links.mentions_name then checks in that text
INDEX_PHRASES = "INSERT INTO chunks_fts (rowid, text) SELECT pk, content FROM chunks WHERE pk >= ?"
# Columns that filters may name directly; any other key is looked up in the chunk's metadata,
# then the document's.
FILTER_COLUMNS = {
    "collection": "d.collection",
    "source": "d.source",
    "title": "d.title",
    "position": "c.position",
}
CHUNK_COLUMNS = (
    "c.pk, c.id, c.position, c.content, c.heading_path, c.metadata, "
    "d.collection, d.source, d.title, d.metadata, d.content_hash"
)
BLOCK = 8192  # rows read at a time when an index is loaded
CHECKPOINT_PAGES = 16384  # pages of write-ahead log (4 KB each) copied into the file at once
SELECT_CHUNKS = f"SELECT {CHUNK_COLUMNS} FROM chunks c JOIN documents d ON d.id = c.document_id"
SCHEMA_VERSION = MIGRATIONS[-1][0]


def vector_blob(vector: Sequence[float] | npt.NDArray[np.float32]) -> bytes:
    return np.asarray(vector, dtype=np.float32).tobytes()
