"""Vectors and dense search in the SQLite store: the vectors table (also the embedding cache,
keyed by model and text hash), the chunks still without a vector, the vectors as columns
searched exactly in numpy, and above ``ann.MIN_VECTORS`` an HNSW graph
(:mod:`ragloop.kb.index.ann`)."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ragloop.core.errors import StoreError
from ragloop.core.records import Chunk, Scope
from ragloop.kb.index import ann, saved_arrays
from ragloop.kb.index.ann import ApproximateIndex
from ragloop.kb.stores.base import (
    index_text,
)
from ragloop.kb.stores.rows import parse_json
from ragloop.kb.stores.sqlite.database import guarded, not_writable, snapshot
from ragloop.kb.stores.sqlite.indexes import IndexRows, SavedIndexes, row_block
from ragloop.kb.stores.sqlite.schema import BLOCK, NEW_STATE, vector_blob


@dataclass
class _DenseIndex:
    generation: str
    model_id: str
    rows: IndexRows
    # (dimension, chunks), one column per chunk: ``query @ columns`` runs 2 to 3 times faster
    # than ``rows @ query`` here (BLAS walks contiguous memory in that layout)
    columns: npt.NDArray[np.float32]
    approximate: ApproximateIndex | None = None  # above ann.MIN_VECTORS, with usearch


class DenseSearch(SavedIndexes):
    """The vectors of the store, its dense index and the searches over it."""

    _dense: _DenseIndex | None = None

    @guarded
    def embedding_model(self) -> tuple[str, int] | None:
        return self._model(self._conn())

    @guarded
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

    @guarded
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

    @guarded
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
                    [(model_id, h, vector_blob(v)) for h, v in items.items()],
                )
        except sqlite3.OperationalError as error:
            if not not_writable(error):  # nor does a file made read-only since it was opened
                raise

    @guarded
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
                found[text_hash] = index_text(title, parse_json(heading_path), content)
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

    @guarded
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
        """The row number of the first chunk without a vector of ``model_id`` (one past the last
        chunk when none lacks one), looked for from where the last search found one and recorded
        for the next. The store's vectors are never deleted, so a chunk that had one keeps it,
        and new chunks get row numbers past any given before. Searched without a write lock (a
        reader must not wait for a writer) and recorded only if no chunks were written
        meanwhile; a file that cannot take the record now (read-only since it was opened, locked
        past the timeout) is searched the same way next time."""
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

    @guarded
    def add_vectors(self, model_id: str, vectors: dict[str, Sequence[float]]) -> None:
        """Vectors of stored chunks (by text hash), in one transaction: dense search sees them
        from the next query on, in this process and others."""
        if not vectors:
            return
        with self._transaction(self._conn()) as conn:
            conn.executemany(
                "INSERT OR IGNORE INTO vectors VALUES (?, ?, ?)",
                [(model_id, h, vector_blob(v)) for h, v in vectors.items()],
            )
            # the dense index reloads; the keyword index, keyed by 'generation', does not
            conn.execute(
                "INSERT INTO meta VALUES ('vectors', '1') "
                "ON CONFLICT (key) DO UPDATE SET value = value + 1"
            )
            conn.execute(NEW_STATE, ("vector_state",))

    def _dense_generation(self) -> str:
        """Changes when chunks are written and when vectors are added."""
        rows = dict(
            self._conn()
            .execute("SELECT key, value FROM meta WHERE key IN ('generation', 'vectors')")
            .fetchall()
        )
        return f"{rows.get('generation', 0)}:{rows.get('vectors', 0)}"

    def _dense_index(self, on_progress: ann.GraphProgress | None = None) -> _DenseIndex | None:
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
                index = self._load_dense(model, generation, on_progress)
                self._dense = index
            return index

    def _load_dense(
        self, model: tuple[str, int], generation: str, on_progress: ann.GraphProgress | None
    ) -> _DenseIndex:
        """The vectors as columns: mapped from the file saved beside the knowledge base for
        this state of it and this model, else read from the rows and saved."""
        conn = self._conn()
        with snapshot(conn):  # the state and the rows from one state of the file
            texts, vectors = self._meta(conn, "text_state"), self._meta(conn, "vector_state")
            state = f"{texts}-{vectors}" if texts and vectors else None
            path = self._saved_path("dense", state)
            index = self._saved_dense(path, model, generation) or self._build_dense(
                conn, path, model, generation
            )
        index.approximate = self._approximate(index, state, self._dense, on_progress)
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
            parts.append(row_block(rows, names))
            matrix = np.frombuffer(b"".join(row[2] for row in rows), dtype=np.float32)
            if not np.isfinite(matrix).all():  # a damaged blob: NaN would rank at random
                raise ValueError("stored vectors hold values that are not finite numbers")
            columns[:, filled : filled + len(rows)] = matrix.reshape(len(rows), model[1]).T
            filled += len(rows)
        return _DenseIndex(generation, model[0], IndexRows.read(parts, names), columns)

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
        self,
        index: _DenseIndex,
        state: str | None,
        previous: _DenseIndex | None,
        on_progress: ann.GraphProgress | None,
    ) -> ApproximateIndex | None:
        """The HNSW graph of a large dense index (:mod:`ragloop.kb.index.ann`): the one saved
        for this state, else the previous one (in memory, or the latest saved) extended with
        the vectors it lacks, else built; saved, then searched from its saved file."""
        pks, columns = index.rows.pks, index.columns
        if len(pks) < ann.MIN_VECTORS or not ann.available():
            return None
        dimension = columns.shape[0]
        found = None if state is None else ApproximateIndex.load(self.path, state, pks, dimension)
        if found is not None:
            return found
        graph = previous.approximate if previous is not None else None
        if graph is not None and graph.graph.ndim == dimension:
            graph = graph.copy()  # searches of the previous index may still read it
        else:
            graph = ApproximateIndex.latest(self.path, dimension)
        missing = graph.missing(pks) if graph is not None else None
        if graph is not None and missing is not None and not graph.stale(len(pks) - len(missing)):
            graph.add(missing, pks, columns, on_progress)
        else:
            graph = ApproximateIndex.build(pks, columns, on_progress)
        if state is None or self.read_only or not graph.save(self.path, state):
            return graph
        # the saved copy, mapped (the built one is freed), as the indexes' saved copies are
        return ApproximateIndex.load(self.path, state, pks, dimension) or graph

    @guarded
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
        if norm == 0.0 and query.shape == (index.columns.shape[0],):
            return []  # a query with nothing to embed ("\x1b") is near no passage
        if query.shape != (index.columns.shape[0],) or not np.isfinite(norm):
            raise StoreError(
                f"query vector of shape {query.shape} and norm {norm}; the index holds "
                f"{index.columns.shape[0]}-d vectors"
            )
        query = query / norm
        mask = self._scope_mask(index.rows, scope)
        if mask is None and index.approximate is not None:
            # the graph's candidates, ranked by their exact scores
            wanted = max(ann.CANDIDATES, 4 * top_k)
            candidates = index.approximate.candidates(query, wanted, index.rows.pks)
            exact = query @ index.columns[:, candidates]
            best = best_positions(exact, top_k)
            top, found = candidates[best], exact[best]
        else:
            scores = query @ index.columns
            if mask is None:
                top = best_positions(scores, top_k)
            else:
                candidates = np.flatnonzero(mask)
                top = candidates[best_positions(scores[candidates], top_k)]
            found = scores[top]
        return [
            (int(index.rows.pks[i]), float(min(1.0, max(0.0, score))))
            for i, score in zip(top, found, strict=True)
        ]


def best_positions(scores: npt.NDArray[np.floating[Any]], k: int) -> npt.NDArray[np.intp]:
    """Positions of the ``k`` highest scores, best first (stable on ties)."""
    k = min(k, len(scores))
    if not k:
        return np.zeros(0, dtype=np.intp)
    top = np.argpartition(-scores, k - 1)[:k]
    return top[np.argsort(-scores[top], kind="stable")]
