"""Knowledge-base retrieval quality on HotpotQA (500 questions, 4,858 pooled passages).

Each configuration retrieves 10 passages per question; we report recall@2/5/10 of *both* gold
passages (the question is answerable only with both) and, in brackets, partial-credit recall
(the share of gold passages found). bm25s, the library a user would otherwise pick for BM25,
runs on the same text in the same run. Embedding throughput is measured on 500 fresh passages;
the full-corpus vectors are cached in benchmarks/.cache so reruns skip the slow part.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import bm25s
from datasets import Question, hotpot_pool, recall

from ragloop.retrieval.embedders import EmbedderUnavailable, get_embedder
from ragloop.retrieval.knowledge_base import Document, KnowledgeBase

CACHE = Path(__file__).resolve().parent / ".cache"
KS = (2, 5, 10)


def evaluate(questions: list[Question], search) -> dict[int, tuple[float, float]]:  # type: ignore[no-untyped-def]
    sums = {k: [0.0, 0.0] for k in KS}
    for q in questions:
        titles = search(q.text)
        for k in KS:
            full, partial = recall(titles, q.gold, k)
            sums[k][0] += full
            sums[k][1] += partial
    return {k: (v[0] / len(questions), v[1] / len(questions)) for k, v in sums.items()}


def bm25s_search(passages: dict[str, str]):  # type: ignore[no-untyped-def]
    titles = list(passages)
    corpus = [f"{t}\n{passages[t]}" for t in titles]
    retriever = bm25s.BM25()
    retriever.index(
        bm25s.tokenize(corpus, stopwords="en", show_progress=False), show_progress=False
    )

    def search(query: str) -> list[str]:
        tokens = bm25s.tokenize([query], stopwords="en", show_progress=False)
        docs, _ = retriever.retrieve(tokens, k=10, show_progress=False)
        return [titles[i] for i in docs[0]]

    return search


def build_kb(passages: dict[str, str], embedder_name: str | None) -> tuple[KnowledgeBase, str]:
    CACHE.mkdir(exist_ok=True)
    path = CACHE / f"hotpot-{embedder_name or 'bm25'}.sqlite"
    embedder = get_embedder(embedder_name) if embedder_name else None
    kb = KnowledgeBase(path, embedder=embedder)
    docs = [Document(text=text, source=title, title=title) for title, text in passages.items()]
    started = time.perf_counter()
    report = kb.add_documents(docs)
    built = time.perf_counter() - started
    note = "cached" if report.added == 0 else f"built in {built:.0f} s"
    return kb, note


def throughput(passages: dict[str, str], embedder_name: str) -> float:
    embedder = get_embedder(embedder_name)
    sample = [f"{t}\n{x}" for t, x in list(passages.items())[:500]]
    started = time.perf_counter()
    embedder.embed(sample)
    return len(sample) / (time.perf_counter() - started)


def row(name: str, result: dict[int, tuple[float, float]], extra: str = "") -> str:
    cells = " | ".join(f"{result[k][0]:.3f} ({result[k][1]:.3f})" for k in KS)
    return f"| {name} | {cells} | {extra} |"


def run() -> str:
    questions, passages = hotpot_pool()
    lines = [
        "## Knowledge-base retrieval quality (HotpotQA)",
        "",
        f"Command: `make bench` (benchmarks/bench_retrieval.py). {len(questions)} questions, "
        f"{len(passages):,} pooled passages (title + text), top 10 per question. Cells: recall "
        "of both gold passages (partial-credit recall in brackets).",
        "",
        "| configuration | recall@2 | recall@5 | recall@10 | notes |",
        "|---|---|---|---|---|",
    ]
    reference = evaluate(questions, bm25s_search(passages))
    lines.append(row("bm25s 0.3 (reference, English stopwords)", reference))
    kb, note = build_kb(passages, None)

    def kb_search(kb: KnowledgeBase, mode: str):  # type: ignore[no-untyped-def]
        def search(query: str) -> list[str]:
            seen: list[str] = []
            for chunk in kb.search(query, mode=mode, top_k=20):  # type: ignore[arg-type]
                if chunk.source not in seen:
                    seen.append(chunk.source)
            return seen[:10]

        return search

    timings = []

    def timed_search(query: str) -> list[str]:
        started = time.perf_counter()
        out = kb_search(kb, "bm25")(query)
        timings.append((time.perf_counter() - started) * 1000)
        return out

    ours_bm25 = evaluate(questions, timed_search)
    lines.append(
        row(
            "ragloop bm25 (SQLite FTS5)",
            ours_bm25,
            f"{statistics.median(timings):.1f} ms/query p50",
        )
    )
    kb.close()
    gap = (ours_bm25[10][1] - reference[10][1]) * 100
    for name in ("minilm", "e5"):
        try:
            speed = throughput(passages, name)
            kb, note = build_kb(passages, name)
        except EmbedderUnavailable as error:
            lines.append(f"| {name} | skipped: {error} | | | |")
            continue
        lines.append(
            row(
                f"ragloop dense, {name}",
                evaluate(questions, kb_search(kb, "dense")),
                f"{speed:.0f} passages/s to embed; {note}",
            )
        )
        lines.append(
            row(
                f"ragloop hybrid (RRF k=60), bm25 + {name}",
                evaluate(questions, kb_search(kb, "hybrid")),
            )
        )
        kb.fusion_weights = {"bm25": 0.5, "dense": 1.0}
        lines.append(
            row(
                f"ragloop hybrid, RRF weights bm25 0.5 / {name} 1.0",
                evaluate(questions, kb_search(kb, "hybrid")),
            )
        )
        kb.close()
    lines += [
        "",
        f"FTS5 BM25 against bm25s at recall@10 (partial credit): {gap:+.1f} points.",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(run())
