"""Do the loops find better evidence than one retrieval? The evaluation harness on real data.

1. HotpotQA, all 500 questions: one-shot bm25, dense and hybrid search, bm25s as an outside
   reference, and RetrievalLoop.offline, compared at equal k with McNemar's test; bridge and
   comparison questions apart; the recall-against-k chart.
2. HotpotQA, every second question (250): the answering loops, RAGLoop.offline and
   AgentLoop.offline, and RAGLoop answering from RetrievalLoop's evidence (`ragloop ask
   --engine retrieval`), against one-shot hybrid search answered by the same
   ExtractiveGenerator. A sample for time: a third of a second per question and loop.
3. Titles ablation: keyword-only knowledge bases with and without the passages' titles.
4. MuSiQue (2 to 4 hops), a second multi-hop set; 5. SciFact and FiQA, the single-hop guard.

Knowledge bases come from benchmarks/.cache (bench_retrieval.py builds the same files).
"""

from __future__ import annotations

from pathlib import Path

import bm25s
from bench_retrieval import CACHE, DATASETS, bm25s_rankings, knowledge_base

from ragloop import ExtractiveGenerator
from ragloop.components.generators import strip_citations
from ragloop.evaluation.configurations import (
    DEPTH,
    AgentLoopConfiguration,
    OneShot,
    RAGLoopConfiguration,
    RetrievalLoopConfiguration,
    build_knowledge_base,
)
from ragloop.evaluation.datasets import EvalDataset, load_dataset
from ragloop.evaluation.harness import (
    Configuration,
    EvalReport,
    FunctionConfiguration,
    Outcome,
    evaluate,
    ranked_passages,
)
from ragloop.evaluation.report import kind_table, markdown_table, recall_chart, significance_table
from ragloop.kb.knowledge_base import KnowledgeBase
from ragloop.offline import answered_retrieval_loop

SAMPLE_EVERY = 2  # the answering loops' sample on HotpotQA: every second question
MUSIQUE_EVERY = 2  # ... on MuSiQue (100 questions)
GUARD_EVERY = 10  # ... on SciFact (300) and FiQA (648)
CHART = Path(__file__).resolve().parents[1] / "docs" / "images" / "hotpotqa-recall.png"
GUARD = ("recall_all@10", "ndcg@10")


def sample(dataset: EvalDataset, every: int) -> EvalDataset:
    return dataset.model_copy(update={"questions": dataset.questions[::every]})


def bm25s_reference(dataset: EvalDataset) -> Configuration:
    """bm25s on the same passages, looked up from one batch retrieval (its speed is measured
    in bench_kb_scale.py)."""
    ranked = bm25s_rankings(dataset)
    by_text = {q.question: ranked[q.id] for q in dataset.questions}
    return FunctionConfiguration(
        f"bm25s {bm25s.__version__} (reference)",
        lambda question: Outcome(ranked=by_text[question][:DEPTH], retrieval_calls=1),
        baseline=True,
    )


def answered_one_shot(kb: KnowledgeBase, top_k: int = 5) -> Configuration:
    """One hybrid retrieval answered by the ExtractiveGenerator: the loops' answering baseline."""
    generator = ExtractiveGenerator(corpus=kb)

    def run(question: str) -> Outcome:
        chunks = kb.search(question, top_k=DEPTH * 2)
        answer = generator.generate(question, chunks[:top_k]).answer
        return Outcome(
            ranked=ranked_passages(chunks)[:DEPTH],
            answer=strip_citations(answer),
            retrieval_calls=1,
        )

    return FunctionConfiguration("one-shot hybrid + ExtractiveGenerator", run, baseline=True)


def answering_loops(kb: KnowledgeBase) -> list[Configuration]:
    return [
        RAGLoopConfiguration(kb, name="RAGLoop.offline"),
        AgentLoopConfiguration(kb, name="AgentLoop.offline"),
        RAGLoopConfiguration(
            kb, name="RAGLoop over RetrievalLoop evidence", loop=answered_retrieval_loop(kb)
        ),
    ]


def tables(report: EvalReport, metrics: tuple[str, ...] = ("recall_all@5",)) -> list[str]:
    return [markdown_table(report), "", significance_table(report, metrics)]


def hotpot_sections() -> list[str]:
    dataset = load_dataset(DATASETS["HotpotQA"])
    kb = knowledge_base("HotpotQA", dataset, "minilm")
    full = evaluate(
        dataset,
        [
            OneShot(kb, "bm25"),
            OneShot(kb, "dense"),
            OneShot(kb, "hybrid"),
            bm25s_reference(dataset),
            RetrievalLoopConfiguration(kb, name="RetrievalLoop.offline"),
        ],
    )
    CHART.parent.mkdir(parents=True, exist_ok=True)
    recall_chart(full, CHART, title="HotpotQA (500 questions): recall of both gold passages")
    few = sample(dataset, SAMPLE_EVERY)
    answering = evaluate(
        few,
        [answered_one_shot(kb), RetrievalLoopConfiguration(kb), *answering_loops(kb)],
    )
    kb.close()
    loop = full.summary("RetrievalLoop.offline")
    best = full.comparison("RetrievalLoop.offline", "recall_all@5")
    return [
        "### HotpotQA: one-shot search against RetrievalLoop (500 questions)",
        "",
        f"4,858 pooled passages (title + text), MiniLM embeddings, top {DEPTH} passages per "
        "configuration, every list cut at k. Cells: recall of both gold passages (partial "
        "credit in brackets). The target: +10 points of recall@5 over the best one-shot "
        f"baseline ({best.baseline}), significant at p < 0.05. Measured: "
        f"{best.difference * 100:+.1f} points, p = {best.p_value:.2g}, for "
        f"{loop.retrieval_calls:.1f} retrieval calls per question instead of one.",
        "",
        *tables(full, ("recall_all@5", "recall_all@10")),
        "",
        "Recall of both gold passages at 5, by question kind (HotpotQA's bridge questions need "
        "a second hop; its comparison questions name both entities):",
        "",
        kind_table(full),
        "",
        f"![recall against k]({CHART.relative_to(CHART.parents[2]).as_posix()})",
        "",
        f"### HotpotQA: the answering loops ({len(few.questions)} questions, every "
        f"{SAMPLE_EVERY}nd)",
        "",
        "Each loop's evidence: every chunk it retrieved, at the best rank it reached in any "
        "of its searches (ties: RAGLoop's answering iteration first, the AgentLoop's order of "
        "discovery). Over a knowledge base both retrieve through RetrievalLoop.offline (a "
        "search and its link-graph hop); RAGLoop reads 5 chunks per query, the AgentLoop asks "
        "10 a search, so RAGLoop's lists are short at k = 10 and 20. Answers are quoted "
        "sentences, so exact match is near zero by design; F1 is token F1 against the short "
        "gold answer. The target: +10 points of recall@5 over the baseline, p < 0.05.",
        "",
        *tables(answering),
    ]


