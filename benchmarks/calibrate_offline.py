"""Fit ExtractiveGenerator's confidence on HotpotQA questions the benchmark does not use.

Usage: python benchmarks/calibrate_offline.py [N]. Takes N questions (default 150) that are not
in bench_eval.py's sample, answers each one-shot over the cached hybrid knowledge base, and
fits a logistic regression of "the answer contains a gold answer" on the generator's confidence
features; prints the coefficients for ``CONFIDENCE_COEFFICIENTS`` in components/generators.py.
"""

from __future__ import annotations

import sys

import numpy as np
from bench_eval import SAMPLE_EVERY
from bench_retrieval import DATASETS, knowledge_base

from ragloop import ExtractiveGenerator
from ragloop.components.generators import strip_citations
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


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 150
    dataset = load_dataset(DATASETS["HotpotQA"])
    held_out = [q for i, q in enumerate(dataset.questions) if i % SAMPLE_EVERY != 0][:n]
    kb = knowledge_base("HotpotQA", dataset, "minilm")
    generator = ExtractiveGenerator(corpus=kb)
    rows, labels = [], []
    for q in held_out:
        chunks = kb.retriever().retrieve(q.question, TOP_K)
        chosen, scorer = generator.pick(q.question, chunks)
        if not chosen:
            continue
        answer = strip_citations(" ".join(s.text for s in chosen))
        rows.append([1.0, *generator.features(scorer, chosen)])
        labels.append(answer_contains(answer, q.answers))
    w = fit_logistic(np.array(rows), np.array(labels))
    print(f"{len(rows)} answers, {np.mean(labels):.2f} contain gold")
    print("CONFIDENCE_COEFFICIENTS = (" + ", ".join(f"{v:.2f}" for v in w) + ")")


if __name__ == "__main__":
    main()
