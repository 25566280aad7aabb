"""Knowledge-base speed and memory at 10k chunks (`make bench`), 100k (slow_kb_scale.py, `python
benchmarks/run.py --slow`) and 1M (huge_kb_scale.py, `python benchmarks/run.py huge_kb_scale`),
beside the references a user would pick.

The chunks are built from the sentences of the real HotpotQA passages (3 to 6 random sentences
each, fixed seed), so term statistics look like real text; the queries are the 500 HotpotQA
questions. References in the same run: bm25s (BM25 in numpy) and a bare numpy exact search over
the same float32 matrix.

ragloop runs in a child process of its own, so its max RSS is ragloop's alone (ingest, both
indexes, the searches and the MiniLM query model), not the references' or this script's. The
documents reach it from a generator, as a user streaming a corpus would give them.

Embedding 100k passages with a real model takes half an hour here (1M: five hours), so the
stored vectors come from a stand-in embedder: a chunk's vector is the mean of MiniLM's vectors of
the sentences it was built from (each pool sentence embedded once), so the vectors have a real
model's geometry, which decides how well the approximate index finds them, at tens of thousands
of chunks a second. Every timed query is embedded by the real MiniLM model, so dense and hybrid
latencies include a real query embedding. The ingest rate is given with and without the
stand-in's own time: the latter is ingest without the embedding model. Ingest with the real
model is measured on 1,000 chunks.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import bm25s
import numpy as np
from bench_retrieval import CACHE
from datasets import hotpot_pool

from ragloop.core.text import split_sentences
from ragloop.kb.embedding.embedders import MiniLMEmbedder
from ragloop.kb.index import ann
from ragloop.kb.knowledge_base import Document, KnowledgeBase
from ragloop.kb.stores.base import Scope

DIMENSION = 384


class SentenceMeanEmbedder:
    """The stand-in passage embedder: a chunk's vector is the normalised mean of MiniLM's
    vectors of its sentences (each sentence of the pool embedded once, cached in
    benchmarks/.cache). The vectors have a real model's geometry (clustered, a question near
    the passages that answer it), which decides how well a graph index finds them, at about
    50,000 chunks a second. Counts the time it spends."""

    model_id = "bench-sentence-mean-384"
    dimension = DIMENSION

    def __init__(self, sentences: list[str]) -> None:
        self.rows = sentence_vectors(sentences)
        self.row_of = {sentence: i for i, sentence in enumerate(sentences)}
        self.spent_s = 0.0

    def embed(self, texts: list[str]) -> np.ndarray:  # type: ignore[type-arg]
        started = time.perf_counter()
        out = np.zeros((len(texts), DIMENSION), dtype=np.float32)
        for i, text in enumerate(texts):
            rows = [
                self.row_of[sentence]
                for line in text.splitlines()
                for sentence in split_sentences(line)
                if sentence in self.row_of
            ]
            if rows:
                out[i] = self.rows[rows].sum(axis=0)
        out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)
        self.spent_s += time.perf_counter() - started
        return out


class StandInPassagesRealQueries(SentenceMeanEmbedder):
    """Stand-in vectors for passages, MiniLM for queries."""

    def __init__(self, sentences: list[str]) -> None:
        super().__init__(sentences)
        self._queries = MiniLMEmbedder()

    def embed_query(self, texts: list[str]) -> list[list[float]]:
        return self._queries.embed(texts)


class RealQueries:
    """MiniLM for queries under the stand-in's model id: what a new process that only
    searches needs (no sentence pool to load)."""

    model_id = SentenceMeanEmbedder.model_id
    dimension = DIMENSION

    def __init__(self) -> None:
        self._model = MiniLMEmbedder()

    def embed(self, texts: list[str]) -> list[list[float]]:
        return self._model.embed(texts)


def first_search(path: str, query: str) -> dict[str, float]:
    """In a new process (the child's child): open the knowledge base and run one hybrid
    search, as ``ragloop search`` would; the seconds each step took."""
    started = time.perf_counter()
    kb = KnowledgeBase(path, embedder=RealQueries(), link_titles=False)
    opened = time.perf_counter()
    hits = kb.search(query, mode="hybrid", top_k=10)
    searched = time.perf_counter()
    assert hits, "the first search found nothing"
    approximate = kb.store._dense.approximate  # type: ignore[attr-defined]
    kb.close()
    return {
        "open_s": opened - started,
        "search_s": searched - opened,
        "mapped": float(approximate is None or approximate.mapped),
    }


def pool_sentences(passages: dict[str, str]) -> list[str]:
    return [s for text in passages.values() for s in split_sentences(text)]


def sentence_vectors(sentences: list[str]) -> np.ndarray:  # type: ignore[type-arg]
    """MiniLM's vectors of the pool's sentences (about two minutes the first time)."""
    path = CACHE / f"hotpot-sentences-{len(sentences)}-minilm.npy"
    if path.exists():
        return np.load(path)
    CACHE.mkdir(exist_ok=True)
    vectors = np.asarray(MiniLMEmbedder().embed(sentences), dtype=np.float32)
    np.save(path, vectors)
    return vectors


def synthetic_texts(n: int, passages: dict[str, str]) -> Iterator[tuple[str, str]]:
    """(title, body) of ``n`` synthetic chunks, the same for a given ``n`` in every process."""
    sentences = pool_sentences(passages)
    titles = list(passages)
    rng = random.Random(13)
    for i in range(n):
        body = " ".join(rng.sample(sentences, rng.randint(3, 6)))
        yield f"{rng.choice(titles)} {i}", body


def synthetic_documents(n: int, passages: dict[str, str]) -> Iterator[Document]:
    for i, (title, body) in enumerate(synthetic_texts(n, passages)):
        yield Document(text=body, source=f"synthetic/{i}", title=title)


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[int(0.95 * (len(ordered) - 1))]


def timed(function: Any, queries: list[Any]) -> tuple[float, float]:
    samples = []
    for query in queries:
        started = time.perf_counter()
        function(query)
        samples.append((time.perf_counter() - started) * 1000)
    return percentiles(samples)


def interleaved(queries: list[str], searches: dict[str, Any]) -> dict[str, float]:
    """p50 (ms) of each search over the queries, the searches taking turns on each query (so
    the machine's load moves them alike: their ratios are what is compared), after a round
    that warms them all (query vectors cached, pages in memory)."""
    for query in queries:
        for search in searches.values():
            search(query)
    samples: dict[str, list[float]] = {name: [] for name in searches}
    for query in queries:
        for name, search in searches.items():
            started = time.perf_counter()
            search(query)
            samples[name].append((time.perf_counter() - started) * 1000)
    return {name: statistics.median(found) for name, found in samples.items()}


def scoped_statistics(
    kb: KnowledgeBase, size: int, passages: dict[str, str], queries: list[str]
) -> dict[str, dict[str, float]]:
    """A search scoped to collections takes BM25's statistics from them (issue 58): with a
    second collection of a tenth as many chunks ("other", the synthetic chunks after the
    first ``size``), bm25 and hybrid searches of every collection, of "default" (ten elevenths
    of the chunks: the most postings a scoped search weighs) and of "other", p50 in ms, taking
    turns on each query (the hybrid ones with the query vector cached)."""
    more = itertools.islice(synthetic_documents(size + size // 10, passages), size, None)
    kb.add_documents(more, collection="other")
    scopes = {"every collection": None, "default": "default", "other": "other"}
    return {
        mode: interleaved(
            queries,
            {
                name: lambda q, m=mode, c=collection: kb.search(q, mode=m, top_k=10, collection=c)
                for name, collection in scopes.items()
            },
        )
        for mode in ("bm25", "hybrid")
    }


def scoped_lines(found: dict[str, dict[str, float]], size: int) -> list[str]:
    return [
        f"BM25 statistics of a scope (issue 58): with a second collection of {size // 10:,} "
        "chunks added, bm25 and hybrid searches (top 10, the first 250 questions, hybrid with "
        "the query vector cached) of every collection, of `default` (ten elevenths of the "
        "chunks) and of the new one, taking turns on each question; p50, and in parentheses "
        "the ratio to the search of every collection measured in the same run.",
        "",
        "| mode | every collection | default | other |",
        "|---|---|---|---|",
        *(
            f"| {mode} | {times['every collection']:.2f} ms | "
            + " | ".join(
                f"{times[name]:.2f} ms ({times[name] / times['every collection']:.2f})"
                for name in ("default", "other")
            )
            + " |"
            for mode, times in found.items()
        ),
    ]


def memory_mb() -> dict[str, float]:
    """This process's resident memory now and at its peak (MB)."""
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0]) / 1024
    return fields


