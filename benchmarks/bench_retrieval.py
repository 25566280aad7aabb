"""Knowledge-base retrieval quality: bm25, dense and hybrid search, and the fusion setting.

1. HotpotQA (500 questions, 4,858 pooled passages): recall of both gold passages at 2/5/10
   (partial credit in brackets) for bm25 (with bm25s, the library a user would otherwise pick,
   on the same text), dense search with the default MiniLM embedder, and hybrid search.
2. Fusion across four datasets: reciprocal rank fusion of bm25 and MiniLM at several k, against
   each single mode: the measurements behind the default k.

Knowledge bases are cached in benchmarks/.cache (vectors keyed by text, so reruns skip the
embedding); embedding throughput is measured on 500 fresh passages.
"""

from __future__ import annotations

import inspect
import statistics
import time
from pathlib import Path

import bm25s

from ragloop.core.records import Chunk
from ragloop.evaluation.configurations import build_knowledge_base
from ragloop.evaluation.datasets import EvalDataset, load_dataset
from ragloop.evaluation.metrics import ndcg, passage_recall, recall_all
from ragloop.kb.embedding.embedders import MiniLMEmbedder, get_embedder
from ragloop.kb.index.exact import exact_terms
from ragloop.kb.index.fusion import RRF_K, reciprocal_rank_fusion
from ragloop.kb.knowledge_base import KnowledgeBase
from ragloop.kb.stores.base import Scope

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
CACHE = Path(__file__).resolve().parent / ".cache"
DATASETS = {
    "HotpotQA": DATA / "hotpotqa_ircot500" / "hotpotqa_dev500_ircot.jsonl",
    "MuSiQue": DATA / "musique_hipporag100" / "musique_train100.json",
    "SciFact": DATA / "beir_gold_pools" / "beir_scifact_test.json",
    "FiQA": DATA / "beir_gold_pools" / "beir_fiqa_test.json",
}
KS = (2, 5, 10)
FUSION_KS = (2, 5, 10, 20, 60)


def ids(chunks: list[Chunk]) -> list[str]:
    return list(dict.fromkeys(c.source for c in chunks))


def cell(dataset: EvalDataset, ranked: dict[str, list[str]], k: int) -> str:
    full = statistics.fmean(recall_all(ranked[q.id], q.gold, k) for q in dataset.questions)
    part = statistics.fmean(passage_recall(ranked[q.id], q.gold, k) for q in dataset.questions)
    return f"{full:.3f} ({part:.3f})"


# MiniLM's vectors are recorded by model, not by how many word pieces of a passage it read:
# the cached file's name says it, so a change of the default embeds the passages again
MINILM_LENGTH = inspect.signature(MiniLMEmbedder).parameters["max_length"].default


def knowledge_base(name: str, dataset: EvalDataset, embedder: str) -> KnowledgeBase:
    CACHE.mkdir(exist_ok=True)
    label = f"{embedder}{MINILM_LENGTH}" if embedder == "minilm" else embedder
    return build_knowledge_base(
        dataset, CACHE / f"{name.lower()}-{label}.sqlite", embedder=embedder
    )


def rankings(kb: KnowledgeBase, dataset: EvalDataset) -> dict[str, tuple[list[Chunk], list[Chunk]]]:
    """Each question's bm25 and dense ranking (80 deep, enough for every fusion)."""
    out = {}
    for q in dataset.questions:
        vector = kb.query_vector(q.question)
        out[q.id] = (
            kb.store.keyword_search(q.question, 80, Scope()),
            kb.store.vector_search(vector, 80, Scope()),
        )
    return out


def bm25s_rankings(dataset: EvalDataset) -> dict[str, list[str]]:
    corpus = [f"{p.title}\n{p.text}" for p in dataset.passages]
    retriever = bm25s.BM25()
    retriever.index(
        bm25s.tokenize(corpus, stopwords="en", show_progress=False), show_progress=False
    )
    out = {}
    for q in dataset.questions:
        tokens = bm25s.tokenize([q.question], stopwords="en", show_progress=False)
        docs, _ = retriever.retrieve(tokens, k=20, show_progress=False)
        out[q.id] = [dataset.passages[i].id for i in docs[0]]
    return out