def titles_section() -> list[str]:
    """Titles carry HotpotQA's entity names and the link graph: keyword search, with and
    without them (no embedder, so both knowledge bases build in seconds)."""
    rows = []
    for titles in (True, False):
        dataset = load_dataset(DATASETS["HotpotQA"])
        name = "hotpotqa-bm25" + ("" if titles else "-notitles")
        kb = build_knowledge_base(dataset, CACHE / f"{name}.sqlite", embedder=None, titles=titles)
        report = evaluate(
            dataset, [OneShot(kb, "bm25"), RetrievalLoopConfiguration(kb, name="RetrievalLoop")]
        )
        kb.close()
        for summary in report.summaries:
            m = summary.metrics
            rows.append(
                f"| {'with' if titles else 'without'} titles | {summary.name} | "
                + " | ".join(f"{m[f'recall_all@{k}']:.3f}" for k in (2, 5, 10))
                + f" | {summary.retrieval_calls:.1f} |"
            )
    return [
        "### Titles ablation (HotpotQA, 500 questions, keyword search only)",
        "",
        "| index | configuration | R@2 | R@5 | R@10 | retrievals |",
        "|---|---|---|---|---|---|",
        *rows,
    ]


def musique_section() -> list[str]:
    dataset = load_dataset(DATASETS["MuSiQue"])
    kb = knowledge_base("MuSiQue", dataset, "minilm")
    retrieval = evaluate(
        dataset,
        [
            OneShot(kb, "bm25"),
            OneShot(kb, "dense"),
            OneShot(kb, "hybrid"),
            RetrievalLoopConfiguration(kb, name="RetrievalLoop.offline"),
        ],
    )
    few = sample(dataset, MUSIQUE_EVERY)
    answering = evaluate(few, [answered_one_shot(kb), *answering_loops(kb)])
    kb.close()
    return [
        f"### MuSiQue ({len(dataset.questions)} questions, 2 to 4 hops, "
        f"{len(dataset.passages):,} passages)",
        "",
        *tables(retrieval, ("recall_all@5", "recall_all@10")),
        "",
        f"The answering loops on every {MUSIQUE_EVERY}nd question ({len(few.questions)}):",
        "",
        *tables(answering),
    ]


def guard_section() -> list[str]:
    """Single-hop questions: the loops must not lose what one retrieval finds."""
    lines = [
        "### The single-hop guard (BEIR SciFact and FiQA)",
        "",
        "The loops against one-shot hybrid search on single-hop questions: a difference beyond "
        "noise (p < 0.05, paired bootstrap on nDCG, McNemar on recall) is marked *. The "
        f"answering loops run on every {GUARD_EVERY}th question.",
        "",
        "| dataset | configuration | R@10 | nDCG@10 | Δ R@10 | Δ nDCG@10 | retrievals |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in ("SciFact", "FiQA"):
        dataset = load_dataset(DATASETS[name])
        kb = knowledge_base(name, dataset, "minilm")
        retrieval = evaluate(dataset, [OneShot(kb, "hybrid"), RetrievalLoopConfiguration(kb)])
        answering = evaluate(
            sample(dataset, GUARD_EVERY), [OneShot(kb, "hybrid"), *answering_loops(kb)[:2]]
        )
        kb.close()
        for report in (retrieval, answering):
            for s in report.summaries:
                deltas = ["", ""]
                if not s.baseline:
                    for i, metric in enumerate(GUARD):
                        c = report.comparison(s.name, metric)
                        deltas[i] = f"{c.difference * 100:+.1f}{' *' if c.significant else ''}"
                lines.append(
                    f"| {name} ({s.questions} q) | {s.name} | "
                    f"{s.metrics['recall_all@10']:.3f} | {s.metrics['ndcg@10']:.3f} | "
                    f"{deltas[0]} | {deltas[1]} | {s.retrieval_calls:.1f} |"
                )
    return lines


def run() -> str:
    return "\n".join(
        [
            "## Evaluation: the loops against one retrieval",
            "",
            "Command: `make bench` (benchmarks/bench_eval.py), or for one configuration "
            "`ragloop eval DATASET --engine hybrid --engine retrieval`. Every loop runs with "
            "its offline defaults (no LLM).",
            "",
            *hotpot_sections(),
            "",
            *titles_section(),
            "",
            *musique_section(),
            "",
            *guard_section(),
        ]
    )


if __name__ == "__main__":
    print(run())
