"""Run configurations over a dataset and score them at equal k.

A configuration answers a question (the text only; gold fields never reach it) with an
:class:`Outcome`: the passage ids it found, best first, and what it cost. The harness scores every
outcome with the same metrics, aggregates them per configuration and per question kind, and
tests each configuration against the baseline with paired tests on the same questions.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from pydantic import BaseModel, Field

from ragloop.core.records import Chunk
from ragloop.evaluation.datasets import EvalDataset, EvalQuestion
from ragloop.evaluation.metrics import (
    answer_contains,
    exact_match,
    f1,
    mrr_first,
    mrr_last,
    ndcg,
    passage_recall,
    recall_all,
)
from ragloop.evaluation.stats import Comparison, compare

DEFAULT_KS = (2, 5, 10, 20)
COMPARED = ("recall_all@5", "recall_all@10", "ndcg@10", "f1")


class Outcome(BaseModel):
    """What a configuration returned for one question."""

    ranked: list[str]
    answer: str | None = None
    retrieval_calls: int = 0
    llm_calls: int = 0
    tokens: int = 0
    iterations: int | None = None


@runtime_checkable
class Configuration(Protocol):
    """Something to evaluate: a name, whether it is a one-shot baseline, and ``run``."""

    name: str
    baseline: bool

    def run(self, question: str) -> Outcome: ...


class FunctionConfiguration:
    """A configuration from a function ``question -> Outcome``."""

    def __init__(
        self, name: str, function: Callable[[str], Outcome], *, baseline: bool = False
    ) -> None:
        self.name = name
        self.function = function
        self.baseline = baseline

    def run(self, question: str) -> Outcome:
        return self.function(question)


def ranked_passages(chunks: Sequence[Chunk]) -> list[str]:
    """Passage ids (the chunks' sources) in rank order, each once."""
    return list(dict.fromkeys(chunk.source for chunk in chunks))


class QuestionResult(BaseModel):
    question_id: str
    kind: str | None
    ranked: list[str]
    answer: str | None
    metrics: dict[str, float]
    latency_ms: float
    retrieval_calls: int
    llm_calls: int
    tokens: int
    iterations: int | None = None


class Summary(BaseModel):
    """One configuration's means over the questions, and its cost."""

    name: str
    baseline: bool
    questions: int
    metrics: dict[str, float]
    by_kind: dict[str, dict[str, float]] = Field(default_factory=dict)
    latency_p50_ms: float
    latency_p95_ms: float
    retrieval_calls: float
    llm_calls: float
    tokens: float
    iterations: float | None = None


class EvalReport(BaseModel):
    dataset: str
    ks: list[int]
    summaries: list[Summary]
    comparisons: list[Comparison]
    results: dict[str, list[QuestionResult]]

    def summary(self, name: str) -> Summary:
        return next(s for s in self.summaries if s.name == name)

    def comparison(self, candidate: str, metric: str) -> Comparison:
        return next(c for c in self.comparisons if c.candidate == candidate and c.metric == metric)


def score(question: EvalQuestion, outcome: Outcome, ks: Sequence[int]) -> dict[str, float]:
    ranked, gold = outcome.ranked, question.gold
    metrics: dict[str, float] = {}
    for k in ks:
        metrics[f"recall_all@{k}"] = recall_all(ranked, gold, k)
        metrics[f"passage_recall@{k}"] = passage_recall(ranked, gold, k)
    metrics["mrr_first"] = mrr_first(ranked, gold)
    metrics["mrr_last"] = mrr_last(ranked, gold)
    metrics["ndcg@10"] = ndcg(ranked, gold, 10)
    if outcome.answer is not None and question.answers:
        metrics["em"] = exact_match(outcome.answer, question.answers)
        metrics["f1"] = f1(outcome.answer, question.answers)
        metrics["answer_in_prediction"] = answer_contains(outcome.answer, question.answers)
    return metrics


def _mean(rows: list[dict[str, float]]) -> dict[str, float]:
    keys = dict.fromkeys(k for row in rows for k in row)
    return {k: statistics.fmean(row[k] for row in rows if k in row) for k in keys}


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[int(q * (len(ordered) - 1))] if ordered else 0.0


def _summarise(name: str, baseline: bool, results: list[QuestionResult]) -> Summary:
    by_kind: dict[str, list[dict[str, float]]] = {}
    for result in results:
        by_kind.setdefault(result.kind or "all", []).append(result.metrics)
    latencies = [r.latency_ms for r in results]
    iterations = [r.iterations for r in results if r.iterations is not None]
    return Summary(
        name=name,
        baseline=baseline,
        questions=len(results),
        metrics=_mean([r.metrics for r in results]) if results else {},
        by_kind={kind: _mean(rows) for kind, rows in sorted(by_kind.items())},
        latency_p50_ms=_percentile(latencies, 0.5),
        latency_p95_ms=_percentile(latencies, 0.95),
        retrieval_calls=statistics.fmean(r.retrieval_calls for r in results) if results else 0,
        llm_calls=statistics.fmean(r.llm_calls for r in results) if results else 0,
        tokens=statistics.fmean(r.tokens for r in results) if results else 0,
        iterations=statistics.fmean(iterations) if iterations else None,
    )


def evaluate(
    dataset: EvalDataset,
    configurations: Sequence[Configuration],
    *,
    ks: Sequence[int] = DEFAULT_KS,
    baseline: str | None = None,
    on_progress: Callable[[str, int, int], Any] | None = None,
) -> EvalReport:
    """Run every configuration on every question and compare each with the baseline.

    ``baseline`` names the configuration to compare against; by default the one-shot
    configuration (``baseline=True``) with the best recall of all gold at 5.
    """
    results: dict[str, list[QuestionResult]] = {}
    total = len(dataset.questions)
    for configuration in configurations:
        rows = []
        for done, question in enumerate(dataset.questions):
            if on_progress:
                on_progress(configuration.name, done, total)
            started = time.perf_counter()
            outcome = configuration.run(question.question)
            latency = (time.perf_counter() - started) * 1000
            rows.append(
                QuestionResult(
                    question_id=question.id,
                    kind=question.kind,
                    ranked=outcome.ranked[: max(ks)],
                    answer=outcome.answer,
                    metrics=score(question, outcome, ks),
                    latency_ms=round(latency, 3),
                    retrieval_calls=outcome.retrieval_calls,
                    llm_calls=outcome.llm_calls,
                    tokens=outcome.tokens,
                    iterations=outcome.iterations,
                )
            )
        results[configuration.name] = rows
        if on_progress:
            on_progress(configuration.name, total, total)
    summaries = [_summarise(c.name, c.baseline, results[c.name]) for c in configurations]
    reference = baseline or _best_baseline(summaries)
    comparisons = []
    if reference is not None:
        base_rows = results[reference]
        for summary in summaries:
            if summary.name == reference:
                continue
            for metric in COMPARED:
                base = [r.metrics.get(metric) for r in base_rows]
                cand = [r.metrics.get(metric) for r in results[summary.name]]
                if any(v is None for v in [*base, *cand]):
                    continue
                comparisons.append(
                    compare(metric, reference, base, summary.name, cand)  # type: ignore[arg-type]
                )
    return EvalReport(
        dataset=dataset.name,
        ks=list(ks),
        summaries=summaries,
        comparisons=comparisons,
        results=results,
    )


def _best_baseline(summaries: list[Summary]) -> str | None:
    candidates = [s for s in summaries if s.baseline] or summaries[:1]
    if not candidates:
        return None
    return max(candidates, key=lambda s: s.metrics.get("recall_all@5", 0.0)).name