class WorkerMemory:
    """Samples the memory of this process's children (the ingest's workers) while it runs:
    the most they held together privately, and the largest resident size of one (which
    counts the pages a forked worker shares with its writer)."""

    def __init__(self) -> None:
        self.workers: set[int] = set()
        self.private_mb = self.rss_mb = 0.0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    def __enter__(self) -> WorkerMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()

    def _sample(self) -> None:
        while not self._done.wait(0.2):
            private = 0.0
            for pid in _children():
                fields = _rollup(pid)
                if not fields:
                    continue
                self.workers.add(pid)
                private += (fields["Private_Clean"] + fields["Private_Dirty"]) / 1024
                self.rss_mb = max(self.rss_mb, fields["Rss"] / 1024)
            self.private_mb = max(self.private_mb, private)


def _children() -> set[int]:
    found: set[int] = set()
    for task in Path("/proc/self/task").iterdir():
        with contextlib.suppress(OSError):
            found.update(int(pid) for pid in (task / "children").read_text().split())
    return found


def _rollup(pid: int) -> dict[str, int]:
    try:
        lines = Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]
    except OSError:  # gone meanwhile
        return {}
    return {key: int(value.split()[0]) for key, _, value in (x.partition(":") for x in lines)}


def measure_ragloop(size: int, folder: str) -> dict[str, Any]:
    """Ingest and search in this process (the child): what the table reports for ragloop."""
    questions, passages = hotpot_pool()
    queries = [q.text for q in questions]
    first, second = queries[: len(queries) // 2], queries[len(queries) // 2 :]
    embedder = StandInPassagesRealQueries(pool_sentences(passages))
    load_before = os.getloadavg()[0]
    path = Path(folder) / "kb.sqlite"
    kb = KnowledgeBase(path, embedder=embedder, link_titles=False)
    phases: dict[str, float] = {}

    def note_phase(state: Any) -> None:
        phases.setdefault(state.phase, time.perf_counter())

    started = time.perf_counter()
    with WorkerMemory() as workers:
        kb.add_documents(synthetic_documents(size, passages), on_progress=note_phase)
    ingest_s = time.perf_counter() - started
    indexing_s = phases["done"] - phases.get("indexing", phases["done"])
    after_ingest = memory_mb()["VmRSS"]
    # the first search of a new process (the ingest built and saved every index)
    started = time.perf_counter()
    child = subprocess.run(
        [sys.executable, __file__, "first-search", str(path), queries[0]],
        check=True,
        capture_output=True,
        text=True,
    )
    new_process = {
        "wall_s": time.perf_counter() - started,
        **json.loads(child.stdout.strip().splitlines()[-1]),
    }
    started = time.perf_counter()
    kb.search("warm up", mode="hybrid")  # this process: the indexes the ingest left
    load_s = time.perf_counter() - started
    recall = dense_recall(kb, np.asarray(embedder.embed_query(queries), dtype=np.float32))
    result = {
        "recall": recall,
        "approximate": kb.store._dense.approximate is not None,  # type: ignore[attr-defined]
        "ingest_rate": size / ingest_s,
        "ingest_rate_without_model": size / (ingest_s - embedder.spent_s),
        "load_s": load_s,
        "indexing_s": indexing_s,
        "new_process": new_process,
        "bm25": timed(lambda q: kb.search(q, mode="bm25", top_k=10), queries),
        "dense": timed(lambda q: kb.search(q, mode="dense", top_k=10), first),
        "hybrid": timed(lambda q: kb.search(q, mode="hybrid", top_k=10), second),
        "hybrid_cached": timed(lambda q: kb.search(q, mode="hybrid", top_k=10), first),
        "rss_after_ingest": after_ingest,
        "file_mb": kb.stats().size_bytes / 1e6,  # type: ignore[operator]
        "load": (load_before, os.getloadavg()[0]),
        "workers": len(workers.workers),
        "workers_private_mb": workers.private_mb,
        "worker_rss_mb": workers.rss_mb,
        **memory_mb(),
    }
    result["scoped"] = scoped_statistics(kb, size, passages, first)
    kb.close()
    return result


def dense_recall(kb: KnowledgeBase, query_vectors: np.ndarray) -> float:  # type: ignore[type-arg]
    """recall@10 of the knowledge base's dense search (approximate above ann.MIN_VECTORS)
    against an exact scan of the vectors it holds."""
    columns = kb.store._dense.columns  # type: ignore[attr-defined]
    found = 0
    for vector in query_vectors:
        exact = set(np.argsort(-(vector @ columns))[:10].tolist())
        pks = kb.store._dense.rows.pks  # type: ignore[attr-defined]
        hits = kb.store._vector_hits(vector, 10, Scope())  # type: ignore[attr-defined]
        positions = np.searchsorted(pks, [pk for pk, _ in hits])
        found += len(exact & set(positions.tolist()))
    return found / (10 * len(query_vectors))


def minilm_recall(size: int, passages: dict[str, str], queries: list[str]) -> str:
    """Approximate search's recall@10 against exact on real MiniLM vectors: ``size`` chunks
    and the questions embedded by MiniLM, the graph forced on below its threshold."""
    with tempfile.TemporaryDirectory() as folder:
        kb = KnowledgeBase(Path(folder) / "kb.sqlite", embedder="minilm", link_titles=False)
        started = time.perf_counter()
        kb.add_documents(synthetic_documents(size, passages))
        embedded_s = time.perf_counter() - started
        exact_ms = timed(lambda q: kb.search(q, mode="dense", top_k=10), queries[:50])
        threshold, ann.MIN_VECTORS = ann.MIN_VECTORS, 0
        try:
            kb.store._dense = None  # type: ignore[attr-defined]
            started = time.perf_counter()
            kb.search("load", mode="dense")
            build_s = time.perf_counter() - started
            vectors = np.asarray(MiniLMEmbedder().embed(queries), dtype=np.float32)
            recall = dense_recall(kb, vectors)
        finally:
            ann.MIN_VECTORS = threshold
        kb.close()
    return (
        f"Approximate search on real vectors: {size:,} chunks and the 500 questions embedded "
        f"by MiniLM ({embedded_s / 60:.0f} min), the HNSW graph forced on: recall@10 against "
        f"the exact scan **{recall:.3f}**; graph built in {build_s:.1f} s (exact scan here "
        f"{exact_ms[0]:.1f} ms p50 with the query embedding)."
    )


def measure_references(size: int, passages: dict[str, str], queries: list[str]) -> dict[str, Any]:
    corpus = [f"{title}\n{body}" for title, body in synthetic_texts(size, passages)]
    reference = bm25s.BM25()
    reference.index(
        bm25s.tokenize(corpus, stopwords="en", show_progress=False), show_progress=False
    )

    def bm25s_query(q: str) -> None:
        tokens = bm25s.tokenize([q], stopwords="en", show_progress=False)
        reference.retrieve(tokens, k=10, show_progress=False)

    bm25s_times = timed(bm25s_query, queries)
    # the layout a user would write: one row per passage, ``matrix @ query``
    matrix = SentenceMeanEmbedder(pool_sentences(passages)).embed(corpus)
    del corpus
    query_vectors = np.asarray(MiniLMEmbedder().embed(queries[:250]), dtype=np.float32)

    def numpy_query(i: int) -> None:
        scores = matrix @ query_vectors[i]
        top = np.argpartition(-scores, 10)[:10]
        top[np.argsort(-scores[top])]

    return {"bm25s": bm25s_times, "numpy": timed(numpy_query, list(range(len(query_vectors))))}


def run(size: int = 10_000, command: str = "make bench", real_vectors: int = 0) -> str:
    """The section at ``size`` chunks; with ``real_vectors``, also approximate search's
    recall on that many chunks embedded by MiniLM."""
    questions, passages = hotpot_pool()
    queries = [q.text for q in questions]
    with tempfile.TemporaryDirectory() as folder:
        child = subprocess.run(
            [sys.executable, __file__, str(size), folder],
            check=True,
            capture_output=True,
            text=True,
        )
    ours = json.loads(child.stdout.strip().splitlines()[-1])
    refs = measure_references(size, passages, queries)
    lines = [
        f"## Knowledge-base speed at {size:,} chunks",
        "",
        f"Command: `{command}` (benchmarks/bench_kb_scale.py). Chunks built from real HotpotQA "
        "sentences, given as a generator; 500 real questions as queries; top 10. Stored "
        "vectors from a stand-in embedder, query vectors from MiniLM (see the module "
        "docstring). Latencies in ms, p50 / p95, one query at a time. **Dense and hybrid "
        "include embedding the query with MiniLM** (each question is new to the knowledge "
        "base: dense runs the first 250, hybrid the other 250); the last hybrid column reruns "
        "the first 250, whose vectors the knowledge base has cached, so it is the search "
        "alone. Ingest: chunks a second from the first document to the search indexes "
        "built and saved (the HNSW graph too, above its threshold), without the stand-in "
        "embedder's own time (that is, without the model), then with it; without title "
        "links (`link_titles=False`, `ragloop ingest --no-links`); the indexing phase's "
        "own time in parentheses. First search: a new process that opens the knowledge "
        "base and runs one hybrid search (interpreter start-up, imports, the MiniLM model, "
        "mapping the saved indexes), wall time. Max RSS is the peak resident memory of a "
        "process of ragloop alone that ingested the chunks, loaded both indexes, held the "
        "MiniLM query model and ran the searches. The numpy reference is `matrix @ query` "
        "over one row per chunk, as a user would write it.",
        "",
        "| chunks | ingest, without the model / with the stand-in (indexing) | bm25 "
        "| bm25s (ref.) | dense | numpy exact, no query embedding (ref.) | hybrid "
        "| hybrid, vector cached | first search, new process | max RSS | file "
        "| dense recall@10 |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
        f"| {size:,} | **{ours['ingest_rate_without_model']:,.0f}** / "
        f"{ours['ingest_rate']:,.0f} chunks/s ({ours['indexing_s']:,.0f} s) "
        f"| {_ms(ours['bm25'])} | {_ms(refs['bm25s'])} | {_ms(ours['dense'])} "
        f"| {_ms(refs['numpy'])} | **{_ms(ours['hybrid'])}** | {_ms(ours['hybrid_cached'])} "
        f"| **{ours['new_process']['wall_s']:.1f} s** | **{ours['VmHWM']:,.0f} MB** "
        f"| {ours['file_mb']:,.0f} MB "
        f"| {ours['recall']:.3f} ({'HNSW' if ours['approximate'] else 'exact scan'}) |",
        "",
        f"The new process's first search: {ours['new_process']['open_s']:.2f} s to open the "
        f"knowledge base, {ours['new_process']['search_s']:.2f} s for the search (the "
        "query model's load, the saved indexes mapped"
        f"{', the graph too' if ours['new_process']['mapped'] else ''}); in the process that "
        f"ingested, the first search took {ours['load_s']:.2f} s.",
        "",
        "Dense recall@10: the knowledge base's dense search against an exact scan of the "
        "vectors it holds, for the 500 questions embedded by MiniLM. Above "
        f"{ann.MIN_VECTORS:,} vectors it is approximate (ragloop.kb.index.ann: the graph's "
        f"{ann.CANDIDATES} candidates ranked by their exact scores).",
        "",
        *scoped_lines(ours["scoped"], size),
        "",
        f"Ingest workers (ragloop.kb.ingest.pipeline.ingest_workers): {ours['workers']}, "
        f"holding at most {ours['workers_private_mb']:,.0f} MB of their own together (each "
        f"one's resident size peaked at {ours['worker_rss_mb']:,.0f} MB, most of it pages it "
        "shares with the writer it was forked from); the max RSS above is the writer's.",
        "",
        f"Load average of the machine (1 minute) when ragloop's process started and ended: "
        f"{ours['load'][0]:.1f} and {ours['load'][1]:.1f} (2 cores: above 2, other work "
        "shared them and every figure is slower than on a quiet machine).",
    ]
    if real_vectors:
        lines += ["", minilm_recall(real_vectors, passages, queries)]
    if size > 10_000:
        return "\n".join(lines)
    with tempfile.TemporaryDirectory() as folder:
        kb = KnowledgeBase(Path(folder) / "kb.sqlite", embedder="minilm")
        sample = list(synthetic_documents(1000, passages))
        started = time.perf_counter()
        kb.add_documents(sample)
        rate = len(sample) / (time.perf_counter() - started)
        kb.close()
    lines += [
        "",
        f"Ingest with the MiniLM embedder (1,000 chunks, links on): {rate:,.0f} chunks/s.",
    ]
    return "\n".join(lines)


def _ms(pair: tuple[float, float]) -> str:
    return f"{pair[0]:.1f} / {pair[1]:.1f}"


def run_scoped(size: int = 10_000) -> str:
    """Only the scoped-statistics table (``python benchmarks/bench_kb_scale.py scoped``):
    ``size`` chunks ingested as the full run does, then :func:`scoped_statistics`."""
    questions, passages = hotpot_pool()
    queries = [q.text for q in questions][: len(questions) // 2]
    embedder = StandInPassagesRealQueries(pool_sentences(passages))
    with tempfile.TemporaryDirectory() as folder:
        kb = KnowledgeBase(Path(folder) / "kb.sqlite", embedder=embedder, link_titles=False)
        kb.add_documents(synthetic_documents(size, passages))
        found = scoped_statistics(kb, size, passages, queries)
        kb.close()
    return "\n".join(scoped_lines(found, size))


if __name__ == "__main__":
    if sys.argv[1:2] == ["scoped"]:  # only the scoped-statistics table
        print(run_scoped(*(int(n) for n in sys.argv[2:3])))
    elif len(sys.argv) == 4 and sys.argv[1] == "first-search":  # a new process after the ingest
        print(json.dumps(first_search(sys.argv[2], sys.argv[3])))
    elif len(sys.argv) == 3:  # the child: ragloop alone
        print(json.dumps(measure_ragloop(int(sys.argv[1]), sys.argv[2])))
    else:
        print(run())
