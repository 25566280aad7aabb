"""Soak: a `ragloop serve` process over many mixed requests, its memory measured after each
round (issue 58, item 5: RSS climbed from 122 MB to 1.62 GB over 2,800 requests).

Rounds of 200 concurrent requests, mixed as a deployment meets them: asks with each engine
(JSON and streamed), searches, `/v1/retrieve`, OpenAI-style chats, trace listings; every ask
a question of its own (the demo shop's questions, numbered per round), and one round of a
single repeated question. RSS is read from ``/proc/<pid>/status`` after each round. Flat means
within 10% over the last half of the rounds (after warm-up).

    python benchmarks/run.py bench_soak
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

import httpx
from bench_serve import QUESTIONS, Server

from ragloop.demo import demo_documents
from ragloop.kb.knowledge_base import KnowledgeBase

ROUNDS = int(__import__("os").environ.get("SOAK_ROUNDS", "30"))
PER_ROUND = 200
REPEATED = "How long do I have to return an item?"


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def requests_of(round_no: int) -> list[tuple[str, dict[str, object]]]:
    """The round's requests: (path, JSON body); questions numbered so none repeats."""
    made: list[tuple[str, dict[str, object]]] = []
    for i in range(PER_ROUND):
        question = f"{QUESTIONS[(round_no * PER_ROUND + i) % len(QUESTIONS)]} ({round_no}.{i})"
        kind = i % 10
        if kind in (0, 1):
            made.append(("/v1/ask", {"question": question, "engine": "rag"}))
        elif kind == 2:
            made.append(("/v1/ask", {"question": question, "engine": "agent"}))
        elif kind == 3:
            made.append(("/v1/ask", {"question": question, "engine": "retrieval"}))
        elif kind == 4:
            made.append(("/v1/ask", {"question": question, "stream": True}))
        elif kind in (5, 6):
            made.append(("/v1/search", {"query": question, "top_k": 5}))
        elif kind == 7:
            made.append(("/v1/retrieve", {"question": question}))
        elif kind == 8:
            messages = [{"role": "user", "content": question}]
            made.append(("/v1/chat/completions", {"model": "ragloop", "messages": messages}))
        else:
            made.append(("GET /v1/traces", {}))
    return made


async def one_round(url: str, requests: list[tuple[str, dict[str, object]]]) -> int:
    """Send the round all at once; how many did not succeed."""
    limits = httpx.Limits(max_connections=PER_ROUND, max_keepalive_connections=PER_ROUND)
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as client:

        async def send(path: str, body: dict[str, object]) -> bool:
            if path.startswith("GET "):
                response = await client.get(path[4:], params={"limit": 50})
            else:
                response = await client.post(path, json=body)
            return response.status_code == 200

        done = await asyncio.gather(*(send(p, b) for p, b in requests), return_exceptions=True)
    return sum(1 for ok in done if ok is not True)


def run() -> str:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        kb_path = folder / "kb.sqlite"
        with KnowledgeBase(kb_path) as kb:
            kb.add_documents(demo_documents())
        with Server(str(kb_path), folder) as server:
            pid = server.process.pid
            start = rss_mb(pid)
            rows, failed, total = [], 0, 0
            for n in range(ROUNDS):
                batch = requests_of(n)
                failed += asyncio.run(one_round(server.url, batch))
                total += len(batch)
                rows.append((n + 1, total, rss_mb(pid)))
            repeated = [("/v1/ask", {"question": REPEATED, "engine": "rag"})] * PER_ROUND
            before = rss_mb(pid)
            for _ in range(3):
                failed += asyncio.run(one_round(server.url, repeated))
                total += PER_ROUND
            after_repeats = rss_mb(pid)
    half = [rss for _, _, rss in rows[len(rows) // 2 :]]
    spread = (max(half) - min(half)) / min(half) * 100
    shown = [rows[i] for i in sorted({0, 1, 2, 4, 9, 14, 19, 24, len(rows) - 1}) if i < len(rows)]
    lines = [
        "## Soak: `ragloop serve` memory over many requests",
        "",
        f"One `ragloop serve` process (demo knowledge base, SQLite, MiniLM, offline engines, no "
        f"keys), {ROUNDS} rounds of {PER_ROUND} concurrent mixed requests (asks with each "
        "engine, JSON and streamed; searches; `/v1/retrieve`; OpenAI chats; trace listings), "
        f"each ask a question of its own, then {3 * PER_ROUND} asks of one repeated question. "
        f"{total:,} requests, {failed} failed.",
        "",
        "| after round | requests | RSS |",
        "|---|---|---|",
        f"| (started) | 0 | {start:.0f} MB |",
        *(f"| {n} | {done:,} | {rss:.0f} MB |" for n, done, rss in shown),
        f"| + {3 * PER_ROUND} repeats | {total:,} | {after_repeats:.0f} MB |",
        "",
        f"Over the last half of the rounds RSS moved within {spread:.1f}% (min {min(half):.0f}, "
        f"max {max(half):.0f} MB); the {3 * PER_ROUND} repeated asks moved it "
        f"{after_repeats - before:+.0f} MB. Before issue 58 the server kept every run's trace "
        "record in memory: RSS rose from 122 MB to 1.62 GB over 2,800 requests.",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(run())
