"""MiniLM's sequence length and batch size: embedding speed against retrieval quality.

The default embedder read up to 256 word pieces of a chunk; all-MiniLM-L6-v2 was trained on 128.
Speed: chunks per second of the bare model on 400 chunks of the Python docs (the length mix of a
real ingest), each setting timed three times in turn (median), so the ratios hold under load.
Quality: dense and hybrid search on the four retrieval sets of BENCHMARKS.md and page@5 on the
pydocs questions, with the passages embedded at each length (queries are shorter than 128 word
pieces, so they embed the same either way). Knowledge bases are cached in benchmarks/.cache.
"""

from __future__ import annotations

import random
import statistics
import time

import pydocs
from bench_retrieval import CACHE, DATASETS, ids, rankings, score

from ragloop.evaluation.configurations import build_knowledge_base
from ragloop.evaluation.datasets import load_dataset
from ragloop.retrieval.chunking import chunk_document
from ragloop.retrieval.embedders import MiniLMEmbedder
from ragloop.retrieval.fusion import reciprocal_rank_fusion
from ragloop.retrieval.knowledge_base import KnowledgeBase
from ragloop.retrieval.readers import read_html
from ragloop.retrieval.store import index_text

LENGTHS = (256, 128)
SPEED_SETTINGS = ((256, 32), (256, 8), (128, 32), (128, 16), (128, 8))


def pydocs_sample(n: int = 400) -> list[str]:
    """Index texts of ``n`` chunks drawn from every third page of the docs."""
    texts = []
    for path in sorted(pydocs.corpus().rglob("*.html"))[::3]:
        doc = read_html(path.read_text(encoding="utf-8"), path)
        texts += [index_text(doc.title, c.heading_path, c.text) for c in chunk_document(doc)]
    return random.Random(0).sample(texts, n)


def speed_rows() -> list[str]:
    texts = pydocs_sample()
    embedders = {s: MiniLMEmbedder(max_length=s[0], batch_size=s[1]) for s in SPEED_SETTINGS}
    times: dict[tuple[int, int], list[float]] = {s: [] for s in SPEED_SETTINGS}
    for _ in range(3):
        for setting, embedder in embedders.items():
            started = time.perf_counter()
            embedder.embed(texts)
            times[setting].append(time.perf_counter() - started)
    base = len(texts) / statistics.median(times[SPEED_SETTINGS[0]])
    rows = ["| max length | batch | chunks/s | vs 256 / 32 |", "|---|---|---|---|"]
    for setting in SPEED_SETTINGS:
        rate = len(texts) / statistics.median(times[setting])
        rows.append(f"| {setting[0]} | {setting[1]} | {rate:.1f} | {rate / base:.2f}x |")
    return rows


def pydocs_page_at_5(length: int) -> tuple[float, float]:
    """Dense and hybrid page@5 over the answerable pydocs questions."""
    path = CACHE / f"pydocs-minilm{length}.sqlite"
    with KnowledgeBase(path, embedder=MiniLMEmbedder(max_length=length, batch_size=16)) as kb:
        kb.ingest(pydocs.corpus())
        out = []
        for mode in ("dense", "hybrid"):
            hits = [
                pydocs.page_at(
                    [c.source for c in kb.search(q.text, top_k=20, mode=mode)], q.gold_files, 5
                )
                for q in pydocs.questions()
            ]
            out.append(statistics.fmean(hits))
    return out[0], out[1]


def quality_rows() -> list[str]:
    header = ["max length"] + [f"{name} dense | {name} hybrid" for name in DATASETS]
    header += ["pydocs dense | pydocs hybrid"]
    rows = ["| " + " | ".join(header) + " |", "|" + "---|" * (1 + 2 * len(DATASETS) + 2)]
    for length in LENGTHS:
        cells = []
        for label, data in DATASETS.items():
            dataset = load_dataset(data)
            kb = build_knowledge_base(
                dataset,
                CACHE / f"{label.lower()}-minilm{length}.sqlite",
                embedder=MiniLMEmbedder(max_length=length, batch_size=16),
            )
            both = rankings(kb, dataset)
            kb.close()
            cells.append(score(dataset, {q: ids(d) for q, (_, d) in both.items()}))
            fused = {
                q: ids(reciprocal_rank_fusion({"bm25": b, "dense": d}, top_k=40))
                for q, (b, d) in both.items()
            }
            cells.append(score(dataset, fused))
        dense, hybrid = pydocs_page_at_5(length)
        cells += [f"{dense:.3f}", f"{hybrid:.3f}"]
        rows.append(f"| {length} | " + " | ".join(cells) + " |")
    return rows


def run() -> str:
    lines = [
        "## MiniLM: sequence length and batch size",
        "",
        "Command: `python benchmarks/run.py slow_embedding_length` "
        "(benchmarks/slow_embedding_length.py). Speed of the bare model on 400 chunks of the "
        "Python docs (median of 3 rounds, settings interleaved):",
        "",
        *speed_rows(),
        "",
        "Quality with passages embedded at each length. Cells: recall of all gold passages at 5 "
        "/ nDCG@10 (hybrid: bm25 + MiniLM at the default fusion); pydocs: page@5 of the "
        f"{len(pydocs.questions())} answerable questions.",
        "",
        *quality_rows(),
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(run())
