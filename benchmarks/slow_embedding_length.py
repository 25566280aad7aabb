"""MiniLM's sequence length and batching: embedding speed against retrieval quality.

all-MiniLM-L6-v2 was trained on 128 word pieces; the embedder read 256 when issue 16 was filed.
Speed: chunks per second of the bare model on 600 chunks of the Python docs (the length mix of a
real ingest), the former embedder (fixed batches of 32 on one run of a thread per core) beside
today's at each length, each timed three times in turn (median), so the ratios hold under load.
Quality: dense and hybrid search on the four retrieval sets of BENCHMARKS.md, with the
passages embedded at each length (queries are shorter than 128 word pieces, so they embed the
same either way; so does any passage within 128, so only the longer ones are embedded again);
then the pydocs questions with the knowledge base's own search. Knowledge bases are cached in
benchmarks/.cache.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

import bench_pydocs_search as pydocs_search
import numpy as np
import pydocs
from bench_retrieval import DATASETS, MINILM_LENGTH, knowledge_base, score
from former_embedder import FormerMiniLM

from ragloop.core.protocols import Embedder
from ragloop.evaluation.datasets import load_dataset
from ragloop.kb.embedding.embedders import MiniLMEmbedder
from ragloop.kb.index.fusion import fuse
from ragloop.kb.ingest.chunking import chunk_document
from ragloop.kb.knowledge_base import KnowledgeBase
from ragloop.kb.readers import read_html
from ragloop.kb.stores.base import Scope, index_text

LENGTHS = (256, 192, 128)


def pydocs_sample(n: int = 200) -> list[str]:
    """Index texts of ``n`` chunks drawn from every third page of the docs."""
    texts = []
    for path in sorted(pydocs.corpus().rglob("*.html"))[::3]:
        doc = read_html(path.read_text(encoding="utf-8"), path)
        texts += [index_text(doc.title, c.heading_path, c.text) for c in chunk_document(doc)]
    return random.Random(0).sample(texts, n)


def speed_rows() -> list[str]:
    texts = pydocs_sample(600)
    embedders: dict[str, Embedder] = {"former": FormerMiniLM()}
    embedders |= {str(length): MiniLMEmbedder(max_length=length) for length in LENGTHS}
    times: dict[str, list[float]] = {name: [] for name in embedders}
    for _ in range(3):
        for name, embedder in embedders.items():
            started = time.perf_counter()
            embedder.embed(texts)
            times[name].append(time.perf_counter() - started)
    print(times, file=sys.stderr, flush=True)
    rates = {name: len(texts) / statistics.median(spent) for name, spent in times.items()}
    rows = [
        "| embedder | max length | chunks/s | vs former |",
        "|---|---|---|---|",
        f"| former: batches of 32 texts on one run of {os.cpu_count()} threads | 256 | "
        f"{rates['former']:.1f} | 1.00x |",
    ]
    for length in LENGTHS:
        rate = rates[str(length)]
        rows.append(
            f"| today: batches of up to 1,024 word pieces, {os.cpu_count()} runs of one thread "
            f"| {length} | {rate:.1f} | {rate / rates['former']:.2f}x |"
        )
    return rows


def dense_at(kb: KnowledgeBase, length: int) -> tuple[np.ndarray, list[str]]:
    """The knowledge base's vectors as they would be with passages read up to ``length`` word
    pieces, and each row's source. The stored vectors read ``MINILM_LENGTH`` (the default,
    which the cached file's name records); a text within the shorter of the two limits embeds
    the same at both, so only the longer ones are embedded again."""
    rows = (
        kb.store._conn()
        .execute(
            "SELECT c.text_hash, d.source, d.title, c.heading_path, c.content, v.vector "
            "FROM chunks c JOIN documents d ON d.id = c.document_id JOIN vectors v "
            "ON v.text_hash = c.text_hash AND v.model_id = ? ORDER BY c.pk",
            (MiniLMEmbedder.model_id,),
        )
        .fetchall()
    )
    matrix = np.stack([np.frombuffer(r[5], dtype=np.float32) for r in rows]).copy()
    if length != MINILM_LENGTH:
        embedder = MiniLMEmbedder(max_length=length)
        texts = [index_text(r[2], json.loads(r[3]), r[4]) for r in rows]
        lengths = [len(e.ids) for e in embedder._tokenizer.encode_batch(texts)]
        longer = [i for i, n in enumerate(lengths) if n >= min(length, MINILM_LENGTH)]
        if longer:
            matrix[longer] = np.asarray(embedder.embed([texts[i] for i in longer]))
    return matrix, [r[1] for r in rows]


def ranked(kb: KnowledgeBase, matrix: np.ndarray, sources: list[str], query: str):
    """(bm25 sources, dense sources, hybrid sources) for a query, 40 deep."""
    vector = np.asarray(kb.query_vector(query), dtype=np.float32)
    order = np.argsort(-(matrix @ vector), kind="stable")[:40]
    dense = list(dict.fromkeys(sources[i] for i in order))  # a passage's chunks count once
    bm25 = [c.source for c in kb.store.keyword_search(query, 40, Scope())]
    fused = fuse({"bm25": [(s, 0.0) for s in dict.fromkeys(bm25)],
                  "dense": [(s, 0.0) for s in dict.fromkeys(dense)]}, top_k=40)  # fmt: skip
    return bm25, dense, [s for s, _, _ in fused]


def quality_rows() -> list[str]:
    header = ["max length"] + [f"{name} dense | {name} hybrid" for name in DATASETS]
    rows = ["| " + " | ".join(header) + " |", "|" + "---|" * (1 + 2 * len(DATASETS))]
    cells: dict[int, list[str]] = {length: [] for length in LENGTHS}
    for label, data in DATASETS.items():
        dataset = load_dataset(data)
        kb = knowledge_base(label, dataset, "minilm")
        for length in LENGTHS:
            matrix, sources = dense_at(kb, length)
            dense, hybrid = {}, {}
            for q in dataset.questions:
                _, dense[q.id], hybrid[q.id] = ranked(kb, matrix, sources, q.question)
            cells[length] += [score(dataset, dense), score(dataset, hybrid)]
            print(label, length, cells[length][-2:], file=sys.stderr, flush=True)
        kb.close()
    for length in LENGTHS:
        rows.append(f"| {length} | " + " | ".join(cells[length]) + " |")
    rows.append("")
    kinds = [f"{name} {mode}" for name in DATASETS for mode in ("dense", "hybrid")]
    for length in LENGTHS[1:]:
        changes = [
            f"{kind} {_points(new, old)}"
            for kind, new, old in zip(kinds, cells[length], cells[LENGTHS[0]], strict=True)
        ]
        rows.append(
            f"{length} against {LENGTHS[0]} word pieces, in points of recall@5 / nDCG@10: "
            + "; ".join(changes)
            + "."
        )
    return rows


def pydocs_rows() -> list[str]:
    """Page@5 of the pydocs questions at each length, with the knowledge base's own dense and
    hybrid search (exact terms first): a copy of bench_pydocs_search's knowledge base with
    every chunk of 128 word pieces or more embedded again at that length."""
    source = pydocs_search.knowledge_base(pydocs_search.CACHE / "pydocs311-search-corpus")
    with KnowledgeBase(source) as kb:
        rows = (
            kb.store._conn()
            .execute(
                "SELECT c.text_hash, d.title, c.heading_path, c.content FROM chunks c "
                "JOIN documents d ON d.id = c.document_id"
            )
            .fetchall()
        )
    texts = [index_text(r[1], json.loads(r[2]), r[3]) for r in rows]
    tokenizer = MiniLMEmbedder(max_length=128)._tokenizer
    longer = [i for i, e in enumerate(tokenizer.encode_batch(texts)) if len(e.ids) >= 128]
    questions = pydocs.questions()
    out = [
        f"The Python docs ({len(rows):,} chunks, {len(longer):,} of them of 128 word pieces or "
        f"more; {len(questions)} questions): page@5, a gold page among the first five chunks.",
        "",
        "| max length | pydocs dense | pydocs hybrid (as shipped) |",
        "|---|---|---|",
    ]
    for length in LENGTHS:
        vectors = MiniLMEmbedder(max_length=length).embed([texts[i] for i in longer])
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "kb.sqlite"
            shutil.copy(source, path)
            with sqlite3.connect(path) as conn:
                conn.executemany(
                    "UPDATE vectors SET vector = ? WHERE text_hash = ?",
                    [
                        (np.asarray(v, dtype=np.float32).tobytes(), rows[i][0])
                        for v, i in zip(vectors, longer, strict=True)
                    ],
                )
                conn.execute("UPDATE meta SET value = value + 1 WHERE key = 'vectors'")
                conn.execute(
                    "UPDATE meta SET value = lower(hex(randomblob(8))) WHERE key = 'vector_state'"
                )
            with KnowledgeBase(path) as kb:
                cells = [
                    statistics.fmean(
                        pydocs.page_at(
                            [c.source for c in kb.search(q.text, top_k=5, mode=mode)],
                            q.gold_files,
                            5,
                        )
                        for q in questions
                    )
                    for mode in ("dense", "hybrid")
                ]
        out.append(f"| {length} | {cells[0]:.3f} | {cells[1]:.3f} |")
        print("pydocs", length, cells, file=sys.stderr, flush=True)
    return out


def _points(new: str, old: str) -> str:
    """The change from cell ``old`` to cell ``new`` ("0.616 / 0.790"), in points."""
    pairs = zip(new.split(" / "), old.split(" / "), strict=True)
    return " / ".join(f"{(float(a) - float(b)) * 100:+.1f}" for a, b in pairs)


def run() -> str:
    lines = [
        "## MiniLM: sequence length and batching",
        "",
        "Command: `python benchmarks/run.py slow_embedding_length` "
        "(benchmarks/slow_embedding_length.py). Speed of the bare model on 600 chunks of the "
        "Python docs (median of 3 rounds, settings interleaved):",
        "",
        *speed_rows(),
        "",
        "Quality with passages embedded at each length. Cells: recall of all gold passages at 5 "
        "/ nDCG@10 (hybrid: bm25 + MiniLM fused by plain RRF, k = 5).",
        "",
        *quality_rows(),
        "",
        *pydocs_rows(),
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(run())
