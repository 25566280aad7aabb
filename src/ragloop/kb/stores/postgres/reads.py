"""Reads of the PostgreSQL store: documents, chunks, BM25 keyword search over the postings
blocks, vector search over the HNSW index, the vectors still missing, the link graph and the
stats."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from ragloop.core.errors import StoreError
from ragloop.core.records import Chunk, Scope
from ragloop.core.text import tokenize
from ragloop.kb.index.bm25 import query_words
from ragloop.kb.stores.base import (
    CollectionInfo,
    DocumentRecord,
    Link,
    StoreStats,
    index_text,
)
from ragloop.kb.stores.postgres import postings
from ragloop.kb.stores.postgres.connection import PostgresDatabase, as_vector
from ragloop.kb.stores.postgres.schema import (
    CHUNK_COLUMNS,
    FILTER_COLUMNS,
    FROM_CHUNKS,
    KEYWORD_QUERY,
    QUERY_LEXEMES,
    SCOPED_KEYWORD_QUERY,
    TEXT_CONFIG,
)
from ragloop.kb.stores.rows import chunk_from_row

if TYPE_CHECKING:
    import psycopg

# a lexeme's postings in scope: chunk pks and BM25 weights without the idf
Weighed = tuple["npt.NDArray[np.integer]", "npt.NDArray[np.float32]"]
FILTERED_WINDOW = 8  # candidates checked against metadata filters first, per result wanted


class PostgresReads(PostgresDatabase):
    """Every read of the store."""

    def document_hash(self, collection: str, source: str) -> str | None:
        with self._connection() as conn:
            row = conn.execute(
                "SELECT content_hash FROM documents WHERE collection = %s AND source = %s",
                (collection, source),
            ).fetchone()
        return row[0] if row else None

    def sources(self, collection: str) -> list[str]:
        with self._connection() as conn:
            rows = conn.execute(
                "SELECT source FROM documents WHERE collection = %s ORDER BY source",
                (collection,),
            ).fetchall()
        return [row[0] for row in rows]

    def documents(self, collection: str | None = None) -> list[DocumentRecord]:
        """The documents of a collection (every collection when None), by source."""
        where, params = (
            ("WHERE collection = %s", (collection,)) if collection is not None else ("", ())
        )
        with self._connection() as conn:
            rows = conn.execute(
                "SELECT collection, source, title, content_hash, metadata FROM documents "
                f"{where} ORDER BY collection, source",
                params,
            ).fetchall()
        return [DocumentRecord(*row) for row in rows]

    def document_chunks(self, collection: str, source: str) -> list[Chunk]:
        """One document's chunks, in their order in it (none: no such document)."""
        with self._connection() as conn:
            rows = conn.execute(
                f"SELECT {CHUNK_COLUMNS} {FROM_CHUNKS} WHERE c.collection = %s AND d.source = %s "
                "ORDER BY c.position",
                (collection, source),
            ).fetchall()
        return [chunk_from_row(row, 1.0) for row in rows]

    def get_chunks(self, ids: Sequence[str]) -> list[Chunk]:
        if not ids:
            return []
        with self._connection() as conn:
            rows = conn.execute(
                f"SELECT {CHUNK_COLUMNS} {FROM_CHUNKS} WHERE c.id = ANY (%s)", (list(ids),)
            ).fetchall()
        found = {row[1]: chunk_from_row(row, 1.0) for row in rows}
        return [found[i] for i in ids if i in found]

    def _scope_sql(self, scope: Scope) -> tuple[str, list[Any]]:
        clauses: list[str] = ["true"]
        params: list[Any] = []
        if scope.collections is not None:
            clauses.append("c.collection = ANY (%s)")
            params.append(list(scope.collections))
        for key, wanted in scope.filters:
            values = (
                list(wanted) if isinstance(wanted, list | tuple | set | frozenset) else [wanted]
            )
            column = FILTER_COLUMNS.get(key)
            if column is None:
                clauses.append("coalesce(c.metadata -> %s, d.metadata -> %s) = ANY (%s)")
                from psycopg.types.json import Jsonb  # the postgres extra, there when used

                params += [key, key, [Jsonb(v) for v in values]]
            elif key == "position":
                clauses.append(f"{column} = ANY (%s::integer[])")
                params.append([v for v in values if isinstance(v, int)])
            else:
                clauses.append(f"{column} = ANY (%s::text[])")
                params.append([str(v) for v in values])
        return " AND ".join(clauses), params

    def keyword_search(self, query: str, top_k: int, scope: Scope) -> list[Chunk]:
        """BM25 over the blocks of the query's lexemes (:mod:`.postings`): one row per
        lexeme from PostgreSQL (none read for a lexeme this process holds already:
        :mod:`.postings_cache`), the scores added up in numpy, then the best chunks' rows.
        A collection scope has statistics of its own (its collections' chunk count, document
        frequencies and average length). Metadata filters are applied in SQL to the
        candidates in score order, a window at a time, so the top is exact however few
        chunks pass."""
        terms = query_words(query)
        if not terms or scope.empty or top_k < 1:
            return []
        with self._connection() as conn:
            chunks, lexemes = self._query_postings(conn, " ".join(terms), scope.collections)
            pks, weights, ceiling = postings.score(lexemes, chunks)
            held, scores = postings.totals(pks, weights)
            if scope.filters:
                ranked = postings.in_score_order(held, scores)
                hits = self._filtered(conn, ranked, top_k, scope)
            else:
                hits = self._chunks_by_pk(conn, postings.best(held, scores, top_k))
        out = []
        for raw, row in hits:
            score = min(1.0, max(0.0, raw / ceiling)) if ceiling > 0 else 0.0
            chunk = chunk_from_row(row, score)
            chunk.metadata["scores"] = {"bm25": round(score, 6), "bm25_raw": round(raw, 6)}
            out.append(chunk)
        return out

    def _query_postings(
        self,
        conn: psycopg.Connection[tuple[Any, ...]],
        words: str,
        collections: Collection[str] | None,
    ) -> tuple[float, list[Weighed]]:
        """The number of chunks in scope and, per query lexeme a chunk in scope holds, in the
        query's order, its postings in scope: (pks, weights without the idf) at the scope's
        average length. From the cache where it holds them, else read (and, for a query of
        every collection, kept)."""
        lexemes = self._query_lexemes(conn, words)
        cache = self._postings_cache
        held_for, held = (None, {}) if cache is None else cache.entries(lexemes)
        query = KEYWORD_QUERY if collections is None else SCOPED_KEYWORD_QUERY
        params = {
            "lexemes": lexemes,
            "collections": None if collections is None else sorted(collections),
            "held": list(held),
        }
        rows = conn.execute(query, params).fetchall()
        chunks, average_length, writes = float(rows[0][0]), float(rows[0][1]), int(rows[0][2])
        if held and writes != held_for:  # held for an earlier state: read them too
            held = {}
            rows = conn.execute(query, {**params, "held": []}).fetchall()
            chunks, average_length, writes = float(rows[0][0]), float(rows[0][1]), int(rows[0][2])
        found: dict[str, Weighed] = {}
        for lexeme, held_postings in held.items():  # every collection's postings
            if collections is None:
                found[lexeme] = (held_postings.pks, held_postings.weights)
            else:
                pks, weights = postings.in_scope(held_postings, collections, average_length)
                if len(pks):
                    found[lexeme] = (pks, weights)
        for lexeme, entries, segments, counts, names in (row[3:] for row in rows):
            if lexeme is None:  # no other lexeme of the query is in scope: one empty row
                continue
            read = postings.lexeme_postings(bytes(entries), segments, counts, names, average_length)
            if cache is not None and collections is None:  # every collection's blocks: kept
                cache.put(lexeme, read, writes)
            found[lexeme] = (read.pks, read.weights)
        return chunks, [found[lexeme] for lexeme in lexemes if lexeme in found]

    def _query_lexemes(self, conn: psycopg.Connection[tuple[Any, ...]], words: str) -> list[str]:
        """The lexemes of the query's words (PostgreSQL's stemming), remembered per text."""
        found = self._lexemes_of.get(words)
        if found is None:
            row = conn.execute(QUERY_LEXEMES, (words,)).fetchone()
            found = list(row[0]) if row and row[0] else []
            if len(self._lexemes_of) >= 4096:
                self._lexemes_of.pop(next(iter(self._lexemes_of)))
            self._lexemes_of[words] = found
        return found

    @staticmethod
    def _chunks_by_pk(
        conn: psycopg.Connection[tuple[Any, ...]],
        ranked: list[tuple[int, float]],
        where: str = "true",
        params: Sequence[Any] = (),
    ) -> list[tuple[float, tuple[Any, ...]]]:
        """(score, chunk row) of the ranked (pk, score) in their order, those ``where`` admits."""
        if not ranked:
            return []
        rows = conn.execute(
            f"SELECT {CHUNK_COLUMNS} {FROM_CHUNKS} WHERE c.pk = ANY (%s) AND {where}",
            [[pk for pk, _ in ranked], *params],
            prepare=False,
        ).fetchall()
        by_pk = {row[0]: row for row in rows}
        return [(score, by_pk[pk]) for pk, score in ranked if pk in by_pk]

    def _filtered(
        self,
        conn: psycopg.Connection[tuple[Any, ...]],
        ranked: tuple[npt.NDArray[np.int64], npt.NDArray[np.float64]],
        top_k: int,
        scope: Scope,
    ) -> list[tuple[float, tuple[Any, ...]]]:
        """The first ``top_k`` of the ranked (pks, scores) the scope's filters admit, checked
        in windows that grow eightfold (one query when the filters admit most chunks)."""
        where, params = self._scope_sql(Scope(None, scope.filters))
        pks, scores = ranked
        found: list[tuple[float, tuple[Any, ...]]] = []
        start, window = 0, FILTERED_WINDOW * top_k
        while start < len(pks) and len(found) < top_k:
            part = slice(start, start + window)
            candidates = list(zip(pks[part].tolist(), scores[part].tolist(), strict=True))
            found += self._chunks_by_pk(conn, candidates, where, params)
            start, window = start + window, window * 8
        return found[:top_k]

    def vector_search(self, vector: Sequence[float], top_k: int, scope: Scope) -> list[Chunk]:
        if scope.empty or top_k < 1:
            return []
        query = as_vector(vector)
        where, scope_params = self._scope_sql(scope)
        with self._connection() as conn:
            model = self._recorded_model(conn)
            if model is None or model[1] == 0:
                return []
            if len(query) != model[1] or not query.any():
                raise StoreError(
                    f"the query vector must be a non-zero {model[1]}-d vector, not {len(query)}-d"
                )
            settings = ["hnsw.ef_search", str(max(self.ef_search, top_k))]
            if self._has_iterative_scan:  # pgvector 0.8: walk on until top_k pass the scope
                settings += ["hnsw.iterative_scan", self.iterative_scan]
            calls = ", ".join(["set_config(%s, %s, true)"] * (len(settings) // 2))
            conn.execute(f"SELECT {calls}", settings)
            rows = conn.execute(
                f"SELECT v.embedding <=> %b AS distance, {CHUNK_COLUMNS} FROM chunk_vectors v "
                f"JOIN chunks c ON c.pk = v.chunk_pk JOIN documents d ON d.id = c.document_id "
                f"WHERE {where} ORDER BY distance LIMIT %s",
                [query, *scope_params, top_k],
            ).fetchall()
        rows.sort(key=lambda row: (row[0], row[1]))  # relaxed order: exact order restored here
        out = []
        for row in rows:
            score = min(1.0, max(0.0, 1.0 - float(row[0])))
            chunk = chunk_from_row(row[1:], score)
            chunk.metadata["scores"] = {"dense": round(score, 6)}
            out.append(chunk)
        return out

    def cached_vectors(self, model_id: str, hashes: Sequence[str]) -> dict[str, list[float]]:
        if not hashes:
            return {}
        with self._connection() as conn:
            rows = conn.execute(
                "SELECT text_hash, embedding::float4[] FROM embeddings "
                "WHERE model_id = %s AND text_hash = ANY (%s)",
                (model_id, list(dict.fromkeys(hashes))),
            ).fetchall()
        return {text_hash: list(vector) for text_hash, vector in rows}

    def missing_vectors(self, model_id: str, limit: int) -> list[tuple[str, str]]:
        """Up to ``limit`` (text hash, index text) of chunks stored without a vector, each
        text once, in the order the chunks were stored (one model per knowledge base). Each
        call goes on after the last chunk the previous one returned (an embedding phase reads
        the table once); when none is left there, it looks again from the first chunk (a
        writer may have committed chunks of smaller pks meanwhile)."""
        after = self._missing_after
        rows = self._missing_rows(limit, after) if after else []
        if not rows:
            rows = self._missing_rows(limit, 0)
        if rows:
            self._missing_after = rows[-1][0]
        found: dict[str, str] = {}
        for _, text_hash, title, heading_path, content in rows:
            found.setdefault(text_hash, index_text(title, heading_path, content))
        return list(found.items())

    def _missing_rows(self, limit: int, after: int) -> list[tuple[Any, ...]]:
        with self._connection() as conn:
            return conn.execute(
                "SELECT c.pk, c.text_hash, d.title, c.heading_path, c.content FROM chunks c "
                "JOIN documents d ON d.id = c.document_id WHERE c.pk > %s AND NOT EXISTS "
                "(SELECT 1 FROM chunk_vectors v WHERE v.chunk_pk = c.pk) ORDER BY c.pk LIMIT %s",
                (after, limit),
            ).fetchall()

    def count_missing_vectors(self, model_id: str) -> int:
        with self._connection() as conn:
            row = conn.execute(
                "SELECT count(DISTINCT c.text_hash) FROM chunks c WHERE NOT EXISTS "
                "(SELECT 1 FROM chunk_vectors v WHERE v.chunk_pk = c.pk)"
            ).fetchone()
        return int(row[0]) if row else 0

    def link_targets(self) -> list[tuple[str, str, str]]:
        """(name, chunk id, document key) for every document title and last heading."""
        with self._connection() as conn:
            rows = conn.execute(
                "SELECT d.title, c.id, c.collection, d.source, c.heading_path ->> -1 "
                f"{FROM_CHUNKS} ORDER BY c.pk"
            ).fetchall()
        targets: list[tuple[str, str, str]] = []
        for title, chunk_id, collection, source, heading in rows:
            key = f"{collection}\0{source}"
            targets.extend((str(name), chunk_id, key) for name in (title, heading) if name)
        return targets

    def chunks_with_phrase(self, phrase: str, limit: int) -> list[tuple[str, str, str]]:
        return self.chunks_with_phrases([phrase], limit).get(phrase, [])

    def chunks_with_phrases(
        self, phrases: Sequence[str], limit: int
    ) -> dict[str, list[tuple[str, str, str]]]:
        """:meth:`chunks_with_phrase` of each phrase, in one query (ingestion looks up every
        new name of a batch: a round trip each was most of the links' time)."""
        spelled = {phrase: " ".join(tokenize(phrase)) for phrase in phrases}
        wanted = sorted({words for words in spelled.values() if words})
        if not wanted:
            return {}
        with self._connection() as conn:
            rows = conn.execute(
                f"SELECT p.words, m.id, m.collection, m.source, m.content "
                f"FROM unnest(%s::text[]) AS p (words) CROSS JOIN LATERAL ("
                f"SELECT c.pk, c.id, c.collection, d.source, c.content {FROM_CHUNKS} "
                f"WHERE c.tsv @@ phraseto_tsquery('{TEXT_CONFIG}', p.words) "
                f"ORDER BY c.pk LIMIT %s) m ORDER BY p.words, m.pk",
                (wanted, limit),
                prepare=False,
            ).fetchall()
        by_words: dict[str, list[tuple[str, str, str]]] = {}
        for words, chunk_id, collection, source, content in rows:
            by_words.setdefault(words, []).append((chunk_id, f"{collection}\0{source}", content))
        return {phrase: by_words.get(words, []) for phrase, words in spelled.items() if words}

    def links_from(
        self, chunk_ids: Sequence[str], collections: Sequence[str] | None = None
    ) -> list[Link]:
        if not chunk_ids or (collections is not None and not collections):
            return []
        scoped = (
            ""
            if collections is None
            else (" AND b.document_id IN (SELECT id FROM documents WHERE collection = ANY (%s))")
        )
        params: list[Any] = [list(chunk_ids)]
        if collections is not None:  # the target's collection, in the query
            params.append(list(collections))
        with self._connection() as conn:
            rows = conn.execute(
                "SELECT a.id, b.id, l.mention FROM links l JOIN chunks a ON a.pk = l.chunk_pk "
                f"JOIN chunks b ON b.pk = l.target_pk WHERE a.id = ANY (%s){scoped} "
                "ORDER BY a.pk, b.pk",
                params,
            ).fetchall()
        return [Link(*row) for row in rows]

    def stats(self) -> StoreStats:
        with self._connection() as conn:
            collections = [
                CollectionInfo(name=name, documents=docs, chunks=chunks)
                for name, docs, chunks in conn.execute(
                    "SELECT d.collection, count(DISTINCT d.id), count(c.pk) FROM documents d "
                    "LEFT JOIN chunks c ON c.document_id = d.id GROUP BY d.collection "
                    "ORDER BY d.collection"
                )
            ]
            # the chunks that have a vector (embeddings is a cache by text, not the index)
            counts = conn.execute(
                "SELECT (SELECT count(*) FROM chunk_vectors), "
                "(SELECT count(*) FROM links), "
                "(SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = %s AND c.relkind = 'r')",
                (self.schema,),
            ).fetchone()
            model = self._recorded_model(conn)
        assert counts is not None
        return StoreStats(
            documents=sum(c.documents for c in collections),
            chunks=sum(c.chunks for c in collections),
            vectors=counts[0],
            links=counts[1],
            collections=collections,
            embedding_model=model[0] if model else None,
            dimension=model[1] if model else None,
            size_bytes=int(counts[2] or 0),
            path=self.location,
        )