def hotpot_section() -> list[str]:
    dataset = load_dataset(DATASETS["HotpotQA"])
    kb = knowledge_base("HotpotQA", dataset, "minilm")
    timings: list[float] = []
    keyword: dict[str, list[str]] = {}
    for q in dataset.questions:
        started = time.perf_counter()
        keyword[q.id] = ids(kb.search(q.question, mode="bm25", top_k=20))
        timings.append((time.perf_counter() - started) * 1000)
    both = rankings(kb, dataset)
    dense = {qid: ids(pair[1]) for qid, pair in both.items()}
    fused = {
        k: {
            qid: ids(reciprocal_rank_fusion({"bm25": b, "dense": d}, top_k=40, k=k))
            for qid, (b, d) in both.items()
        }
        for k in (RRF_K, 60)
    }
    sample = [f"{p.title}\n{p.text}" for p in dataset.passages[:500]]
    started = time.perf_counter()
    get_embedder("minilm").embed(sample)
    rate = len(sample) / (time.perf_counter() - started)
    kb.close()
    rows = [
        ("bm25s 0.3 (reference, English stopwords)", bm25s_rankings(dataset), ""),
        ("ragloop bm25", keyword, f"{statistics.median(timings):.1f} ms/query p50"),
        ("ragloop dense, MiniLM (default embedder)", dense, f"{rate:.0f} passages/s to embed"),
        (f"ragloop hybrid, RRF k={RRF_K} (default)", fused[RRF_K], ""),
        ("ragloop hybrid, RRF k=60", fused[60], ""),
    ]
    lines = [
        "| configuration | recall@2 | recall@5 | recall@10 | notes |",
        "|---|---|---|---|---|",
    ]
    for name, ranked, note in rows:
        cells = " | ".join(cell(dataset, ranked, k) for k in KS)
        lines.append(f"| {name} | {cells} | {note} |")
    return lines


def score(dataset: EvalDataset, ranked: dict[str, list[str]]) -> str:
    """Recall of all gold passages at 5 / nDCG@10."""
    r5 = statistics.fmean(recall_all(ranked[q.id], q.gold, 5) for q in dataset.questions)
    n10 = statistics.fmean(ndcg(ranked[q.id], q.gold, 10) for q in dataset.questions)
    return f"{r5:.3f} / {n10:.3f}"


def fusion_section() -> list[str]:
    header = ["dataset", "bm25", "dense"] + [
        f"RRF k={k}" + (" (default)" if k == RRF_K else "") for k in FUSION_KS
    ]
    header.append(f"RRF k={RRF_K}, exact terms first (shipped)")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, path in DATASETS.items():
        dataset = load_dataset(path)
        kb = knowledge_base(name, dataset, "minilm")
        both = rankings(kb, dataset)
        kb.close()

        cells = [
            score(dataset, {qid: ids(pair[0]) for qid, pair in both.items()}),
            score(dataset, {qid: ids(pair[1]) for qid, pair in both.items()}),
        ]
        for k in FUSION_KS:
            cells.append(
                score(
                    dataset,
                    {
                        qid: ids(reciprocal_rank_fusion({"bm25": b, "dense": d}, top_k=40, k=k))
                        for qid, (b, d) in both.items()
                    },
                )
            )
        questions = {q.id: q.question for q in dataset.questions}
        cells.append(
            score(
                dataset,
                {
                    qid: ids(
                        reciprocal_rank_fusion(
                            {"bm25": b, "dense": d},
                            top_k=40,
                            exact_terms=exact_terms(questions[qid]),
                        )
                    )
                    for qid, (b, d) in both.items()
                },
            )
        )
        lines.append(
            f"| {name} ({len(dataset.questions)} q, {len(dataset.passages):,} p) | "
            + " | ".join(cells)
            + " |"
        )
    return lines


def run() -> str:
    return "\n".join(
        [
            "## Knowledge-base retrieval quality",
            "",
            "Command: `make bench` (benchmarks/bench_retrieval.py).",
            "",
            "**HotpotQA**, 500 questions over 4,858 pooled passages (title + text), 10 passages "
            "per question. Cells: recall of both gold passages (partial-credit recall in "
            "brackets).",
            "",
            *hotpot_section(),
            "",
            "**Fusion**, bm25 and MiniLM dense search fused by reciprocal rank fusion "
            "(equal weights) at several k. Cells: recall of all gold passages at 5 / nDCG@10. "
            "The literature's k = 60 is the worst setting on all four sets; a small k, which "
            "lets each list's top ranks dominate, is the best or within a point of it, and beats "
            f"both single modes except on FiQA, where bm25 is weak: hence the default k = {RRF_K}. "
            "The last column is hybrid search as it ships: the same fusion with the chunks that "
            "hold the question's words written as code (identifiers, codes) first.",
            "",
            *fusion_section(),
        ]
    )


if __name__ == "__main__":
    print(run())
