"""Fit the offline components' coefficients on HotpotQA questions the benchmarks do not use.

Usage: python benchmarks/calibrate_offline.py [N]. Takes N questions (default 250) that are
not in bench_eval.py's sample (yes/no questions left out: no sentence says "yes"), retrieves
the 5 best chunks of each with one hybrid search of the cached knowledge base, and fits

1. the sentence scorer (``SENTENCE_COEFFICIENTS`` and ``SENTENCE_LEXICAL`` in
   components/extractive.py): a logistic regression of "this sentence contains a gold answer"
   on the sentence features, with and without embedding similarity;
2. the answer judge (``ANSWER_COEFFICIENTS`` in components/judging.py): a logistic regression
   of "the extractive answer contains a gold answer" on the answer features, over the answers
   to the questions as retrieved and, as questions the documents cannot answer, the answers to
   the same questions with their gold passages taken out of the knowledge base's results.

It prints the coefficients to paste, and a reliability table of the judge on the fitting data.
"""

from __future__ import annotations

import sys

import numpy as np
from bench_eval import SAMPLE_EVERY
from bench_retrieval import DATASETS, knowledge_base

from ragloop import Corpus, ExtractiveGenerator
from ragloop.components import extractive
from ragloop.components.citations import strip_citations
from ragloop.components.extractive import (
    SENTENCE_FEATURES,
    SentenceScorer,
    sentence_similarity,
    split_chunks,
)
from ragloop.components.judging import ANSWER_FEATURES, answer_features
from ragloop.components.questions import profile
from ragloop.evaluation.datasets import load_dataset
from ragloop.evaluation.metrics import answer_contains

TOP_K = 5


def fit_logistic(x: np.ndarray, y: np.ndarray, l2: float = 1e-2, steps: int = 50) -> np.ndarray:
    """Newton's method on the L2-regularised log loss; column 0 of x is the intercept."""
    w = np.zeros(x.shape[1])
    for _ in range(steps):
        p = 1 / (1 + np.exp(-(x @ w)))
        grad = x.T @ (p - y) + l2 * w
        hess = x.T @ (x * (p * (1 - p))[:, None]) + l2 * np.eye(x.shape[1])
        w -= np.linalg.solve(hess, grad)
    return w


def coefficients(names: tuple[str, ...], w: np.ndarray) -> str:
    pairs = [f'"bias": {w[0]:.2f}'] + [f'"{n}": {v:.2f}' for n, v in zip(names, w[1:], strict=True)]
    return "{" + ", ".join(pairs) + "}"


def sentence_data(kb, questions, *, embedded: bool) -> tuple[np.ndarray, np.ndarray]:  # type: ignore[no-untyped-def]
    corpus = Corpus.of(kb) if embedded else None
    rows, labels = [], []
    for q in questions:
        chunks = kb.search(q.question, top_k=TOP_K)
        sentences = split_chunks(chunks)
        if not sentences:
            continue
        scorer = SentenceScorer.build(q.question, sentences)
        similarity = sentence_similarity(corpus, scorer, chunks) if embedded else None
        scorer.score(chunks, similarity, corpus)
        for sentence in sentences:
            rows.append([1.0, *(sentence.features[k] for k in SENTENCE_FEATURES)])
            labels.append(float(answer_contains(sentence.text, q.answers)))
    return np.array(rows), np.array(labels)


def answer_data(kb, questions) -> tuple[np.ndarray, np.ndarray]:  # type: ignore[no-untyped-def]
    """Answer features and labels: each question as retrieved, and again without its gold
    passages (a question the documents cannot answer)."""
    generator = ExtractiveGenerator(corpus=kb, unsure_below=0.0)
    rows, labels = [], []
    for q in questions:
        found = kb.search(q.question, top_k=4 * TOP_K)
        for chunks in (found[:TOP_K], [c for c in found if c.source not in q.gold][:TOP_K]):
            answer = generator.generate(q.question, chunks).answer
            asked = profile(q.question)
            analysis = generator.judge.analyse(asked, chunks, answer)
            if not analysis.answered:
                continue
            features = answer_features(asked, analysis)
            rows.append([1.0, *(features[k] for k in ANSWER_FEATURES)])
            labels.append(float(answer_contains(strip_citations(answer), q.answers)))
    return np.array(rows), np.array(labels)


def reliability(p: np.ndarray, y: np.ndarray) -> list[str]:
    """Predicted chance against how often it was right, in bins of 0.2."""
    lines = ["| predicted | answers | mean predicted | right |", "|---|---|---|---|"]
    for low in (0.0, 0.2, 0.4, 0.6, 0.8):
        inside = (p >= low) & (p < low + 0.2 if low < 0.8 else p <= 1.0)
        if inside.any():
            lines.append(
                f"| {low:.1f}-{low + 0.2:.1f} | {int(inside.sum())} | "
                f"{p[inside].mean():.2f} | {y[inside].mean():.2f} |"
            )
    return lines


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 250
    dataset = load_dataset(DATASETS["HotpotQA"])
    held_out = [
        q
        for i, q in enumerate(dataset.questions)
        if i % SAMPLE_EVERY != 0 and not {a.lower() for a in q.answers} & {"yes", "no"}
    ][:n]
    kb = knowledge_base("HotpotQA", dataset, "minilm")
    for embedded, name in ((True, "SENTENCE_COEFFICIENTS"), (False, "SENTENCE_LEXICAL")):
        x, y = sentence_data(kb, held_out, embedded=embedded)
        features = (
            SENTENCE_FEATURES
            if embedded
            else tuple(f for f in SENTENCE_FEATURES if f != "similarity")
        )
        keep = [0] + [1 + SENTENCE_FEATURES.index(f) for f in features]
        w = fit_logistic(x[:, keep], y)
        print(f"{len(y)} sentences, {y.mean():.3f} contain a gold answer")
        print(f"{name} = {coefficients(features, w)}")
        fitted = dict(zip(("bias", *features), (float(v) for v in w), strict=True))
        target = extractive.SENTENCE_COEFFICIENTS if embedded else extractive.SENTENCE_LEXICAL
        target.clear()
        target.update(fitted)  # the answers below are picked with the fitted scorer
    x, y = answer_data(kb, held_out)
    w = fit_logistic(x, y)
    print(f"{len(y)} answers, {y.mean():.3f} contain a gold answer")
    print(f"ANSWER_COEFFICIENTS = {coefficients(ANSWER_FEATURES, w)}")
    p = 1 / (1 + np.exp(-(x @ w)))
    print("\n".join(reliability(p, y)))


if __name__ == "__main__":
    main()
